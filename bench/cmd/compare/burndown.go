package main

// `compare burndown` prices the queue itself (issue 28): how fast a worker
// drains a backlog of no-op jobs, and what each job costs Postgres, the
// lease engine against River.
//
// Per round, every side gets a fresh database. Its backlog of -n jobs is
// inserted first with nothing executing, in batches of -batch (5000, what
// River's bench inserts per call): River by InsertManyFast of a no-op args
// kind; the lease engine by EnqueueMany of a 1-step no-op kind, each run
// with its idempotency key, as a user would. The insert's pool is closed,
// the database's commit counter read, and then the worker starts on a pool
// of -pool connections: timed from just before Start until the last job's
// completion was reported (River: its subscription's completed events,
// which follow the completer's commit, as River's bench counts; lease: the
// Metrics hook's Finished, after the run's commit), with a deadline
// (-timeout). The side then stops, and a query checks that the database
// holds all -n jobs completed.
//
// River is configured as its own `river bench` configures itself (module
// github.com/riverqueue/river/cmd/river, file cmd/river/riverbench/
// river_bench.go; that module is not in the v0.51.2 library's zip, so it
// was read from the riverqueue/river repository, whose copy here predates
// v0.51.2 and whose every version read sets the same): FetchCooldown 2ms,
// FetchPollInterval 20ms, the default queue at MaxWorkers 2000, a no-op
// worker, a subscription to completed/cancelled/failed events sized above
// the job count. Its CLI's pool (rivercli.openPgxV5DBPool) is pgxpool from
// the URL with application_name "river CLI", statement_timeout 10s and
// idle_in_transaction_session_timeout 11s, which are set here too; its size
// is the URL's, here -pool for both sides.
//
// The lease worker runs at each -concurrency (steps at once; default 32
// and 128) with the claim batch of -claim-batch (0: Config.BatchSize's
// default, 64) and the default ActiveRuns.
//
// Per side and round: jobs/s; Postgres commits per job (the xact_commit
// delta of the side's database over worker start, drain and stop);
// Postgres CPU per job, utime+stime from /proc/<pid>/stat (clock ticks
// assumed 100 Hz, not read from sysconf) of every backend connected to the
// side's database (pg_stat_activity, sampled once a second so that a backend
// that exits is counted to its last sample, one that starts from zero) plus
// the server's own processes (postmaster, checkpointer, walwriter,
// background writer, launchers: pg_stat_activity's rows without a
// database); the whole server's CPU (every process named postgres plus the
// postmaster's reaped children) is printed per round as a cross-check,
// since other users' backends would show there; and the client's own CPU
// per job (getrusage of this process: the side's library and this
// program's sampling). Sides rotate who goes first per round; the medians
// of the rounds are printed, each metric's own median, with the per-round
// ratio of lease jobs/s to River's.
//
//	go run ./cmd/compare burndown -n 50000 -rounds 3 -db $TEST_DATABASE_URL

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/taskport/taskport/internal/benchkit"
	"github.com/taskport/taskport/leaseadapter"
	"github.com/taskport/taskport/migrations"
	"github.com/taskport/taskport/port"
)

// clockTicks is the /proc/<pid>/stat unit: USER_HZ, assumed to be 100 (what
// Linux reports on every common architecture) rather than read from sysconf.
const clockTicks = 100

// riverBenchBatch is how many jobs River's bench inserts per call; both
// sides' backlogs are inserted in batches of this size by default.
const riverBenchBatch = 5000

// burnSide is one side of the burn-down: how to fill its database with n
// jobs, and how to open a worker on it.
type burnSide struct {
	name   string
	conc   int    // lease: StartOptions.Concurrency; River: MaxWorkers
	verify string // counts the completed jobs of the side's database
	fill   func(ctx context.Context, dsn string, n, batch int) error
	worker func(ctx context.Context, dsn string, n int) (*burnWorker, error)
}

// burnWorker is a side's worker, opened but not started.
type burnWorker struct {
	start func() error
	done  <-chan struct{} // closed when n jobs completed
	count func() int64    // jobs completed so far
	err   func() error    // a job that failed or was cancelled
	stop  func() error    // stops the worker and closes its pool
}

// burnRound is what one side measured in one round.
type burnRound struct {
	fill      time.Duration
	elapsed   time.Duration
	commits   int64
	pgOwn     time.Duration // backends of the side's database
	pgServer  time.Duration // the server's own processes
	pgWhole   time.Duration // every postgres process (cross-check)
	client    time.Duration
	procKnown bool   // the server's processes were readable
	writes    string // -statements: row writes per table
}

func (r burnRound) jobsPerSec(n int) float64 { return float64(n) / r.elapsed.Seconds() }

func runBurndown(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("compare burndown", flag.ContinueOnError)
	var (
		dbURL   = fs.String("db", os.Getenv("TEST_DATABASE_URL"), "Postgres server URL (an admin database: fresh databases are created beside it)")
		jobs    = fs.Int("n", 50000, "jobs in each side's backlog per round")
		conc    = fs.String("concurrency", "32,128", "lease worker concurrencies (steps at once)")
		rounds  = fs.Int("rounds", 3, "rounds; sides rotate who goes first, the median is reported")
		pool    = fs.Int("pool", 20, "connections per side (pool_max_conns)")
		batch   = fs.Int("batch", riverBenchBatch, "jobs per InsertManyFast / EnqueueMany call while filling the backlog")
		claim   = fs.Int("claim-batch", 0, "the lease worker's Config.BatchSize (0: the engine's default, 64)")
		timeout = fs.Duration("timeout", 10*time.Minute, "deadline of one side's drain")
		prof    = fs.String("cpuprofile", "", "write a CPU profile of this process (River's client and the lease workers alike) to this file")
		stmts   = fs.Bool("statements", false, "diagnostics: trace every statement of the workers' pools during the drain (a pgx tracer: adds client work) and print each side's statements per job, by statement, and its row writes per table")
	)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *jobs < 1 || *batch < 1 || *rounds < 1 || *pool < 1 || *claim < 0 {
		return errors.New("-n, -batch, -rounds and -pool must be at least 1, -claim-batch at least 0")
	}
	var levels []int
	for f := range strings.SplitSeq(*conc, ",") {
		c, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || c < 1 {
			return fmt.Errorf("bad concurrency %q", f)
		}
		levels = append(levels, c)
	}
	if *prof != "" {
		stop, err := benchkit.StartCPUProfile(*prof)
		if err != nil {
			return err
		}
		defer stop()
	}
	if *stmts {
		tracer = &statementTracer{counts: map[string]*stmtCount{}}
	}
	claimBatch := *claim
	if claimBatch == 0 {
		claimBatch = 64 // leaseadapter.Config.BatchSize's documented default
	}
	admin, err := connectAdmin(ctx, *dbURL)
	if err != nil {
		return err
	}
	defer admin.Close(context.WithoutCancel(ctx))
	loadStart := benchkit.LoadAvg()
	sides := []burnSide{riverBurnSide()}
	for _, c := range levels {
		sides = append(sides, leaseBurnSide(c, *claim))
	}
	got := make([][]burnRound, len(sides))
	for round := range *rounds {
		for k := range sides {
			i := (round + k) % len(sides) // each round starts with the next side
			r, err := burnOnce(ctx, admin, *dbURL, *pool, sides[i], *jobs, *batch, *timeout)
			if err != nil {
				return fmt.Errorf("round %d: %s: %w", round+1, sides[i].name, err)
			}
			fmt.Fprintf(os.Stderr, "round %d: %-10s fill %6.2fs, drain %6.2fs = %8.0f jobs/s, %.3f commits/job, PG CPU %s/job (own backends %s + server %s; whole server %s), client CPU %s/job\n",
				round+1, sides[i].name, r.fill.Seconds(), r.elapsed.Seconds(), r.jobsPerSec(*jobs), float64(r.commits)/float64(*jobs),
				perJob(r.pgOwn+r.pgServer, *jobs, r.procKnown), perJob(r.pgOwn, *jobs, r.procKnown), perJob(r.pgServer, *jobs, r.procKnown),
				perJob(r.pgWhole, *jobs, r.procKnown), perJob(r.client, *jobs, true))
			got[i] = append(got[i], r)
			if tracer != nil {
				tracer.print(os.Stderr, sides[i].name, *jobs)
				fmt.Fprint(os.Stderr, r.writes)
			}
		}
	}
	loadEnd := benchkit.LoadAvg()

	n := float64(*jobs)
	med := func(rs []burnRound, f func(burnRound) float64) float64 {
		xs := make([]float64, len(rs))
		for i, r := range rs {
			xs[i] = f(r)
		}
		return benchkit.Median(xs)
	}
	rate := func(r burnRound) float64 { return r.jobsPerSec(*jobs) }
	commitsPer := func(r burnRound) float64 { return float64(r.commits) / n }
	pgPer := func(r burnRound) float64 {
		if !r.procKnown {
			return math.NaN()
		}
		return float64((r.pgOwn + r.pgServer).Microseconds()) / n
	}
	clientPer := func(r burnRound) float64 { return float64(r.client.Microseconds()) / n }

	fmt.Printf("\nburndown: %d no-op jobs per side and round, inserted first with nothing executing (batches of %d), then drained; median of %d rounds, sides rotating who goes first; pool of %d connections per side\n",
		*jobs, *batch, *rounds, *pool)
	fmt.Printf("River: `river bench`'s configuration (cmd/river/riverbench/river_bench.go): MaxWorkers 2000, FetchCooldown 2ms, FetchPollInterval 20ms; backlog by InsertManyFast\n")
	fmt.Printf("lease: 1-step no-op kind, backlog by EnqueueMany with idempotency keys; claim batch %d (Config.BatchSize), ActiveRuns default; concurrency = steps at once\n", claimBatch)
	fmt.Printf("Postgres CPU: utime+stime of /proc/<pid>/stat at %d Hz (assumed, not read from sysconf) of the side's database's backends (pg_stat_activity, sampled once a second) plus the server's own processes (postmaster, walwriter, checkpointer, ...), over the drain; client CPU: getrusage(RUSAGE_SELF) of this process over the drain\n", clockTicks)
	fmt.Printf("\n| side | concurrency | jobs/s | lease/River per round | commits/job | Postgres CPU µs/job | client CPU µs/job | goal |\n|---|---|---|---|---|---|---|---|\n")
	riverRate, riverPG := med(got[0], rate), med(got[0], pgPer)
	fmt.Printf("| River | MaxWorkers 2000 | %.0f | | %.3f | %.1f | %.1f | |\n", riverRate, med(got[0], commitsPer), riverPG, med(got[0], clientPer))
	for i := 1; i < len(sides); i++ {
		var ratios []string
		for r := range got[i] {
			ratios = append(ratios, fmt.Sprintf("%.2fx", rate(got[i][r])/rate(got[0][r])))
		}
		leaseRate, leasePG := med(got[i], rate), med(got[i], pgPer)
		verdict := "met"
		switch {
		case math.IsNaN(leasePG) || math.IsNaN(riverPG):
			verdict = "unknown (no /proc of the server)"
		case leaseRate < riverRate && leasePG > riverPG:
			verdict = "missed (jobs/s and CPU)"
		case leaseRate < riverRate:
			verdict = "missed (jobs/s)"
		case leasePG > riverPG:
			verdict = "missed (CPU)"
		}
		fmt.Printf("| lease | %d | %.0f | %.2fx (%s) | %.3f | %.1f | %.1f | %s |\n", sides[i].conc, leaseRate, leaseRate/riverRate,
			strings.Join(ratios, ", "), med(got[i], commitsPer), leasePG, med(got[i], clientPer), verdict)
	}
	fmt.Printf("\ngoal: lease jobs/s >= River's and Postgres CPU/job <= River's\n")
	fmt.Printf("load average: %s at the start, %s at the end\n", loadStart, loadEnd)
	return nil
}

// perJob formats a CPU time per job in µs.
func perJob(d time.Duration, n int, known bool) string {
	if !known {
		return "n/a"
	}
	return fmt.Sprintf("%.1fµs", float64(d.Microseconds())/float64(n))
}

// burnOnce gives side a fresh database, fills it with n jobs and times its
// worker draining them.
func burnOnce(ctx context.Context, admin *pgx.Conn, server string, poolSize int, side burnSide, n, batch int, timeout time.Duration) (burnRound, error) {
	name, dsn, drop, err := freshDB(ctx, admin, server, "burndown", poolSize)
	if err != nil {
		return burnRound{}, err
	}
	defer drop()
	var r burnRound
	t0 := time.Now()
	if err := side.fill(ctx, dsn, n, batch); err != nil {
		return r, fmt.Errorf("fill: %w", err)
	}
	r.fill = time.Since(t0)
	// The fill's pool is closed: its backends flushed their counters as
	// they exited, which commits waits for.
	before, err := commits(ctx, admin, name)
	if err != nil {
		return r, err
	}
	w, err := side.worker(ctx, dsn, n)
	if err != nil {
		return r, err
	}
	stopped := false
	defer func() {
		if !stopped {
			_ = w.stop()
		}
	}()
	s, err := newPGSampler(ctx, admin, name)
	if err != nil {
		return r, err
	}
	if tracer != nil {
		tracer.reset()
		tracer.on.Store(true)
	}
	cpu0 := selfCPU()
	start := time.Now()
	if err := w.start(); err != nil {
		return r, fmt.Errorf("start: %w", err)
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	// A sample reads /proc (about 10 ms of this process's CPU on a 2-core
	// VM, counted in the client column and taken from both sides' cores),
	// so it runs once a second: the pool's backends live through the
	// drain, and the samples only keep the ticks of a process that exits.
	sampleTick := time.NewTicker(time.Second)
	defer sampleTick.Stop()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
wait:
	for {
		select {
		case <-w.done:
			break wait
		case <-tick.C:
			if err := w.err(); err != nil {
				return r, err
			}
		case <-sampleTick.C:
			if err := s.sample(ctx); err != nil {
				return r, err
			}
		case <-deadline.C:
			return r, fmt.Errorf("deadline %s: %d of %d jobs completed", timeout, w.count(), n)
		case <-ctx.Done():
			return r, ctx.Err()
		}
	}
	r.elapsed = time.Since(start)
	r.client = selfCPU() - cpu0
	if tracer != nil {
		tracer.on.Store(false)
	}
	if err := s.sample(ctx); err != nil {
		return r, err
	}
	r.pgOwn, r.pgServer, r.pgWhole, r.procKnown = s.totals()
	stopped = true
	if err := w.stop(); err != nil {
		return r, fmt.Errorf("stop: %w", err)
	}
	after, err := commits(ctx, admin, name)
	if err != nil {
		return r, err
	}
	r.commits = after - before
	// Checked after the counter is read: this query is a transaction of
	// the side's database too.
	pool, err := pgxpool.New(ctx, dsn) // dsn's pool_max_conns is pgxpool's
	if err != nil {
		return r, err
	}
	defer pool.Close()
	var completed int
	if err := pool.QueryRow(ctx, side.verify).Scan(&completed); err != nil {
		return r, fmt.Errorf("verify: %w", err)
	}
	if completed != n {
		return r, fmt.Errorf("%d of %d jobs completed in the database", completed, n)
	}
	if tracer != nil {
		r.writes, err = tableWrites(ctx, pool, n)
	}
	return r, err
}

// tableWrites describes the side's row writes per job by table, fill and
// drain together (-statements).
func tableWrites(ctx context.Context, pool *pgxpool.Pool, n int) (string, error) {
	rows, err := pool.Query(ctx, `SELECT schemaname || '.' || relname, n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del,
  (SELECT count(*) FROM pg_index i WHERE i.indrelid = t.relid)
FROM pg_stat_user_tables t WHERE n_tup_ins + n_tup_upd + n_tup_del > 0 ORDER BY 1`)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	var table string
	var ins, upd, hot, del, indexes int64
	per := func(x int64) float64 { return float64(x) / float64(n) }
	_, err = pgx.ForEachRow(rows, []any{&table, &ins, &upd, &hot, &del, &indexes}, func() error {
		fmt.Fprintf(&b, "    table %-32s %d indexes, per job (fill and drain): %.3f inserted, %.3f updated (%.3f HOT), %.3f deleted\n",
			table, indexes, per(ins), per(upd), per(hot), per(del))
		return nil
	})
	return b.String(), err
}

// selfCPU is this process's user+system CPU time so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// pgSampler follows the CPU time of a database's backends and of the
// server's own processes from its creation on.
type pgSampler struct {
	admin *pgx.Conn
	db    string
	known bool
	// per pid: ticks at the start (0 for a process started since) and at
	// the last sample, and whether it is a backend of db
	base, last map[int]int64
	own        map[int]bool
	pm         int   // the postmaster, found once: each search reads all of /proc
	whole0     int64 // every postgres process + the postmaster's reaped children, at the start
	whole      int64
}

func newPGSampler(ctx context.Context, admin *pgx.Conn, db string) (*pgSampler, error) {
	s := &pgSampler{admin: admin, db: db, base: map[int]int64{}, last: map[int]int64{}, own: map[int]bool{}}
	// The server's processes are readable if the admin connection's
	// backend is a local process named postgres.
	var pid int
	if err := admin.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		return nil, err
	}
	if comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); err == nil && strings.TrimSpace(string(comm)) == "postgres" {
		s.known = true
	}
	if !s.known {
		return s, nil
	}
	s.pm = postmasterPID()
	pids, err := s.pids(ctx)
	if err != nil {
		return nil, err
	}
	for p, own := range pids {
		if t, ok := procTicks(p); ok {
			s.base[p], s.last[p], s.own[p] = t, t, own
		}
	}
	s.whole0 = wholeServerTicks(s.pm)
	s.whole = s.whole0
	return s, nil
}

// pids are the backends of db (true) and the server's own processes: the
// rows of pg_stat_activity without a database, and the postmaster.
func (s *pgSampler) pids(ctx context.Context) (map[int]bool, error) {
	rows, err := s.admin.Query(ctx, `SELECT pid, datname IS NOT NULL FROM pg_stat_activity
WHERE datname = $1 OR (datname IS NULL AND backend_type <> 'client backend')`, s.db)
	if err != nil {
		return nil, fmt.Errorf("pg_stat_activity: %w", err)
	}
	out := map[int]bool{}
	var pid int
	var own bool
	if _, err := pgx.ForEachRow(rows, []any{&pid, &own}, func() error {
		out[pid] = own
		return nil
	}); err != nil {
		return nil, err
	}
	if s.pm > 0 {
		out[s.pm] = false
	}
	return out, nil
}

func (s *pgSampler) sample(ctx context.Context) error {
	if !s.known {
		return nil
	}
	pids, err := s.pids(ctx)
	if err != nil {
		return err
	}
	for p, own := range pids {
		t, ok := procTicks(p)
		if !ok {
			continue
		}
		if _, seen := s.base[p]; !seen {
			s.base[p], s.own[p] = 0, own // started since the first sample
		}
		s.last[p] = t
	}
	s.whole = wholeServerTicks(s.pm)
	return nil
}

// totals are the CPU times since the start: backends of the database, the
// server's own processes, and every postgres process.
func (s *pgSampler) totals() (own, server, whole time.Duration, known bool) {
	var o, sv int64
	for p, t := range s.last {
		if s.own[p] {
			o += t - s.base[p]
		} else {
			sv += t - s.base[p]
		}
	}
	tick := time.Second / clockTicks
	return time.Duration(o) * tick, time.Duration(sv) * tick, time.Duration(s.whole-s.whole0) * tick, s.known
}

// procStat is the fields of /proc/<pid>/stat after the command name, from
// field 3 (state) on.
func procStat(pid int) ([]string, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil, false
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return nil, false
	}
	f := strings.Fields(string(b[i+1:]))
	return f, len(f) > 14
}

// procTicks is utime+stime (fields 14 and 15) of pid.
func procTicks(pid int) (int64, bool) {
	f, ok := procStat(pid)
	if !ok {
		return 0, false
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	return u + st, err1 == nil && err2 == nil
}

// postmasterPID is the pid of the process named postgres whose parent is
// not named postgres.
func postmasterPID() int {
	for _, p := range postgresPIDs() {
		f, ok := procStat(p)
		if !ok {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		if comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", ppid)); err != nil || strings.TrimSpace(string(comm)) != "postgres" {
			return p
		}
	}
	return 0
}

// postgresPIDs lists the processes named postgres.
func postgresPIDs() []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if comm, err := os.ReadFile("/proc/" + e.Name() + "/comm"); err == nil && strings.TrimSpace(string(comm)) == "postgres" {
			out = append(out, pid)
		}
	}
	return out
}

// wholeServerTicks is utime+stime of every process named postgres plus the
// cutime+cstime of the postmaster pm (its reaped children: backends that
// exited), so that its differences count exited backends too.
func wholeServerTicks(pm int) int64 {
	var sum int64
	for _, p := range postgresPIDs() {
		f, ok := procStat(p)
		if !ok {
			continue
		}
		last := 12
		if p == pm {
			last = 14
		}
		for _, x := range f[11 : last+1] {
			v, _ := strconv.ParseInt(x, 10, 64)
			sum += v
		}
	}
	return sum
}

// riverBurnSide is River configured as `river bench` configures itself.
func riverBurnSide() burnSide {
	return burnSide{
		name:   "River",
		conc:   2000,
		verify: `SELECT count(*) FROM river_job WHERE state = 'completed'`,
		fill: func(ctx context.Context, dsn string, n, batch int) error {
			// riverClient (enqueue.go) migrates and returns an insert-only
			// client.
			client, closePool, err := riverClient(ctx, dsn)
			if err != nil {
				return err
			}
			defer closePool()
			for lo := 0; lo < n; lo += batch {
				hi := min(lo+batch, n)
				params := make([]river.InsertManyParams, 0, hi-lo)
				for i := lo; i < hi; i++ {
					params = append(params, river.InsertManyParams{Args: riverNoop{I: i}})
				}
				got, err := client.InsertManyFast(ctx, params)
				if err != nil {
					return err
				}
				if got != hi-lo {
					return fmt.Errorf("InsertManyFast inserted %d of %d", got, hi-lo)
				}
			}
			return nil
		},
		worker: riverBenchWorker,
	}
}

// riverBenchWorker opens a River client with the configuration of River's
// own bench (cmd/river/riverbench/river_bench.go, Benchmarker.Run) on a
// pool configured as River's CLI configures it
// (cmd/river/rivercli/command.go, openPgxV5DBPool).
func riverBenchWorker(ctx context.Context, dsn string, n int) (*burnWorker, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	if tracer != nil {
		cfg.ConnConfig.Tracer = tracer
	}
	rp := cfg.ConnConfig.RuntimeParams
	rp["application_name"] = "river CLI"
	rp["idle_in_transaction_session_timeout"] = "11000"
	rp["statement_timeout"] = "10000"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open pool: %w", err)
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, riverNoopWorker{})
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		FetchCooldown:     2 * time.Millisecond,
		FetchPollInterval: 20 * time.Millisecond,
		Logger:            slog.New(slog.DiscardHandler),
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 2_000}},
		Workers:           workers,
	})
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("river: %w", err)
	}
	// River's bench counts its subscription's events, sized above the job
	// count so that none is dropped.
	events, cancel := client.SubscribeConfig(&river.SubscribeConfig{
		ChanSize: max(n, 75_000),
		Kinds:    []river.EventKind{river.EventKindJobCancelled, river.EventKindJobCompleted, river.EventKindJobFailed},
	})
	var completed atomic.Int64
	var failed atomic.Pointer[error]
	done := make(chan struct{})
	go func() {
		for ev := range events {
			if ev.Kind != river.EventKindJobCompleted {
				err := fmt.Errorf("job %d: %s", ev.Job.ID, ev.Kind)
				failed.CompareAndSwap(nil, &err)
				continue
			}
			if completed.Add(1) == int64(n) {
				close(done)
			}
		}
	}()
	return &burnWorker{
		start: func() error { return client.Start(ctx) },
		done:  done,
		count: completed.Load,
		err: func() error {
			if e := failed.Load(); e != nil {
				return *e
			}
			return nil
		},
		stop: func() error {
			err := client.Stop(ctx)
			cancel()
			pool.Close()
			return err
		},
	}, nil
}

const noop1Kind port.Kind = "compare.noop1"

// noop1Registry knows a 1-step no-op kind.
func noop1Registry() (*port.Registry, error) {
	reg := port.NewRegistry()
	return reg, errors.Join(reg.RegisterActivity(port.Bind(noop, func(_ context.Context, i int) (int, error) { return i, nil })),
		reg.Register(port.Definition{Kind: noop1Kind, Version: 1, Retry: port.NetworkRetry(),
			Handler: port.Handle(func(f port.Flow, _ struct{}) error {
				_, err := noop.Run(f, "s0", 0)
				return err
			})}))
}

// openLease1 is openLease for the 1-step kind, with claimBatch as
// Config.BatchSize (0: the default).
func openLease1(ctx context.Context, dsn string, metrics leaseadapter.Metrics, claimBatch int) (*leaseadapter.Engine, *pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, nil, err
	}
	if tracer != nil && metrics != nil { // the worker's pool, not the fill's
		cfg.ConnConfig.Tracer = tracer
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("open pool: %w", err)
	}
	reg, err := noop1Registry()
	if err == nil {
		err = migrations.Up(ctx, pool)
	}
	var eng *leaseadapter.Engine
	if err == nil {
		eng, err = leaseadapter.New(pool, reg, leaseadapter.Config{Logger: slog.New(slog.DiscardHandler), Metrics: metrics, BatchSize: claimBatch})
	}
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return eng, pool, nil
}

// leaseBurnSide is the lease engine's worker at concurrency c.
func leaseBurnSide(c, claimBatch int) burnSide {
	return burnSide{
		name:   "lease " + strconv.Itoa(c),
		conc:   c,
		verify: `SELECT count(*) FROM taskport.run WHERE status = 'succeeded'`,
		fill: func(ctx context.Context, dsn string, n, batch int) error {
			eng, pool, err := openLease1(ctx, dsn, nil, claimBatch)
			if err != nil {
				return err
			}
			defer pool.Close()
			for lo := 0; lo < n; lo += batch {
				hi := min(lo+batch, n)
				items := make([]port.EnqueueItem, 0, hi-lo)
				for i := lo; i < hi; i++ {
					items = append(items, port.EnqueueItem{Kind: noop1Kind, Input: struct{}{},
						Options: port.EnqueueOptions{IdempotencyKey: "job-" + strconv.Itoa(i)}})
				}
				if _, err := eng.EnqueueMany(ctx, items); err != nil {
					return err
				}
			}
			return nil
		},
		worker: func(ctx context.Context, dsn string, n int) (*burnWorker, error) {
			fin := &finished{want: int64(n), all: make(chan struct{})}
			eng, pool, err := openLease1(ctx, dsn, fin, claimBatch)
			if err != nil {
				return nil, err
			}
			return &burnWorker{
				start: func() error { return eng.Start(ctx, port.StartOptions{Concurrency: c}) },
				done:  fin.all,
				count: fin.n.Load,
				err:   func() error { return nil },
				stop: func() error {
					err := eng.Stop(ctx)
					pool.Close()
					return err
				},
			}, nil
		},
	}
}

// The DBOS side of `compare -modes burndown` (main.go): the backlog is
// enqueued onto a DBOS queue first, by -burn-producers goroutines calling
// dbos.Enqueue (DBOS has no batch enqueue) before the context is launched,
// so that nothing dequeues it; Launch starts the queue runner, which runs
// at most `concurrency` workflows at once (WithWorkerConcurrency) and
// polls the queue every -dbos-poll (DBOS's default, 1s, would cap the
// drain at `concurrency` workflows per second: a poll dequeues only into
// free slots). The lease side enqueues by EnqueueMany (one producer,
// batches of 5000) before its worker starts. Only the drain is timed.
var (
	burnProducers = flag.Int("burn-producers", 8, "burndown mode: goroutines enqueueing DBOS's backlog, one dbos.Enqueue at a time")
	dbosPoll      = flag.Duration("dbos-poll", 5*time.Millisecond, "burndown mode: the DBOS queue's base polling interval (WithQueueBasePollingInterval; DBOS's default is 1s)")
)

// runLeaseBurndown enqueues n runs by EnqueueMany, then times a worker at
// concurrency c draining them.
func runLeaseBurndown(ctx context.Context, dbURL string, c, n int) (runStats, error) {
	done := &finished{want: int64(n), all: make(chan struct{})}
	eng, pool, err := openLease(ctx, dbURL, done)
	if err != nil {
		return runStats{}, err
	}
	defer pool.Close()
	t0 := time.Now()
	for lo := 0; lo < n; lo += riverBenchBatch {
		if _, err := eng.EnqueueMany(ctx, noopItems(lo, min(lo+riverBenchBatch, n))); err != nil {
			return runStats{}, err
		}
	}
	st := runStats{producers: 1, enqueue: time.Since(t0)}
	start := time.Now()
	if err := eng.Start(ctx, port.StartOptions{Concurrency: c}); err != nil {
		return runStats{}, err
	}
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

const dbosBurnName = "compare.noop3"

// dbosBurnReturned counts the burn-down workflows whose function returned
// (their status is written just after).
var dbosBurnReturned atomic.Int64

func dbosBurnWorkflow(ctx dbos.Context, i int) (int, error) {
	out, err := dbosWorkflow(ctx, i)
	if err == nil {
		dbosBurnReturned.Add(1)
	}
	return out, err
}

// runDBOSBurndown enqueues n workflows onto a DBOS queue of worker
// concurrency c before launching, then times the drain: until every
// workflow's function returned and the system database says all n
// succeeded (polled every 5 ms from then on).
func runDBOSBurndown(ctx context.Context, dbURL string, c, n int) (runStats, error) {
	dctx, err := dbos.NewContext(ctx, dbos.Config{AppName: "taskport-compare", DatabaseURL: dbURL,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return runStats{}, fmt.Errorf("dbos context: %w", err)
	}
	launched := false
	defer func() {
		if !launched {
			_ = dbos.Shutdown(dctx, 10*time.Second)
		}
	}()
	dbos.RegisterWorkflow(dctx, dbosBurnWorkflow, dbos.WithWorkflowName(dbosBurnName))
	q, err := dbos.RegisterQueue(dctx, "compare_burndown", dbos.WithWorkerConcurrency(c), dbos.WithQueueBasePollingInterval(*dbosPoll))
	if err != nil {
		return runStats{}, fmt.Errorf("dbos queue: %w", err)
	}
	// One connection for the completion check, opened before the clock.
	conn, err := pgxpool.New(ctx, dbURL) // dbURL's pool_max_conns is pgxpool's
	if err != nil {
		return runStats{}, err
	}
	defer conn.Close()
	if err := conn.Ping(ctx); err != nil {
		return runStats{}, err
	}
	dbosBurnReturned.Store(0)
	producers := max(1, *burnProducers)
	t0 := time.Now()
	err = spread(producers, n, func(i int) error {
		_, err := dbos.Enqueue[int](dctx, q.GetName(), dbosBurnName, i, dbos.WithEnqueueWorkflowID("job-"+strconv.Itoa(i)))
		return err
	})
	if err != nil {
		return runStats{}, fmt.Errorf("dbos enqueue: %w", err)
	}
	st := runStats{producers: producers, enqueue: time.Since(t0)}
	start := time.Now()
	if err := dbos.Launch(dctx); err != nil {
		return runStats{}, fmt.Errorf("dbos launch: %w", err)
	}
	launched = true
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		var succeeded int
		if dbosBurnReturned.Load() >= int64(n) {
			err = conn.QueryRow(ctx, `SELECT count(*) FROM dbos.workflow_status WHERE status = 'SUCCESS'`).Scan(&succeeded)
			if err != nil {
				break
			}
		}
		if succeeded >= n {
			st.elapsed = time.Since(start)
			break
		}
		select {
		case <-ctx.Done():
			err = ctx.Err()
		case <-tick.C:
		}
		if err != nil {
			break
		}
	}
	return st, errors.Join(err, dbos.Shutdown(dctx, 10*time.Second))
}

// tracer is the -statements tracer (nil: none).
var tracer *statementTracer

// statementTracer counts the statements of the pools it is set on while
// on, by statement, with their client-side duration (send to result).
type statementTracer struct {
	on     atomic.Bool
	mu     sync.Mutex
	counts map[string]*stmtCount
}

type stmtCount struct {
	calls int
	dur   time.Duration
}

type traceStartKey struct{}

type traceStart struct {
	sql string
	at  time.Time
}

func (t *statementTracer) reset() {
	t.mu.Lock()
	t.counts = map[string]*stmtCount{}
	t.mu.Unlock()
}

func (t *statementTracer) add(sql string, d time.Duration) {
	key := stmtKey(sql)
	t.mu.Lock()
	c := t.counts[key]
	if c == nil {
		c = &stmtCount{}
		t.counts[key] = c
	}
	c.calls++
	c.dur += d
	t.mu.Unlock()
}

// stmtKey names a statement by its sqlc name comment if it has one, else
// by its first 100 characters, whitespace collapsed.
func stmtKey(sql string) string {
	if i := strings.Index(sql, "-- name: "); i >= 0 {
		name, _, _ := strings.Cut(sql[i+len("-- name: "):], "\n")
		return strings.TrimSpace(name)
	}
	f := strings.Join(strings.Fields(sql), " ")
	if len(f) > 100 {
		f = f[:100] + "…"
	}
	return f
}

func (t *statementTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if !t.on.Load() {
		return ctx
	}
	return context.WithValue(ctx, traceStartKey{}, traceStart{sql: d.SQL, at: time.Now()})
}

func (t *statementTracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryEndData) {
	if s, ok := ctx.Value(traceStartKey{}).(traceStart); ok {
		t.add(s.sql, time.Since(s.at))
	}
}

// Batches: each statement is counted, the batch's time is not split.
func (t *statementTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (t *statementTracer) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	if t.on.Load() {
		t.add("(batch) "+d.SQL, 0)
	}
}

func (t *statementTracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// print writes the statements per job of the last drain, most frequent
// first.
func (t *statementTracer) print(w io.Writer, side string, n int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	type row struct {
		key string
		c   stmtCount
	}
	var rows []row
	total := 0
	for k, c := range t.counts {
		rows = append(rows, row{k, *c})
		total += c.calls
	}
	slices.SortFunc(rows, func(a, b row) int { return b.c.calls - a.c.calls })
	fmt.Fprintf(w, "  %s: %.3f statements/job\n", side, float64(total)/float64(n))
	for _, r := range rows[:min(len(rows), 12)] {
		mean := time.Duration(0)
		if r.c.calls > 0 {
			mean = r.c.dur / time.Duration(r.c.calls)
		}
		fmt.Fprintf(w, "    %8.4f/job  mean %8s  %s\n", float64(r.c.calls)/float64(n), mean.Round(time.Microsecond), r.key)
	}
}
