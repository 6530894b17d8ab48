// The manifests are built with kustomize's own library (the same code as
// `kubectl kustomize`) and decoded strictly into the typed Kubernetes API
// objects, so a misspelled field, a wrong type or a broken overlay fails
// here instead of at `kubectl apply` time. Then the invariants this project
// relies on are checked: selectors match, every container is bounded and
// non-root, probes exist, the grace period outlasts the worker's graceful
// stop, and every command is a real taskport subcommand.
package kubernetes_test

import (
	"bytes"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// subcommands are the taskport subcommands a manifest may run
// (cmd/taskport registers them).
var subcommands = []string{"migrate", "worker", "admin"}

type built struct {
	deployments map[string]*appsv1.Deployment
	jobs        map[string]*batchv1.Job
	services    map[string]*corev1.Service
	configMaps  map[string]*corev1.ConfigMap
	secrets     map[string]*corev1.Secret
	pdbs        []*policyv1.PodDisruptionBudget
	hpas        []*autoscalingv2.HorizontalPodAutoscaler
}

func build(t *testing.T, dir string) built {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	res, err := k.Run(filesys.MakeFsOnDisk(), dir)
	require.NoError(t, err, "kustomize build %s", dir)
	b := built{deployments: map[string]*appsv1.Deployment{}, jobs: map[string]*batchv1.Job{},
		services: map[string]*corev1.Service{}, configMaps: map[string]*corev1.ConfigMap{}, secrets: map[string]*corev1.Secret{}}
	for _, r := range res.Resources() {
		y, err := r.AsYAML()
		require.NoError(t, err)
		name := r.GetName()
		decode := func(into any) {
			require.NoError(t, yaml.UnmarshalStrict(y, into), "%s %s: strict decode", r.GetKind(), name)
		}
		switch r.GetKind() {
		case "Deployment":
			var d appsv1.Deployment
			decode(&d)
			b.deployments[name] = &d
		case "Job":
			var j batchv1.Job
			decode(&j)
			b.jobs[name] = &j
		case "Service":
			var s corev1.Service
			decode(&s)
			b.services[name] = &s
		case "ConfigMap":
			var c corev1.ConfigMap
			decode(&c)
			b.configMaps[name] = &c
		case "Secret":
			var s corev1.Secret
			decode(&s)
			b.secrets[name] = &s
		case "PodDisruptionBudget":
			var p policyv1.PodDisruptionBudget
			decode(&p)
			b.pdbs = append(b.pdbs, &p)
		case "HorizontalPodAutoscaler":
			var h autoscalingv2.HorizontalPodAutoscaler
			decode(&h)
			b.hpas = append(b.hpas, &h)
		case "Namespace":
			var n corev1.Namespace
			decode(&n)
		default:
			t.Fatalf("%s: unexpected kind %s; add it to this test", name, r.GetKind())
		}
	}
	return b
}

func TestOverlays(t *testing.T) {
	for _, tc := range []struct {
		dir            string
		workerReplicas int32
		// externalSecret: the overlay expects taskport-secrets to exist in
		// the cluster (managed outside the repository).
		externalSecret bool
	}{
		{dir: "overlays/dev", workerReplicas: 1},
		{dir: "overlays/prod", workerReplicas: 3, externalSecret: true},
	} {
		t.Run(tc.dir, func(t *testing.T) {
			b := build(t, tc.dir)
			worker := b.deployments["taskport-worker"]
			require.NotNil(t, worker)
			require.Equal(t, tc.workerReplicas, *worker.Spec.Replicas)
			require.NotNil(t, b.deployments["taskport-admin"])
			require.NotNil(t, b.jobs["taskport-migrate"])

			for name, d := range b.deployments {
				sel, err := metav1LabelSelector(d.Spec.Selector.MatchLabels)
				require.NoError(t, err)
				require.True(t, sel.Matches(labels.Set(d.Spec.Template.Labels)), "%s: selector does not match its pod template", name)
				checkPod(t, name, d.Spec.Template.Spec, true, b, tc.externalSecret)
			}
			for name, j := range b.jobs {
				checkPod(t, name, j.Spec.Template.Spec, false, b, tc.externalSecret)
			}

			stop := flagDuration(t, worker.Spec.Template.Spec.Containers[0].Args, "--stop-timeout")
			grace := time.Duration(*worker.Spec.Template.Spec.TerminationGracePeriodSeconds) * time.Second
			require.Greater(t, grace, stop, "the grace period must outlast the worker's graceful stop, or SIGKILL cuts in-flight steps")

			for _, svc := range b.services {
				require.True(t, selectsSome(svc.Spec.Selector, b), "service %s selects no deployment", svc.Name)
			}
			for _, p := range b.pdbs {
				require.True(t, selectsSome(p.Spec.Selector.MatchLabels, b), "pdb %s selects no deployment", p.Name)
			}
			for _, h := range b.hpas {
				require.NotNil(t, b.deployments[h.Spec.ScaleTargetRef.Name], "hpa %s targets a missing deployment", h.Name)
				require.GreaterOrEqual(t, h.Spec.MaxReplicas, *h.Spec.MinReplicas)
			}
		})
	}
}

var imageWithTag = regexp.MustCompile(`^[a-z0-9./-]+:[A-Za-z0-9._-]+$`)

func checkPod(t *testing.T, owner string, spec corev1.PodSpec, longRunning bool, b built, externalSecret bool) {
	t.Helper()
	require.NotNil(t, spec.SecurityContext, owner)
	require.True(t, spec.SecurityContext.RunAsNonRoot != nil && *spec.SecurityContext.RunAsNonRoot, "%s must run as non-root", owner)
	for _, c := range spec.Containers {
		where := fmt.Sprintf("%s/%s", owner, c.Name)
		require.Regexp(t, imageWithTag, c.Image, "%s: image needs an explicit tag", where)
		require.NotEmpty(t, c.Args, where)
		require.Contains(t, subcommands, c.Args[0], "%s runs an unknown subcommand", where)
		require.False(t, c.Resources.Limits.Memory().IsZero(), "%s: memory limit", where)
		require.False(t, c.Resources.Requests.Cpu().IsZero(), "%s: cpu request", where)
		require.NotNil(t, c.SecurityContext, where)
		require.False(t, *c.SecurityContext.AllowPrivilegeEscalation, where)
		if longRunning {
			require.NotNil(t, c.LivenessProbe, "%s: liveness probe", where)
			require.NotNil(t, c.ReadinessProbe, "%s: readiness probe", where)
		}
		for _, from := range c.EnvFrom {
			switch {
			case from.ConfigMapRef != nil:
				require.Contains(t, b.configMaps, from.ConfigMapRef.Name, "%s: config map", where)
			case from.SecretRef != nil && !externalSecret:
				require.Contains(t, b.secrets, from.SecretRef.Name, "%s: secret", where)
			}
		}
	}
}

func flagDuration(t *testing.T, args []string, flag string) time.Duration {
	t.Helper()
	i := slices.Index(args, flag)
	require.GreaterOrEqual(t, i, 0, "%s not set in %v", flag, args)
	d, err := time.ParseDuration(args[i+1])
	require.NoError(t, err)
	return d
}

func metav1LabelSelector(m map[string]string) (labels.Selector, error) {
	if len(m) == 0 {
		return nil, fmt.Errorf("empty selector")
	}
	return labels.SelectorFromSet(m), nil
}

func selectsSome(sel map[string]string, b built) bool {
	for _, d := range b.deployments {
		if len(sel) > 0 && labels.SelectorFromSet(sel).Matches(labels.Set(d.Spec.Template.Labels)) {
			return true
		}
	}
	return false
}

// The dev overlay's output is what `kubectl apply -k` sends; printing it on
// failure helps, and checking it is non-trivial guards the build itself.
func TestDevOverlayRendersYAML(t *testing.T) {
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	res, err := k.Run(filesys.MakeFsOnDisk(), "overlays/dev")
	require.NoError(t, err)
	out, err := res.AsYaml()
	require.NoError(t, err)
	require.True(t, bytes.Contains(out, []byte("namespace: taskport-dev")))
	require.False(t, strings.Contains(string(out), "image: taskport\n"), "the base image name must be rewritten")
}
