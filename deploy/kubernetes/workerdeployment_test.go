package kubernetes_test

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// workerControllerCRDs holds temporal-worker-controller v1.8.1's CRDs as
// released (with their MIT license): the controller's Go module is not
// served by the module proxy, so they cannot be read from the module cache
// the way KEDA's are.
const workerControllerCRDs = "testdata/temporal-worker-controller-v1.8.1"

func workerControllerCRD(t *testing.T, kind string) *crd {
	t.Helper()
	file := map[string]string{"WorkerDeployment": "temporal.io_workerdeployments.yaml", "Connection": "temporal.io_connections.yaml"}[kind]
	require.NotEmpty(t, file, kind)
	return loadCRD(t, filepath.Join(workerControllerCRDs, file))
}

// workerDeployment and connection are the fields of the controller's
// objects that the checks below compare with the rest of the overlay; the
// CRDs validate every field.
type workerDeployment struct {
	Metadata metav1.ObjectMeta `json:"metadata"`
	Spec     struct {
		Template      corev1.PodTemplateSpec `json:"template"`
		WorkerOptions struct {
			ConnectionRef     struct{ Name string } `json:"connectionRef"`
			TemporalNamespace string                `json:"temporalNamespace"`
		} `json:"workerOptions"`
	} `json:"spec"`
}

type connection struct {
	Metadata metav1.ObjectMeta `json:"metadata"`
	Spec     struct {
		HostPort        string                    `json:"hostPort"`
		APIKeySecretRef *corev1.SecretKeySelector `json:"apiKeySecretRef,omitempty"`
	} `json:"spec"`
}

func decodeInto(t *testing.T, obj map[string]any, into any) {
	t.Helper()
	b, err := json.Marshal(obj)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, into), "%s", obj["kind"])
}

// The worker-versioning overlay hands the workers to temporal-worker-
// controller: every temporal.io object is valid for the controller's
// released CRDs (pruning, defaults, OpenAPI schema and CEL rules, with the
// API server's code); the WorkerDeployment has the prod worker's pod
// template (every pod check of the other overlays holds for it) and is
// connected to the same Temporal frontend and namespace; no plain worker
// Deployment and no autoscaler aimed at one remain.
func TestWorkerVersioningOverlay(t *testing.T) {
	b := build(t, "overlays/worker-versioning")
	prod := build(t, "overlays/prod")
	require.Nil(t, b.Deployments["taskport-worker"], "the controller creates the worker Deployments")
	require.Empty(t, b.CustomOf("ScaledObject"), "KEDA would scale a Deployment that no longer exists")

	var temporalObjects int
	for _, obj := range b.Custom {
		if strings.HasPrefix(obj["apiVersion"].(string), "temporal.io/") {
			workerControllerCRD(t, obj["kind"].(string)).validate(t, obj)
			temporalObjects++
		}
	}
	require.Equal(t, 2, temporalObjects, "a WorkerDeployment and its Connection")

	wds := b.CustomOf("WorkerDeployment")
	require.Len(t, wds, 1)
	var wd workerDeployment
	decodeInto(t, wds[0], &wd)
	want := prod.Deployments["taskport-worker"].Spec.Template
	require.Equal(t, want, wd.Spec.Template, "the pod template is the prod worker's")
	checkPod(t, "WorkerDeployment/"+wd.Metadata.Name, wd.Spec.Template.Spec, true, b, true)
	for _, p := range b.PDBs {
		require.Equal(t, wd.Spec.Template.Labels["app.kubernetes.io/name"], p.Spec.Selector.MatchLabels["app.kubernetes.io/name"],
			"the PDB keeps selecting the controller's worker pods")
	}

	wc := wd.Spec.Template.Spec.Containers[0]
	ns, _ := b.Env(wc, "TEMPORAL_NAMESPACE")
	require.Equal(t, ns, wd.Spec.WorkerOptions.TemporalNamespace)
	conns := b.CustomOf("Connection")
	require.Len(t, conns, 1)
	var conn connection
	decodeInto(t, conns[0], &conn)
	require.Equal(t, wd.Spec.WorkerOptions.ConnectionRef.Name, conn.Metadata.Name)
	addr, _ := b.Env(wc, "TEMPORAL_ADDRESS")
	require.Equal(t, addr, conn.Spec.HostPort)
	require.NotNil(t, conn.Spec.APIKeySecretRef)
	require.Equal(t, "taskport-secrets", conn.Spec.APIKeySecretRef.Name)
	require.Equal(t, "TEMPORAL_API_KEY", conn.Spec.APIKeySecretRef.Key)
}

// The CRD validation refuses what the API server would: each mutation of
// the overlay's own objects below breaks one rule of the released CRDs (a
// field's type, an enum, a bound, an unknown field, a CEL rule) and is
// refused with that rule's message.
func TestWorkerControllerCRDRefuses(t *testing.T) {
	b := build(t, "overlays/worker-versioning")
	cases := []struct {
		name, kind string
		mutate     func(spec map[string]any, obj map[string]any)
		want       string
	}{
		{"replicas of the wrong type", "WorkerDeployment", func(s, _ map[string]any) { s["replicas"] = "three" }, "spec.replicas"},
		{"unknown rollout strategy", "WorkerDeployment", func(s, _ map[string]any) { rollout(s)["strategy"] = "Canary" }, "spec.rollout.strategy"},
		{"ramp over 99", "WorkerDeployment", func(s, _ map[string]any) { step(s)["rampPercentage"] = 100 }, "rampPercentage"},
		{"misspelled field", "WorkerDeployment", func(s, _ map[string]any) { s["sunSet"] = map[string]any{} }, "unknown field spec.sunSet"},
		{"pause under 30s (CEL)", "WorkerDeployment", func(s, _ map[string]any) { step(s)["pauseDuration"] = "10s" },
			"pause duration must be at least 30s"},
		{"progressive without steps (CEL)", "WorkerDeployment", func(s, _ map[string]any) { delete(rollout(s), "steps") },
			"steps are required for Progressive rollout"},
		{"name over 63 characters (CEL)", "WorkerDeployment", func(_, o map[string]any) {
			o["metadata"].(map[string]any)["name"] = strings.Repeat("w", 64)
		}, "name cannot be more than 63 characters"},
		{"host without port", "Connection", func(s, _ map[string]any) { s["hostPort"] = "taskport.a1b2c.tmprl.cloud" }, "spec.hostPort"},
		{"mTLS and API key (CEL)", "Connection", func(s, _ map[string]any) {
			s["mutualTLSSecretRef"] = map[string]any{"name": "temporal-mtls"}
		}, "Only one of mutualTLSSecretRef or apiKeySecretRef may be set"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			objs := b.CustomOf(tc.kind)
			require.Len(t, objs, 1)
			obj := deepCopy(t, objs[0])
			c := workerControllerCRD(t, tc.kind)
			require.Empty(t, c.problems(t, obj), "the overlay's own object is valid")
			tc.mutate(obj["spec"].(map[string]any), obj)
			problems := c.problems(t, obj)
			require.NotEmpty(t, problems, "the mutated %s passed", tc.kind)
			require.Contains(t, strings.Join(problems, "\n"), tc.want)
		})
	}
}

func rollout(spec map[string]any) map[string]any { return spec["rollout"].(map[string]any) }

func step(spec map[string]any) map[string]any {
	return rollout(spec)["steps"].([]any)[0].(map[string]any)
}

func deepCopy(t *testing.T, obj map[string]any) map[string]any {
	t.Helper()
	b, err := json.Marshal(obj)
	require.NoError(t, err)
	var out map[string]any
	require.NoError(t, json.Unmarshal(b, &out))
	return out
}
