package outbox

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/internal/dbtx"
	"github.com/taskport/taskport/internal/testkit/pgtest"
)

// The dispatcher's claim, the failed-row listing and count (the metrics
// hook's, every PollInterval) and the retention statements read an index
// (and stop after their LIMIT) with n dispatched rows behind them (a
// million by default), 10,000 pending and 1,000 failed: no sequential
// scan, no sort of the table; before any ANALYZE and after one.
func TestPlansStayIndexedAtAMillionRows(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	n := pgtest.BacklogRows(t)
	pgtest.Seed(t, pool, n,
		`ALTER TABLE outbox_event SET (autovacuum_enabled = off)`,
		`INSERT INTO outbox_event (id, kind, idempotency_key, business_key, payload, status, attempts, next_attempt_at,
		   created_at, dispatched_at)
		 SELECT ('00000000-0000-7000-8000-' || lpad(to_hex(g), 12, '0'))::uuid, 'k', 'd' || g, 'p' || (g / 5), '{}',
		   'dispatched', 1, now() - interval '2 days' + g * (interval '2 days' / $1),
		   now() - interval '2 days' + g * (interval '2 days' / $1), now() - interval '2 days' + g * (interval '2 days' / $1)
		 FROM generate_series(1, $1::int) g`,
		`INSERT INTO outbox_event (id, kind, idempotency_key, payload, status, next_attempt_at)
		 SELECT ('00000000-0000-7000-8000-' || lpad(to_hex($1 + g), 12, '0'))::uuid, 'k', 'o' || g, '{}',
		   CASE WHEN g <= 10000 THEN 'pending' ELSE 'failed' END, now() - interval '1 minute' + g * interval '1 ms'
		 FROM generate_series(1, 11000) g`,
	)
	pgtest.RequireNeverAnalyzed(t, pool, "outbox_event")
	day := int64(24 * 3600 * 1000)
	ctx := context.Background()
	// Prepared and run often, so each statement is checked as a generic
	// plan too (pgtest.ExplainGeneric; Explain shows the custom plan); the
	// prune runs after the plan pin, as Pruner runs it.
	check := func(stats string) {
		for _, generic := range []bool{false, true} {
			err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				name := stats + " custom:"
				explain := func(sql string, args ...any) pgtest.Plan { return pgtest.Explain(t, tx, sql, args...) }
				if generic {
					name = stats + " generic:"
					explain = func(sql string, args ...any) pgtest.Plan { return pgtest.ExplainGeneric(t, tx, sql, args...) }
				}
				explain(claimSQL, 32, 30.0).RequireIndexed(t, name+" claim", "outbox_event_pending")
				explain(listFailedSQL, 100).RequireIndexed(t, name+" failed rows", "outbox_event_failed")
				explain(countFailedSQL).RequireIndexed(t, name+" failed count", "outbox_event_failed")
				explain(pruneLagSQL, day).RequireIndexed(t, name+" retention lag", "outbox_event_dispatched")
				if _, err := tx.Exec(ctx, dbtx.PinIndexScansSQL); err != nil {
					return err
				}
				explain(pruneSQL, day, 1000).RequireIndexed(t, name+" retention", "outbox_event_dispatched", "outbox_event_pkey")
				return nil
			})
			require.NoError(t, err)
		}
	}
	check("never analyzed:")
	pgtest.Seed(t, pool, n, `ANALYZE outbox_event`)
	check("analyzed:")
}
