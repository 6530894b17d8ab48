package migrations_test

// The migration benchmark (issue 26, "migrations measured on a running
// system"): each migration applied to a seeded database while an enqueue,
// a claim and a plans API update run against the hot tables. It is a test
// behind a variable rather than a Go benchmark because what it measures is
// one run of each migration, not a per-operation rate.

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/internal/testkit/pgtest"
	"github.com/taskport/taskport/migrations"
)

const (
	envBench      = "TASKPORT_MIGRATION_BENCH"
	envBenchRuns  = "TASKPORT_MIGRATION_BENCH_RUNS"
	envBenchPlans = "TASKPORT_MIGRATION_BENCH_PLANS"
	envBenchOnly  = "TASKPORT_MIGRATION_BENCH_ONLY"

	// baselineWindow is how long the clients run on the seeded database
	// before the migration starts; their longest operation in it is the
	// baseline that a lock wait is told apart from.
	baselineWindow = 2 * time.Second
	// opInterval paces each client (200 operations a second), so that the
	// clients load the server as a running system would without starving
	// the migration of the machine's CPUs.
	opInterval = 5 * time.Millisecond
	// maxOps bounds each client's loop, whatever the migration's length.
	maxOps = 200_000
	// benchTimeout bounds one migration's measurement (seed, baseline,
	// migration).
	benchTimeout = 30 * time.Minute
)

// TestMigrationBench measures, for each migration N from 2 to the newest,
// on a fresh database migrated to N-1 and seeded with runs and plans: how
// long N takes, and the longest single operation each concurrent client
// saw while it ran, beside that client's longest operation before it.
func TestMigrationBench(t *testing.T) {
	if os.Getenv(envBench) != "1" {
		t.Skipf("set %s=1 to apply each migration to a seeded database under load (docs/migrations.md)", envBench)
	}
	runs := benchEnvInt(t, envBenchRuns, 1_000_000)
	plans := benchEnvInt(t, envBenchPlans, 100_000)
	only := map[int64]bool{}
	for _, v := range strings.FieldsFunc(os.Getenv(envBenchOnly), func(r rune) bool { return r == ',' || r == ' ' }) {
		n, err := strconv.ParseInt(v, 10, 64)
		require.NoError(t, err, "%s=%q: want migration numbers, e.g. 14,15", envBenchOnly, os.Getenv(envBenchOnly))
		only[n] = true
	}

	names, err := fs.Glob(migrations.SetFS(migrations.SetLegacy), "*.sql")
	require.NoError(t, err)
	var results []benchResult
	for _, name := range names {
		version, err := strconv.ParseInt(name[:strings.IndexByte(name, '_')], 10, 64)
		require.NoError(t, err, name)
		if version < 2 || len(only) > 0 && !only[version] {
			continue
		}
		t.Run(name, func(t *testing.T) {
			results = append(results, measureMigration(t, version, runs, plans))
		})
	}
	t.Log("\n" + benchTable(results))
}

func benchEnvInt(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(strings.ReplaceAll(v, "_", ""))
	require.NoError(t, err, "%s=%q: want a number of rows", name, v)
	require.Positive(t, n, "%s", name)
	return n
}

// gooseProvider is a goose provider over the legacy set, with the table
// name the application's flow gives it; the benchmark and the legacy set's
// tests need UpTo, UpByOne and DownTo on it, which Migrator does not offer.
func gooseProvider(t *testing.T, pool *pgxpool.Pool) *goose.Provider {
	t.Helper()
	db := stdlib.OpenDBFromPool(pool)
	t.Cleanup(func() { _ = db.Close() })
	p, err := goose.NewProvider(goose.DialectPostgres, db, migrations.SetFS(migrations.SetLegacy), goose.WithTableName("taskport_schema_migrations"))
	require.NoError(t, err)
	return p
}

// benchClient is one concurrent client: its name and one operation.
type benchClient struct {
	name string
	op   func(ctx context.Context, conn *pgxpool.Conn, i int) error
}

// benchResult is one migration's row of the table.
type benchResult struct {
	version     int64
	runs, plans int
	duration    time.Duration // from the first attempt's start to the end of the one that succeeded
	failed      []string      // why each failed attempt failed
	clients     []clientResult
}

// clientResult is what one client saw: its longest operation before the
// migration and while it ran, and the error that stopped it, if any.
type clientResult struct {
	name              string
	baseline, longest time.Duration
	ops, deadlocks    int
	err               error
}

func measureMigration(t *testing.T, version int64, runs, plans int) benchResult {
	ctx, cancel := context.WithTimeout(context.Background(), benchTimeout)
	defer cancel()
	cfg, err := pgxpool.ParseConfig(pgtest.NewEmptyDatabase(t))
	require.NoError(t, err)
	cfg.MaxConns = 8 // three clients, the migration and goose's own queries
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	provider := gooseProvider(t, pool)
	_, err = provider.UpTo(ctx, version-1)
	require.NoError(t, err)

	runs, plans = seedBench(t, ctx, pool, runs, plans)
	clients := benchClients(t, ctx, pool, plans)

	// The clients run from before the migration to its end; each operation
	// is kept with its start and its length, and told apart afterwards.
	type op struct {
		start time.Time
		took  time.Duration
	}
	var done atomic.Bool
	var wg sync.WaitGroup
	ops := make([][]op, len(clients))
	errs := make([]error, len(clients))
	deadlocks := make([]int, len(clients))
	for c, cl := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := pool.Acquire(ctx)
			if err != nil {
				errs[c] = err
				return
			}
			defer conn.Release()
			tick := time.NewTicker(opInterval)
			defer tick.Stop()
			for i := 0; i < maxOps && !done.Load(); i++ {
				start := time.Now()
				err := cl.op(ctx, conn, i)
				ops[c] = append(ops[c], op{start, time.Since(start)})
				// A deadlock rolls back the client's statement, which a
				// client retries; anything else stops it.
				if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok && pgErr.Code == "40P01" {
					deadlocks[c]++
				} else if err != nil {
					errs[c] = err
					return
				}
				<-tick.C
			}
		}()
	}
	time.Sleep(baselineWindow) // the baseline's length, not a synchronization
	// A migration that a client's statement deadlocks with is rolled back
	// by Postgres; an operator would run it again, and so does this, up to
	// three times, reporting the failed attempts (and, if all three fail,
	// the migration as not applied: that is a result, not a test failure).
	start := time.Now()
	var failed []string
	for range 3 {
		_, err = provider.UpByOne(ctx)
		if pgErr, ok := errors.AsType[*pgconn.PgError](err); !ok || pgErr.Code != "40P01" {
			break
		}
		failed = append(failed, "deadlock")
	}
	end := time.Now()
	done.Store(true)
	wg.Wait()
	if len(failed) < 3 {
		require.NoError(t, err, "migration %d", version)
	}

	res := benchResult{version: version, runs: runs, plans: plans, duration: end.Sub(start), failed: failed}
	for c, cl := range clients {
		r := clientResult{name: cl.name, err: errs[c], deadlocks: deadlocks[c]}
		for _, o := range ops[c] {
			switch {
			case o.start.Add(o.took).Before(start):
				r.baseline = max(r.baseline, o.took)
			case !o.start.After(end):
				r.longest = max(r.longest, o.took)
				r.ops++
			}
		}
		res.clients = append(res.clients, r)
	}
	t.Logf("migration %d: %s", version, benchTable([]benchResult{res}))
	return res
}

// columns lists the columns table has in the schema as migrated so far.
func columns(t *testing.T, ctx context.Context, pool *pgxpool.Pool, schema, table string) map[string]bool {
	t.Helper()
	rows, err := pool.Query(ctx, `SELECT column_name FROM information_schema.columns
WHERE table_schema = $1 AND table_name = $2`, schema, table)
	require.NoError(t, err)
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var c string
		require.NoError(t, rows.Scan(&c))
		out[c] = true
	}
	require.NoError(t, rows.Err())
	return out
}

// insertSelect builds INSERT INTO table (cols) SELECT exprs FROM from, with
// the columns of values that table has now; the expressions are constants
// of this file, never input.
func insertSelect(table string, have map[string]bool, values [][2]string, from string) string {
	var cols, exprs []string
	for _, v := range values {
		if have[v[0]] {
			cols = append(cols, v[0])
			exprs = append(exprs, v[1])
		}
	}
	return "INSERT INTO " + table + " (" + strings.Join(cols, ", ") + ") SELECT " + strings.Join(exprs, ", ") + " FROM " + from
}

// runStatus spreads the seeded runs as a backlog does: one in ten pending
// (every one a lease run, so that the claim finds work), one in twenty
// failed, one in twenty waiting, the rest succeeded. Every version's CHECK
// accepts these statuses (00001, 00004, 00012, 00014).
const runStatus = `CASE WHEN g % 10 = 0 THEN 'pending' WHEN g % 20 = 1 THEN 'failed' WHEN g % 20 = 3 THEN 'waiting' ELSE 'succeeded' END`

// seedBench fills the runs (and, between 00003 and 00014, their lease task
// rows) and the plans, with the columns the schema has at this version,
// and returns the numbers of runs and plans.
func seedBench(t *testing.T, ctx context.Context, pool *pgxpool.Pool, runs, plans int) (int, int) {
	t.Helper()
	run := columns(t, ctx, pool, "taskport", "run")
	_, err := pool.Exec(ctx, insertSelect("taskport.run", run, [][2]string{
		{"id", "md5('run' || g)::uuid"},
		{"engine", "CASE WHEN g % 2 = 0 THEN 'lease' ELSE 'temporal' END"},
		{"kind", "'kind-' || g % 10"},
		{"version", "1"},
		{"idempotency_key", "'key-' || g"},
		{"business_key", "CASE WHEN g % 4 = 0 THEN 'plan-' || g % 1000 ELSE '' END"},
		{"input", "jsonb_build_object('n', g)"},
		{"status", runStatus},
		{"attempts", "1"},
		{"created_at", "now() - g * interval '1 second'"},
		{"updated_at", "now() - g * interval '1 second'"},
		{"finished_at", "CASE WHEN g % 10 = 0 OR g % 20 = 3 THEN NULL ELSE now() - g * interval '1 second' END"},
		// From 00014 the lease state is in the run row.
		{"next_run_at", "now() - g * interval '1 second'"},
		{"claims", "1"},
		{"max_attempts", "3"},
		{"backoff_initial", "'1 second'"},
		{"backoff_max", "'1 minute'"},
		{"backoff_coefficient", "2"},
	}, "generate_series(1, $1::int) g"), runs)
	require.NoError(t, err)

	// Before 00014 a lease run is also a row of taskport_lease.task.
	if task := columns(t, ctx, pool, "taskport_lease", "task"); len(task) > 0 {
		_, err := pool.Exec(ctx, insertSelect("taskport_lease.task", task, [][2]string{
			{"id", "r.id"}, {"kind", "r.kind"}, {"handler_version", "r.version"}, {"input", "r.input"},
			{"status", "r.status"}, {"claims", "1"}, {"next_run_at", "r.created_at"}, {"max_attempts", "3"},
			{"backoff_initial", "'1 second'"}, {"backoff_max", "'1 minute'"}, {"backoff_coefficient", "2"},
			{"created_at", "r.created_at"}, {"updated_at", "r.updated_at"}, {"finished_at", "r.finished_at"},
			{"run_seq", "r.seq"},
		}, "taskport.run r WHERE r.engine = 'lease'"))
		require.NoError(t, err)
	}

	plan := columns(t, ctx, pool, "public", "plan")
	if len(plan) == 0 { // before 00002
		plans = 0
	}
	if plans == 0 {
		return vacuumAndCount(t, ctx, pool), 0
	}
	_, err = pool.Exec(ctx, insertSelect("plan", plan, [][2]string{
		{"id", "md5('plan' || h)::uuid"},
		{"title", "'plan ' || h"},
		{"source_type", "'magnet'"},
		{"source", "'magnet:?xt=urn:btih:' || lpad(to_hex(h), 40, '0')"},
		// Unique per plan: 00005's indexes hold an active plan's hash and
		// target.
		{"info_hash", "lpad(to_hex(h), 40, '0')"},
		{"target_path", "'/media/' || h"},
		{"expected_size", "1000"},
		{"expected_sha256", "repeat('a', 64)"},
		{"status", "CASE WHEN h % 10 = 0 THEN 'awaiting_approval' WHEN h % 10 = 1 THEN 'downloading' ELSE 'completed' END"},
		{"created_at", "now() - h * interval '1 second'"},
		{"updated_at", "now() - h * interval '1 second'"},
	}, "generate_series(1, $1::int) h"), plans)
	require.NoError(t, err, "seed plans")
	return vacuumAndCount(t, ctx, pool), plans
}

// vacuumAndCount vacuums and analyzes the seeded database and returns the
// number of runs.
func vacuumAndCount(t *testing.T, ctx context.Context, pool *pgxpool.Pool) int {
	t.Helper()
	// A backlog is vacuumed and analyzed; a freshly loaded table is neither,
	// and the first statements on it would pay for both.
	_, err := pool.Exec(ctx, "VACUUM ANALYZE")
	require.NoError(t, err)
	var n int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM taskport.run").Scan(&n))
	return n
}

// benchClients are the enqueue, the claim and the plans API update, in the
// shape of the schema at this version.
func benchClients(t *testing.T, ctx context.Context, pool *pgxpool.Pool, plans int) []benchClient {
	t.Helper()
	run := columns(t, ctx, pool, "taskport", "run")
	task := columns(t, ctx, pool, "taskport_lease", "task")
	prefix := fmt.Sprintf("bench-%d-", time.Now().UnixNano())

	enqueue := `INSERT INTO taskport.run (id, engine, kind, version, idempotency_key, input)
VALUES (gen_random_uuid(), 'lease', 'bench', 1, $1, '{}')`
	if len(task) > 0 {
		seq, runSeq := "", ""
		if task["run_seq"] {
			seq, runSeq = ", seq", ", run_seq"
		}
		enqueue = `WITH r AS (` + enqueue + ` RETURNING id` + seq + `)
INSERT INTO taskport_lease.task (id, kind, handler_version, input, max_attempts, backoff_initial, backoff_max,
  backoff_coefficient` + runSeq + `)
SELECT id, 'bench', 1, '{}', 3, '1 second', '1 minute', 2` + seq + ` FROM r`
	}

	var claim string
	switch {
	case run["next_run_at"]:
		claim = `UPDATE taskport.run SET status = 'running', claims = claims + 1, lease_owner = 'bench',
  lease_until = now() + interval '1 minute', lease_token = gen_random_uuid(), updated_at = now()
WHERE id = (SELECT id FROM taskport.run WHERE engine = 'lease' AND status IN ('pending', 'waiting')
  AND next_run_at <= now() ORDER BY priority, next_run_at LIMIT 1 FOR UPDATE SKIP LOCKED)`
	case len(task) > 0:
		claim = `UPDATE taskport_lease.task SET status = 'running', claims = claims + 1, lease_owner = 'bench',
  lease_until = now() + interval '1 minute', lease_token = gen_random_uuid(), updated_at = now()
WHERE id = (SELECT id FROM taskport_lease.task WHERE status IN ('pending', 'waiting')
  AND next_run_at <= now() ORDER BY priority, next_run_at LIMIT 1 FOR UPDATE SKIP LOCKED)`
	default: // before the lease engine (00003) a claim can only take a pending run
		claim = `UPDATE taskport.run SET status = 'running', updated_at = now()
WHERE id = (SELECT id FROM taskport.run WHERE status = 'pending' LIMIT 1 FOR UPDATE SKIP LOCKED)`
	}

	clients := []benchClient{
		{"enqueue", func(ctx context.Context, conn *pgxpool.Conn, i int) error {
			_, err := conn.Exec(ctx, enqueue, prefix+strconv.Itoa(i))
			return err
		}},
		{"claim", func(ctx context.Context, conn *pgxpool.Conn, _ int) error {
			_, err := conn.Exec(ctx, claim)
			return err
		}},
	}
	if plans == 0 { // before 00002 there is no plan to update
		return clients
	}
	return append(clients, benchClient{"plan update", func(ctx context.Context, conn *pgxpool.Conn, i int) error {
		_, err := conn.Exec(ctx, `UPDATE plan SET updated_at = now() WHERE id = md5('plan' || $1::int)::uuid`,
			1+(i*7919)%plans)
		return err
	}})
}

// benchTable prints results as a table: per migration, the rows seeded,
// the migration's duration, and per client the longest operation while it
// ran minus the client's baseline (the longest lock wait it saw), with the
// baseline beside it.
func benchTable(results []benchResult) string {
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "migration\truns\tplans\tduration\tenqueue wait\tclaim wait\tplan update wait\tbaseline (enqueue/claim/plan)\t")
	for _, r := range results {
		waits := []string{"-", "-", "-"} // before 00002 there is no plan client
		bases := []string{"-", "-", "-"}
		for i, c := range r.clients {
			s := roundDuration(max(0, c.longest-c.baseline)).String()
			if c.deadlocks > 0 {
				s += fmt.Sprintf(" (%d deadlocked)", c.deadlocks)
			}
			if pgErr, ok := errors.AsType[*pgconn.PgError](c.err); ok {
				s += " (stopped: " + pgErr.Code + ")"
			} else if c.err != nil {
				s += " (stopped: " + c.err.Error() + ")"
			}
			waits[i], bases[i] = s, roundDuration(c.baseline).String()
		}
		duration := roundDuration(r.duration).String()
		if len(r.failed) > 0 {
			duration += fmt.Sprintf(" (%d attempts failed: %s)", len(r.failed), strings.Join(r.failed, ", "))
		}
		if len(r.failed) == 3 {
			duration += " NOT APPLIED"
		}
		fmt.Fprintf(w, "%05d\t%d\t%d\t%s\t%s\t%s\t\n", r.version, r.runs, r.plans, duration,
			strings.Join(waits, "\t"), strings.Join(bases, "/"))
	}
	_ = w.Flush()
	return b.String()
}

func roundDuration(d time.Duration) time.Duration {
	if d >= time.Second {
		return d.Round(10 * time.Millisecond)
	}
	return d.Round(100 * time.Microsecond)
}
