package leaseadapter

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/internal/testkit/pgtest"
)

// insertRuns adds n lease runs of kind "k" version 1 with the given status.
func insertRuns(t *testing.T, pool *pgxpool.Pool, n int, status string) {
	t.Helper()
	_, err := pool.Exec(context.Background(), `
INSERT INTO taskport.run (id, engine, kind, version, idempotency_key, input, status, max_attempts,
  backoff_initial, backoff_max, backoff_coefficient)
SELECT gen_random_uuid(), 'lease', 'k', 1, $2 || g, '{}', $2, 3, '1s', '1m', 2 FROM generate_series(1, $1) g`, n, status)
	require.NoError(t, err)
}

// The claim must walk run_ready_kind in order and stop after LIMIT rows,
// even when the table has no statistics yet (never analyzed: its first
// minute, or autovacuum behind a burst). The planner then guesses a handful
// of ready runs and, unpinned, picks a bitmap scan of every ready run plus
// a sort, so that each claim costs O(backlog). Pinned, the only sort is the
// merge of the per-pair scans' limited rows (pgtest.RequireIndexed allows
// a sort that reads a table only through a Limit).
func TestClaimPlanWalksTheIndexWhateverTheStatistics(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	insertRuns(t, pool, 200, "succeeded")
	insertRuns(t, pool, 5000, "pending")

	args := []any{[]string{"k"}, 8, "w", int64(10000), []int32{1}}
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var plan []byte
		if err := tx.QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+claimSQL, args...).Scan(&plan); err != nil {
			return err
		}
		t.Logf("plan without the pin (depends on the planner): %s", compactPlan(string(plan)))
		return nil
	})
	require.NoError(t, err)
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, claimPlanSQL); err != nil {
			return err
		}
		p := pgtest.Explain(t, tx, claimSQL, args...)
		p.RequireIndexed(t, "pinned claim", "run_ready", "run_ready_kind")
		require.NotContains(t, p.String(), "Bitmap", p.String())
		return nil
	})
	require.NoError(t, err)
}

// compactPlan keeps the node types of an EXPLAIN (FORMAT JSON) for a log line.
func compactPlan(plan string) string {
	var types []string
	for _, line := range strings.Split(plan, "\n") {
		if i := strings.Index(line, `"Node Type": `); i >= 0 {
			types = append(types, strings.Trim(line[i+len(`"Node Type": `):], `",`))
		}
	}
	return strings.Join(types, " > ")
}

// A heartbeat must not wait for a row lock held by a commit in progress (it
// would deadlock with group commits): it skips that renewal and still
// reports the run as held, not as lost. Once the lock is gone it renews.
func TestHeartbeatSkipsLockedRowsAndKeepsThemLive(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	id, token := uuid.New(), uuid.New()
	_, err := pool.Exec(ctx, `
INSERT INTO taskport.run (id, engine, kind, version, idempotency_key, input, status, lease_owner, lease_token,
  lease_until, max_attempts, backoff_initial, backoff_max, backoff_coefficient)
VALUES ($1, 'lease', 'k', 1, 'beat', '{}', 'running', 'w', $2, now() + interval '1 minute', 3, '1s', '1m', 2)`, id, token)
	require.NoError(t, err)
	leaseUntil := func() time.Time {
		var at time.Time
		require.NoError(t, pool.QueryRow(ctx, `SELECT lease_until FROM taskport.run WHERE id = $1`, id).Scan(&at))
		return at
	}
	before := leaseUntil()

	// beat returns the live runs, each with whether its lease was renewed.
	beat := func() (map[uuid.UUID]bool, error) {
		rows, err := pool.Query(ctx, heartbeatSQL, []uuid.UUID{id}, []uuid.UUID{token}, []string{"s1"}, []*string{nil},
			int64(time.Hour/time.Millisecond), []int32{0})
		if err != nil {
			return nil, err
		}
		live := map[uuid.UUID]bool{}
		var rid uuid.UUID
		var canceled, renewed bool
		_, err = pgx.ForEachRow(rows, []any{&rid, &canceled, &renewed}, func() error { live[rid] = renewed; return nil })
		return live, err
	}

	// A step commit in progress: FOR SHARE on the run row, held.
	lock, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer lock.Rollback(ctx) //nolint:errcheck // released below; this unblocks a stuck heartbeat on failure
	_, err = lock.Exec(ctx, `SELECT 1 FROM taskport.run WHERE id = $1 FOR SHARE`, id)
	require.NoError(t, err)
	type result struct {
		live map[uuid.UUID]bool
		err  error
	}
	done := make(chan result, 1)
	go func() {
		live, err := beat()
		done <- result{live, err}
	}()
	select {
	case r := <-done:
		require.NoError(t, r.err)
		require.Contains(t, r.live, id, "a locked run is still held, not lost")
		require.False(t, r.live[id], "and reported not renewed, so that its worker keeps the older deadline")
	case <-time.After(time.Minute):
		t.Fatal("the heartbeat waited for the row lock")
	}
	require.Equal(t, before, leaseUntil(), "the locked row was skipped")
	require.NoError(t, lock.Rollback(ctx))

	live, err := beat()
	require.NoError(t, err)
	require.Contains(t, live, id)
	require.True(t, live[id], "reported renewed")
	require.True(t, leaseUntil().After(before), "renewed once the lock is gone")
}

// The claim bounds its scan per served pair and priority (readyOfPair): it
// must still take the ready runs of the served versions in (priority,
// next_run_at) order across priorities, skip the rows another transaction
// holds, and leave scheduled runs, unserved versions, runs that are not
// open and the Temporal engine's runs alone, whichever priority they have.
// The queue depth, bounded alike, counts the ready runs of the served
// pairs, of every priority.
func TestClaimTakesReadyRunsInPriorityOrderAcrossPriorities(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	type run struct {
		name, status string
		version      int
		priority     int
		due          string // next_run_at, relative to now
		engine       string
	}
	runs := []run{
		{"succeeded", "succeeded", 1, -9, "-1 hour", "lease"},
		{"running", "running", 1, -9, "-1 hour", "lease"},
		{"temporal", "pending", 1, -9, "-1 hour", "temporal"},
		{"scheduled", "pending", 1, -7, "1 hour", "lease"},
		{"unserved version", "pending", 2, -7, "-1 hour", "lease"},
		{"locked", "pending", 1, -3, "-2 minutes", "lease"},
		{"woken waiter", "waiting", 1, -3, "-1 minute", "lease"},
		{"parked waiter", "waiting", 1, -3, "1 day", "lease"},
		{"0 later", "pending", 1, 0, "-1 minute", "lease"},
		{"0 earlier", "pending", 1, 0, "-2 minutes", "lease"},
		{"0 scheduled", "pending", 1, 0, "1 minute", "lease"},
		{"4", "pending", 1, 4, "-1 second", "lease"},
		{"9", "pending", 1, 9, "-1 hour", "lease"},
		{"9 scheduled", "pending", 1, 9, "1 hour", "lease"},
	}
	names := map[uuid.UUID]string{}
	ids := map[string]uuid.UUID{}
	for _, k := range runs {
		id := uuid.New()
		names[id], ids[k.name] = k.name, id
		_, err := pool.Exec(ctx, `
INSERT INTO taskport.run (id, engine, kind, version, idempotency_key, input, status, priority, next_run_at,
  max_attempts, backoff_initial, backoff_max, backoff_coefficient)
VALUES ($1, $6, 'k', $2, $7, '{}', $3, $4, now() + $5::interval, 3, '1s', '1m', 2)`,
			id, k.version, k.status, k.priority, k.due, k.engine, k.name)
		require.NoError(t, err)
	}

	var depth int
	require.NoError(t, pool.QueryRow(ctx, queueDepthSQL, []string{"k"}, []int32{1}).Scan(&depth))
	require.Equal(t, 6, depth, "the queue depth counts the ready lease runs of the served pairs")
	require.NoError(t, pool.QueryRow(ctx, queueDepthSQL, []string{"k", "k"}, []int32{1, 2}).Scan(&depth))
	require.Equal(t, 7, depth, "with version 2 served too")

	lock, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer lock.Rollback(ctx) //nolint:errcheck // released below; this releases the row on failure
	_, err = lock.Exec(ctx, `SELECT 1 FROM taskport.run WHERE id = $1 FOR UPDATE`, ids["locked"])
	require.NoError(t, err)

	claim := func(n int) []string {
		t.Helper()
		var got []string
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, claimPlanSQL); err != nil {
				return err
			}
			rows, err := tx.Query(ctx, claimSQL, []string{"k"}, n, "w", int64(time.Minute/time.Millisecond), []int32{1})
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				v, err := rows.Values()
				if err != nil {
					return err
				}
				got = append(got, names[uuid.UUID(v[0].([16]byte))])
			}
			return rows.Err()
		})
		require.NoError(t, err)
		return got
	}
	// One slot at a time shows the order; the rows a claim returns come
	// back in no particular order.
	require.Equal(t, []string{"woken waiter"}, claim(1), "the lowest priority with a ready, unlocked run first")
	require.Equal(t, []string{"0 earlier"}, claim(1), "then the next priority, earliest due first")
	require.ElementsMatch(t, []string{"0 later", "4"}, claim(2), "a claim spans priorities")
	require.Equal(t, []string{"9"}, claim(8), "fewer ready runs than asked: the rest stay")
	require.Empty(t, claim(8), "the locked run is skipped, nothing else is ready")
	require.NoError(t, lock.Rollback(ctx))
	require.Equal(t, []string{"locked"}, claim(8), "once released it is claimed")
	require.Empty(t, claim(8))

	var running []string
	rows, err := pool.Query(ctx, `SELECT id FROM taskport.run WHERE status = 'running' AND lease_owner = 'w'`)
	require.NoError(t, err)
	var id uuid.UUID
	_, err = pgx.ForEachRow(rows, []any{&id}, func() error { running = append(running, names[id]); return nil })
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"woken waiter", "0 earlier", "0 later", "4", "9", "locked"}, running,
		"scheduled runs, parked waiters, unserved versions, closed runs and Temporal runs are never claimed")
}
