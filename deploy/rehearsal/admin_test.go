package rehearsal_test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/taskport/taskport/deploy/kubernetes"
	"github.com/taskport/taskport/internal/testkit/devserver"
	"github.com/taskport/taskport/internal/testkit/pgtest"
	"github.com/taskport/taskport/temporaladapter"
)

// adminOverlays are the overlays whose admin the rehearsal runs, with the
// plaintext of the test token whose hash their Secret's ADMIN_TOKENS holds
// (prod and worker-versioning: the Secret an operator creates, with test
// values, kubernetes/testdata/secret).
var adminOverlays = []struct{ dir, token string }{
	{"../kubernetes/overlays/dev", "taskport-dev-operator"},
	{"../kubernetes/overlays/media", "taskport-dev-operator"},
	{"../kubernetes/testdata/prod", "taskport-prod-rehearsal"},
	{"../kubernetes/testdata/worker-versioning", "taskport-prod-rehearsal"},
}

// TestAdminRehearsal runs each overlay's admin container as its pod would
// (the image's entrypoint and the container's args, the ConfigMap's and
// the Secret's environment, its user, read-only root and capabilities,
// host network) after the overlay's migration Job container, against a
// fresh database on the loopback Postgres and a Temporal dev server: the
// container turns ready and live on its probes, serves /admin to the
// overlay's test token (200, the overview page) and refuses a request
// without one (401, no page), and exits 0 on SIGTERM within its grace
// period. Temporal Cloud (prod's TLS frontend and API key) is stood in for
// by the plaintext dev server, so TLS and the API key are turned off with
// the address; nothing else is replaced.
func TestAdminRehearsal(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the pod rehearsal runs containers with runc, which needs root")
	}
	_, err := exec.LookPath("runc")
	require.NoError(t, err, "runc is not installed (make tools: apt-get install runc)")

	rendered := make([]*kubernetes.Objects, len(adminOverlays))
	namespaces := map[string]bool{}
	for i, ov := range adminOverlays {
		o, err := kubernetes.Render(ov.dir)
		require.NoError(t, err)
		rendered[i] = o
		ac := adminContainer(t, o)
		ns, _ := o.Env(ac, "TEMPORAL_NAMESPACE")
		namespaces[ns] = true
	}
	// The dev server always serves "default" beside the namespace it is
	// started with: one server covers dev's and prod's namespaces.
	delete(namespaces, "default")
	require.LessOrEqual(t, len(namespaces), 1, "the overlays use more namespaces than one dev server registers: %v", keys(namespaces))
	namespace := "default"
	for ns := range namespaces {
		namespace = ns
	}

	rootfs, cf := unpackedImage(t)
	db := pgtest.NewEmptyDatabase(t)
	srv := devserver.Start(t, devserver.Options{Namespace: namespace, SearchAttributes: temporaladapter.SearchAttributes()})

	var summary []string
	t.Cleanup(func() { t.Logf("admin rehearsal:\n%s", strings.Join(summary, "\n")) })
	for i, ov := range adminOverlays {
		o := rendered[i]
		name := strings.TrimPrefix(ov.dir, "../kubernetes/")
		t.Run(name, func(t *testing.T) {
			admin := o.Deployments["taskport-admin"]
			spec := admin.Spec.Template.Spec
			ac := adminContainer(t, o)
			requireTokenInSecret(t, o, ac, ov.token)
			replaced := map[string]string{
				"DATABASE_URL":     db,
				"TEMPORAL_ADDRESS": srv.HostPort,
				"TEMPORAL_TLS":     "",
				"TEMPORAL_API_KEY": "",
			}
			rt := &runtime{rootfs: rootfs, imageCfg: cf.Config, state: t.TempDir(), bundles: t.TempDir(), volumes: map[string]string{}}

			// The overlay's migration Job first, as `kubectl apply` and
			// the wait in docs/deploy.md order them (a no-op after the
			// first overlay's).
			for _, j := range o.Jobs {
				jc := j.Spec.Template.Spec.Containers[0]
				out := rt.run(t, "migrate", j.Spec.Template.Spec, jc, podEnv(t, o, jc, cf.Config.Env, replaced), 2*time.Minute)
				require.Contains(t, out, "applied ", "the migration Job printed %q", out)
			}

			ready, live := probeURL(t, ac, ac.ReadinessProbe), probeURL(t, ac, ac.LivenessProbe)
			requireFreePort(t, ready)
			start := time.Now()
			c := rt.start(t, "admin", spec, ac, podEnv(t, o, ac, cf.Config.Env, replaced))
			waitStatus(t, c, ready, http.StatusOK, 2*time.Minute)
			readyAfter := time.Since(start)
			require.Equal(t, http.StatusOK, get(live), "liveness")

			page := strings.TrimSuffix(ready, ac.ReadinessProbe.HTTPGet.Path) + "/admin"
			host := publicHost(t, o, ac)
			code, body := adminGet(t, page, host, ov.token)
			require.Equal(t, http.StatusOK, code, "GET /admin with the overlay's token:\n%s\n%s", body, c.lastLines(20))
			require.Contains(t, body, "<title>taskport admin</title>", "the overview page")
			refused, refusedBody := adminGet(t, page, host, "")
			require.Equal(t, http.StatusUnauthorized, refused, "GET /admin without a token")
			require.NotContains(t, refusedBody, "<title>taskport admin</title>")
			wrong, _ := adminGet(t, page, host, ov.token+"-wrong")
			require.Equal(t, http.StatusUnauthorized, wrong, "GET /admin with a wrong token")

			grace := 30 * time.Second // the pod default
			if spec.TerminationGracePeriodSeconds != nil {
				grace = time.Duration(*spec.TerminationGracePeriodSeconds) * time.Second
			}
			require.NoError(t, c.signal("TERM"))
			term := time.Now()
			exit, ok := c.wait(grace)
			require.True(t, ok, "the admin outlived its grace period (%s):\n%s", grace, c.lastLines(20))
			require.Equal(t, 0, exit, c.lastLines(20))
			shownHost := host
			if shownHost == "" {
				shownHost = strings.TrimPrefix(strings.TrimSuffix(page, "/admin"), "http://")
			}
			summary = append(summary, fmt.Sprintf("%-26s admin %v: %s -> 200 after %s; %s -> 200; GET /admin (Host %s) with the test token -> %d (%d bytes, the overview page), without -> %d, wrong token -> %d; SIGTERM -> exit %d after %s",
				name, ac.Args, ready, readyAfter.Round(10*time.Millisecond), live, shownHost, code, len(body), refused, wrong, exit, time.Since(term).Round(time.Millisecond)))
		})
	}
}

func adminContainer(t *testing.T, o *kubernetes.Objects) corev1.Container {
	t.Helper()
	d := o.Deployments["taskport-admin"]
	require.NotNil(t, d, "the overlay has no admin Deployment")
	return d.Spec.Template.Spec.Containers[0]
}

// requireTokenInSecret checks that the token the rehearsal sends is one
// the admin's Secret holds (by its hash, as `taskport admin token` writes).
func requireTokenInSecret(t *testing.T, o *kubernetes.Objects, c corev1.Container, token string) {
	t.Helper()
	sum := sha256.Sum256([]byte(token))
	for _, from := range c.EnvFrom {
		if from.SecretRef == nil {
			continue
		}
		s := o.Secrets[from.SecretRef.Name]
		require.NotNil(t, s, "secret %s is not rendered", from.SecretRef.Name)
		require.Contains(t, string(s.Data["ADMIN_TOKENS"]), "sha256:"+hex.EncodeToString(sum[:]), "the test token is not in ADMIN_TOKENS")
		return
	}
	t.Fatal("the admin reads no Secret")
}

// requireFreePort fails early, and says why, when another process on this
// host holds the port the container would bind (host networking).
func requireFreePort(t *testing.T, probe string) {
	t.Helper()
	u, err := url.Parse(probe)
	require.NoError(t, err)
	l, err := net.Listen("tcp", ":"+u.Port())
	require.NoError(t, err, "port %s is taken on this host: the container binds it on the host network", u.Port())
	require.NoError(t, l.Close())
}

// publicHost is the Host a browser sends: the overlay's first public
// origin (--public-origin, ADMIN_PUBLIC_ORIGINS) when it lists one, else
// the loopback address the rehearsal reaches the pod on.
func publicHost(t *testing.T, o *kubernetes.Objects, c corev1.Container) string {
	t.Helper()
	origins, _ := o.Env(c, "ADMIN_PUBLIC_ORIGINS")
	for i, a := range c.Args {
		if a == "--public-origin" && i+1 < len(c.Args) {
			origins = c.Args[i+1]
		} else if v, ok := strings.CutPrefix(a, "--public-origin="); ok {
			origins = v
		}
	}
	if first, _, _ := strings.Cut(origins, ","); first != "" {
		u, err := url.Parse(strings.TrimSpace(first))
		require.NoError(t, err)
		return u.Host
	}
	return ""
}

// adminGet is one GET of an admin page, with a bearer token unless empty.
func adminGet(t *testing.T, page, host, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, page, nil)
	require.NoError(t, err)
	if host != "" {
		req.Host = host
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}
