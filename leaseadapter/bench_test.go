package leaseadapter_test

// Benchmarks (not timed tests): run with
//
//	go test -run '^$' -bench 'Throughput|EnqueueToFirstStep|EnqueueToLastStep|SignalToWake' -benchtime 2000x ./leaseadapter
//
// b.N is the number of runs (or samples). Each reports its figures with
// ReportMetric, so the bench output is the table: runs/s and Postgres
// commits per run (pg_stat_database xact_commit delta of the benchmark's own
// database, every statement included: claims, heartbeats, polls) for a
// 3-step no-op kind at concurrency 1, 8 and 32; enqueue -> first step,
// enqueue -> last (third) step and signal -> wake latency percentiles.

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskport/taskport/internal/testkit/pgtest"
	"github.com/taskport/taskport/leaseadapter"
	"github.com/taskport/taskport/port"
)

const (
	benchNoop  port.Kind = "bench.noop3"
	benchWaitK port.Kind = "bench.wait"
)

var noopAct = port.DeclareActivity[int, int]("bench.noop")

// benchProbe lets an activity tell the benchmark when it ran.
type benchProbe struct {
	mu   sync.Mutex
	seen map[probeKey]chan struct{}
}

// probeKey is a run's step by index: 0 the first, lastStep the last.
type probeKey struct {
	run  port.RunID
	step int
}

const lastStep = 2

func newBenchProbe() *benchProbe { return &benchProbe{seen: map[probeKey]chan struct{}{}} }

func (p *benchProbe) expect(id port.RunID, step int) chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	ch, ok := p.seen[probeKey{id, step}]
	if !ok {
		ch = make(chan struct{})
		p.seen[probeKey{id, step}] = ch
	}
	return ch
}

func (p *benchProbe) noop(ctx context.Context, step int) (int, error) {
	if step != 0 && step != lastStep {
		return step, nil
	}
	si, _ := port.StepInfoFrom(ctx)
	ch := p.expect(si.RunID, step)
	select {
	case <-ch:
	default:
		close(ch)
	}
	return step, nil
}

func benchRegistry(b *testing.B, probe *benchProbe) *port.Registry {
	b.Helper()
	reg := port.NewRegistry()
	retry := port.NetworkRetry()
	if err := reg.RegisterActivity(port.Bind(noopAct, probe.noop)); err != nil {
		b.Fatal(err)
	}
	err := reg.Register(
		port.Definition{Kind: benchNoop, Version: 1, Retry: retry, Handler: port.Handle(func(f port.Flow, _ struct{}) error {
			for i := range lastStep + 1 {
				if _, err := noopAct.Run(f, fmt.Sprintf("s%d", i), i); err != nil {
					return err
				}
			}
			return nil
		})},
		port.Definition{Kind: benchWaitK, Version: 1, Retry: retry, Handler: port.Handle(func(f port.Flow, topic string) error {
			if _, err := f.WaitSignal("wait", port.Topic(topic), time.Hour, nil); err != nil {
				return err
			}
			_, err := noopAct.Run(f, "after", 0)
			return err
		})},
	)
	if err != nil {
		b.Fatal(err)
	}
	return reg
}

func benchEngine(b *testing.B, pool *pgxpool.Pool, reg *port.Registry) *leaseadapter.Engine {
	b.Helper()
	eng, err := leaseadapter.New(pool, reg, leaseadapter.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	return eng
}

// sizedPool sets the worker's pool to 20 connections (what cmd/taskport
// and DBOS use by default) instead of pgxpool's max(4, CPUs), which would
// make the group committers queue for connections on a small machine.
func sizedPool(b *testing.B, raw string) string {
	b.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		b.Fatal(err)
	}
	q := u.Query()
	q.Set("pool_max_conns", "20")
	u.RawQuery = q.Encode()
	return u.String()
}

// dbStats reads the database's commit counter and the pages its statements
// read (pg_stat_database's blks_hit + blks_read) once every backend has
// flushed its statistics (they do at exit; the caller closed its pools):
// when two reads agree, up to the handful of pages a read takes. The commit
// of its own read of the stable value is taken off.
func dbStats(b *testing.B, url string) (commits, pages int64) {
	b.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	lastCommits, lastPages := int64(-1), int64(-1)
	tick := time.NewTicker(300 * time.Millisecond)
	defer tick.Stop()
	for {
		if err := conn.QueryRow(ctx, `SELECT xact_commit, blks_hit + blks_read FROM pg_stat_database WHERE datname = current_database()`).
			Scan(&commits, &pages); err != nil {
			b.Fatal(err)
		}
		if commits == lastCommits && pages-lastPages < 100 {
			return commits - 1, pages
		}
		lastCommits, lastPages = commits, pages
		<-tick.C
	}
}

func BenchmarkThroughput(b *testing.B) {
	for _, c := range []int{1, 8, 32} {
		b.Run(fmt.Sprintf("noop3/concurrency=%d", c), func(b *testing.B) {
			ctx := context.Background()
			url := pgtest.NewDatabase(b)
			probe := newBenchProbe()
			reg := benchRegistry(b, probe)

			loader, err := pgxpool.New(ctx, url)
			if err != nil {
				b.Fatal(err)
			}
			client := benchEngine(b, loader, reg)
			for i := range b.N {
				if _, err := client.Enqueue(ctx, benchNoop, struct{}{}, port.EnqueueOptions{IdempotencyKey: fmt.Sprint(i)}); err != nil {
					b.Fatal(err)
				}
			}
			loader.Close()
			before, _ := dbStats(b, url)

			pool, err := pgxpool.New(ctx, sizedPool(b, url))
			if err != nil {
				b.Fatal(err)
			}
			done := &finishCounter{all: make(chan struct{})}
			done.want.Store(int64(b.N))
			eng, err := leaseadapter.New(pool, reg, leaseadapter.Config{Logger: slog.New(slog.DiscardHandler), Metrics: done})
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			start := time.Now()
			if err := eng.Start(ctx, port.StartOptions{Concurrency: c}); err != nil {
				b.Fatal(err)
			}
			<-done.all
			elapsed := time.Since(start)
			b.StopTimer()
			if err := eng.Stop(ctx); err != nil {
				b.Fatal(err)
			}
			pool.Close()
			after, _ := dbStats(b, url)
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "runs/s")
			b.ReportMetric(float64(after-before)/float64(b.N), "commits/run")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// finishCounter closes all when want runs have succeeded, so that waiting
// for the end adds no query of its own to the commit count.
type finishCounter struct {
	want, n atomic.Int64
	all     chan struct{}
}

func (c *finishCounter) Finished(_ port.Kind, s port.Status) {
	if s == port.StatusSucceeded && c.n.Add(1) == c.want.Load() {
		close(c.all)
	}
}
func (*finishCounter) Claimed(int)            {}
func (*finishCounter) LeaseLost(port.Kind)    {}
func (*finishCounter) FencedCommit(port.Kind) {}
func (*finishCounter) QueueDepth(int)         {}

func percentiles(b *testing.B, samples []time.Duration) {
	slices.Sort(samples)
	at := func(q float64) float64 {
		return float64(samples[int(q*float64(len(samples)-1))].Microseconds()) / 1000
	}
	b.ReportMetric(at(0.5), "p50_ms")
	b.ReportMetric(at(0.99), "p99_ms")
	b.ReportMetric(0, "ns/op")
}

// latencyEngine is an idle worker (concurrency 8) on a fresh database,
// stopped when the benchmark ends.
func latencyEngine(b *testing.B) (*pgxpool.Pool, *benchProbe, *leaseadapter.Engine) {
	b.Helper()
	pool := pgtest.Connect(b, sizedPool(b, pgtest.NewDatabase(b)))
	probe := newBenchProbe()
	eng := benchEngine(b, pool, benchRegistry(b, probe))
	if err := eng.Start(context.Background(), port.StartOptions{Concurrency: 8}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = eng.Stop(context.Background()) })
	return pool, probe, eng
}

func BenchmarkEnqueueToFirstStep(b *testing.B) { benchEnqueueToStep(b, 0) }

// BenchmarkEnqueueToLastStep adds to the first step's latency the commits
// between steps on an idle worker: each step's result and the next step's
// started marker, before the next body starts.
func BenchmarkEnqueueToLastStep(b *testing.B) { benchEnqueueToStep(b, lastStep) }

// benchEnqueueToStep times, one run at a time, from Enqueue to the start of
// the body of the run's step at index step, and reports the database's
// commits per run, every statement of the idle worker's included (the run's
// end too: the worker is stopped once the last run finished).
func benchEnqueueToStep(b *testing.B, step int) {
	ctx := context.Background()
	url := pgtest.NewDatabase(b)
	pool := pgtest.Connect(b, sizedPool(b, url))
	probe := newBenchProbe()
	eng := benchEngine(b, pool, benchRegistry(b, probe))
	if err := eng.Start(ctx, port.StartOptions{Concurrency: 8}); err != nil {
		b.Fatal(err)
	}
	before, _ := dbStats(b, url)
	samples := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		start := time.Now()
		id, err := eng.Enqueue(ctx, benchNoop, struct{}{}, port.EnqueueOptions{IdempotencyKey: fmt.Sprint(i)})
		if err != nil {
			b.Fatal(err)
		}
		<-probe.expect(id, step)
		samples = append(samples, time.Since(start))
	}
	b.StopTimer()
	if err := eng.Stop(ctx); err != nil { // waits for the last run's end
		b.Fatal(err)
	}
	pool.Close()
	after, _ := dbStats(b, url)
	percentiles(b, samples)
	b.ReportMetric(float64(after-before)/float64(b.N), "commits/run")
}

func BenchmarkSignalToWake(b *testing.B) {
	ctx := context.Background()
	pool, probe, eng := latencyEngine(b)
	samples := make([]time.Duration, 0, b.N)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	b.ResetTimer()
	for i := range b.N {
		topic := fmt.Sprintf("bench:%d", i)
		id, err := eng.Enqueue(ctx, benchWaitK, topic, port.EnqueueOptions{IdempotencyKey: topic})
		if err != nil {
			b.Fatal(err)
		}
		for {
			var waiting bool
			if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM taskport.run WHERE id = $1 AND status = 'waiting')`, id).Scan(&waiting); err != nil {
				b.Fatal(err)
			}
			if waiting {
				break
			}
			<-tick.C
		}
		start := time.Now()
		n, err := eng.Signal(ctx, port.Topic(topic), nil)
		if err != nil || n != 1 {
			b.Fatalf("signal %s: delivered %d, %v", topic, n, err)
		}
		<-probe.expect(id, 0)
		samples = append(samples, time.Since(start))
	}
	b.StopTimer()
	percentiles(b, samples)
}
