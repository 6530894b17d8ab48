package runstore

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/internal/dbtx"
	"github.com/taskport/taskport/internal/testkit/pgtest"
	"github.com/taskport/taskport/port"
)

// seedRuns fills taskport.run as after months of work, never analyzed: n
// finished Temporal runs over the last two days (nine in ten succeeded, the
// rest canceled or failed: the dead letters), and 10,000 pending ones,
// each waiting on a topic registered a day ago; and n/5 early signals sent
// over the two days, all taken but the first 1,000.
func seedRuns(t *testing.T, pool *pgxpool.Pool, n int) {
	t.Helper()
	start := time.Now()
	pgtest.Seed(t, pool, n,
		`ALTER TABLE taskport.run SET (autovacuum_enabled = off)`,
		`ALTER TABLE taskport.waiter SET (autovacuum_enabled = off)`,
		`ALTER TABLE taskport.early_signal SET (autovacuum_enabled = off)`,
		`INSERT INTO taskport.run (id, engine, kind, version, idempotency_key, input, status, created_at, finished_at)
		 SELECT ('00000000-0000-7000-8000-' || lpad(to_hex(g), 12, '0'))::uuid, 'temporal', 'k', 1, 'f' || g, '{}',
		   CASE g % 20 WHEN 0 THEN 'failed' WHEN 1 THEN 'canceled' ELSE 'succeeded' END,
		   now() - interval '2 days' + (g - 1) * (interval '2 days' / $1), now() - interval '2 days' + g * (interval '2 days' / $1)
		 FROM generate_series(1, $1::int) g`,
		`INSERT INTO taskport.run (id, engine, kind, version, idempotency_key, input, status)
		 SELECT ('00000000-0000-7000-8000-' || lpad(to_hex($1 + g), 12, '0'))::uuid, 'temporal', 'k', 1, 'o' || g, '{}', 'waiting'
		 FROM generate_series(1, 10000) g`,
		`INSERT INTO taskport.waiter (topic, run_id, step, since)
		 SELECT 't:' || id, id, 'wait', now() - interval '1 day' FROM taskport.run WHERE status = 'waiting'`,
		`INSERT INTO taskport.early_signal (topic, payload, created_at, consumed_by, consumed_step, consumed_at)
		 SELECT 't' || g, '{}', now() - interval '2 days' + g * (interval '2 days' / $1),
		   CASE WHEN g > 1000 THEN gen_random_uuid() END, CASE WHEN g > 1000 THEN 'wait' ELSE '' END,
		   CASE WHEN g > 1000 THEN now() - interval '2 days' + g * (interval '2 days' / $1) END
		 FROM generate_series(1, $1::int / 5) g`,
	)
	t.Logf("seeded %d finished runs and 10,000 waiting ones in %s", n, time.Since(start).Round(time.Millisecond))
}

// The run store's admin listings and retention statements read an index
// and stop after their LIMIT at a million finished runs: no sequential
// scan, no sort of the backlog; before any ANALYZE, after one, and (the
// retention statements, which pgx prepares and runs often) as generic
// plans.
func TestPlansStayIndexedAtAMillionRuns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	seedRuns(t, pool, pgtest.BacklogRows(t))
	pgtest.RequireNeverAnalyzed(t, pool, "taskport.run", "taskport.waiter", "taskport.early_signal")

	day := (24 * time.Hour).Milliseconds()
	// Open runs whose steps a busy Temporal worker could be running.
	rows, err := pool.Query(ctx, `SELECT id FROM taskport.run WHERE status = 'waiting' LIMIT 100`)
	require.NoError(t, err)
	running, err := pgx.CollectRows(rows, pgx.RowTo[dbtx.UUID])
	require.NoError(t, err)
	require.Len(t, running, 100)
	// The retention statements as PruneRuns, PruneWaiters, PruneEarlySignals
	// and the lags run them: the waiter and signal prunes after
	// dbtx.PinIndexScansSQL.
	retention := func(tx pgx.Tx, stats string, generic bool) {
		explain := func(sql string, args ...any) pgtest.Plan { return pgtest.Explain(t, tx, sql, args...) }
		if generic {
			explain = func(sql string, args ...any) pgtest.Plan { return pgtest.ExplainGeneric(t, tx, sql, args...) }
		}
		explain(pruneRunsSQL, EngineTemporal, day, day, day, 1000).
			RequireIndexed(t, stats+" retention: runs", "run_finished", "run_pkey")
		explain(RunLagSQL, EngineTemporal, day, day, day).RequireIndexed(t, stats+" retention: run lag", "run_finished")
		explain(waiterLagSQL, int64(3600000)).RequireIndexed(t, stats+" retention: waiter lag", "waiter_since", "run_pkey")
		explain(earlySignalLagSQL, day).
			RequireIndexed(t, stats+" retention: early signal lag", "early_signal_consumed", "early_signal_unconsumed_age")
		_, err := tx.Exec(ctx, dbtx.PinIndexScansSQL)
		require.NoError(t, err)
		explain(pruneWaitersSQL, int64(3600000), 1000).
			RequireIndexed(t, stats+" retention: waiters", "waiter_since", "run_pkey")
		explain(pruneEarlySignalsSQL, day, 1000).
			RequireIndexed(t, stats+" retention: early signals", "early_signal_consumed", "early_signal_unconsumed_age", "early_signal_pkey")
		// Not retention, but as often run and prepared: the cancel watch's
		// read of its running steps' flags (CanceledAmong), every second.
		explain(canceledAmongSQL, dbtx.UUIDArray(running)).RequireIndexed(t, stats+" cancel flags of running steps", "run_pkey")
	}
	check := func(stats string) {
		// The listings of the engine that owns the runs: its engine
		// condition (listRunsSelect) leaves them the seeks they were.
		sql, args, err := listQuery(ctx, pool, EngineTemporal, port.RunFilter{Statuses: []port.Status{port.StatusFailed}, Limit: 100})
		require.NoError(t, err)
		pgtest.Explain(t, pool, sql, args...).RequireIndexed(t, stats+" dead letters", "run_status_created")
		// Every run, and one kind: a branch per status, or per (version,
		// status), each stopping after the LIMIT; the kind's versions by a
		// loose scan.
		sql, args, err = listQuery(ctx, pool, EngineTemporal, port.RunFilter{Limit: 100})
		require.NoError(t, err)
		pgtest.Explain(t, pool, sql, args...).RequireIndexed(t, stats+" every run", "run_status_created")
		sql, args, err = listQuery(ctx, pool, EngineTemporal, port.RunFilter{Kind: "k", Limit: 100})
		require.NoError(t, err)
		pgtest.Explain(t, pool, sql, args...).RequireIndexed(t, stats+" one kind", "run_kind_version_status_created")
		pgtest.Explain(t, pool, kindVersionsSQL, "k", math.MaxInt32).
			RequireIndexed(t, stats+" a kind's versions", "run_kind_version_status_created")
		// engine status's runs left to move: run_unmoved, which holds only them.
		pgtest.Explain(t, pool, unmovedRunsSQL, []string{"lease", "temporal"}).RequireIndexed(t, stats+" runs left to move", "run_unmoved")
		for _, generic := range []bool{false, true} {
			err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				retention(tx, fmt.Sprintf("%s generic=%v:", stats, generic), generic)
				return nil
			})
			require.NoError(t, err)
		}
	}
	check("never analyzed:")
	_, err = pool.Exec(ctx, `ANALYZE taskport.run, taskport.waiter, taskport.early_signal`)
	require.NoError(t, err)
	check("analyzed:")
}
