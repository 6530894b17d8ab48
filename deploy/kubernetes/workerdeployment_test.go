package kubernetes_test

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// workerDeployment and connection are temporal-worker-controller's
// temporal.io/v1alpha1 WorkerDeployment and Connection, written from the
// controller's API types (api/v1alpha1 in its repository) for the fields
// this project sets. The controller's module is not served by the Go module
// proxy (it answers 403 "not available"), so its CRD cannot be loaded the
// way KEDA's is: this strict decoding is the check that stands in for it,
// together with the CRD's CEL rules restated below.
type workerDeployment struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   metav1.ObjectMeta `json:"metadata"`
	Spec       struct {
		Replicas                *int32                 `json:"replicas,omitempty"`
		Template                corev1.PodTemplateSpec `json:"template"`
		MinReadySeconds         int32                  `json:"minReadySeconds,omitempty"`
		ProgressDeadlineSeconds *int32                 `json:"progressDeadlineSeconds,omitempty"`
		Rollout                 struct {
			Strategy string `json:"strategy"`
			Steps    []struct {
				RampPercentage int             `json:"rampPercentage"`
				PauseDuration  metav1.Duration `json:"pauseDuration"`
			} `json:"steps,omitempty"`
		} `json:"rollout"`
		Sunset struct {
			ScaledownDelay *metav1.Duration `json:"scaledownDelay"`
			DeleteDelay    *metav1.Duration `json:"deleteDelay"`
		} `json:"sunset"`
		WorkerOptions struct {
			ConnectionRef struct {
				Name string `json:"name"`
			} `json:"connectionRef"`
			TemporalNamespace   string `json:"temporalNamespace"`
			UnsafeCustomBuildID string `json:"unsafeCustomBuildID,omitempty"`
		} `json:"workerOptions"`
	} `json:"spec"`
}

type connection struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   metav1.ObjectMeta `json:"metadata"`
	Spec       struct {
		HostPort           string                    `json:"hostPort"`
		MutualTLSSecretRef *struct{ Name string }    `json:"mutualTLSSecretRef,omitempty"`
		APIKeySecretRef    *corev1.SecretKeySelector `json:"apiKeySecretRef,omitempty"`
	} `json:"spec"`
}

func strictDecode(t *testing.T, obj map[string]any, into any) {
	t.Helper()
	b, err := json.Marshal(obj)
	require.NoError(t, err)
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(into), "%s: strict decode", obj["kind"])
}

// The worker-versioning overlay hands the workers to temporal-worker-
// controller: a WorkerDeployment with the prod worker's pod template (every
// pod check of the other overlays holds for it), connected to the same
// Temporal frontend and namespace, with a progressive rollout the CRD
// accepts; no plain worker Deployment and no autoscaler aimed at one remain.
func TestWorkerVersioningOverlay(t *testing.T) {
	b := build(t, "overlays/worker-versioning")
	prod := build(t, "overlays/prod")
	require.Nil(t, b.Deployments["taskport-worker"], "the controller creates the worker Deployments")
	require.Empty(t, b.CustomOf("ScaledObject"), "KEDA would scale a Deployment that no longer exists")

	wds := b.CustomOf("WorkerDeployment")
	require.Len(t, wds, 1)
	var wd workerDeployment
	strictDecode(t, wds[0], &wd)
	require.Equal(t, "temporal.io/v1alpha1", wd.APIVersion)
	require.LessOrEqual(t, len(wd.Metadata.Name), 63, "the CRD's name rule")

	want := prod.Deployments["taskport-worker"].Spec.Template
	require.Equal(t, want, wd.Spec.Template, "the pod template is the prod worker's")
	checkPod(t, "WorkerDeployment/"+wd.Metadata.Name, wd.Spec.Template.Spec, true, b, true)
	for _, p := range b.PDBs {
		require.Equal(t, wd.Spec.Template.Labels["app.kubernetes.io/name"], p.Spec.Selector.MatchLabels["app.kubernetes.io/name"],
			"the PDB keeps selecting the controller's worker pods")
	}

	r := wd.Spec.Rollout
	require.Contains(t, []string{"Manual", "AllAtOnce", "Progressive"}, r.Strategy)
	if r.Strategy == "Progressive" {
		require.NotEmpty(t, r.Steps, "the CRD's rule: steps are required for Progressive rollout")
	}
	require.LessOrEqual(t, len(r.Steps), 20)
	last := 0
	for _, s := range r.Steps {
		require.True(t, s.RampPercentage >= 1 && s.RampPercentage <= 99, "ramp %d", s.RampPercentage)
		require.Greater(t, s.RampPercentage, last, "ramps only go up")
		last = s.RampPercentage
		require.GreaterOrEqual(t, s.PauseDuration.Duration, 30*time.Second, "the CRD's rule: pause duration must be at least 30s")
	}

	wc := wd.Spec.Template.Spec.Containers[0]
	ns, _ := b.Env(wc, "TEMPORAL_NAMESPACE")
	require.Equal(t, ns, wd.Spec.WorkerOptions.TemporalNamespace)
	conns := b.CustomOf("Connection")
	require.Len(t, conns, 1)
	var conn connection
	strictDecode(t, conns[0], &conn)
	require.Equal(t, wd.Spec.WorkerOptions.ConnectionRef.Name, conn.Metadata.Name)
	addr, _ := b.Env(wc, "TEMPORAL_ADDRESS")
	require.Equal(t, addr, conn.Spec.HostPort)
	require.False(t, conn.Spec.MutualTLSSecretRef != nil && conn.Spec.APIKeySecretRef != nil, "the CRD's rule: one of mTLS or API key")
	require.NotNil(t, conn.Spec.APIKeySecretRef)
	require.Equal(t, "taskport-secrets", conn.Spec.APIKeySecretRef.Name)
	require.Equal(t, "TEMPORAL_API_KEY", conn.Spec.APIKeySecretRef.Key)
}
