package acquisition

import (
	"context"
	"testing"

	"github.com/stephenafamo/bob"
	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/internal/testkit/pgtest"
)

// The plan listing (the admin overview, `taskport plan list`) reads
// plan_newest and stops after its LIMIT with n plans in the
// table (a million by default): no sequential scan, no sort of the table;
// before any ANALYZE and after one.
func TestPlanListStaysIndexedAtAMillionPlans(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	n := pgtest.BacklogRows(t)
	pgtest.Seed(t, pool, n,
		`ALTER TABLE plan SET (autovacuum_enabled = off)`,
		`INSERT INTO plan (id, title, source_type, source, info_hash, target_path, expected_size, expected_sha256, status,
		   created_at)
		 SELECT ('00000000-0000-7000-8000-' || lpad(to_hex(g), 12, '0'))::uuid, 'p' || g, 'magnet', 'magnet:?xt=urn:btih:x',
		   lpad(to_hex(g), 40, '0'), '/library/p' || g, 1, repeat('b', 64), 'completed',
		   now() - interval '2 days' + g * (interval '2 days' / $1)
		 FROM generate_series(1, $1::int) g`,
	)
	pgtest.RequireNeverAnalyzed(t, pool, "plan")
	sql, args, err := bob.Build(context.Background(), listPlansStmt(PlanFilter{Limit: 100}))
	require.NoError(t, err)
	pgtest.Explain(t, pool, sql, args...).RequireIndexed(t, "never analyzed: plan list", "plan_newest")
	pgtest.Seed(t, pool, n, `ANALYZE plan`)
	pgtest.Explain(t, pool, sql, args...).RequireIndexed(t, "analyzed: plan list", "plan_newest")
}

// The decision centre's list (open decisions, oldest first: /admin and
// `taskport decision list`) reads decision_open in its order and stops after
// its LIMIT, with a backlog of resolved decisions and a thousand open ones:
// no sequential scan, no sort of the table; before any ANALYZE and after one.
func TestDecisionListStaysIndexed(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	n := pgtest.BacklogRows(t)
	pgtest.Seed(t, pool, n,
		`ALTER TABLE decision SET (autovacuum_enabled = off)`,
		`INSERT INTO plan (id, title, source_type, source, info_hash, target_path, expected_size, expected_sha256, status)
		 VALUES ('00000000-0000-7000-8000-000000000001', 'p', 'magnet', 'magnet:?xt=urn:btih:x', repeat('a', 40),
		   '/library/p', 1, repeat('b', 64), 'failed')`,
		`INSERT INTO decision (id, plan_id, kind, run_id, input, reason, status, created_at)
		 SELECT ('00000000-0000-7000-8000-' || lpad(to_hex(g), 12, '0'))::uuid, '00000000-0000-7000-8000-000000000001',
		   'asset.import', 'run-' || g, '{}', 'failed',
		   CASE WHEN g % ($1 / 1000) = 0 THEN 'open' ELSE 'abandon' END,
		   now() - interval '2 days' + g * (interval '2 days' / $1)
		 FROM generate_series(1, $1::int) g`,
	)
	pgtest.RequireNeverAnalyzed(t, pool, "decision")
	sql, args, err := bob.Build(context.Background(), listDecisionsStmt(DecisionOpen, 100))
	require.NoError(t, err)
	pgtest.Explain(t, pool, sql, args...).RequireIndexed(t, "never analyzed: open decisions", "decision_open")
	pgtest.Seed(t, pool, n, `ANALYZE decision`)
	pgtest.Explain(t, pool, sql, args...).RequireIndexed(t, "analyzed: open decisions", "decision_open")
}
