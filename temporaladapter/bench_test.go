package temporaladapter_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"golang.org/x/sync/errgroup"

	"github.com/taskport/taskport/internal/benchkit"
	"github.com/taskport/taskport/internal/testkit/pgtest"
	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/temporaladapter"
)

// BenchmarkAdapterVsRawSDK runs the same 3-step no-op workflow through the
// adapter and written directly on the SDK:
//
//	go test -run '^$' -bench AdapterVsRawSDK -benchtime 7x ./temporaladapter/
//
// -benchtime Nx runs N rounds (b.Loop: no extra probing round).
// benchMethod, printed above the table, says what is held equal between the
// two sides.
const (
	benchSlots     = 8   // activity, workflow-task and local-activity slots of each side's worker
	benchProducers = 8   // goroutines, each starting a run and waiting for its end before the next
	benchRuns      = 320 // runs per side and round
)

var benchMethod = fmt.Sprintf(`method: one dev server and one client for both sides (the harness's, built by temporaladapter.Dial with its tracing interceptor);
the same 3-activity no-op workflow; workers with %d activity, workflow-task and local-activity slots, default pollers,
the adapter's sticky schedule-to-start and workflow-task timeouts on both; %d producers, each starting a run
(adapter: Engine.Enqueue; raw: client.ExecuteWorkflow) and waiting for its end with client.GetWorkflow(...).Get before the next;
%d runs per side and round, the side going first alternating by round; runs/s is the median of the rounds, the ratio the
median of the per-round ratios; enqueue->first step runs from before the start call to the start of the run's first
activity, over every round; commits are the pg_stat_database.xact_commit delta of the benchmark's database over the
side's rounds, every pool connection flushing its statistics first; CPU is utime+stime per run of this process, of the
dev server, and of the Postgres backends connected to the benchmark's database; the adapter's pool has pgxpool's default size`, benchSlots, benchProducers, benchRuns)

var noop = port.DeclareActivity[string, string]("bench.noop")

// firstStep records when the first activity of each workflow started.
type firstStep struct {
	mu sync.Mutex
	at map[string]time.Time
}

func (f *firstStep) mark(ctx context.Context) {
	wid := activity.GetInfo(ctx).WorkflowExecution.ID
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, seen := f.at[wid]; !seen {
		f.at[wid] = time.Now()
	}
}

func (f *firstStep) take(wid string) time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := f.at[wid]
	delete(f.at, wid)
	return t
}

// benchSide is one side's starts and what its rounds measured.
type benchSide struct {
	name  string
	start func(ctx context.Context) (wid string, err error)

	rates     []float64 // runs/s per round
	latencies []time.Duration
	runs      int
	commits   int64
	cpu       [3]time.Duration // this process, dev server, Postgres backends
}

func (s *benchSide) median() float64 {
	r := slices.Clone(s.rates)
	slices.Sort(r)
	return r[len(r)/2]
}

func (s *benchSide) pct(p float64) time.Duration {
	l := slices.Clone(s.latencies)
	slices.Sort(l)
	return l[min(len(l)-1, int(p*float64(len(l))))]
}

func (s *benchSide) perRun(d time.Duration) string {
	return fmt.Sprintf("%.1f", float64(d.Microseconds())/1000/float64(s.runs))
}

// benchMeter reads the counters a round is charged with: Postgres commits
// of the benchmark's database and the CPU time of the three processes that
// do the work.
type benchMeter struct {
	pool    *pgxpool.Pool
	admin   *pgx.Conn // on the server's own database, so its reads are not counted
	db      string
	flushes int64 // commits of our own pg_stat_force_next_flush calls
	devPID  int
}

type benchReading struct {
	commits int64
	cpu     [3]time.Duration
}

func (m *benchMeter) read(b *testing.B) benchReading {
	b.Helper()
	ctx := context.Background()
	// A backend publishes its counters when idle, at most once a second
	// unless told to; each flush call is a commit of its own, taken off.
	for _, c := range m.pool.AcquireAllIdle(ctx) {
		if _, err := c.Exec(ctx, "SELECT pg_stat_force_next_flush()"); err != nil {
			b.Fatal(err)
		}
		m.flushes++
		c.Release()
	}
	var r benchReading
	var pids []int
	rows, err := m.admin.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE datname = $1`, m.db)
	if err != nil {
		b.Fatal(err)
	}
	if pids, err = pgx.CollectRows(rows, pgx.RowTo[int]); err != nil {
		b.Fatal(err)
	}
	if err := m.admin.QueryRow(ctx, `SELECT xact_commit FROM pg_stat_database WHERE datname = $1`, m.db).Scan(&r.commits); err != nil {
		b.Fatal(err)
	}
	r.commits -= m.flushes
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	r.cpu[0] = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	r.cpu[1] = benchkit.ProcCPU(m.devPID, false)
	for _, pid := range pids {
		r.cpu[2] += benchkit.ProcCPU(pid, false)
	}
	return r
}

// round runs n runs of s with benchProducers producers and charges s with
// what they took.
func (s *benchSide) round(b *testing.B, n int, c client.Client, marks *firstStep, m *benchMeter) {
	b.Helper()
	ctx := context.Background()
	before := m.read(b)
	var next atomic.Int64
	var mu sync.Mutex
	lat := make([]time.Duration, 0, n)
	began := time.Now()
	var g errgroup.Group
	for range benchProducers {
		g.Go(func() error {
			for next.Add(1) <= int64(n) {
				t0 := time.Now()
				wid, err := s.start(ctx)
				if err != nil {
					return fmt.Errorf("%s: start: %w", s.name, err)
				}
				if err := c.GetWorkflow(ctx, wid, "").Get(ctx, nil); err != nil {
					return fmt.Errorf("%s: run %s: %w", s.name, wid, err)
				}
				mu.Lock()
				lat = append(lat, marks.take(wid).Sub(t0))
				mu.Unlock()
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		b.Fatal(err)
	}
	elapsed := time.Since(began)
	after := m.read(b)
	s.rates = append(s.rates, float64(n)/elapsed.Seconds())
	s.latencies = append(s.latencies, lat...)
	s.runs += n
	s.commits += after.commits - before.commits
	for i := range s.cpu {
		s.cpu[i] += after.cpu[i] - before.cpu[i]
	}
}

func BenchmarkAdapterVsRawSDK(b *testing.B) {
	ctx := context.Background()
	dbURL := pgtest.NewDatabase(b)
	pool := pgtest.Connect(b, dbURL)
	admin, err := pgx.Connect(ctx, pgtest.ServerURL(b))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { admin.Close(ctx) })
	c := temporalClient
	marks := &firstStep{at: map[string]time.Time{}}
	devPID, err := benchkit.ChildNamed("temporal")
	if err != nil {
		b.Fatal(err)
	}
	meter := &benchMeter{pool: pool, admin: admin, db: pool.Config().ConnConfig.Database, devPID: devPID}

	reg := port.NewRegistry()
	if err := benchkit.ThreeNoopSteps(reg, "bench.three", noop, func(ctx context.Context, in string) (string, error) {
		marks.mark(ctx)
		return in, nil
	}); err != nil {
		b.Fatal(err)
	}
	stamp := time.Now().UnixNano()
	eng, err := temporaladapter.New(c, pool, reg, temporaladapter.Config{TaskQueue: fmt.Sprintf("bench-adapter-%d", stamp), Logger: testLogger()})
	if err != nil {
		b.Fatal(err)
	}
	if err := eng.Start(ctx, port.StartOptions{Concurrency: benchSlots}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = eng.Stop(ctx) })

	rawQueue := fmt.Sprintf("bench-raw-%d", stamp)
	w := benchkit.RawWorker(c, rawQueue, benchSlots, func(ctx context.Context, in string) (string, error) {
		marks.mark(ctx)
		return in, nil
	})
	if err := w.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(w.Stop)

	var seq atomic.Int64
	adapter := &benchSide{name: "adapter", start: func(ctx context.Context) (string, error) {
		id, err := eng.Enqueue(ctx, "bench.three", "x", port.EnqueueOptions{IdempotencyKey: fmt.Sprintf("bench-%d-%d", stamp, seq.Add(1))})
		return temporaladapter.WorkflowID(id), err
	}}
	raw := &benchSide{name: "raw SDK", start: func(ctx context.Context) (string, error) {
		wid := fmt.Sprintf("raw/%d/%d", stamp, seq.Add(1))
		_, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: wid, TaskQueue: rawQueue,
			WorkflowTaskTimeout: temporaladapter.DefaultWorkflowTaskTimeout}, "raw.three", "x")
		return wid, err
	}}

	// A short unmeasured round warms both paths up (connections, caches).
	for _, s := range []*benchSide{adapter, raw} {
		s.round(b, 4*benchProducers, c, marks, meter)
		*s = benchSide{name: s.name, start: s.start}
	}
	rounds := 0
	for ; b.Loop(); rounds++ {
		if rounds%2 == 0 {
			adapter.round(b, benchRuns, c, marks, meter)
			raw.round(b, benchRuns, c, marks, meter)
		} else {
			raw.round(b, benchRuns, c, marks, meter)
			adapter.round(b, benchRuns, c, marks, meter)
		}
	}
	b.StopTimer()

	ratios := make([]float64, rounds)
	each := make([]string, rounds)
	for i := range ratios {
		ratios[i] = adapter.rates[i] / raw.rates[i]
		each[i] = fmt.Sprintf("%.2f", ratios[i])
	}
	slices.Sort(ratios)
	ratio := ratios[len(ratios)/2]
	b.ReportMetric(adapter.median(), "adapter_runs/s")
	b.ReportMetric(raw.median(), "raw_runs/s")
	b.ReportMetric(ratio, "ratio")
	b.ReportMetric(float64(adapter.commits)/float64(adapter.runs), "adapter_commits/run")

	fmt.Printf("\n%s\n\n", benchMethod)
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "side\truns\truns/s (median)\trounds\tenqueue->first step p50\tp99\tcommits/run\tCPU ms/run: test process\tdev server\tPostgres\t\n")
	for _, s := range []*benchSide{adapter, raw} {
		each := make([]string, len(s.rates))
		for i, r := range s.rates {
			each[i] = fmt.Sprintf("%.1f", r)
		}
		fmt.Fprintf(tw, "%s\t%d\t%.1f\t%s\t%s\t%s\t%.2f\t%s\t%s\t%s\t\n", s.name, s.runs, s.median(), strings.Join(each, " "),
			s.pct(0.5).Round(time.Microsecond), s.pct(0.99).Round(time.Microsecond), float64(s.commits)/float64(s.runs),
			s.perRun(s.cpu[0]), s.perRun(s.cpu[1]), s.perRun(s.cpu[2]))
	}
	fmt.Fprintf(tw, "adapter/raw (median of round ratios)\t\t%.3f\t%s\t\t\t\t\t\t\t\n", ratio, strings.Join(each, " "))
	tw.Flush()
}
