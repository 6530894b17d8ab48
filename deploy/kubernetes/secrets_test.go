package kubernetes_test

import (
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/taskport/taskport/admin"
	"github.com/taskport/taskport/deploy/kubernetes"
)

// secretOverlays are the overlays with the taskport-secrets Secret their
// pods read: the overlay's own generator (dev, media), or, for the
// overlays whose Secret is managed outside the repository, the one an
// operator creates as docs/deploy.md says (testdata/secret, test values).
var secretOverlays = []struct {
	dir        string
	documented bool // the Secret is the one docs/deploy.md creates
}{
	{dir: "overlays/dev"},
	{dir: "overlays/media"},
	{dir: "testdata/prod", documented: true},
	{dir: "testdata/worker-versioning", documented: true},
}

// Every pod of every overlay starts with its Secret: it holds
// DATABASE_URL, and, for an admin running --auth token, ADMIN_TOKENS that
// the admin accepts (an empty or malformed set makes it refuse to start:
// the pod would crash-loop); every key a custom object reads from it
// (KEDA's TriggerAuthentication, the controller's Connection) is there;
// and the production Secret that docs/deploy.md creates has exactly the
// keys the test Secret has.
func TestSecretsHoldWhatPodsNeed(t *testing.T) {
	documented := documentedSecretKeys(t)
	for _, tc := range secretOverlays {
		t.Run(tc.dir, func(t *testing.T) {
			b := build(t, tc.dir)
			secret := b.Secrets["taskport-secrets"]
			require.NotNil(t, secret, "no taskport-secrets")
			data := map[string]string{}
			for k, v := range secret.Data {
				data[k] = string(v)
			}
			maps.Copy(data, secret.StringData)

			var admins int
			for owner, spec := range taskportPods(t, b) {
				for _, c := range spec.Containers {
					if !readsSecret(c, secret.Name) {
						continue
					}
					where := owner + "/" + c.Name
					require.NotEmpty(t, data["DATABASE_URL"], "%s: DATABASE_URL", where)
					if mode, _ := setting(c, b, "--auth", "ADMIN_AUTH"); mode != "token" {
						continue
					}
					admins++
					file, _ := setting(c, b, "--auth-tokens-file", "ADMIN_TOKENS_FILE")
					require.Empty(t, file, "%s: the tokens are read from the Secret's ADMIN_TOKENS", where)
					_, err := admin.ParseTokens([]byte(data["ADMIN_TOKENS"]))
					require.NoError(t, err, "%s runs --auth token: it refuses to start without tokens in ADMIN_TOKENS", where)
				}
			}
			require.Positive(t, admins, "the overlay's admin runs --auth token")
			for _, key := range customSecretKeys(b.Custom, secret.Name) {
				require.Contains(t, data, key, "a custom object reads %s from %s", key, secret.Name)
			}
			if tc.documented {
				require.Equal(t, slices.Sorted(maps.Keys(data)), documented,
					"docs/deploy.md's production Secret and the test Secret (testdata/secret) differ")
			}
		})
	}
}

// taskportPods are the pod specs that run the taskport image: Deployments,
// Jobs, and the controller's WorkerDeployment template.
func taskportPods(t *testing.T, b *kubernetes.Objects) map[string]corev1.PodSpec {
	t.Helper()
	out := map[string]corev1.PodSpec{}
	for name, d := range b.Deployments {
		if isTaskport(d.Spec.Template.Spec) {
			out["Deployment/"+name] = d.Spec.Template.Spec
		}
	}
	for name, j := range b.Jobs {
		out["Job/"+name] = j.Spec.Template.Spec
	}
	for _, obj := range b.CustomOf("WorkerDeployment") {
		var wd workerDeployment
		decodeInto(t, obj, &wd)
		out["WorkerDeployment/"+wd.Metadata.Name] = wd.Spec.Template.Spec
	}
	return out
}

func readsSecret(c corev1.Container, name string) bool {
	return slices.ContainsFunc(c.EnvFrom, func(f corev1.EnvFromSource) bool { return f.SecretRef != nil && f.SecretRef.Name == name })
}

// customSecretKeys are the keys custom objects name in the Secret: any
// {name: <secret>, key: <key>} reference, wherever the CRD puts it
// (secretTargetRef, apiKeySecretRef).
func customSecretKeys(objs []map[string]any, secret string) []string {
	var out []string
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if key, ok := v["key"].(string); ok && v["name"] == secret {
				out = append(out, key)
			}
			for _, x := range v {
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	for _, o := range objs {
		walk(o)
	}
	return out
}

var secretKeyFlag = regexp.MustCompile(`--from-(?:literal|file)=([A-Z_]+)=`)

// documentedSecretKeys are the keys of the `kubectl create secret generic
// taskport-secrets` command in docs/deploy.md, sorted.
func documentedSecretKeys(t *testing.T) []string {
	t.Helper()
	doc, err := os.ReadFile("../../docs/deploy.md")
	require.NoError(t, err)
	_, rest, ok := strings.Cut(string(doc), "create secret generic taskport-secrets")
	require.True(t, ok, "docs/deploy.md does not say how to create taskport-secrets")
	cmd, _, _ := strings.Cut(rest, "```")
	var keys []string
	for _, m := range secretKeyFlag.FindAllStringSubmatch(cmd, -1) {
		keys = append(keys, m[1])
	}
	slices.Sort(keys)
	return keys
}

// The otlp-egress component turns tracing on and lets the worker and the
// admin reach the collector: with the endpoint configured, their policies
// allow egress to the collector's namespace on the endpoint's port (and
// nothing else changes; checkNetworkPolicies lists every rule).
func TestOTLPEgress(t *testing.T) {
	b := build(t, "testdata/prod-otlp")
	for _, name := range []string{"taskport-worker", "taskport-admin"} {
		ep, _ := setting(b.Deployments[name].Spec.Template.Spec.Containers[0], b, "--otlp-endpoint", "OTEL_EXPORTER_OTLP_ENDPOINT")
		require.NotEmpty(t, ep, "%s: tracing is not configured", name)
	}
	checkNetworkPolicies(t, b, false)
}
