package migrations_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/internal/testkit/pgtest"
	"github.com/taskport/taskport/migrations"
)

// The engine and media sets' baselines create, on a new database, exactly
// the catalog the legacy set leaves after its last migration (the golden
// file's last section): a database migrated by an earlier release and a
// new one are the same from here on.
func TestBaselinesEqualTheLegacyMigrations(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, m := emptyDatabase(t)
	_, err := m.Up(ctx)
	require.NoError(t, err)
	// The baselines alone: the engine set's later migrations rolled back.
	_, err = m.DownTo(ctx, "engine", 1)
	require.NoError(t, err)

	golden, err := os.ReadFile(schemaGolden)
	require.NoError(t, err)
	sections := strings.Split(string(golden), "== after ")
	last := sections[len(sections)-1]
	require.True(t, strings.HasPrefix(last, "00021\n"), "the golden file ends at the legacy set's last migration")
	require.Equal(t, strings.TrimPrefix(last, "00021\n"), dumpSchema(t, ctx, pool))
}

// A database an earlier release migrated to the legacy set's end: the
// application's flow adopts its tables (nothing is created or dropped, the
// rows stay), and records the engine and media sets as applied.
func TestApplicationFlowAdoptsALegacyDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Connect(t, pgtest.NewEmptyDatabase(t))
	_, err := gooseProvider(t, pool).Up(ctx)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO taskport.run (id, engine, kind, version, idempotency_key, input)
VALUES ('00000000-0000-0000-0000-000000000001', 'lease', 'k', 1, 'kept', '{}')`)
	require.NoError(t, err)
	var before string
	require.NoError(t, pool.QueryRow(ctx, `SELECT oid::text FROM pg_class WHERE oid = 'taskport.run'::regclass`).Scan(&before))

	m, err := migrations.New(pool, nil)
	require.NoError(t, err)
	defer m.Close()
	applied, err := m.Up(ctx)
	require.NoError(t, err)
	require.Equal(t, allOf("engine", "media"), applied)
	require.NoError(t, migrations.CheckSchema(ctx, pool))

	var after string
	var runs int
	require.NoError(t, pool.QueryRow(ctx, `SELECT oid::text, (SELECT count(*) FROM taskport.run) FROM pg_class WHERE oid = 'taskport.run'::regclass`).Scan(&after, &runs))
	require.Equal(t, before, after, "the run table was adopted, not made again")
	require.Equal(t, 1, runs)

	status, err := m.Status(ctx)
	require.NoError(t, err)
	sets := map[string]int{}
	for _, s := range status {
		require.True(t, s.Applied, "%+v", s)
		sets[s.Set]++
	}
	require.Equal(t, map[string]int{"legacy": 21, "engine": int(migrations.Latest("engine")), "media": int(migrations.Latest("media"))}, sets)
}

// A database an earlier release migrated part of the way: the application's
// flow finishes the legacy set first, then adopts. The engine set alone
// refuses it (it cannot finish the legacy set, which makes media tables
// too), saying what to run.
func TestApplicationFlowFinishesAnEarlierRelease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Connect(t, pgtest.NewEmptyDatabase(t))
	_, err := gooseProvider(t, pool).UpTo(ctx, 15)
	require.NoError(t, err)

	require.ErrorContains(t, migrations.UpEngine(ctx, pool, ""),
		"this database was migrated by an earlier taskport release to version 15")
	var behind *migrations.BehindError
	require.ErrorAs(t, migrations.CheckSchema(ctx, pool), &behind)
	require.Equal(t, migrations.BehindError{Set: "legacy", Applied: 15, Need: 21}, *behind)

	m, err := migrations.New(pool, nil)
	require.NoError(t, err)
	defer m.Close()
	applied, err := m.Up(ctx)
	require.NoError(t, err)
	want := []migrations.Applied{}
	for v := int64(16); v <= 21; v++ {
		want = append(want, migrations.Applied{Set: "legacy", Version: v})
	}
	want = append(want, allOf("engine", "media")...)
	require.Equal(t, want, applied)
	require.NoError(t, migrations.CheckSchema(ctx, pool))
}

// A library user's database has its own plan table. The engine set, alone
// and into a schema the user names, creates only the engine's tables
// there: nothing in public, no extension, the user's plan untouched; the
// application's flow would refuse that database instead of building on
// the user's plan.
func TestEngineSetBesideTheUsersOwnPlan(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, schema := range []string{"jobs", ""} {
		t.Run("schema="+schema, func(t *testing.T) {
			t.Parallel()
			pool := pgtest.Connect(t, pgtest.NewEmptyDatabase(t))
			_, err := pool.Exec(ctx, `CREATE TABLE public.plan (id int PRIMARY KEY, what text NOT NULL);
INSERT INTO public.plan VALUES (1, 'mine')`)
			require.NoError(t, err)
			publicBefore := objectsIn(t, pool, "public")

			require.NoError(t, migrations.UpEngine(ctx, pool, schema))
			require.NoError(t, migrations.UpEngine(ctx, pool, schema), "a second run is a no-op")
			require.NoError(t, migrations.CheckEngineSchema(ctx, pool, schema))

			require.Equal(t, publicBefore, objectsIn(t, pool, "public"), "the engine set wrote nothing in public")
			var what string
			require.NoError(t, pool.QueryRow(ctx, `SELECT what FROM public.plan WHERE id = 1`).Scan(&what))
			require.Equal(t, "mine", what)
			var extensions int
			require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_extension WHERE extname <> 'plpgsql'`).Scan(&extensions))
			require.Zero(t, extensions)

			name, lease := schema, schema
			if schema == "" {
				name, lease = "taskport", "taskport_lease"
			}
			for _, table := range []string{name + ".run", name + ".waiter", name + ".early_signal", name + ".engine_switch",
				lease + ".step_result", lease + ".task_signal"} {
				var exists bool
				require.NoError(t, pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, table).Scan(&exists))
				require.True(t, exists, table)
			}
			if schema != "" {
				var others int
				require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'taskport%'`).Scan(&others))
				require.Zero(t, others, "a named schema is the only one the engine set makes")
			}

			// The row check and the lease trigger name the schema they are in.
			_, err = pool.Exec(ctx, `INSERT INTO `+name+`.run (id, engine, kind, version, idempotency_key, input, status)
VALUES (gen_random_uuid(), 'lease', 'k', 1, 'a', '{}', 'sleeping')`)
			require.ErrorContains(t, err, "run_row_check")

			m, err := migrations.New(pool, nil)
			require.NoError(t, err)
			defer m.Close()
			_, err = m.Up(ctx)
			require.ErrorContains(t, err, "table plan exists, and taskport's migrations did not create it")
		})
	}
}

// A later engine migration, written against the default layout, lands in
// the schema the user named.
func TestLaterEngineMigrationsNameTheSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Connect(t, pgtest.NewEmptyDatabase(t))
	later := fstest.MapFS{"00002_note.sql": {Data: []byte(`-- +goose Up
ALTER TABLE taskport.run ADD COLUMN note text;
CREATE INDEX step_result_name ON taskport_lease.step_result (name);
-- +goose Down
DROP INDEX taskport_lease.step_result_name;
ALTER TABLE taskport.run DROP COLUMN note;
`)}}
	m, err := migrations.NewEngineWith(pool, "jobs", later)
	require.NoError(t, err)
	defer m.Close()
	applied, err := m.Up(ctx)
	require.NoError(t, err)
	require.Equal(t, []migrations.Applied{{Set: "engine", Version: 1}, {Set: "engine", Version: 2}}, applied)
	var note, index bool
	require.NoError(t, pool.QueryRow(ctx, `SELECT
  EXISTS (SELECT 1 FROM information_schema.columns WHERE table_schema = 'jobs' AND table_name = 'run' AND column_name = 'note'),
  to_regclass('jobs.step_result_name') IS NOT NULL`).Scan(&note, &index))
	require.True(t, note)
	require.True(t, index)
	_, err = m.DownTo(ctx, "engine", 0)
	require.NoError(t, err)
	var left int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'jobs' AND c.relname !~ '^taskport_engine_migrations'`).Scan(&left))
	require.Zero(t, left, "down to 0 leaves only the set's version table")
}

// objectsIn lists the relations, functions and types in schema.
func objectsIn(t *testing.T, pool *pgxpool.Pool, schema string) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `
SELECT 'rel ' || c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1
UNION ALL
SELECT 'fn ' || p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = $1
ORDER BY 1`, schema)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return out
}
