package app_test

import (
	"cmp"
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/acquisition"
	"github.com/taskport/taskport/app/apptest"
	"github.com/taskport/taskport/internal/testkit/devserver"
	"github.com/taskport/taskport/leaseadapter"
	"github.com/taskport/taskport/ledger"
	"github.com/taskport/taskport/outbox"
	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/temporaladapter"
	"github.com/taskport/taskport/workflows"
)

// temporalServer is one dev server for the package's engine tests; each
// world uses a task queue of its own.
var temporalServer *devserver.Server

func TestMain(m *testing.M) {
	os.Exit(devserver.Main(m, devserver.Options{SearchAttributes: temporaladapter.SearchAttributes()},
		func(s *devserver.Server) { temporalServer = s }))
}

// engineBuilder builds an engine over a world's registry and pool, logging
// to log.
type engineBuilder func(t *testing.T, reg *port.Registry, pool *pgxpool.Pool, log *slog.Logger) port.TaskEngine

// engines builds each engine.
var engines = []struct {
	name string
	new  engineBuilder
}{
	{"lease", func(t *testing.T, reg *port.Registry, pool *pgxpool.Pool, log *slog.Logger) port.TaskEngine {
		e, err := leaseadapter.New(pool, reg, leaseadapter.Config{PollInterval: 200 * time.Millisecond, Logger: log})
		require.NoError(t, err)
		return e
	}},
	{"temporal", func(t *testing.T, reg *port.Registry, pool *pgxpool.Pool, log *slog.Logger) port.TaskEngine {
		// A client of its own, so that the SDK's logs (activity errors)
		// go to log too.
		c, err := temporaladapter.Dial(context.Background(), temporaladapter.ClientConfig{
			HostPort: temporalServer.HostPort, Namespace: temporalServer.Namespace, Logger: log})
		require.NoError(t, err)
		t.Cleanup(c.Close)
		e, err := temporaladapter.New(c, pool, reg, temporaladapter.Config{
			TaskQueue: "app-" + rand.Text()[:12], WorkerStopTimeout: 5 * time.Second, Logger: log})
		require.NoError(t, err)
		return e
	}},
}

// engineWorld is a world whose engine is a real one, started, with the
// outbox dispatcher running. The engine logs where the activities do
// (opts.Logger; default discard).
func engineWorld(t *testing.T, build engineBuilder, opts apptest.Options) *apptest.World {
	t.Helper()
	var eng port.TaskEngine
	log := cmp.Or(opts.Logger, slog.New(slog.DiscardHandler))
	opts.NewEngine = func(reg *port.Registry, pool *pgxpool.Pool) port.TaskEngine {
		eng = build(t, reg, pool, log)
		return eng
	}
	w := apptest.NewWorld(t, opts)
	require.NoError(t, eng.Start(context.Background(), port.StartOptions{}))
	t.Cleanup(func() { require.NoError(t, eng.Stop(context.Background())) })
	require.NoError(t, w.Dispatcher.Start(context.Background()))
	return w
}

// The full acquisition on each engine: the approval hands over through the
// outbox and the dispatcher, each step to the next kind in its own commit
// (EnqueueTx), the engine runs them, and the test waits on the business
// ledger only.
func TestFullAcquisitionOnEngines(t *testing.T) {
	for _, e := range engines {
		t.Run(e.name, func(t *testing.T) {
			t.Parallel()
			fullAcquisition(t, engineWorld(t, e.new, apptest.Options{}))
		})
	}
}

func fullAcquisition(t *testing.T, w *apptest.World) {
	ctx := context.Background()

	a := apptest.NewAsset("full.mkv", 500_000)
	p := w.CreatePlan(t, a)
	id := p.ID.String()
	status := func() acquisition.Status { return w.Plan(t, id).Status }
	apptest.Acked(t)(w.Plans.Approve(ctx, id, "ann", ""))
	require.Eventually(t, func() bool { return status() == acquisition.Downloading }, 30*time.Second, 20*time.Millisecond)
	w.FinishDownload(t, p, a)
	apptest.Acked(t)(w.Plans.ReportDownloadComplete(ctx, a.Hash, ""))
	require.Eventually(t, func() bool { return len(w.Webhooks.Keys()) == 1 }, 60*time.Second, 20*time.Millisecond)

	require.Equal(t, acquisition.Completed, status())
	require.Equal(t, a.SHA256, apptest.FileSHA256(t, w.Target(a)))
	// Every operation and every enqueue of the timeline names a run of
	// this plan, as the engine recorded it: what /admin links to.
	runs, err := w.Engine.(port.Admin).ListRuns(ctx, port.RunFilter{BusinessKey: id})
	require.NoError(t, err)
	ids := map[string]bool{}
	for _, r := range runs {
		ids[string(r.ID)] = true
	}
	tl, err := w.Plans.Timeline(ctx, id)
	require.NoError(t, err)
	linked := 0
	for _, e := range tl.Entries {
		if e.Source == "operation" || (e.Source == "handoff" && !strings.HasPrefix(e.Event, "signal") && !strings.HasPrefix(e.Event, "cancel")) {
			require.True(t, ids[e.RunID], "%s %s names run %q, not one of the plan's", e.Source, e.Event, e.RunID)
			linked++
		}
	}
	require.Positive(t, linked)
	require.Equal(t, []string{a.Name}, w.LibraryFiles(t))
	require.Equal(t, map[ledger.Op]bool{
		ledger.OpSubmit: true, ledger.OpImport: true, ledger.OpVerify: true, ledger.OpCleanup: true,
	}, w.Operations(t, id))
	// The approval's hand-off is the plan's one outbox row (the API has no
	// engine); every later hand-over was enqueued by the step's own commit
	// (EnqueueTx): one run of each kind, and no outbox row for them. The
	// row is marked dispatched after Enqueue returns, which can be after
	// its run already finished.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, []string{"download.submit dispatched plan:" + id + ":download.submit"}, w.Outbox(t, id), "outbox rows")
	}, 30*time.Second, 20*time.Millisecond)
	kinds := map[port.Kind]int{}
	for _, r := range runs {
		kinds[r.Kind]++
	}
	require.Equal(t, map[port.Kind]int{workflows.KindDownloadSubmit: 1, workflows.KindDownloadAwait: 1, workflows.KindAssetImport: 1,
		workflows.KindAssetVerify: 1, workflows.KindDownloadCleanup: 1, workflows.KindNotifyWebhook: 1}, kinds)
	require.Equal(t, 1, w.QBT.AddRequests())
}

// A cancel while an engine runs the import: the step sees the flag between
// chunks, plan.cancel compensates, and nothing is left behind.
func TestCancelMidImportOnEngines(t *testing.T) {
	for _, e := range engines {
		t.Run(e.name, func(t *testing.T) {
			t.Parallel()
			files := &cancelingFiles{}
			cancelMidImport(t, engineWorld(t, e.new, apptest.Options{Files: files, ChunkSize: 16 << 10}), files)
		})
	}
}

func cancelMidImport(t *testing.T, w *apptest.World, files *cancelingFiles) {
	ctx := context.Background()
	a := apptest.NewAsset("cancel.mkv", 400_000)
	p := w.CreatePlan(t, a)
	id := p.ID.String()
	canceled := make(chan error, 1)
	files.cancel = func() { canceled <- apptest.ErrOf(w.Plans.Cancel(ctx, id, "tester", "changed my mind")) }

	apptest.Acked(t)(w.Plans.Approve(ctx, id, "ann", ""))
	require.Eventually(t, func() bool { return w.Plan(t, id).Status == acquisition.Downloading }, 30*time.Second, 20*time.Millisecond)
	w.FinishDownload(t, p, a)
	apptest.Acked(t)(w.Plans.ReportDownloadComplete(ctx, id, ""))
	select {
	case err := <-canceled:
		require.NoError(t, err)
	case <-time.After(60 * time.Second):
		t.Fatal("the import never started")
	}
	require.Eventually(t, func() bool {
		return w.Plan(t, id).Status == acquisition.Canceled && len(w.LibraryFiles(t)) == 0 && !w.Operations(t, id)[ledger.OpImport]
	}, 60*time.Second, 20*time.Millisecond)
	// The import run ends (canceled or returning "canceled") without
	// writing anything after the compensation.
	require.Eventually(t, func() bool {
		var open int
		require.NoError(t, w.Pool.QueryRow(ctx, `SELECT count(*) FROM taskport.run WHERE business_key = $1 AND status NOT IN ('succeeded','failed','canceled')`, id).Scan(&open))
		return open == 0
	}, 60*time.Second, 20*time.Millisecond)
	require.Empty(t, w.LibraryFiles(t))
	require.Less(t, files.last.Load(), int64(len(a.Content)), "the copy stopped between chunks")
	deleted, withFiles := w.QBT.Deleted(a.Hash)
	require.True(t, deleted && withFiles)
	require.True(t, w.Operations(t, id)[ledger.OpCompensate])
}

var benchStarted = port.DeclareActivity[int, int]("bench.started")

// BenchmarkCommitToRunStartOnLeaseEngine measures the whole outbox hop on a
// real engine: from the commit of the business transaction that wrote the
// outbox row to the first step of the run starting on a lease-engine worker.
func BenchmarkCommitToRunStartOnLeaseEngine(b *testing.B) {
	ctx := context.Background()
	started := make(chan time.Time, 1)
	var eng *leaseadapter.Engine
	w := apptest.NewWorld(b, apptest.Options{NewEngine: func(reg *port.Registry, pool *pgxpool.Pool) port.TaskEngine {
		require.NoError(b, reg.RegisterActivity(port.Bind(benchStarted, func(context.Context, int) (int, error) {
			started <- time.Now()
			return 0, nil
		})))
		require.NoError(b, reg.Register(port.Definition{
			Kind: "bench.start", Version: 1, Retry: port.NetworkRetry(),
			Handler: port.Handle(func(f port.Flow, in int) error {
				_, err := benchStarted.Run(f, "start", in)
				return err
			}),
		}))
		var err error
		eng, err = leaseadapter.New(pool, reg, leaseadapter.Config{})
		require.NoError(b, err)
		return eng
	}})
	require.NoError(b, eng.Start(ctx, port.StartOptions{}))
	b.Cleanup(func() { require.NoError(b, eng.Stop(context.Background())) })
	require.NoError(b, w.Dispatcher.Start(ctx))

	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		tx, err := w.Pool.Begin(ctx)
		require.NoError(b, err)
		_, err = outbox.Write(ctx, tx, outbox.Event{Kind: "bench.start", IdempotencyKey: fmt.Sprintf("bench-%d", i), Payload: i})
		require.NoError(b, err)
		require.NoError(b, tx.Commit(ctx))
		committed := time.Now()
		lat = append(lat, (<-started).Sub(committed))
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}
