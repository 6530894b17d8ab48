package temporaladapter_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"

	"github.com/taskport/taskport/internal/devserver"
	"github.com/taskport/taskport/internal/runstore"
	"github.com/taskport/taskport/internal/testkit/pgtest"
	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/temporaladapter"
	"github.com/taskport/taskport/test/contract/kinds"
)

// server is the one dev server of this test binary; each test isolates
// itself with its own task queue and its own database.
var (
	server         *devserver.Server
	temporalClient client.Client
)

func testLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

func TestMain(m *testing.M) {
	s, err := devserver.Launch(context.Background(), devserver.Options{SearchAttributes: temporaladapter.SearchAttributes()})
	if err != nil {
		fmt.Fprintln(os.Stderr, "temporaladapter tests:", err)
		os.Exit(1)
	}
	server = s
	// The harness's own client, with the SDK's logs bridged to slog.
	c, err := temporaladapter.Dial(context.Background(), temporaladapter.ClientConfig{HostPort: s.HostPort, Namespace: s.Namespace, Logger: testLogger()})
	if err != nil {
		fmt.Fprintln(os.Stderr, "temporaladapter tests:", err)
		os.Exit(1)
	}
	temporalClient = c
	code := m.Run()
	c.Close()
	if err := s.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stop dev server:", err)
	}
	os.Exit(code)
}

// harness is one test's database, registry and task queue. The kinds are
// the contract suite's (test/contract/kinds): these tests hold the adapter's
// own mechanics, the suite what both engines promise.
type harness struct {
	t     *testing.T
	pool  *pgxpool.Pool
	queue string
	c     client.Client
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	pool := pgtest.NewPool(t)
	_, err := pool.Exec(context.Background(), kinds.Schema)
	require.NoError(t, err)
	queue := "tq-" + strings.NewReplacer("/", "-", " ", "-").Replace(t.Name()) + "-" + fmt.Sprint(time.Now().UnixNano())
	return &harness{t: t, pool: pool, queue: queue, c: temporalClient}
}

// engine builds and starts an engine serving defs (the suite's kinds when
// none) on the harness's queue, with cfg's settings; the harness sets the
// task queue, the stop timeout and the logger.
func (h *harness) engine(cfg temporaladapter.Config, defs ...port.Definition) *temporaladapter.Engine {
	h.t.Helper()
	if len(defs) == 0 {
		defs = kinds.Definitions(false)
	}
	reg := port.NewRegistry()
	require.NoError(h.t, kinds.Register(reg, h.pool, defs...))
	return h.serve(cfg, reg)
}

// serve starts an engine over reg on the harness's queue.
func (h *harness) serve(cfg temporaladapter.Config, reg *port.Registry) *temporaladapter.Engine {
	h.t.Helper()
	cfg.TaskQueue, cfg.WorkerStopTimeout, cfg.Logger = h.queue, 5*time.Second, testLogger()
	eng, err := temporaladapter.New(h.c, h.pool, reg, cfg)
	require.NoError(h.t, err)
	require.NoError(h.t, eng.Start(context.Background(), port.StartOptions{Concurrency: 20}))
	h.t.Cleanup(func() { _ = eng.Stop(context.Background()) })
	return eng
}

func (h *harness) enqueue(eng *temporaladapter.Engine, kind port.Kind, in any, opts port.EnqueueOptions) port.RunID {
	h.t.Helper()
	id, err := eng.Enqueue(context.Background(), kind, in, opts)
	require.NoError(h.t, err)
	return id
}

// waitStatus polls the Postgres projection (the business-side truth about
// the run) until it reaches want.
func (h *harness) waitStatus(id port.RunID, want port.Status) runstore.Run {
	h.t.Helper()
	var run runstore.Run
	require.EventuallyWithT(h.t, func(c *assert.CollectT) {
		var err error
		run, err = runstore.Get(context.Background(), h.pool, id)
		require.NoError(c, err)
		require.Equal(c, want, run.Status, "run %s: last error %q", id, run.LastError)
	}, 60*time.Second, 50*time.Millisecond)
	return run
}

// history returns the events of the run's workflow, in order, as the
// harness's client reads them from the server.
func (h *harness) history(id port.RunID) []*historypb.HistoryEvent {
	h.t.Helper()
	var events []*historypb.HistoryEvent
	it := h.c.GetWorkflowHistory(context.Background(), temporaladapter.WorkflowID(id), "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		require.NoError(h.t, err)
		events = append(events, ev)
	}
	return events
}

// effects returns the executions of each effect label of a run.
func (h *harness) effects(id port.RunID) map[string]int {
	h.t.Helper()
	out, err := kinds.Effects(context.Background(), h.pool, id)
	require.NoError(h.t, err)
	return out
}

// wait is a wait on topic, an hour long; ct.wait's gate is named after the
// topic.
func wait(topic port.Topic) kinds.WaitIn {
	return kinds.WaitIn{Gate: string(topic), Topic: topic, Timeout: kinds.Duration(time.Hour)}
}
