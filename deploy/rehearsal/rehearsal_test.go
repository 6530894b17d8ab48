// Package rehearsal_test runs the worker the way the dev overlay's pod
// would run it, before any cluster sees it: the image `make image` builds,
// unpacked into an OCI bundle and run under Debian's runc with the worker
// container's args, ConfigMap environment, volume mounts, read-only root
// and user, on the host's network, against the loopback Postgres (a fresh
// database) and a Temporal dev server. The migration Job's container runs
// first, against that database.
//
// The downloader is qbtfake, the qBittorrent Web API v2 fake, on loopback,
// and the test writes the payload into the shared downloads volume where
// qBittorrent would have saved it. Why not qbittorrent-nox: it would run on
// the host and save into the paths the worker names (/downloads/...), that
// is into the host's /downloads, not into the directory mounted at
// /downloads in the container; the real daemon is exercised by the
// qbittorrent package's end-to-end test and by `make run`. What this test
// is about is the container: its mounts, its environment, its user and its
// read-only root, its signals and its probes. The completion report is the
// media overlay's on-finish hook (`taskport plan complete %I --content-path
// "%F"`), run from the same image with the same environment.
//
// Root only (runc needs it); skipped otherwise. CI runs as root.
package rehearsal_test

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/operatorservice/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/taskport/taskport/deploy/image"
	"github.com/taskport/taskport/deploy/internal/deploytest"
	"github.com/taskport/taskport/deploy/kubernetes"
	"github.com/taskport/taskport/internal/testkit/devserver"
	"github.com/taskport/taskport/internal/testkit/pgtest"
	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/qbittorrent"
	"github.com/taskport/taskport/qbittorrent/qbtfake"
	"github.com/taskport/taskport/temporaladapter"
	"github.com/taskport/taskport/workflows"
)

// timeline records what happened when, from the worker's start, and is
// printed at the end of the test whatever its outcome.
type timeline struct {
	start  time.Time
	events []string
}

func (tl *timeline) mark(format string, args ...any) {
	tl.events = append(tl.events, fmt.Sprintf("%8.2fs  %s", time.Since(tl.start).Seconds(), fmt.Sprintf(format, args...)))
}

// volumeDir is a host directory standing in for a volume, owned by the
// pod's fsGroup as the kubelet makes it.
func volumeDir(t *testing.T, gid int64) string {
	t.Helper()
	d := t.TempDir()
	require.NoError(t, os.Chown(d, int(gid), int(gid)))
	require.NoError(t, os.Chmod(d, 0o2775))
	return d
}

func TestPodRehearsal(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the pod rehearsal runs containers with runc, which needs root")
	}
	_, err := exec.LookPath("runc")
	require.NoError(t, err, "runc is not installed (make tools: apt-get install runc)")
	ctx := context.Background()

	// The manifests, as kubectl would apply them.
	o, err := kubernetes.Render("../kubernetes/overlays/dev")
	require.NoError(t, err)
	worker := o.Deployments["taskport-worker"]
	require.NotNil(t, worker)
	var job *corev1.PodSpec
	for _, j := range o.Jobs {
		job = &j.Spec.Template.Spec
	}
	require.NotNil(t, job, "the overlay has no migration Job")
	wspec := worker.Spec.Template.Spec
	wc := wspec.Containers[0]
	grace := time.Duration(*wspec.TerminationGracePeriodSeconds) * time.Second
	stopTimeout := flagValue(t, wc.Args, "--stop-timeout")
	stopBound, err := time.ParseDuration(stopTimeout)
	require.NoError(t, err)

	rootfs, cf := unpackedImage(t)

	// The real parts the pod would reach, on loopback.
	db := pgtest.NewEmptyDatabase(t)
	namespace, _ := o.Env(wc, "TEMPORAL_NAMESPACE")
	srv := devserver.Start(t, devserver.Options{Namespace: namespace, SearchAttributes: temporaladapter.SearchAttributes()})
	qbtPassword := "rehearsal-" + rand.Text()
	qbt := qbtfake.Start(t, qbtfake.Options{Username: "admin", Password: qbtPassword})

	gid := *wspec.SecurityContext.FSGroup
	volumes := map[string]string{}
	for _, v := range wspec.Volumes {
		volumes[v.Name] = volumeDir(t, gid) // the claims and the emptyDir alike
	}
	rt := &runtime{rootfs: rootfs, imageCfg: cf.Config, state: t.TempDir(), bundles: t.TempDir(), volumes: volumes}

	// The environment: the image's, then the ConfigMap's (envFrom), then
	// the Secret's. The cluster's service names do not resolve here: the
	// addresses of Postgres, Temporal and qBittorrent are replaced by the
	// loopback ones, and nothing else.
	replaced := map[string]string{
		"DATABASE_URL":         db,
		"TEMPORAL_ADDRESS":     srv.HostPort,
		"QBITTORRENT_URL":      qbt.URL,
		"QBITTORRENT_PASSWORD": qbtPassword,
	}
	env := podEnv(t, o, wc, cf.Config.Env, replaced)
	t.Logf("worker args %v, user %d, read-only root %v, mounts %v; env replaced for loopback: %v",
		wc.Args, *wspec.SecurityContext.RunAsUser, *wc.SecurityContext.ReadOnlyRootFilesystem, mountPaths(wc), keys(replaced))

	tl := &timeline{start: time.Now()}
	t.Cleanup(func() {
		t.Logf("rehearsal timeline (from the migration Job's start):\n%s", strings.Join(tl.events, "\n"))
	})

	// The migration Job's container migrates the fresh database.
	jc := job.Containers[0]
	out := rt.run(t, "migrate", *job, jc, podEnv(t, o, jc, cf.Config.Env, replaced), 2*time.Minute)
	require.Contains(t, out, "applied ")
	tl.mark("migration Job container exited 0: %s", strings.TrimSpace(lastLine(out)))

	// The worker's container turns ready.
	probe := probeURL(t, wc, wc.ReadinessProbe)
	live := probeURL(t, wc, wc.LivenessProbe)
	w := rt.start(t, "worker", wspec, wc, env)
	tl.mark("worker container started")
	waitStatus(t, w, probe, http.StatusOK, 2*time.Minute)
	tl.mark("%s -> 200 (ready)", probe)
	require.Equal(t, http.StatusOK, get(live))

	// A plan completes through the container: created and approved with the
	// CLI (the business API), submitted by the worker to the downloader,
	// reported complete by the on-finish hook, imported from the downloads
	// volume into the library, verified and cleaned up.
	pool, err := pgxpool.New(ctx, db)
	require.NoError(t, err)
	defer pool.Close()
	cli := func(args ...string) string {
		c := wc
		c.Args = args
		return rt.run(t, "cli", wspec, c, env, 2*time.Minute)
	}
	payload := make([]byte, 3<<20+11)
	_, _ = rand.Read(payload)
	planA := createPlan(t, cli, pool, "a", payload)
	tl.mark("plan A created and approved with `taskport plan create|approve` (containers of the same image)")
	deliver(t, qbt, pool, planA, payload, volumes, wc, cli)
	tl.mark("qBittorrent's on-finish hook ran: `taskport plan complete %s --content-path ...`", planA.hash)
	waitPlan(t, pool, planA.id, "completed", w, 2*time.Minute)
	tl.mark("plan A completed (plan.status in Postgres)")
	library := volumes[claimVolume(wspec, "media-library")]
	got, err := os.ReadFile(filepath.Join(library, strings.TrimPrefix(planA.target, "/library/")))
	require.NoError(t, err, "the file is not in the library volume")
	sum := sha256.Sum256(got)
	require.Equal(t, planA.sha256, hex.EncodeToString(sum[:]), "the library file is the downloaded payload")
	tl.mark("library file on the volume, sha256 %s...", planA.sha256[:12])

	// SIGTERM with a step in flight: plan B's download.submit is inside a
	// slow qBittorrent add when the kubelet would send SIGTERM.
	adds := qbt.AddRequests()
	qbt.SetDelay(3 * time.Second)
	planB := createPlan(t, cli, pool, "b", payload)
	require.Eventually(t, func() bool { return qbt.AddRequests() > adds }, time.Minute, 20*time.Millisecond,
		"plan B's submit never reached qBittorrent:\n%s", w.lastLines(30))
	tl.mark("plan B's download.submit in flight (qBittorrent add answering in 3s)")
	require.NoError(t, w.signal("TERM"))
	term := time.Now()
	tl.mark("SIGTERM")
	// The worker handles the signal on a goroutine of its own: a probe
	// answered in the same instant may still read ready. Polled, with a
	// deadline well inside the step's 3s, so readiness fails before the
	// drain ends, while the step is still in flight.
	var code int
	require.Eventually(t, func() bool { code = get(probe); return code == http.StatusServiceUnavailable }, 2*time.Second, 5*time.Millisecond,
		"readiness must fail on SIGTERM")
	notReadyAfter := time.Since(term)
	tl.mark("%s -> %d (not ready) %s after SIGTERM", probe, code, notReadyAfter.Round(time.Millisecond))
	exitCode, ok := w.wait(grace)
	exitAfter := time.Since(term)
	require.True(t, ok, "the worker outlived the pod's grace period (%s): the kubelet would SIGKILL it\n%s", grace, w.lastLines(20))
	tl.mark("worker exited %d, %s after SIGTERM (--stop-timeout %s, grace period %s)", exitCode, exitAfter.Round(time.Millisecond), stopTimeout, grace)
	require.Equal(t, 0, exitCode, w.lastLines(30))
	require.Less(t, exitAfter, stopBound+5*time.Second, "the stop must finish within --stop-timeout (plus the engine's own margin)")
	var stateB string
	require.NoError(t, pool.QueryRow(ctx, `SELECT state FROM download_task WHERE plan_id = $1`, planB.id).Scan(&stateB))
	require.Contains(t, []string{"submitted", "planned"}, stateB)
	if stateB == "submitted" {
		tl.mark("plan B's in-flight submit finished before the exit (download_task.state = submitted)")
	} else {
		tl.mark("plan B's in-flight submit was handed back (download_task.state = planned)")
	}
	qbt.SetDelay(0)

	// A fatal engine error: the namespace the worker polls is deleted. The
	// Go SDK retries a poll that ends NamespaceNotFound for two minutes
	// (its retryLongPollGracePeriod, which only the SDK's own tests can
	// change) before it reports the error as fatal, so the worker exits
	// about two minutes after the deletion; hence the six-minute bound.
	w2 := rt.start(t, "worker", wspec, wc, env)
	waitStatus(t, w2, probe, http.StatusOK, 2*time.Minute)
	tl.mark("worker restarted: ready")
	waitDownloadState(t, pool, planB.id, "submitted", w2, 3*time.Minute)
	tl.mark("plan B submitted (download_task.state in Postgres)")
	_, err = srv.Client.OperatorService().DeleteNamespace(ctx, &operatorservice.DeleteNamespaceRequest{Namespace: namespace})
	require.NoError(t, err)
	deleted := time.Now()
	tl.mark("namespace %q deleted on the dev server", namespace)
	var notReady string
	require.Eventually(t, func() bool {
		if w2.exited() {
			return true
		}
		if notReady == "" {
			if code, body := getBody(probe); code == http.StatusServiceUnavailable {
				notReady = strings.TrimSpace(body)
				tl.mark("%s -> 503: %s", probe, notReady)
			}
		}
		return false
	}, 6*time.Minute, 200*time.Millisecond, "the worker kept running after its namespace was deleted:\n%s", w2.lastLines(20))
	fatalCode, _ := w2.wait(time.Second)
	tl.mark("worker exited %d, %s after the namespace was deleted", fatalCode, time.Since(deleted).Round(time.Millisecond))
	require.NotEqual(t, 0, fatalCode, "a worker whose engine stopped for good must exit non-zero:\n%s", w2.lastLines(20))
	require.Contains(t, w2.out.String(), "engine stopped")
}

// built is the image the rehearsals share, built and unpacked once per
// test binary (a build takes minutes on a small machine); TestMain removes
// it.
var built struct {
	once   sync.Once
	dir    string
	rootfs string
	cf     *v1.ConfigFile
	err    error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if built.dir != "" {
		_ = os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

// unpackedImage builds the image from this checkout, as `make image` does,
// and unpacks it into a bundle's rootfs.
func unpackedImage(t *testing.T) (rootfs string, cf *v1.ConfigFile) {
	t.Helper()
	built.once.Do(func() { built.err = buildImage(t) })
	require.NoError(t, built.err, "build the image")
	return built.rootfs, built.cf
}

func buildImage(t *testing.T) error {
	root := deploytest.RepoRoot(t)
	rev, err := image.GitRevision(context.Background(), root)
	if err != nil {
		return err
	}
	if built.dir, err = os.MkdirTemp("", "taskport-rehearsal-"); err != nil {
		return err
	}
	bin := filepath.Join(built.dir, "taskport")
	buildCtx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	if err := image.BuildBinary(buildCtx, image.BinaryConfig{RepoRoot: root, Out: bin, Revision: rev.ID, Env: os.Environ()}); err != nil {
		return err
	}
	img, err := image.Build(image.Options{Binary: bin, Revision: rev})
	if err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	if built.cf, err = img.ConfigFile(); err != nil {
		return err
	}
	built.rootfs = filepath.Join(built.dir, "rootfs")
	if err := unpack(img, built.rootfs); err != nil {
		return err
	}
	t.Logf("image %s (revision %s), unpacked into %s", digest, rev.ID, built.rootfs)
	return nil
}

type plan struct {
	id, hash, target, sha256, name string
}

// createPlan creates and approves a plan for payload through the CLI: the
// approval's transaction hands the plan to download.submit itself, so no
// run waits for it and it may come at once.
func createPlan(t *testing.T, cli func(...string) string, pool *pgxpool.Pool, name string, payload []byte) plan {
	t.Helper()
	hashBytes := make([]byte, 20)
	_, _ = rand.Read(hashBytes)
	sum := sha256.Sum256(payload)
	p := plan{hash: hex.EncodeToString(hashBytes), sha256: hex.EncodeToString(sum[:]), name: "rehearsal-" + name + ".bin"}
	p.target = "/library/rehearsal/" + p.name
	magnet := fmt.Sprintf("magnet:?xt=urn:btih:%s&dn=%s&xl=%d", p.hash, p.name, len(payload))
	out := cli("plan", "create", "--title", "rehearsal "+name, "--magnet", magnet, "--info-hash", p.hash,
		"--target", p.target, "--size", fmt.Sprint(len(payload)), "--sha256", p.sha256)
	p.id = strings.TrimSpace(lastLine(out))
	require.Len(t, p.id, 36, "plan create printed %q", out)
	cli("plan", "approve", p.id, "--by", "rehearsal")
	return p
}

// deliver plays the downloader: once the worker has added the torrent, the
// payload appears where qBittorrent saves it (on the shared downloads
// volume), the torrent completes, and the on-finish hook reports it.
func deliver(t *testing.T, qbt *qbtfake.Server, pool *pgxpool.Pool, p plan, payload []byte, volumes map[string]string, wc corev1.Container, cli func(...string) string) {
	t.Helper()
	var tor qbittorrent.Torrent
	require.Eventually(t, func() bool {
		for _, x := range qbt.Torrents() {
			if x.Hash == p.hash {
				tor = x
				return true
			}
		}
		return false
	}, 2*time.Minute, 50*time.Millisecond, "the worker never added plan %s's torrent", p.id)
	downloads, ok := "", false
	for _, m := range wc.VolumeMounts {
		if strings.HasPrefix(tor.SavePath+"/", m.MountPath+"/") && len(m.MountPath) > len(downloads) {
			downloads, ok = m.MountPath, true
			rel := strings.TrimPrefix(tor.SavePath, m.MountPath)
			dir := filepath.Join(volumes[m.Name], rel)
			require.NoError(t, os.MkdirAll(dir, 0o775))
			require.NoError(t, os.WriteFile(filepath.Join(dir, p.name), payload, 0o664))
			require.NoError(t, os.Chown(dir, 65532, 65532))
			require.NoError(t, os.Chown(filepath.Join(dir, p.name), 65532, 65532))
		}
	}
	require.True(t, ok, "qBittorrent was told to save into %s, which no volume of the worker holds", tor.SavePath)
	// As for the approval: report once download.await waits, so the hint
	// is not dropped (its next check would find the download done, up to
	// DownloadWait later).
	waitWaiter(t, pool, workflows.DownloadTopic(p.id))
	require.NoError(t, qbt.Complete(p.hash))
	cli("plan", "complete", p.hash, "--content-path", tor.SavePath+"/"+p.name)
}

// waitWaiter waits until a run is registered as waiting on topic (the
// engines' waiter table), so a signal sent now reaches it.
func waitWaiter(t *testing.T, pool *pgxpool.Pool, topic port.Topic) {
	t.Helper()
	require.Eventually(t, func() bool {
		var n int
		err := pool.QueryRow(context.Background(), `SELECT count(*) FROM taskport.waiter WHERE topic = $1`, string(topic)).Scan(&n)
		return err == nil && n > 0
	}, 2*time.Minute, 20*time.Millisecond, "no run waits on %s", topic)
}

func waitPlan(t *testing.T, pool *pgxpool.Pool, id, want string, w *container, d time.Duration) {
	t.Helper()
	waitRow(t, pool, `SELECT status FROM plan WHERE id = $1`, id, want, w, d)
}

func waitDownloadState(t *testing.T, pool *pgxpool.Pool, planID, want string, w *container, d time.Duration) {
	t.Helper()
	waitRow(t, pool, `SELECT state FROM download_task WHERE plan_id = $1`, planID, want, w, d)
}

func waitRow(t *testing.T, pool *pgxpool.Pool, query, arg, want string, w *container, d time.Duration) {
	t.Helper()
	var got string
	require.Eventually(t, func() bool {
		require.False(t, w.exited(), "the worker exited:\n%s", w.lastLines(30))
		_ = pool.QueryRow(context.Background(), query, arg).Scan(&got)
		return got == want
	}, d, 100*time.Millisecond, "%s [%s]: %q, want %q\n%s", query, arg, got, want, w.lastLines(30))
}

// podEnv is the container's environment as the kubelet builds it: the
// image's, then envFrom ConfigMaps and Secrets (those the overlay renders;
// prod's comes from the tests' kubernetes/testdata), then env; replaced
// (the loopback addresses and what stands in for the cluster's services)
// last.
func podEnv(t *testing.T, o *kubernetes.Objects, c corev1.Container, imageEnv []string, replaced map[string]string) []string {
	t.Helper()
	vals := map[string]string{}
	var order []string
	set := func(k, v string) {
		if _, ok := vals[k]; !ok {
			order = append(order, k)
		}
		vals[k] = v
	}
	for _, kv := range imageEnv {
		k, v, _ := strings.Cut(kv, "=")
		set(k, v)
	}
	for _, from := range c.EnvFrom {
		if from.ConfigMapRef != nil {
			cm := o.ConfigMaps[from.ConfigMapRef.Name]
			require.NotNil(t, cm, from.ConfigMapRef.Name)
			for _, k := range keys(cm.Data) {
				set(k, cm.Data[k])
			}
		}
		if from.SecretRef != nil {
			if s := o.Secrets[from.SecretRef.Name]; s != nil {
				for _, k := range keys(s.Data) {
					set(k, string(s.Data[k]))
				}
			}
		}
	}
	for _, e := range c.Env {
		set(e.Name, e.Value)
	}
	for _, k := range keys(replaced) {
		set(k, replaced[k])
	}
	env := make([]string, 0, len(order))
	for _, k := range order {
		env = append(env, k+"="+vals[k])
	}
	return env
}

// probeURL is where the kubelet sends an HTTP probe on host networking.
func probeURL(t *testing.T, c corev1.Container, p *corev1.Probe) string {
	t.Helper()
	require.NotNil(t, p)
	require.NotNil(t, p.HTTPGet)
	port := p.HTTPGet.Port.IntValue()
	for _, cp := range c.Ports {
		if cp.Name == p.HTTPGet.Port.String() {
			port = int(cp.ContainerPort)
		}
	}
	require.Positive(t, port)
	return fmt.Sprintf("http://127.0.0.1:%d%s", port, p.HTTPGet.Path)
}

var probeClient = &http.Client{Timeout: time.Second} // the kubelet's default probe timeout

// get is one probe: the status code, 0 when nothing answers.
func get(url string) int {
	code, _ := getBody(url)
	return code
}

func getBody(url string) (int, string) {
	resp, err := probeClient.Get(url)
	if err != nil {
		return 0, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// waitStatus waits for url to answer want, and fails at once, with what
// the container printed, if the container exits first (a require inside
// the condition would only end the polling goroutine, and the wait would
// run to its deadline).
func waitStatus(t *testing.T, c *container, url string, want int, d time.Duration) {
	t.Helper()
	var exited bool
	require.Eventually(t, func() bool {
		exited = c.exited()
		return exited || get(url) == want
	}, d, 50*time.Millisecond, "%s never answered %d:\n%s", url, want, c.lastLines(30))
	require.False(t, exited, "the container %s exited:\n%s", c.id, c.lastLines(30))
}

func flagValue(t *testing.T, args []string, flag string) string {
	t.Helper()
	i := slices.Index(args, flag)
	require.GreaterOrEqual(t, i, 0, "%s not in %v", flag, args)
	return args[i+1]
}

func claimVolume(spec corev1.PodSpec, claim string) string {
	for _, v := range spec.Volumes {
		if v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == claim {
			return v.Name
		}
	}
	return ""
}

func mountPaths(c corev1.Container) []string {
	var out []string
	for _, m := range c.VolumeMounts {
		out = append(out, m.MountPath)
	}
	return out
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

func keys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
