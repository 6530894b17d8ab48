package stack

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/operatorservice/v1"

	"github.com/taskport/taskport/internal/startstop"
	"github.com/taskport/taskport/internal/testkit"
	"github.com/taskport/taskport/internal/testkit/devserver"
	"github.com/taskport/taskport/internal/testkit/pgtest"
	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/temporaladapter"
	"github.com/taskport/taskport/workflows"
)

// probe answers one probe of h: the status code and the body.
func probe(t *testing.T, h *workerHealth, path string) (int, string) {
	t.Helper()
	return probeLogged(t, h, path, slog.New(slog.DiscardHandler))
}

func probeLogged(t *testing.T, h *workerHealth, path string, log *slog.Logger) (int, string) {
	t.Helper()
	mux := http.NewServeMux()
	h.register(mux, log)
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec.Code, rec.Body.String()
}

// testStack wires a real stack (Postgres, the chosen engine) the way the
// worker command does.
func testStack(t *testing.T, engine, temporalAddr, namespace string) *Stack {
	t.Helper()
	g := &Globals{DatabaseURL: pgtest.NewDatabase(t), LogLevel: "warn"}
	c := Config{Engine: engine, TemporalAddress: temporalAddr, TemporalNamespace: namespace, TaskQueue: "health-" + t.Name(),
		StopTimeout: 5 * time.Second, LibraryRoot: t.TempDir(), DownloadDir: t.TempDir(), QBittorrentURL: "http://127.0.0.1:1"}
	s, err := Build(context.Background(), g, c, slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})))
	require.NoError(t, err)
	t.Cleanup(s.Close)
	return s
}

// Each readiness and liveness rule, against a real Postgres and the real
// lease engine: the engine serving, Postgres answering, the dispatcher
// running and its last hand-over to the engine succeeding; not ready from
// the stop on; neither live nor ready once the engine has stopped for good.
func TestWorkerHealthRules(t *testing.T) {
	ctx := context.Background()
	s := testStack(t, "lease", "", "")
	h := newWorkerHealth(s.engine, s.dispatchWatch, namedCheck{"postgres", s.bizPool.Ping})

	code, body := probe(t, h, "/readyz")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Contains(t, body, "engine not serving")
	require.NoError(t, s.engine.Start(ctx, port.StartOptions{}))
	t.Cleanup(func() { _ = s.engine.Stop(ctx) }) // its pool is closed below: a failed hand-back is no news here
	code, body = probe(t, h, "/readyz")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Contains(t, body, "outbox dispatcher not running")
	s.dispatchWatch.setRunning(true)
	code, _ = probe(t, h, "/readyz")
	require.Equal(t, http.StatusOK, code)

	// A hand-over the engine refuses as invalid is the row's fault, not
	// the dispatcher's: still ready.
	_, err := s.dispatchWatch.EnqueueMany(context.Background(), []port.EnqueueItem{
		{Kind: "no.such.kind", Input: struct{}{}, Options: port.EnqueueOptions{IdempotencyKey: "k"}}})
	require.ErrorIs(t, err, port.ErrInvalidInput)
	code, _ = probe(t, h, "/readyz")
	require.Equal(t, http.StatusOK, code)

	// The engine unreachable (its database gone): the dispatcher cannot
	// move rows, so the worker is not ready; Postgres itself fails too.
	s.enginePool.Close()
	_, err = s.dispatchWatch.EnqueueMany(context.Background(), []port.EnqueueItem{{Kind: workflows.KindNotifyWebhook,
		Input: workflows.NotifyInput{PlanID: uuid.NewString(), Event: "e", Status: "s"}, Options: port.EnqueueOptions{IdempotencyKey: "k"}}})
	require.Error(t, err)
	require.NotErrorIs(t, err, port.ErrInvalidInput)
	code, body = probe(t, h, "/readyz")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Contains(t, body, "last enqueue failed")
	s.bizPool.Close()
	h = newWorkerHealth(s.engine, nil, namedCheck{"postgres", s.bizPool.Ping})
	code, body = probe(t, h, "/readyz")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, "postgres check failed\n", body)
	code, _ = probe(t, h, "/healthz")
	require.Equal(t, http.StatusOK, code, "a dependency down is not a reason to restart the process")

	h = newWorkerHealth(s.engine, nil)
	h.beginStop()
	code, body = probe(t, h, "/readyz")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Contains(t, body, "stopping")
	code, _ = probe(t, h, "/healthz")
	require.Equal(t, http.StatusOK, code, "a graceful stop must not be cut short by the liveness probe")

	require.NoError(t, s.engine.Stop(ctx))
	h = newWorkerHealth(s.engine, nil)
	code, body = probe(t, h, "/readyz")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Contains(t, body, "engine not serving")
	code, _ = probe(t, h, "/healthz")
	require.Equal(t, http.StatusOK, code, "a graceful stop is not a reason to restart the process")

	// A fatal error, as the Temporal engine reports one (the lease engine
	// has none; TestWorkerExitsWhenEngineStopsForGood has the real one):
	// the same lifecycle code, failed.
	var failed startstop.Base
	require.NoError(t, startstop.Start(ctx, &failed, func(context.Context) error { return nil }))
	startstop.Fail(&failed, errors.New("namespace gone"))
	h = newWorkerHealth(&failed, nil)
	for _, path := range []string{"/healthz", "/readyz"} {
		code, body = probe(t, h, path)
		require.Equal(t, http.StatusServiceUnavailable, code, path)
		require.Equal(t, "engine stopped for good\n", body, path)
	}
}

// A probe body names what failed and never carries the dependency's own
// error (host names, users, SQL), which goes to the log instead: the probe
// port answers anyone who reaches the pod.
func TestProbeBodyNamesTheDependencyNotItsError(t *testing.T) {
	ctx := context.Background()
	raw := errors.New(`failed to connect to host=db.internal.example user=taskport: password authentication failed`)
	var serving startstop.Base
	require.NoError(t, startstop.Start(ctx, &serving, func(context.Context) error { return nil }))
	var logged strings.Builder
	log := slog.New(slog.NewTextHandler(&logged, nil))

	h := newWorkerHealth(&serving, nil, namedCheck{"postgres", func(context.Context) error { return nil }},
		namedCheck{"temporal", func(context.Context) error { return raw }})
	code, body := probeLogged(t, h, "/readyz", log)
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, "temporal check failed\n", body)
	require.Contains(t, logged.String(), "password authentication failed", "the raw error is logged")

	watch := &dispatchWatch{running: true, lastErr: raw}
	code, body = probeLogged(t, newWorkerHealth(&serving, watch), "/readyz", log)
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, "outbox dispatcher: last enqueue failed\n", body)

	var failed startstop.Base
	require.NoError(t, startstop.Start(ctx, &failed, func(context.Context) error { return nil }))
	startstop.Fail(&failed, raw)
	for _, path := range []string{"/healthz", "/readyz"} {
		code, body = probeLogged(t, newWorkerHealth(&failed, nil), path, log)
		require.Equal(t, http.StatusServiceUnavailable, code, path)
		require.Equal(t, "engine stopped for good\n", body, path)
	}
}

// stopProbe is the real engine, with a look at the worker's /readyz when
// Stop is called: readiness must already be off by then.
type stopProbe struct {
	port.TaskEngine
	url       string
	readyCode chan int
}

func (p *stopProbe) Stop(ctx context.Context) error {
	resp, err := http.Get(p.url + "/readyz")
	if err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		p.readyCode <- resp.StatusCode
	} else {
		p.readyCode <- 0
	}
	return p.TaskEngine.Stop(ctx)
}

func waitReady(t *testing.T, addr string) {
	t.Helper()
	require.Eventually(t, func() bool {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 30*time.Second, 50*time.Millisecond, "the worker never became ready")
}

// On SIGTERM (ctx ends) readiness turns off before the stop begins, the
// probe server keeps answering during the stop, and the worker returns nil.
func TestWorkerNotReadyBeforeStop(t *testing.T) {
	s := testStack(t, "lease", "", "")
	addr := testkit.FreeAddr(t)
	probeEngine := &stopProbe{TaskEngine: s.engine, url: "http://" + addr, readyCode: make(chan int, 1)}
	s.engine = probeEngine
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- s.RunWorker(ctx, Config{Engine: "lease", StopTimeout: 5 * time.Second}, addr, true)
	}()
	waitReady(t, addr)
	cancel()
	require.Equal(t, http.StatusServiceUnavailable, <-probeEngine.readyCode, "readiness was still on when the engine began to stop")
	require.NoError(t, <-done)
}

// When the Temporal worker stops for good (its namespace deleted on a real
// dev server), the worker process reports neither live nor ready and
// returns an error, so it exits non-zero and is restarted.
func TestWorkerExitsWhenEngineStopsForGood(t *testing.T) {
	const ns = "health-fatal"
	srv := devserver.Start(t, devserver.Options{Namespace: ns, SearchAttributes: temporaladapter.SearchAttributes()})
	s := testStack(t, "temporal", srv.HostPort, ns)
	addr := testkit.FreeAddr(t)
	done := make(chan error, 1)
	go func() {
		done <- s.RunWorker(context.Background(), Config{Engine: "temporal", StopTimeout: 5 * time.Second}, addr, true)
	}()
	waitReady(t, addr)

	_, err := srv.Client.OperatorService().DeleteNamespace(context.Background(), &operatorservice.DeleteNamespaceRequest{Namespace: ns})
	require.NoError(t, err)
	var runErr error
	select {
	case runErr = <-done:
	case <-time.After(5 * time.Minute):
		t.Fatal("the worker kept running after its namespace was deleted")
	}
	require.ErrorContains(t, runErr, "temporal engine stopped")
	require.Error(t, s.health.live())
	require.Error(t, s.health.ready(context.Background()))
}
