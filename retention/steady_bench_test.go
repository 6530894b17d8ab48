package retention_test

// BenchmarkSteadyRetention is the steady run (not a timed test): the
// lease engine serves a fixed arrival rate through the outbox, a quarter of
// the runs wait for a signal, and the retention cleaner deletes what passed
// its age. Every sample it prints the size of each table
// (pg_total_relation_size, indexes and TOAST included); at the end, the
// spread of each table once retention reached its age. Short by default:
//
//	go test -run '^$' -bench SteadyRetention -benchtime 1x ./retention/
//	TASKPORT_STEADY_MINUTES=30 go test -run '^$' -bench SteadyRetention -benchtime 1x -timeout 40m ./retention/
//
// The age is a sixth of the run (at least 30 s), the cleaner's interval a
// sixth of the age (at least 5 s), a sample every 10 s, or every minute
// from 10 minutes on.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/taskport/taskport/internal/testkit/pgtest"
	"github.com/taskport/taskport/leaseadapter"
	"github.com/taskport/taskport/outbox"
	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/retention"
)

// steadyTables are the tables a run writes, in the printed order.
var steadyTables = []string{"taskport.run", "taskport_lease.step_result",
	"taskport_lease.task_signal", "taskport.waiter", "outbox_event"}

const steadyKind port.Kind = "steady.run"

const (
	steadyRate        = 100 // runs enqueued per second
	steadyConcurrency = 8
)

var steadyStep = port.DeclareActivity[int, int]("steady.step")

type steadyIn struct {
	Topic string `json:"topic,omitempty"` // non-empty: wait for a signal on it after the steps
}

// countingMetrics sums the cleaner's deletes.
type countingMetrics struct {
	mu      sync.Mutex
	deleted map[string]int64
}

func (m *countingMetrics) Deleted(table string, n int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.deleted[table] += n
}
func (m *countingMetrics) Lag(string, time.Duration) {}

func BenchmarkSteadyRetention(b *testing.B) {
	minutes := 2.0
	if v := os.Getenv("TASKPORT_STEADY_MINUTES"); v != "" {
		var err error
		if minutes, err = strconv.ParseFloat(v, 64); err != nil || minutes <= 0 {
			b.Fatalf("TASKPORT_STEADY_MINUTES=%q: want a positive number of minutes", v)
		}
	}
	total := time.Duration(minutes * float64(time.Minute))
	age := max(30*time.Second, total/6)
	interval := max(5*time.Second, age/6)
	every := 10 * time.Second
	if total >= 10*time.Minute {
		every = time.Minute
	}
	for range b.N {
		steadyRun(b, total, age, interval, every)
	}
}

func steadyRun(b *testing.B, total, age, interval, every time.Duration) {
	ctx := context.Background()
	u, err := url.Parse(pgtest.NewDatabase(b))
	if err != nil {
		b.Fatal(err)
	}
	q := u.Query()
	q.Set("pool_max_conns", "20")
	u.RawQuery = q.Encode()
	pool := pgtest.Connect(b, u.String())

	reg := port.NewRegistry()
	if err := reg.RegisterActivity(port.Bind(steadyStep, func(_ context.Context, i int) (int, error) { return i, nil })); err != nil {
		b.Fatal(err)
	}
	err = reg.Register(port.Definition{Kind: steadyKind, Version: 1, Retry: port.NetworkRetry(),
		Handler: port.Handle(func(f port.Flow, in steadyIn) error {
			for i := range 3 {
				if _, err := steadyStep.Run(f, fmt.Sprintf("s%d", i), i); err != nil {
					return err
				}
			}
			if in.Topic == "" {
				return nil
			}
			_, err := f.WaitSignal("wait", port.Topic(in.Topic), time.Minute, nil)
			return err
		})})
	if err != nil {
		b.Fatal(err)
	}
	quiet := slog.New(slog.DiscardHandler)
	eng, err := leaseadapter.New(pool, reg, leaseadapter.Config{Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	disp, err := outbox.NewDispatcher(pool, eng, eng, outbox.Config{Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	m := &countingMetrics{deleted: map[string]int64{}}
	cleaner, err := retention.New(pool, []retention.Pruner{eng.Pruner(), outbox.Pruner(pool)}, retention.Config{
		Policy: retention.Policy{Completed: age, Canceled: age, Failed: age, Interval: interval}, Logger: quiet, Metrics: m})
	if err != nil {
		b.Fatal(err)
	}
	if err := eng.Start(ctx, port.StartOptions{Concurrency: steadyConcurrency}); err != nil {
		b.Fatal(err)
	}
	for _, s := range []interface{ Start(context.Context) error }{disp, cleaner} {
		if err := s.Start(ctx); err != nil {
			b.Fatal(err)
		}
	}
	defer func() {
		for _, s := range []interface{ Stop(context.Context) error }{cleaner, disp, eng} {
			if err := s.Stop(ctx); err != nil {
				b.Error(err)
			}
		}
	}()

	// Deleted rows leave their space for reuse only once (auto)vacuum has
	// seen them. Where autovacuum is off (test servers turn it off for
	// speed), the bench does what it would: a plain VACUUM of each table
	// every minute, autovacuum's default naptime.
	var autovacuum string
	if err := pool.QueryRow(ctx, `SHOW autovacuum`).Scan(&autovacuum); err != nil {
		b.Fatal(err)
	}
	vacuuming, stopVacuuming := context.WithCancel(ctx)
	defer stopVacuuming()
	if autovacuum == "off" {
		go func() {
			tick := time.NewTicker(time.Minute)
			defer tick.Stop()
			for {
				select {
				case <-vacuuming.Done():
					return
				case <-tick.C:
				}
				for _, t := range steadyTables {
					if _, err := pool.Exec(vacuuming, "VACUUM "+pgx.Identifier(strings.Split(t, ".")).Sanitize()); err != nil && vacuuming.Err() == nil {
						b.Error(err)
					}
				}
			}
		}()
	}

	// The producer: steadyRate outbox rows a second, every fourth run
	// waiting for a signal sent right after its row (often before it waits).
	produce, stopProducing := context.WithCancel(ctx)
	defer stopProducing()
	var produced, produceErrs atomic.Int64
	go func() {
		tick := time.NewTicker(time.Second / steadyRate)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-produce.Done():
				return
			case <-tick.C:
			}
			in := steadyIn{}
			if i%4 == 0 {
				in.Topic = fmt.Sprintf("steady:%d", i)
			}
			_, err := outbox.Write(produce, pool, outbox.Event{Kind: steadyKind, IdempotencyKey: fmt.Sprintf("steady:%d", i), Payload: in})
			if err == nil && in.Topic != "" {
				_, err = eng.Signal(produce, port.Topic(in.Topic), nil)
			}
			if err != nil && produce.Err() == nil {
				produceErrs.Add(1)
				continue
			}
			produced.Add(1)
		}
	}()

	// Besides the sizes, each sample records what makes a table grow while
	// retention works: a backlog (runs not finished, outbox rows not yet
	// dispatched: the worker fell behind the offered rate), dead tuples a
	// VACUUM could not remove, and the oldest open transaction on the
	// server, whose snapshot keeps VACUUM from removing what died after it
	// began.
	type sample struct {
		at                  time.Duration
		sizes               []int64
		runs, open, pending int64
		dead                int64
		oldest              float64 // seconds
		oldestDB            string
	}
	var samples []sample
	read := func(at time.Duration) {
		s := sample{at: at, sizes: make([]int64, len(steadyTables))}
		for i, t := range steadyTables {
			if err := pool.QueryRow(ctx, `SELECT pg_total_relation_size($1::regclass)`, t).Scan(&s.sizes[i]); err != nil {
				b.Fatal(err)
			}
		}
		err := pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE status NOT IN ('succeeded', 'failed', 'canceled')) FROM taskport.run`).Scan(&s.runs, &s.open)
		if err != nil {
			b.Fatal(err)
		}
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM outbox_event WHERE status = 'pending'`).Scan(&s.pending); err != nil {
			b.Fatal(err)
		}
		err = pool.QueryRow(ctx, `SELECT coalesce(sum(n_dead_tup), 0) FROM pg_stat_user_tables WHERE relid = ANY($1::regclass[])`, steadyTables).Scan(&s.dead)
		if err != nil {
			b.Fatal(err)
		}
		err = pool.QueryRow(ctx, `SELECT coalesce(extract(epoch FROM now() - xact_start)::float8, 0), coalesce(datname, '')
			FROM pg_stat_activity WHERE backend_xmin IS NOT NULL AND pid <> pg_backend_pid()
			ORDER BY xact_start LIMIT 1`).Scan(&s.oldest, &s.oldestDB)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			b.Fatal(err)
		}
		if s.oldestDB == u.Path[1:] {
			s.oldestDB = "this"
		}
		samples = append(samples, s)
	}
	start := time.Now()
	tick := time.NewTicker(every)
	for time.Since(start) < total {
		<-tick.C
		read(time.Since(start).Round(time.Second))
	}
	tick.Stop()
	stopProducing()
	stopVacuuming()
	var kept, open int64
	err = pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status = 'succeeded'), count(*) FILTER (WHERE status NOT IN ('succeeded', 'failed', 'canceled'))
		FROM taskport.run`).Scan(&kept, &open)
	if err != nil {
		b.Fatal(err)
	}

	var out strings.Builder
	fmt.Fprintf(&out, "\nsteady run: %s, %d runs/s offered (%d enqueued, %d producer errors), lease engine at concurrency %d,\n",
		total, steadyRate, produced.Load(), produceErrs.Load(), steadyConcurrency)
	fmt.Fprintf(&out, "retention age %s, cleaner every %s; sizes in KiB (pg_total_relation_size)\n", age, interval)
	if autovacuum == "off" {
		fmt.Fprintf(&out, "autovacuum is off on this server: the bench ran VACUUM on each table every minute, as autovacuum would\n")
	}
	out.WriteString("\n")
	fmt.Fprintf(&out, "| t | runs kept |")
	for _, t := range steadyTables {
		fmt.Fprintf(&out, " %s |", t)
	}
	fmt.Fprintf(&out, " open runs | pending outbox | dead tuples | oldest xact (db) |\n|---|---|%s\n", strings.Repeat("---|", len(steadyTables)+4))
	for _, s := range samples {
		fmt.Fprintf(&out, "| %s | %d |", s.at, s.runs)
		for _, v := range s.sizes {
			fmt.Fprintf(&out, " %d |", v/1024)
		}
		fmt.Fprintf(&out, " %d | %d | %d | %.0f s (%s) |\n", s.open, s.pending, s.dead, max(0, s.oldest), s.oldestDB)
	}
	// Each table should stay flat once it has turned over: the first
	// deletes are due at age, and their space is reused only after the
	// VACUUM that follows, so the pages hold their working set (an age of
	// runs, up to a cleaner interval more, and the dead tuples between two
	// VACUUMs) once every run of the first age has been deleted and
	// replaced, at twice the age. From age on, the tables still fill: the
	// 30-minute runs grew 10-15% between minutes 6 and 10.
	settled := 2 * age
	fmt.Fprintf(&out, "\nfrom t >= %s: spread of each table (max-min)/min, rows deleted over the run\n\n", settled)
	for i, t := range steadyTables {
		lo, hi := int64(-1), int64(0)
		for _, s := range samples {
			if s.at < settled {
				continue
			}
			if lo < 0 || s.sizes[i] < lo {
				lo = s.sizes[i]
			}
			hi = max(hi, s.sizes[i])
		}
		spread := "n/a (run longer)"
		if lo > 0 {
			spread = fmt.Sprintf("%.1f%% (%d..%d KiB)", 100*float64(hi-lo)/float64(lo), lo/1024, hi/1024)
		}
		// Space of deleted rows is reused once (auto)vacuum has seen it.
		var vacuums int64
		err := pool.QueryRow(ctx, `SELECT coalesce(sum(vacuum_count + autovacuum_count), 0) FROM pg_stat_user_tables
			WHERE relid = $1::regclass`, t).Scan(&vacuums)
		if err != nil {
			b.Fatal(err)
		}
		m.mu.Lock()
		fmt.Fprintf(&out, "- %s: %s, %d rows deleted, vacuumed %d times\n", t, spread, m.deleted[t], vacuums)
		m.mu.Unlock()
	}
	fmt.Fprintf(&out, "\nat the end: %d succeeded runs kept, %d open (the worker's backlog)\n", kept, open)
	fmt.Print(out.String())
}
