package leaseadapter_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskport/taskport/internal/testkit/pgtest"
	"github.com/taskport/taskport/leaseadapter"
	"github.com/taskport/taskport/port"
)

// BenchmarkBacklog is the growth benchmark of issue 14: lease throughput and
// enqueue -> first step at backlogs of pending runs. Run it once
// (-benchtime 1x); the sizes, the batch, the samples and the rounds may be
// set in the environment (defaults shown; about 2 minutes on 2 cores):
//
//	TASKPORT_BACKLOG_SIZES=1000,100000,1000000 TASKPORT_BACKLOG_RUNS=2000 TASKPORT_BACKLOG_SAMPLES=200 \
//	TASKPORT_BACKLOG_ROUNDS=5 go test -run '^$' -bench Backlog -benchtime 1x -timeout 30m ./leaseadapter
//
// The backlog models a user who imported plans whose runs are scheduled
// ahead (EnqueueOptions.AvailableAt, a day and more away): pending lease
// runs (rows of taskport.run, which hold the lease state since migration
// 00014), of the very kind the worker serves, in the claim's index
// (run_ready), that stay pending while it is measured. A backlog due now would be drained during the measurement (1k
// in under a second, 1M never), so its sizes could not be compared; one of
// a kind nobody serves is a misconfiguration. Scheduled runs are what a
// bulk import leaves pending for days, and every claim reads past them: the
// index orders (priority, next_run_at), so when fewer runs are ready than a
// claim asks for, it reads on through the scheduled ones.
//
// Each size gets its own database, seeded once with generate_series
// (seconds for a million) and analyzed, as autovacuum would after an
// import. Then, per round and size in turns (the first size rotating, so
// that load swings hit every size alike): a fresh batch of N runs (3 no-op
// steps) enqueued with EnqueueMany before the worker starts, timed from
// Start until all N succeeded (concurrency 8), with the pages the database
// read meanwhile (pg_stat_database, per run: the work, which the machine's
// load does not change as it changes the rate); then an idle worker
// (concurrency 8) and S runs enqueued one at a time, each timed from
// Enqueue until its first step runs. After the rounds every backlog run is
// still pending, never claimed, with no step: the measurement never
// touched it.
func BenchmarkBacklog(b *testing.B) {
	sizes := envInts(b, "TASKPORT_BACKLOG_SIZES", "1000,100000,1000000")
	n := envInts(b, "TASKPORT_BACKLOG_RUNS", "2000")[0]
	samples := envInts(b, "TASKPORT_BACKLOG_SAMPLES", "200")[0]
	rounds := envInts(b, "TASKPORT_BACKLOG_ROUNDS", "5")[0]
	probe := newBenchProbe()
	reg := benchRegistry(b, probe)

	type result struct {
		rates    []float64
		pages    int64
		firsts   []time.Duration
		seedTook time.Duration
	}
	urls := make([]string, len(sizes))
	results := make([]result, len(sizes))
	for i, size := range sizes {
		urls[i] = pgtest.NewDatabase(b)
		pool := pgtest.Connect(b, urls[i])
		start := time.Now()
		seedScheduled(b, pool, size)
		results[i].seedTook = time.Since(start)
		pool.Close()
	}
	b.ResetTimer()
	for r := range rounds {
		for k := range sizes {
			i := (r + k) % len(sizes)
			key := fmt.Sprintf("r%d", r)
			rate, pages := backlogThroughput(b, urls[i], reg, key, n)
			results[i].rates = append(results[i].rates, rate)
			results[i].pages += pages
			results[i].firsts = append(results[i].firsts, backlogFirstSteps(b, urls[i], reg, probe, key, samples)...)
		}
	}
	b.StopTimer()
	for i, size := range sizes {
		requireBacklogUntouched(b, urls[i], size, rounds*(n+samples))
	}

	fmt.Printf("\nlease engine, backlog of scheduled pending runs (3-step no-op kind, concurrency 8; %d runs per throughput round, %d enqueue->first-step samples per round, median rate of %d rounds)\n\n",
		n, samples, rounds)
	fmt.Println("| backlog | seeded in | runs/s (median) | runs/s rounds | vs first | pages/run | first step p50 | p99 | p99 vs first |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|")
	var baseRate float64
	var baseP99 time.Duration
	for i, size := range sizes {
		rate := median(results[i].rates)
		slices.Sort(results[i].firsts)
		p50, p99 := quantile(results[i].firsts, 0.5), quantile(results[i].firsts, 0.99)
		if i == 0 {
			baseRate, baseP99 = rate, p99
		}
		rs := make([]string, len(results[i].rates))
		for j, x := range results[i].rates {
			rs[j] = fmt.Sprintf("%.0f", x)
		}
		fmt.Printf("| %d | %s | %.0f | %s | %.2f | %.0f | %s | %s | %.2f |\n", size, results[i].seedTook.Round(100*time.Millisecond),
			rate, strings.Join(rs, ", "), rate/baseRate, float64(results[i].pages)/float64(rounds*n), ms(p50), ms(p99),
			float64(p99)/float64(baseP99))
		b.ReportMetric(rate, fmt.Sprintf("runs/s@%d", size))
		b.ReportMetric(float64(p99.Microseconds())/1000, fmt.Sprintf("p99_ms@%d", size))
	}
	b.ReportMetric(0, "ns/op")
}

// seedScheduled adds size pending runs of benchNoop, due from a day on, one
// a second, as the row Enqueue writes (taskport.run with its lease columns:
// next_run_at at available_at, the kind's retry policy), and analyzes the
// table.
func seedScheduled(b *testing.B, pool *pgxpool.Pool, size int) {
	b.Helper()
	pgtest.Seed(b, pool, size,
		`INSERT INTO taskport.run (id, engine, kind, version, idempotency_key, input, available_at, next_run_at,
		   max_attempts, backoff_initial, backoff_max, backoff_coefficient)
		 SELECT gen_random_uuid(), 'lease', 'bench.noop3', 1, 'import:' || g, '{}', a.at, a.at, 3, '1s', '1m', 2
		 FROM generate_series(1, $1::int) g, LATERAL (SELECT now() + interval '1 day' + g * interval '1 second' AS at) a`,
		`ANALYZE taskport.run`,
	)
}

// backlogThroughput enqueues n fresh runs, starts a worker and returns its
// runs/s from Start until all n succeeded, and the pages (shared buffers)
// the database read meanwhile: the work, whatever the machine's load.
func backlogThroughput(b *testing.B, url string, reg *port.Registry, round string, n int) (rate float64, pages int64) {
	b.Helper()
	ctx := context.Background()
	loader := pgtest.Connect(b, url)
	client := benchEngine(b, loader, reg)
	items := make([]port.EnqueueItem, 0, 1000)
	for i := range n {
		items = append(items, port.EnqueueItem{Kind: benchNoop, Input: struct{}{},
			Options: port.EnqueueOptions{IdempotencyKey: fmt.Sprintf("%s:batch:%d", round, i)}})
		if len(items) == cap(items) || i == n-1 {
			if _, err := client.EnqueueMany(ctx, items); err != nil {
				b.Fatal(err)
			}
			items = items[:0]
		}
	}
	loader.Close()
	_, before := dbStats(b, url)
	pool := pgtest.Connect(b, sizedPool(b, url))
	defer pool.Close()
	done := &finishCounter{all: make(chan struct{})}
	done.want.Store(int64(n))
	eng, err := leaseadapter.New(pool, reg, leaseadapter.Config{Logger: slog.New(slog.DiscardHandler), Metrics: done})
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	if err := eng.Start(ctx, port.StartOptions{Concurrency: 8}); err != nil {
		b.Fatal(err)
	}
	<-done.all
	elapsed := time.Since(start)
	if err := eng.Stop(ctx); err != nil {
		b.Fatal(err)
	}
	pool.Close()
	_, after := dbStats(b, url)
	return float64(n) / elapsed.Seconds(), after - before
}

// backlogFirstSteps starts an idle worker and times samples runs, enqueued
// one at a time, from Enqueue until their first step runs.
func backlogFirstSteps(b *testing.B, url string, reg *port.Registry, probe *benchProbe, round string, samples int) []time.Duration {
	b.Helper()
	ctx := context.Background()
	pool := pgtest.Connect(b, sizedPool(b, url))
	defer pool.Close()
	eng := benchEngine(b, pool, reg)
	if err := eng.Start(ctx, port.StartOptions{Concurrency: 8}); err != nil {
		b.Fatal(err)
	}
	out := make([]time.Duration, 0, samples)
	for i := range samples {
		start := time.Now()
		id, err := eng.Enqueue(ctx, benchNoop, struct{}{}, port.EnqueueOptions{IdempotencyKey: fmt.Sprintf("%s:one:%d", round, i)})
		if err != nil {
			b.Fatal(err)
		}
		<-probe.expect(id, 0)
		out = append(out, time.Since(start))
	}
	// The last runs finish their steps before the worker stops, so that
	// requireBacklogUntouched can count every fresh run succeeded.
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for deadline := time.Now().Add(time.Minute); ; <-tick.C {
		var open bool
		if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM taskport.run
		   WHERE status NOT IN ('succeeded', 'failed', 'canceled') AND next_run_at < now() + interval '1 hour')`).Scan(&open); err != nil {
			b.Fatal(err)
		}
		if !open {
			break
		}
		if time.Now().After(deadline) {
			b.Fatal("the sampled runs did not finish within a minute")
		}
	}
	if err := eng.Stop(ctx); err != nil {
		b.Fatal(err)
	}
	return out
}

// requireBacklogUntouched checks the business truth after the rounds: the
// fresh runs all succeeded with their three steps, and every imported run is
// still pending, never claimed, with no step, so each round met the full
// backlog.
func requireBacklogUntouched(b *testing.B, url string, size, fresh int) {
	b.Helper()
	ctx := context.Background()
	pool := pgtest.Connect(b, url)
	defer pool.Close()
	var pending, unclaimed, importSteps, succeeded, freshSteps int
	err := pool.QueryRow(ctx, `
SELECT
  (SELECT count(*) FROM taskport.run WHERE idempotency_key LIKE 'import:%' AND status = 'pending'),
  (SELECT count(*) FROM taskport.run WHERE idempotency_key LIKE 'import:%' AND status = 'pending' AND claims = 0),
  (SELECT count(*) FROM taskport_lease.step_result s JOIN taskport.run r ON r.id = s.run_id WHERE r.idempotency_key LIKE 'import:%'),
  (SELECT count(*) FROM taskport.run WHERE idempotency_key NOT LIKE 'import:%' AND status = 'succeeded'),
  (SELECT count(*) FROM taskport_lease.step_result s JOIN taskport.run r ON r.id = s.run_id WHERE r.idempotency_key NOT LIKE 'import:%')`).
		Scan(&pending, &unclaimed, &importSteps, &succeeded, &freshSteps)
	if err != nil {
		b.Fatal(err)
	}
	if pending != size || unclaimed != size || importSteps != 0 || succeeded != fresh || freshSteps != 3*fresh {
		b.Fatalf("backlog %d: %d runs still pending, %d of them never claimed, %d imported steps; %d of %d fresh runs succeeded with %d steps",
			size, pending, unclaimed, importSteps, succeeded, fresh, freshSteps)
	}
}

func envInts(b *testing.B, name, def string) []int {
	b.Helper()
	v := os.Getenv(name)
	if v == "" {
		v = def
	}
	var out []int
	for _, f := range strings.Split(v, ",") {
		x, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || x <= 0 {
			b.Fatalf("%s=%q: want positive numbers, comma-separated", name, v)
		}
		out = append(out, x)
	}
	return out
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

func quantile(sorted []time.Duration, q float64) time.Duration {
	return sorted[int(q*float64(len(sorted)-1))]
}

func ms(d time.Duration) string {
	return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000)
}
