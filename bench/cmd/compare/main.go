// Command compare runs the lease-table engine and DBOS Transact Go side by
// side on the same Postgres server, in one run, and prints a table: runs/s
// and Postgres commits per run of a 3-step no-op workflow at each
// concurrency.
//
// Three modes (-modes), each engine's rounds alternating with the
// other's. Closed loop: DBOS runs in its fastest mode, the workflow started
// directly with dbos.RunWorkflow (no queue) by `concurrency` goroutines,
// each waiting for its result before starting the next; the lease engine
// gets the same work: `concurrency` goroutines enqueue the runs while a
// worker with Concurrency=`concurrency` executes them. Open loop: every
// workflow is started at once and awaited at the end. DBOS: `concurrency`
// goroutines call dbos.RunWorkflow for all of them without waiting, then
// every handle's GetResult (without a queue DBOS runs every started
// workflow at once; there is no limit to set). Lease: one EnqueueMany of
// all the runs, then the wait for all, the worker at
// Concurrency=`concurrency`. Burn-down (burndown.go): the backlog is
// enqueued first with nothing executing (lease: EnqueueMany, one producer;
// DBOS: dbos.Enqueue onto a queue of worker concurrency `concurrency`, from
// -burn-producers goroutines, before Launch), then drained, and only the
// drain is timed. The closed and open timings cover start to last
// completion. Every row prints its producers and its enqueue phase's own
// time (start until the last run was handed to the engine; in the closed
// loop DBOS's starters await each result, so it spans the whole run).
// Commits are the pg_stat_database xact_commit delta of each engine's own
// fresh database over the whole measurement, enqueue included (every
// statement of the engine counted).
// Each engine reaches it through a pool of the same size (-pool, default 20,
// which is what DBOS sets for itself; pgxpool's own default is 4 here).
//
//	go run ./cmd/compare -db postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable
//
// `compare enqueue` compares enqueue rates instead (see enqueue.go),
// `compare taken` prices EnqueueMany with keys already taken (taken.go),
// and `compare burndown` drains a backlog of no-op jobs with the lease
// engine and with River configured as its own bench (burndown.go).
package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskport/taskport/internal/benchkit"
	"github.com/taskport/taskport/leaseadapter"
	"github.com/taskport/taskport/migrations"
	"github.com/taskport/taskport/port"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "compare:", err)
		os.Exit(1)
	}
}

type result struct {
	engine      string
	mode        string
	concurrency int
	runsPerSec  float64
	commitsRun  float64
	producers   int
	enqueueSec  float64
}

func run(ctx context.Context) error {
	if len(os.Args) > 1 && os.Args[1] == "enqueue" {
		return runEnqueue(ctx, os.Args[2:])
	}
	if len(os.Args) > 1 && os.Args[1] == "taken" {
		return runTaken(ctx, os.Args[2:])
	}
	if len(os.Args) > 1 && os.Args[1] == "burndown" {
		return runBurndown(ctx, os.Args[2:])
	}
	var (
		dbURL  = flag.String("db", os.Getenv("TEST_DATABASE_URL"), "Postgres server URL (an admin database: fresh databases are created beside it)")
		runs   = flag.Int("n", 2000, "workflows per measurement")
		conc   = flag.String("c", "1,8,32", "concurrencies")
		rounds = flag.Int("rounds", 3, "alternating rounds per engine and concurrency; the median is reported")
		pool   = flag.Int("pool", 20, "connections per engine (pool_max_conns); 20 is DBOS's own default")
		modes  = flag.String("modes", "closed,open", "modes: closed (each starter awaits its workflow), open (all started at once, awaited at the end), burndown (a backlog enqueued first, then drained; only the drain timed)")
		prof   = flag.String("cpuprofile", "", "write a CPU profile of the whole comparison (both engines run in this process) to this file")
		active = flag.Int("active", 0, "the lease worker's ActiveRuns: runs executing at once, of which `concurrency` run a step at once (0: the engine's default, twice the concurrency, up to four times while runs leave step slots idle)")
	)
	flag.Parse()
	activeRuns = *active
	if *dbURL == "" {
		return errDBRequired
	}
	if *prof != "" {
		stop, err := benchkit.StartCPUProfile(*prof)
		if err != nil {
			return err
		}
		defer stop()
	}
	var levels []int
	for f := range strings.SplitSeq(*conc, ",") {
		c, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || c < 1 {
			return fmt.Errorf("bad concurrency %q", f)
		}
		levels = append(levels, c)
	}
	runners := map[string][2]runner{"closed": {runLease, runDBOS}, "open": {runLeaseOpen, runDBOSOpen},
		"burndown": {runLeaseBurndown, runDBOSBurndown}}
	var modeList []string
	for f := range strings.SplitSeq(*modes, ",") {
		m := strings.TrimSpace(f)
		if _, ok := runners[m]; !ok {
			return fmt.Errorf("bad mode %q: want closed, open or burndown", f)
		}
		modeList = append(modeList, m)
	}
	loadStart := benchkit.LoadAvg()
	var results []result
	for _, c := range levels {
		// Rounds alternate between the engines and the modes so that all see
		// the same swings of a shared machine; the median of each is kept.
		lease, dbosRounds := map[string][]result{}, map[string][]result{}
		for range max(*rounds, 1) {
			for _, m := range modeList {
				r, err := measure(ctx, *dbURL, *pool, "lease", m, c, *runs, runners[m][0])
				if err != nil {
					return err
				}
				lease[m] = append(lease[m], r)
				r, err = measure(ctx, *dbURL, *pool, "dbos", m, c, *runs, runners[m][1])
				if err != nil {
					return err
				}
				dbosRounds[m] = append(dbosRounds[m], r)
			}
		}
		for _, m := range modeList {
			results = append(results, median(lease[m]), median(dbosRounds[m]))
		}
	}
	load := benchkit.LoadAvg()
	fmt.Printf("\n| mode | concurrency | producers lease / DBOS | enqueue s lease / DBOS | lease runs/s | DBOS runs/s | lease/DBOS | commits/run lease / DBOS |\n|---|---|---|---|---|---|---|---|\n")
	var missed []string
	checked := 0
	for i := 0; i+1 < len(results); i += 2 {
		l, d := results[i], results[i+1]
		ratio := l.runsPerSec / d.runsPerSec
		fmt.Printf("| %s | %d | %d / %d | %.2f / %.2f | %.1f | %.1f | %.2fx | %.2f / %.2f |\n", l.mode, l.concurrency, l.producers, d.producers,
			l.enqueueSec, d.enqueueSec, l.runsPerSec, d.runsPerSec, ratio, l.commitsRun, d.commitsRun)
		if l.mode != "burndown" && (l.concurrency == 8 || l.concurrency == 32) {
			checked++
			if ratio < 3 {
				missed = append(missed, fmt.Sprintf("%s at %d: %.2fx", l.mode, l.concurrency, ratio))
			}
		}
	}
	verdict := "met"
	switch {
	case checked == 0:
		verdict = "not measured here (no closed or open row at 8 or 32)"
	case len(missed) > 0:
		verdict = "missed: " + strings.Join(missed, ", ")
	}
	fmt.Printf("\ngoal (issue 14): lease runs/s >= 3x DBOS's at concurrency 8 and 32, closed and open loop: %s; burndown has no goal of its own yet\n", verdict)
	fmt.Printf("load average: %s at the start, %s at the end\n", loadStart, load)
	return nil
}

// median returns the round with the median runs/s.
func median(rs []result) result {
	slices.SortFunc(rs, func(a, b result) int { return cmp.Compare(a.runsPerSec, b.runsPerSec) })
	return rs[len(rs)/2]
}

var errDBRequired = errors.New("-db (or TEST_DATABASE_URL) is required")

// connectAdmin connects to the server's admin database (-db), where each
// measurement creates its fresh database.
func connectAdmin(ctx context.Context, server string) (*pgx.Conn, error) {
	if server == "" {
		return nil, errDBRequired
	}
	admin, err := pgx.Connect(ctx, server)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	return admin, nil
}

// runner executes n workflows at concurrency c on the database at url and
// returns what it measured (setup excluded).
type runner func(ctx context.Context, url string, c, n int) (runStats, error)

// runStats is a runner's measurement: the timed span; the enqueue phase's
// producers and time, from the start of the enqueue until the last run
// was handed to the engine.
type runStats struct {
	elapsed, enqueue time.Duration
	producers        int
}

// measure gives the engine a fresh database, reached through a pool of
// poolSize connections, and reads its commit counter around the run.
func measure(ctx context.Context, server string, poolSize int, engine, mode string, c, n int, fn runner) (result, error) {
	admin, err := connectAdmin(ctx, server)
	if err != nil {
		return result{}, err
	}
	defer admin.Close(context.WithoutCancel(ctx))
	name, dsn, drop, err := freshDB(ctx, admin, server, fmt.Sprintf("%s_%s_%d", engine, mode, c), poolSize)
	if err != nil {
		return result{}, err
	}
	defer drop()
	before, err := commits(ctx, admin, name)
	if err != nil {
		return result{}, err
	}
	st, err := fn(ctx, dsn, c, n)
	if err != nil {
		return result{}, fmt.Errorf("%s %s at concurrency %d: %w", engine, mode, c, err)
	}
	elapsed := st.elapsed
	fmt.Fprintf(os.Stderr, "%s %s concurrency=%d: %d workflows in %s (%.1f/s); enqueue phase %s, %d producers\n", engine, mode, c, n,
		elapsed.Round(time.Millisecond), float64(n)/elapsed.Seconds(), st.enqueue.Round(time.Millisecond), st.producers)
	after, err := commits(ctx, admin, name)
	if err != nil {
		return result{}, err
	}
	return result{engine: engine, mode: mode, concurrency: c, runsPerSec: float64(n) / elapsed.Seconds(),
		commitsRun: float64(after-before) / float64(n), producers: st.producers, enqueueSec: st.enqueue.Seconds()}, nil
}

// freshDB creates a database beside server's and returns its name and a
// URL for it whose pools have poolSize connections; drop removes it.
func freshDB(ctx context.Context, admin *pgx.Conn, server, label string, poolSize int) (name, dsn string, drop func(), err error) {
	name = fmt.Sprintf("tp_compare_%s_%s", label, strings.ToLower(rand.Text()[:8]))
	u, err := url.Parse(server)
	if err != nil {
		return "", "", nil, fmt.Errorf("parse url: %w", err)
	}
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", "", nil, fmt.Errorf("create database: %w", err)
	}
	drop = func() {
		admin.Exec(context.WithoutCancel(ctx), "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)") //nolint:errcheck // best effort
	}
	u.Path = "/" + name
	// Both pgxpool.New and DBOS (which otherwise sets 20) take the pool size
	// from the URL, so the engines get the same number of connections.
	q := u.Query()
	q.Set("pool_max_conns", strconv.Itoa(poolSize))
	u.RawQuery = q.Encode()
	return name, u.String(), drop, nil
}

// commits reads xact_commit of database name once it is stable: backends
// flush their statistics when they exit, and the runners close their pools.
func commits(ctx context.Context, admin *pgx.Conn, name string) (int64, error) {
	last := int64(-1)
	tick := time.NewTicker(300 * time.Millisecond)
	defer tick.Stop()
	for {
		var n int64
		err := admin.QueryRow(ctx, `SELECT coalesce((SELECT xact_commit FROM pg_stat_database WHERE datname = $1), 0)`, name).Scan(&n)
		if err != nil {
			return 0, fmt.Errorf("read commits: %w", err)
		}
		if n == last {
			return n, nil
		}
		last = n
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-tick.C:
		}
	}
}

// spread runs n calls of fn on c goroutines.
func spread(c, n int, fn func(i int) error) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, c)
	for g := range c {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := fn(i); err != nil {
					errs[g] = err
					return
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

var noop = port.DeclareActivity[int, int]("compare.noop")

// activeRuns is the lease worker's Config.ActiveRuns (-active).
var activeRuns int

const noopKind port.Kind = "compare.noop3"

// openLease migrates the database at dbURL and returns a lease engine over
// it that knows the 3-step no-op kind; close the pool when done.
func openLease(ctx context.Context, dbURL string, metrics leaseadapter.Metrics) (*leaseadapter.Engine, *pgxpool.Pool, error) {
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return nil, nil, fmt.Errorf("open pool: %w", err)
	}
	if err := migrations.Up(ctx, pool); err != nil {
		pool.Close()
		return nil, nil, err
	}
	reg, err := noopRegistry()
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	eng, err := leaseadapter.New(pool, reg, leaseadapter.Config{Logger: slog.New(slog.DiscardHandler), Metrics: metrics, ActiveRuns: activeRuns})
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return eng, pool, nil
}

// noopRegistry knows the 3-step no-op kind and its activity.
func noopRegistry() (*port.Registry, error) {
	reg := port.NewRegistry()
	return reg, errors.Join(reg.RegisterActivity(port.Bind(noop, func(_ context.Context, i int) (int, error) { return i, nil })),
		reg.Register(port.Definition{Kind: noopKind, Version: 1, Retry: port.NetworkRetry(),
			Handler: port.Handle(func(f port.Flow, _ struct{}) error {
				for i := range 3 {
					if _, err := noop.Run(f, "s"+strconv.Itoa(i), i); err != nil {
						return err
					}
				}
				return nil
			})}))
}

func runLease(ctx context.Context, dbURL string, c, n int) (runStats, error) {
	return timeLease(ctx, dbURL, c, c, n, func(eng *leaseadapter.Engine) error {
		return spread(c, n, func(i int) error {
			_, err := eng.Enqueue(ctx, noopKind, struct{}{}, port.EnqueueOptions{IdempotencyKey: strconv.Itoa(i)})
			return err
		})
	})
}

// timeLease starts a lease worker at concurrency c, runs enqueue (by
// producers goroutines) and returns the time from enqueue's start until n
// runs succeeded.
func timeLease(ctx context.Context, dbURL string, c, producers, n int, enqueue func(*leaseadapter.Engine) error) (runStats, error) {
	done := &finished{want: int64(n), all: make(chan struct{})}
	eng, pool, err := openLease(ctx, dbURL, done)
	if err != nil {
		return runStats{}, err
	}
	defer pool.Close()
	if err := eng.Start(ctx, port.StartOptions{Concurrency: c}); err != nil {
		return runStats{}, err
	}
	start := time.Now()
	if err := enqueue(eng); err != nil {
		_ = eng.Stop(ctx)
		return runStats{}, err
	}
	st := runStats{enqueue: time.Since(start), producers: producers}
	select {
	case <-done.all:
	case <-ctx.Done():
	}
	st.elapsed = time.Since(start)
	if err := eng.Stop(ctx); err != nil {
		return runStats{}, err
	}
	return st, ctx.Err()
}

// finished closes all once want runs have succeeded.
type finished struct {
	want int64
	n    atomic.Int64
	all  chan struct{}
}

func (f *finished) Finished(_ port.Kind, s port.Status) {
	if s == port.StatusSucceeded && f.n.Add(1) == f.want {
		close(f.all)
	}
}
func (*finished) Claimed(int)            {}
func (*finished) LeaseLost(port.Kind)    {}
func (*finished) FencedCommit(port.Kind) {}
func (*finished) QueueDepth(int)         {}

// launchDBOS returns a launched DBOS context on dbURL that knows
// dbosWorkflow; shut it down when done.
func launchDBOS(ctx context.Context, dbURL string) (dbos.Context, error) {
	dctx, err := dbos.NewContext(ctx, dbos.Config{AppName: "taskport-compare", DatabaseURL: dbURL,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return nil, fmt.Errorf("dbos context: %w", err)
	}
	dbos.RegisterWorkflow(dctx, dbosWorkflow)
	if err := dbos.Launch(dctx); err != nil {
		return nil, fmt.Errorf("dbos launch: %w", err)
	}
	return dctx, nil
}

func dbosNoop(_ context.Context) (int, error) { return 0, nil }

func dbosWorkflow(ctx dbos.Context, _ int) (int, error) {
	for i := range 3 {
		if _, err := dbos.RunAsStep(ctx, dbosNoop, dbos.WithStepName("s"+strconv.Itoa(i))); err != nil {
			return 0, err
		}
	}
	return 0, nil
}

func runDBOS(ctx context.Context, dbURL string, c, n int) (runStats, error) {
	dctx, err := launchDBOS(ctx, dbURL)
	if err != nil {
		return runStats{}, err
	}
	var lastStarted atomic.Int64 // since start, of the last RunWorkflow to return
	start := time.Now()
	err = spread(c, n, func(i int) error {
		h, err := dbos.RunWorkflow(dctx, dbosWorkflow, i)
		if err != nil {
			return err
		}
		for at := int64(time.Since(start)); ; {
			prev := lastStarted.Load()
			if at <= prev || lastStarted.CompareAndSwap(prev, at) {
				break
			}
		}
		_, err = h.GetResult()
		return err
	})
	st := runStats{elapsed: time.Since(start), enqueue: time.Duration(lastStarted.Load()), producers: c}
	return st, errors.Join(err, dbos.Shutdown(dctx, 10*time.Second))
}

// runLeaseOpen enqueues all n runs in one EnqueueMany and waits for all.
func runLeaseOpen(ctx context.Context, dbURL string, c, n int) (runStats, error) {
	items := make([]port.EnqueueItem, n)
	for i := range items {
		items[i] = port.EnqueueItem{Kind: noopKind, Input: struct{}{}, Options: port.EnqueueOptions{IdempotencyKey: strconv.Itoa(i)}}
	}
	return timeLease(ctx, dbURL, c, 1, n, func(eng *leaseadapter.Engine) error {
		_, err := eng.EnqueueMany(ctx, items)
		return err
	})
}

// runDBOSOpen starts all n workflows from c goroutines without waiting,
// then awaits every result.
func runDBOSOpen(ctx context.Context, dbURL string, c, n int) (runStats, error) {
	dctx, err := launchDBOS(ctx, dbURL)
	if err != nil {
		return runStats{}, err
	}
	handles := make([]dbos.WorkflowHandle[int], n)
	start := time.Now()
	err = spread(c, n, func(i int) error {
		h, err := dbos.RunWorkflow(dctx, dbosWorkflow, i)
		handles[i] = h
		return err
	})
	st := runStats{enqueue: time.Since(start), producers: c}
	for _, h := range handles {
		if err != nil {
			break
		}
		_, err = h.GetResult()
	}
	st.elapsed = time.Since(start)
	return st, errors.Join(err, dbos.Shutdown(dctx, 10*time.Second))
}
