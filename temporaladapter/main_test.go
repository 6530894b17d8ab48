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
	"go.temporal.io/sdk/client"

	"github.com/taskport/taskport/internal/devserver"
	"github.com/taskport/taskport/internal/runstore"
	"github.com/taskport/taskport/internal/testkit/pgtest"
	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/temporaladapter"
	"github.com/taskport/taskport/temporaladapter/internal/testkinds"
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

// harness is one test's database, registry and task queue.
type harness struct {
	t     *testing.T
	pool  *pgxpool.Pool
	dbURL string
	queue string
	c     client.Client
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	dbURL := pgtest.NewDatabase(t)
	pool := pgtest.Connect(t, dbURL)
	_, err := pool.Exec(context.Background(), testkinds.Schema)
	require.NoError(t, err)
	queue := "tq-" + strings.NewReplacer("/", "-", " ", "-").Replace(t.Name()) + "-" + fmt.Sprint(time.Now().UnixNano())
	return &harness{t: t, pool: pool, dbURL: dbURL, queue: queue, c: temporalClient}
}

// engine builds an engine serving the test kinds (test.versioned at the
// given versions) on the harness's queue; started unless startWorker is false.
func (h *harness) engine(startWorker bool, versions ...int) *temporaladapter.Engine {
	h.t.Helper()
	return h.engineWith(temporaladapter.Config{}, startWorker, versions...)
}

// engineWith is engine with cfg's settings; the harness sets the task
// queue, the stop timeout and the logger.
func (h *harness) engineWith(cfg temporaladapter.Config, startWorker bool, versions ...int) *temporaladapter.Engine {
	h.t.Helper()
	reg := port.NewRegistry()
	require.NoError(h.t, testkinds.Register(reg, h.pool, versions...))
	cfg.TaskQueue, cfg.WorkerStopTimeout, cfg.Logger = h.queue, 5*time.Second, testLogger()
	eng, err := temporaladapter.New(h.c, h.pool, reg, cfg)
	require.NoError(h.t, err)
	if startWorker {
		require.NoError(h.t, eng.Start(context.Background(), port.StartOptions{Concurrency: 20}))
		h.t.Cleanup(func() { _ = eng.Stop(context.Background()) })
	}
	return eng
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

// ledgerRow is one operation in the test ledger.
type ledgerRow struct {
	Begins, Commits int
	Done            bool
	Epoch           int64
	Result          string
}

func (h *harness) ledger(id port.RunID, step string) (ledgerRow, bool) {
	h.t.Helper()
	var r ledgerRow
	err := h.pool.QueryRow(context.Background(),
		`SELECT begins, commits, done, epoch, result FROM tp_test_ledger WHERE op = $1`, string(id)+"/"+step).
		Scan(&r.Begins, &r.Commits, &r.Done, &r.Epoch, &r.Result)
	if err != nil {
		return ledgerRow{}, false
	}
	return r, true
}

func (h *harness) waitBegun(id port.RunID, step string) {
	h.t.Helper()
	require.Eventually(h.t, func() bool { _, ok := h.ledger(id, step); return ok }, 60*time.Second, 20*time.Millisecond,
		"step %s of run %s never began", step, id)
}

func (h *harness) count(sql string, args ...any) int {
	h.t.Helper()
	var n int
	require.NoError(h.t, h.pool.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}
