package stack

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/operatorservice/v1"

	"github.com/taskport/taskport/host"
	"github.com/taskport/taskport/internal/testkit"
	"github.com/taskport/taskport/internal/testkit/devserver"
	"github.com/taskport/taskport/internal/testkit/pgtest"
	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/temporaladapter"
	"github.com/taskport/taskport/workflows"
)

// probe answers one probe of a host over s's business pool and engine
// with services: the status code and the body.
func probe(t *testing.T, s *Stack, path string, services ...host.Service) (int, string) {
	t.Helper()
	h, err := host.New(host.Config{Pool: s.bizPool, Engine: s.engine, Services: services})
	require.NoError(t, err)
	rec := httptest.NewRecorder()
	h.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec.Code, rec.Body.String()
}

// dispatcherService is the dispatcher as RunWorker hands it to the host,
// for its readiness only.
func dispatcherService(s *Stack) host.Service {
	return host.Service{Name: "outbox dispatcher", Ready: s.dispatchWatch.healthy}
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

// The worker's own readiness rules on top of package host's (host's tests
// hold those), against a real Postgres and the real lease engine: the
// dispatcher running and its last hand-over to the engine succeeding.
func TestWorkerHealthRules(t *testing.T) {
	ctx := context.Background()
	s := testStack(t, "lease", "", "")
	d := dispatcherService(s)

	code, body := probe(t, s, "/readyz", d)
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Contains(t, body, "engine not serving")
	require.NoError(t, s.engine.Start(ctx, port.StartOptions{}))
	t.Cleanup(func() { _ = s.engine.Stop(ctx) }) // its pool is closed below: a failed hand-back is no news here
	code, body = probe(t, s, "/readyz", d)
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Contains(t, body, "outbox dispatcher not running")
	s.dispatchWatch.setRunning(true)
	code, _ = probe(t, s, "/readyz", d)
	require.Equal(t, http.StatusOK, code)

	// A hand-over the engine refuses as invalid is the row's fault, not
	// the dispatcher's: still ready.
	_, err := s.dispatchWatch.EnqueueMany(context.Background(), []port.EnqueueItem{
		{Kind: "no.such.kind", Input: struct{}{}, Options: port.EnqueueOptions{IdempotencyKey: "k"}}})
	require.ErrorIs(t, err, port.ErrInvalidInput)
	code, _ = probe(t, s, "/readyz", d)
	require.Equal(t, http.StatusOK, code)

	// The engine unreachable (its database gone): the dispatcher cannot
	// move rows, so the worker is not ready, and the probe body names the
	// dispatcher, not the driver's error.
	s.enginePool.Close()
	_, err = s.dispatchWatch.EnqueueMany(context.Background(), []port.EnqueueItem{{Kind: workflows.KindNotifyWebhook,
		Input: workflows.NotifyInput{PlanID: uuid.NewString(), Event: "e", Status: "s"}, Options: port.EnqueueOptions{IdempotencyKey: "k"}}})
	require.Error(t, err)
	require.NotErrorIs(t, err, port.ErrInvalidInput)
	code, body = probe(t, s, "/readyz", d)
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, "outbox dispatcher: last enqueue failed\n", body)
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
	require.ErrorContains(t, runErr, "temporal worker: engine stopped")
	require.Error(t, s.host.Live())
	require.Error(t, s.host.Ready(context.Background()))
}
