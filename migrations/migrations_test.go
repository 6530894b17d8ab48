package migrations_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/internal/testkit/pgtest"
	"github.com/taskport/taskport/migrations"
)

// Up, down to zero, then up again on a fresh database, with the
// application's flow: every set's down must undo its up exactly, or the
// second up fails.
func TestUpDownUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, m := emptyDatabase(t)

	applied, err := m.Up(ctx)
	require.NoError(t, err)
	require.Equal(t, allOf("engine", "media"), applied,
		"a new database gets the engine and media sets, never the legacy one")
	status, err := m.Status(ctx)
	require.NoError(t, err)
	require.Len(t, status, len(applied))
	for _, s := range status {
		require.True(t, s.Applied, "migration %s %d %s not applied", s.Set, s.Version, s.Name)
	}
	requireTables(t, pool, true)
	var legacy bool
	require.NoError(t, pool.QueryRow(ctx, `SELECT to_regclass('taskport_schema_migrations') IS NOT NULL`).Scan(&legacy))
	require.False(t, legacy)

	// The engine set goes after the media set, whose runs it holds.
	_, err = m.DownTo(ctx, "engine", 0)
	require.ErrorContains(t, err, "roll it back first")
	requireTables(t, pool, true)
	media, err := m.DownTo(ctx, "media", 0)
	require.NoError(t, err)
	engine, err := m.DownTo(ctx, "engine", 0)
	require.NoError(t, err)
	require.Len(t, append(media, engine...), len(applied))
	requireTables(t, pool, false)
	status, err = m.Status(ctx)
	require.NoError(t, err)
	for _, s := range status {
		require.False(t, s.Applied, "migration %s %d still applied after down", s.Set, s.Version)
	}
	_, err = m.DownTo(ctx, "legacy", 0)
	require.ErrorContains(t, err, `no migration set "legacy" here: engine, media`)

	again, err := m.Up(ctx)
	require.NoError(t, err)
	require.Equal(t, applied, again)
	requireTables(t, pool, true)

	none, err := m.Up(ctx)
	require.NoError(t, err)
	require.Empty(t, none, "a second up must be a no-op")
}

// emptyDatabase is a fresh database with no migration applied, and the
// application's migrator, closed when t ends.
func emptyDatabase(t *testing.T) (*pgxpool.Pool, *migrations.Migrator) {
	t.Helper()
	pool := pgtest.Connect(t, pgtest.NewEmptyDatabase(t))
	m, err := migrations.New(pool, nil)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, m.Close()) })
	return pool, m
}

// allOf is every migration of the named sets, in the order Up applies
// them: each set's versions are numbered from its baseline, 1, without a gap.
func allOf(sets ...string) []migrations.Applied {
	var out []migrations.Applied
	for _, set := range sets {
		for v := int64(1); v <= migrations.Latest(set); v++ {
			out = append(out, migrations.Applied{Set: set, Version: v})
		}
	}
	return out
}

// requireTables checks a table from each set: the shared run store, the
// business ledger and the lease engine.
func requireTables(t *testing.T, pool *pgxpool.Pool, want bool) {
	t.Helper()
	for _, table := range []string{"taskport.run", "taskport.waiter", "public.plan", "public.asset_operation",
		"public.outbox_event", "public.decision", "taskport_lease.step_result", "taskport_lease.task_signal"} {
		var exists bool
		require.NoError(t, pool.QueryRow(context.Background(), "SELECT to_regclass($1) IS NOT NULL", table).Scan(&exists))
		require.Equal(t, want, exists, "table %s", table)
	}
}

// The lease tables carry no foreign keys (00004): deleting a run must still
// delete its step results, through the trigger (00014).
func TestDeletingARunForgetsItsLeaseRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	const runs = 3
	for i := range runs {
		_, err := pool.Exec(ctx, `
WITH r AS (
  INSERT INTO taskport.run (id, engine, kind, version, idempotency_key, input)
  VALUES (gen_random_uuid(), 'lease', 'k', 1, $1, '{}') RETURNING id
)
INSERT INTO taskport_lease.step_result (run_id, seq, name, result)
SELECT id, g, 's' || g, '1' FROM r, generate_series(0, 2) g`, fmt.Sprint(i))
		require.NoError(t, err)
	}
	count := func(table string) int {
		var n int
		require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&n))
		return n
	}
	require.Equal(t, 3*runs, count("taskport_lease.step_result"))

	_, err := pool.Exec(ctx, `DELETE FROM taskport.run WHERE idempotency_key = '0'`)
	require.NoError(t, err)
	require.Equal(t, 3*(runs-1), count("taskport_lease.step_result"))

	_, err = pool.Exec(ctx, `DELETE FROM taskport.run`)
	require.NoError(t, err)
	require.Zero(t, count("taskport_lease.step_result"))
}

// 00014 moves each lease run's task row into its run row: the live status
// (a claimed run is running, a dead one failed), the claim, the policy, the
// input of a continue-as-new beside the enqueued one, and the step results
// keyed by the run. Down puts the task rows back.
func TestLeaseStateMovesIntoTheRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Connect(t, pgtest.NewEmptyDatabase(t))
	m := gooseProvider(t, pool)
	_, err := m.Up(ctx)
	require.NoError(t, err)
	_, err = m.DownTo(ctx, 13)
	require.NoError(t, err)

	// Runs as the engine before 00014 left them: claimed (its projection
	// says pending), dead, continued as new with a new input, and waiting.
	_, err = pool.Exec(ctx, `
WITH r AS (
  INSERT INTO taskport.run (id, engine, kind, version, idempotency_key, input, status, finished_at)
  VALUES ('00000000-0000-0000-0000-000000000001', 'lease', 'k', 1, 'claimed', '{"n":1}', 'pending', NULL),
         ('00000000-0000-0000-0000-000000000002', 'lease', 'k', 1, 'dead', '{"n":2}', 'failed', now()),
         ('00000000-0000-0000-0000-000000000003', 'lease', 'k', 1, 'continued', '{"n":3}', 'pending', NULL),
         ('00000000-0000-0000-0000-000000000004', 'lease', 'k', 1, 'waiting', '{"n":4}', 'waiting', NULL)
  RETURNING id, seq, input
)
INSERT INTO taskport_lease.task (id, kind, handler_version, input, status, claims, lease_owner, lease_token,
  lease_until, max_attempts, backoff_initial, backoff_max, backoff_coefficient, current_step, dead_letter_at,
  wait_topic, run_seq)
SELECT id, 'k', 1,
  CASE WHEN input->>'n' = '3' THEN '{"n":30}' ELSE input END,
  CASE input->>'n' WHEN '1' THEN 'running' WHEN '2' THEN 'dead' WHEN '3' THEN 'pending' ELSE 'waiting' END,
  2, CASE WHEN input->>'n' = '1' THEN 'w1' END, CASE WHEN input->>'n' = '1' THEN gen_random_uuid() END,
  CASE WHEN input->>'n' = '1' THEN now() + interval '1 minute' END,
  4, '1s', '1m', 2, 'step-' || (input->>'n'), CASE WHEN input->>'n' = '2' THEN now() END,
  CASE WHEN input->>'n' = '4' THEN 'topic' END, seq
FROM r`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO taskport_lease.step_result (task_id, seq, name, result)
VALUES ('00000000-0000-0000-0000-000000000001', 0, 'a', '1')`)
	require.NoError(t, err)

	_, err = m.Up(ctx)
	require.NoError(t, err)
	type row struct {
		Status, Input, Continued, Owner, Step, Topic string
		Claims, MaxAttempts                          int
		Dead                                         bool
	}
	read := func(id string) row {
		var r row
		require.NoError(t, pool.QueryRow(ctx, `
SELECT status, input::text, coalesce(continued_input::text, ''), coalesce(lease_owner, ''), current_step,
  coalesce(wait_topic, ''), claims, max_attempts, dead_letter_at IS NOT NULL
FROM taskport.run WHERE id = $1`, id).Scan(&r.Status, &r.Input, &r.Continued, &r.Owner, &r.Step, &r.Topic,
			&r.Claims, &r.MaxAttempts, &r.Dead))
		return r
	}
	require.Equal(t, row{Status: "running", Input: `{"n": 1}`, Owner: "w1", Step: "step-1", Claims: 2, MaxAttempts: 4},
		read("00000000-0000-0000-0000-000000000001"))
	require.Equal(t, row{Status: "failed", Input: `{"n": 2}`, Claims: 2, MaxAttempts: 4, Dead: true},
		read("00000000-0000-0000-0000-000000000002"))
	require.Equal(t, row{Status: "pending", Input: `{"n": 3}`, Continued: `{"n": 30}`, Claims: 2, MaxAttempts: 4},
		read("00000000-0000-0000-0000-000000000003"))
	require.Equal(t, row{Status: "waiting", Input: `{"n": 4}`, Topic: "topic", Claims: 2, MaxAttempts: 4},
		read("00000000-0000-0000-0000-000000000004"))
	var steps int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM taskport_lease.step_result
WHERE run_id = '00000000-0000-0000-0000-000000000001'`).Scan(&steps))
	require.Equal(t, 1, steps)

	_, err = m.DownTo(ctx, 13)
	require.NoError(t, err)
	var claimed, continued string
	require.NoError(t, pool.QueryRow(ctx, `
SELECT (SELECT t.status || '/' || r.status FROM taskport_lease.task t JOIN taskport.run r USING (id)
        WHERE id = '00000000-0000-0000-0000-000000000001'),
       (SELECT input::text FROM taskport_lease.task WHERE id = '00000000-0000-0000-0000-000000000003')`).
		Scan(&claimed, &continued))
	require.Equal(t, "running/pending", claimed)
	require.Equal(t, `{"n": 30}`, continued)
}

// The row checks (00004, then 00012: constant lists from immutable
// functions; 00014: a lease run's max_attempts) refuse what the column
// CHECKs they replace refused.
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
	// A lease run's retry policy (00014).
	_, err = pool.Exec(ctx, `UPDATE taskport.run SET max_attempts = 0`)
	require.ErrorContains(t, err, "run_row_check")
}

// A database never migrated is behind at 0; a set one migration behind is
// refused, naming the set and both versions; the newest schema passes, and
// so does one with a migration this binary does not know (the next release
// migrated it during a rolling upgrade). The engine's own check reads only
// its set, in its schema.
func TestCheckSchemaNamesBothVersions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, m := emptyDatabase(t)
	engine, media := migrations.Latest("engine"), migrations.Latest("media")

	var behind *migrations.BehindError
	require.ErrorAs(t, migrations.CheckSchema(ctx, pool), &behind)
	require.Equal(t, migrations.BehindError{Set: "engine", Applied: 0, Need: engine}, *behind)
	require.ErrorAs(t, migrations.CheckEngineSchema(ctx, pool, ""), &behind)

	_, err := m.Up(ctx)
	require.NoError(t, err)
	require.NoError(t, migrations.CheckSchema(ctx, pool))
	require.NoError(t, migrations.CheckEngineSchema(ctx, pool, "taskport"))
	require.ErrorAs(t, migrations.CheckEngineSchema(ctx, pool, "elsewhere"), &behind, "another schema has no engine")

	_, err = m.DownTo(ctx, "media", media-1)
	require.NoError(t, err)
	err = migrations.CheckSchema(ctx, pool)
	require.ErrorAs(t, err, &behind)
	require.Equal(t, migrations.BehindError{Set: "media", Applied: media - 1, Need: media}, *behind)
	require.ErrorContains(t, err, fmt.Sprintf("the media migrations are at version %d, this binary needs version %d", media-1, media))
	require.NoError(t, migrations.CheckEngineSchema(ctx, pool, ""), "the engine does not need the media tables")

	_, err = m.Up(ctx)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO taskport.taskport_engine_migrations (version_id, is_applied) VALUES ($1, true)`, engine+1)
	require.NoError(t, err)
	require.NoError(t, migrations.CheckSchema(ctx, pool))

	require.ErrorContains(t, migrations.CheckEngineSchema(ctx, pool, "Bad-Name"), "a schema name is a lower-case identifier")
}

// 00006 numbers the runs there are in id order (UUIDv7: creation order)
// below every run created from then on, copies each number into its task
// row, and leaves seq an identity that no insert may set.
func TestFencingGenerationNumbersEarlierRunsFirst(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Connect(t, pgtest.NewEmptyDatabase(t))
	m := gooseProvider(t, pool)
	_, err := m.Up(ctx)
	require.NoError(t, err)
	_, err = m.DownTo(ctx, 5)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `
WITH r AS (
  INSERT INTO taskport.run (id, engine, kind, version, idempotency_key, input)
  VALUES ('00000000-0000-0000-0000-000000000003', 'lease', 'k', 1, 'c', '{}'),
         ('00000000-0000-0000-0000-000000000001', 'lease', 'k', 1, 'a', '{}'),
         ('00000000-0000-0000-0000-000000000002', 'temporal', 'k', 1, 'b', '{}')
  RETURNING id, engine
)
INSERT INTO taskport_lease.task (id, kind, handler_version, input, max_attempts, backoff_initial, backoff_max, backoff_coefficient)
SELECT id, 'k', 1, '{}', 1, '0', '0', 1 FROM r WHERE engine = 'lease'`)
	require.NoError(t, err)

	_, err = m.UpTo(ctx, 6)
	require.NoError(t, err)
	rows, err := pool.Query(ctx, `SELECT r.seq, coalesce(t.run_seq, -1) FROM taskport.run r
LEFT JOIN taskport_lease.task t USING (id) ORDER BY r.id`)
	require.NoError(t, err)
	var got [][2]int64
	for rows.Next() {
		var seq, runSeq int64
		require.NoError(t, rows.Scan(&seq, &runSeq))
		got = append(got, [2]int64{seq, runSeq})
	}
	require.NoError(t, rows.Err())
	require.Equal(t, [][2]int64{{1, 1}, {2, -1}, {3, 3}}, got)

	var next int64
	require.NoError(t, pool.QueryRow(ctx, `INSERT INTO taskport.run (id, engine, kind, version, idempotency_key, input)
VALUES ('00000000-0000-0000-0000-000000000000', 'lease', 'k', 1, 'd', '{}') RETURNING seq`).Scan(&next))
	require.Equal(t, int64(4), next, "a run created after the migration is a newer generation than every earlier one")
	_, err = pool.Exec(ctx, `INSERT INTO taskport.run (id, engine, kind, version, idempotency_key, input, seq)
VALUES ('00000000-0000-0000-0000-000000000009', 'lease', 'k', 1, 'e', '{}', 100)`)
	require.ErrorContains(t, err, "cannot insert a non-DEFAULT value into column")
	var reserved bool
	require.NoError(t, pool.QueryRow(ctx, `SELECT to_regclass('taskport.run_seq_reserved') IS NOT NULL`).Scan(&reserved))
	require.False(t, reserved)
}

// Engine migration 00006 marks the runs an interrupted evacuation of an
// earlier release left to move, which that release told apart by their
// cancel reason alone: they are still to be moved after the upgrade. A run
// whose reason names another engine's evacuation, or none, is not marked.
func TestEvacuationMarkKeepsWhatAnEarlierReleaseLeftToMove(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Connect(t, pgtest.NewEmptyDatabase(t))
	m, err := migrations.NewEngine(pool, migrations.DefaultSchema, nil)
	require.NoError(t, err)
	defer m.Close()
	_, err = m.Up(ctx)
	require.NoError(t, err)
	_, err = m.DownTo(ctx, migrations.SetEngine, 5)
	require.NoError(t, err)

	_, err = pool.Exec(ctx, `
INSERT INTO taskport.run (id, engine, kind, version, idempotency_key, input, status, finished_at, cancel_requested_at, cancel_reason)
VALUES ('00000000-0000-0000-0000-000000000001', 'temporal', 'k', 1, 'ended', '{}', 'canceled', now(), now(),
        'evacuated from the temporal engine to the lease engine by ops'),
       ('00000000-0000-0000-0000-000000000002', 'temporal', 'k', 1, 'open', '{}', 'running', NULL, now(),
        'evacuated from the temporal engine to the lease engine by ops'),
       ('00000000-0000-0000-0000-000000000003', 'temporal', 'k', 1, 'other', '{}', 'canceled', now(), now(),
        'evacuated from the lease engine to the temporal engine by ops'),
       ('00000000-0000-0000-0000-000000000004', 'temporal', 'k', 1, 'none', '{}', 'canceled', now(), now(), '')`)
	require.NoError(t, err)
	_, err = m.Up(ctx)
	require.NoError(t, err)
	rows, err := pool.Query(ctx, `SELECT idempotency_key FROM taskport.run WHERE evacuation_requested_at IS NOT NULL ORDER BY 1`)
	require.NoError(t, err)
	marked, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"ended", "open"}, marked)
}
