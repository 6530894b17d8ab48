package temporaladapter_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"text/tabwriter"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/taskport/taskport/internal/testkit/pgtest"
	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/temporaladapter"
)

// The benchmark runs the same 3-step no-op workflow through the adapter and
// written directly on the SDK, on the same dev server, interleaved batch by
// batch, and prints runs/s and enqueue->first-step latency for both.
//
//	go test -run '^$' -bench AdapterVsRawSDK -benchtime 20x ./temporaladapter/

// benchBatch runs go through one side before the other side's batch; small
// batches, alternating who goes first, spread load drift on a shared machine
// over both sides.
const benchBatch = 20

var noop = port.DeclareActivity[string, string]("bench.noop")

// firstStep records when the first step of each workflow started.
type firstStep struct {
	mu sync.Mutex
	at map[string]time.Time
}

func (f *firstStep) mark(ctx context.Context) {
	info := activity.GetInfo(ctx)
	if info.ActivityID != "s1" && info.ActivityType.Name != "raw.noop" {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, seen := f.at[info.WorkflowExecution.ID]; !seen {
		f.at[info.WorkflowExecution.ID] = time.Now()
	}
}

func (f *firstStep) get(wid string) time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.at[wid]
}

func rawWorkflow(ctx workflow.Context, in string) (string, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute})
	for range 3 {
		if err := workflow.ExecuteActivity(ctx, "raw.noop", in).Get(ctx, &in); err != nil {
			return "", err
		}
	}
	return in, nil
}

type benchSide struct {
	name      string
	elapsed   time.Duration
	runs      int
	latencies []time.Duration
	rates     []float64 // per batch
}

func (s *benchSide) add(elapsed time.Duration, lat []time.Duration) {
	s.elapsed += elapsed
	s.runs += len(lat)
	s.latencies = append(s.latencies, lat...)
	s.rates = append(s.rates, float64(len(lat))/elapsed.Seconds())
}

// medianRatio is the median over rounds of a's batch rate over b's: robust
// to load that other processes put on the machine in some rounds.
func medianRatio(a, b *benchSide) float64 {
	r := make([]float64, len(a.rates))
	for i := range r {
		r[i] = a.rates[i] / b.rates[i]
	}
	slices.Sort(r)
	return r[len(r)/2]
}

func (s *benchSide) rate() float64 { return float64(s.runs) / s.elapsed.Seconds() }

func (s *benchSide) pct(p float64) time.Duration {
	l := slices.Clone(s.latencies)
	slices.Sort(l)
	return l[min(len(l)-1, int(p*float64(len(l))))]
}

func BenchmarkAdapterVsRawSDK(b *testing.B) {
	ctx := context.Background()
	pool := pgtest.NewPool(b)
	c := temporalClient
	marks := &firstStep{at: map[string]time.Time{}}
	const concurrency = 50

	reg := port.NewRegistry()
	if err := reg.Register(port.Definition{Kind: "bench.three", Version: 1, Retry: port.FileRetry(),
		Handler: port.Handle(func(f port.Flow, in string) error {
			for _, step := range []string{"s1", "s2", "s3"} {
				var err error
				if in, err = noop.Run(f, step, in); err != nil {
					return err
				}
			}
			return nil
		})}); err != nil {
		b.Fatal(err)
	}
	if err := reg.RegisterActivity(port.Bind(noop, func(ctx context.Context, in string) (string, error) {
		marks.mark(ctx)
		return in, nil
	})); err != nil {
		b.Fatal(err)
	}
	stamp := time.Now().UnixNano()
	eng, err := temporaladapter.New(c, pool, reg, temporaladapter.Config{TaskQueue: fmt.Sprintf("bench-adapter-%d", stamp), Logger: testLogger()})
	if err != nil {
		b.Fatal(err)
	}
	if err := eng.Start(ctx, port.StartOptions{Concurrency: concurrency}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = eng.Stop(ctx) })

	rawQueue := fmt.Sprintf("bench-raw-%d", stamp)
	w := worker.New(c, rawQueue, worker.Options{MaxConcurrentActivityExecutionSize: concurrency, MaxConcurrentWorkflowTaskExecutionSize: concurrency})
	w.RegisterWorkflowWithOptions(rawWorkflow, workflow.RegisterOptions{Name: "raw.three"})
	w.RegisterActivityWithOptions(func(ctx context.Context, in string) (string, error) {
		marks.mark(ctx)
		return in, nil
	}, activity.RegisterOptions{Name: "raw.noop"})
	if err := w.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(w.Stop)

	adapter := &benchSide{name: "adapter"}
	raw := &benchSide{name: "raw SDK"}
	seq := 0
	runAdapter := func() {
		started := time.Now()
		enq := make(map[string]time.Time, benchBatch)
		var wids []string
		for range benchBatch {
			seq++
			t0 := time.Now()
			id, err := eng.Enqueue(ctx, "bench.three", "x", port.EnqueueOptions{IdempotencyKey: fmt.Sprintf("bench-%d-%d", stamp, seq)})
			if err != nil {
				b.Fatal(err)
			}
			wid := temporaladapter.WorkflowID(id)
			enq[wid] = t0
			wids = append(wids, wid)
		}
		adapter.add(waitAll(b, c, wids, started, enq, marks))
	}
	runRaw := func() {
		started := time.Now()
		enq := make(map[string]time.Time, benchBatch)
		var wids []string
		for range benchBatch {
			seq++
			wid := fmt.Sprintf("raw/%d/%d", stamp, seq)
			t0 := time.Now()
			if _, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: wid, TaskQueue: rawQueue}, "raw.three", "x"); err != nil {
				b.Fatal(err)
			}
			enq[wid] = t0
			wids = append(wids, wid)
		}
		raw.add(waitAll(b, c, wids, started, enq, marks))
	}

	runAdapter() // warm both paths up before measuring
	runRaw()
	*adapter, *raw = benchSide{name: "adapter"}, benchSide{name: "raw SDK"}
	b.ResetTimer()
	for i := range b.N {
		if i%2 == 0 { // alternate who goes first
			runAdapter()
			runRaw()
		} else {
			runRaw()
			runAdapter()
		}
	}
	b.StopTimer()

	b.ReportMetric(adapter.rate(), "adapter_runs/s")
	b.ReportMetric(raw.rate(), "raw_runs/s")
	b.ReportMetric(adapter.rate()/raw.rate(), "ratio")
	b.ReportMetric(medianRatio(adapter, raw), "median_round_ratio")
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "\nside\truns\truns/s\tenqueue->first step p50\tp99\t\n")
	for _, s := range []*benchSide{adapter, raw} {
		fmt.Fprintf(tw, "%s\t%d\t%.1f\t%s\t%s\t\n", s.name, s.runs, s.rate(), s.pct(0.5).Round(time.Microsecond), s.pct(0.99).Round(time.Microsecond))
	}
	fmt.Fprintf(tw, "adapter/raw\t\t%.3f\t%.3f\t%.3f\t\n", adapter.rate()/raw.rate(),
		float64(adapter.pct(0.5))/float64(raw.pct(0.5)), float64(adapter.pct(0.99))/float64(raw.pct(0.99)))
	fmt.Fprintf(tw, "median of per-round ratios\t\t%.3f\t\t\t\n", medianRatio(adapter, raw))
	tw.Flush()
}

// waitAll waits for every workflow to complete and returns the batch's
// elapsed time and each run's enqueue -> first step latency.
func waitAll(b *testing.B, c client.Client, wids []string, started time.Time, enq map[string]time.Time, marks *firstStep) (time.Duration, []time.Duration) {
	ctx := context.Background()
	for _, wid := range wids {
		if err := c.GetWorkflow(ctx, wid, "").Get(ctx, nil); err != nil {
			b.Fatalf("run %s: %v", wid, err)
		}
	}
	elapsed := time.Since(started)
	lat := make([]time.Duration, 0, len(wids))
	for _, wid := range wids {
		lat = append(lat, marks.get(wid).Sub(enq[wid]))
	}
	return elapsed, lat
}
