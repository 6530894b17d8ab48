package migrations_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/internal/testkit/pgtest"
	"github.com/taskport/taskport/migrations"
)

// Up, down to zero, then up again on a fresh database: every down section
// must undo its up section exactly, or the second up fails.
func TestUpDownUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Connect(t, pgtest.NewEmptyDatabase(t))
	m, err := migrations.New(pool, nil)
	require.NoError(t, err)
	defer m.Close()

	applied, err := m.Up(ctx)
	require.NoError(t, err)
	require.NotEmpty(t, applied)
	status, err := m.Status(ctx)
	require.NoError(t, err)
	require.Len(t, status, len(applied))
	for _, s := range status {
		require.True(t, s.Applied, "migration %d %s not applied", s.Version, s.Name)
	}
	requireTables(t, pool, true)

	rolledBack, err := m.DownTo(ctx, 0)
	require.NoError(t, err)
	require.Len(t, rolledBack, len(applied))
	requireTables(t, pool, false)
	status, err = m.Status(ctx)
	require.NoError(t, err)
	for _, s := range status {
		require.False(t, s.Applied, "migration %d still applied after down", s.Version)
	}

	again, err := m.Up(ctx)
	require.NoError(t, err)
	require.Equal(t, applied, again)
	requireTables(t, pool, true)

	none, err := m.Up(ctx)
	require.NoError(t, err)
	require.Empty(t, none, "a second up must be a no-op")
}

// requireTables checks a table from each migration: the shared run store,
// the business ledger and the lease engine.
func requireTables(t *testing.T, pool *pgxpool.Pool, want bool) {
	t.Helper()
	for _, table := range []string{"taskport.run", "taskport.waiter", "public.plan", "public.asset_operation",
		"public.outbox_event", "public.decision", "taskport_lease.task", "taskport_lease.task_signal"} {
		var exists bool
		require.NoError(t, pool.QueryRow(context.Background(), "SELECT to_regclass($1) IS NOT NULL", table).Scan(&exists))
		require.Equal(t, want, exists, "table %s", table)
	}
}

// The lease tables carry no foreign keys (00004): deleting a run must still
// delete its task row and step results, through the triggers.
func TestDeletingARunForgetsItsLeaseRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	const runs = 3
	for i := range runs {
		_, err := pool.Exec(ctx, `
WITH r AS (
  INSERT INTO taskport.run (id, engine, kind, version, idempotency_key, input)
  VALUES (gen_random_uuid(), 'lease', 'k', 1, $1, '{}') RETURNING id, seq
), t AS (
  INSERT INTO taskport_lease.task (id, kind, handler_version, input, max_attempts, backoff_initial, backoff_max, backoff_coefficient, run_seq)
  SELECT id, 'k', 1, '{}', 3, '1s', '1m', 2, seq FROM r RETURNING id
)
INSERT INTO taskport_lease.step_result (task_id, seq, name, result)
SELECT id, g, 's' || g, '1' FROM t, generate_series(0, 2) g`, fmt.Sprint(i))
		require.NoError(t, err)
	}
	count := func(table string) int {
		var n int
		require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&n))
		return n
	}
	require.Equal(t, runs, count("taskport_lease.task"))
	require.Equal(t, 3*runs, count("taskport_lease.step_result"))

	_, err := pool.Exec(ctx, `DELETE FROM taskport.run WHERE idempotency_key = '0'`)
	require.NoError(t, err)
	require.Equal(t, runs-1, count("taskport_lease.task"))
	require.Equal(t, 3*(runs-1), count("taskport_lease.step_result"))

	_, err = pool.Exec(ctx, `DELETE FROM taskport.run`)
	require.NoError(t, err)
	require.Zero(t, count("taskport_lease.task"))
	require.Zero(t, count("taskport_lease.step_result"))
}

// The row checks (00004, then 00012: constant lists from immutable
// functions) refuse what the column CHECKs they replace refused.
func TestRowChecksRefuseBadRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	insertRun := `INSERT INTO taskport.run (id, engine, kind, version, idempotency_key, input, status)
VALUES (gen_random_uuid(), $1, 'k', $2, $3, '{}', $4)`
	for name, args := range map[string][]any{
		"engine":          {"cron", 1, "a", "pending"},
		"version":         {"lease", 0, "b", "pending"},
		"idempotency key": {"lease", 1, "", "pending"},
		"status":          {"lease", 1, "c", "dead"},
	} {
		_, err := pool.Exec(ctx, insertRun, args...)
		require.ErrorContains(t, err, "run_row_check", name)
	}
	_, err := pool.Exec(ctx, insertRun, "lease", 1, "ok", "pending")
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `UPDATE taskport.run SET status = 'sleeping'`)
	require.ErrorContains(t, err, "run_row_check")

	insertTask := `INSERT INTO taskport_lease.task (id, kind, handler_version, input, status, max_attempts, backoff_initial, backoff_max, backoff_coefficient, run_seq)
VALUES (gen_random_uuid(), 'k', 1, '{}', $1, $2, '1s', '1m', 2, 1)`
	_, err = pool.Exec(ctx, insertTask, "lost", 3)
	require.ErrorContains(t, err, "task_row_check")
	_, err = pool.Exec(ctx, insertTask, "pending", 0)
	require.ErrorContains(t, err, "task_row_check")
	_, err = pool.Exec(ctx, insertTask, "dead", 1)
	require.NoError(t, err)
}
