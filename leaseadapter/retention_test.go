package leaseadapter_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/outbox"
	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/retention"
	"github.com/taskport/taskport/test/contract/kinds"
)

// recordedMetrics is the retention hook as a test reads it.
type recordedMetrics struct {
	mu      sync.Mutex
	deleted map[string]int64
	lag     map[string]time.Duration
}

func (m *recordedMetrics) Deleted(table string, n int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.deleted[table] += n
}

func (m *recordedMetrics) Lag(table string, d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.lag[table] = d
}

// count runs a count(*) query.
func count(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	require.NoError(t, pool.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}

// The cleaner deletes exactly what is older than its age and terminal:
// finished runs with their step results (failed runs kept
// longest), consumed and expired signals, dispatched outbox rows and
// waiters of ended runs; never an open run, whatever its timestamps, nor a
// business row, a pending or failed outbox row, or a signal to an open run.
// A pruned key is free again; a kept one still dedupes.
func TestRetentionPrunesOnlyWhatAged(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newDB(t)
	eng := newEngine(t, pool, fastConfig())
	startEngine(t, eng, port.StartOptions{Concurrency: 4})

	var old []port.RunID // terminal, older than their age: pruned
	for _, key := range []string{"a", "b", "c", "d", "e"} {
		old = append(old, enqueue(t, eng, kinds.Three, kinds.TagIn{}, key))
	}
	young := enqueue(t, eng, kinds.Three, kinds.TagIn{}, "young")
	failed := enqueue(t, eng, kinds.NonRetry, kinds.TagIn{}, "failed")
	canceled := enqueue(t, eng, kinds.Memo, kinds.WaitIn{Topic: "t:canceled", Timeout: kinds.Duration(time.Hour)}, "canceled")
	consumer := enqueue(t, eng, kinds.Memo, kinds.WaitIn{Topic: "t:consumed", Timeout: kinds.Duration(time.Hour)}, "consumer")
	open := enqueue(t, eng, kinds.Memo, kinds.WaitIn{Topic: "t:open", Timeout: kinds.Duration(time.Hour)}, "open")
	pending, err := eng.Enqueue(ctx, kinds.Three, kinds.TagIn{},
		port.EnqueueOptions{IdempotencyKey: "pending", AvailableAt: time.Now().Add(time.Hour)})
	require.NoError(t, err)

	for _, id := range append(old, young) {
		waitTaskStatus(t, pool, id, "succeeded")
	}
	waitTaskStatus(t, pool, failed, "failed")
	waitTaskStatus(t, pool, canceled, "waiting")
	require.NoError(t, eng.Cancel(ctx, canceled, "test"))
	waitTaskStatus(t, pool, consumer, "waiting")
	delivered, err := eng.Signal(ctx, "t:consumed", "go")
	require.NoError(t, err)
	require.Equal(t, 1, delivered)
	waitTaskStatus(t, pool, consumer, "succeeded")
	waitTaskStatus(t, pool, open, "waiting")
	old = append(old, canceled, consumer)

	// Signals: one nobody waits for, one sent to the open run and not yet
	// consumed (as if its wake were still queued).
	_, err = eng.Signal(ctx, "t:nobody", "early")
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO taskport_lease.task_signal (topic, payload, target) VALUES ('t:open', '"x"', $1)`, open)
	require.NoError(t, err)
	// An orphaned waiter (a run that ended while registered) and the open run's own.
	_, err = pool.Exec(ctx, `INSERT INTO taskport.waiter (topic, run_id, step) VALUES ('t:orphan', $1, 'wait')`, failed)
	require.NoError(t, err)
	// Outbox rows in each status, and a business row.
	_, err = pool.Exec(ctx, `
INSERT INTO outbox_event (id, kind, idempotency_key, payload, status, dispatched_at)
VALUES (gen_random_uuid(), 'k', 'dispatched', '{}', 'dispatched', now()),
       (gen_random_uuid(), 'k', 'pending', '{}', 'pending', NULL),
       (gen_random_uuid(), 'k', 'failed', '{}', 'failed', NULL)`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `
INSERT INTO plan (id, title, source_type, source, info_hash, target_path, expected_size, expected_sha256, status)
VALUES (gen_random_uuid(), 'p', 'magnet', 'magnet:?xt=urn:btih:x', repeat('a', 40), '/lib/p', 1, repeat('b', 64), 'completed')`)
	require.NoError(t, err)

	// Age everything by two hours, open runs included (a finished_at on an
	// open run must not make it prunable). The young run stays young.
	for _, sql := range []string{
		`UPDATE taskport.run SET finished_at = now() - interval '2 hours', created_at = now() - interval '2 hours' WHERE id <> $1`,
		`UPDATE taskport.waiter SET since = now() - interval '2 hours' WHERE run_id <> $1`,
		`UPDATE taskport_lease.task_signal SET created_at = now() - interval '2 hours',
		   consumed_at = CASE WHEN consumed_by IS NULL THEN NULL ELSE now() - interval '2 hours' END WHERE $1::uuid IS NOT NULL`,
		`UPDATE outbox_event SET created_at = now() - interval '2 hours',
		   dispatched_at = CASE WHEN status = 'dispatched' THEN now() - interval '2 hours' END WHERE $1::uuid IS NOT NULL`,
	} {
		_, err := pool.Exec(ctx, sql, young)
		require.NoError(t, err)
	}
	require.Equal(t, int64(2), count(t, pool, `SELECT count(*) FROM taskport.waiter`), "the orphan and the open run's waiter")

	stepsOfOld := count(t, pool, `SELECT count(*) FROM taskport_lease.step_result WHERE run_id = ANY($1)`, old)
	require.Positive(t, stepsOfOld)
	policy := retention.Policy{Completed: time.Hour, Canceled: time.Hour, Failed: 24 * time.Hour, BatchSize: 2}
	lag, err := eng.Pruner().Lag(ctx, policy.WithDefaults())
	require.NoError(t, err)
	require.InDelta(t, time.Hour.Seconds(), lag["taskport.run"].Seconds(), 60, "the oldest succeeded run became prunable an hour ago")

	m := &recordedMetrics{deleted: map[string]int64{}, lag: map[string]time.Duration{}}
	cleaner, err := retention.New(pool, []retention.Pruner{eng.Pruner(), outbox.Pruner(pool)},
		retention.Config{Policy: policy, Metrics: m})
	require.NoError(t, err)
	deleted, err := cleaner.RunOnce(ctx)
	require.NoError(t, err)
	want := retention.Deleted{
		"taskport.run": int64(len(old)), "taskport_lease.step_result": stepsOfOld,
		"taskport_lease.task_signal": 2, // the consumed one and the one nobody waited for
		"taskport.waiter":            1, // the orphan
		"outbox_event":               1, // the dispatched row
	}
	require.Equal(t, want, deleted, "batches of 2 drained everything prunable in one pass")
	require.Equal(t, map[string]int64(want), m.deleted)
	for table, d := range m.lag {
		require.Zero(t, d, "nothing prunable is left in %s", table)
	}

	// What is left, read from the tables.
	kept := []port.RunID{young, failed, open, pending}
	require.Equal(t, int64(len(kept)), count(t, pool, `SELECT count(*) FROM taskport.run`))
	require.Equal(t, int64(len(kept)), count(t, pool, `SELECT count(*) FROM taskport.run WHERE id = ANY($1)`, kept))
	require.Zero(t, count(t, pool, `SELECT count(*) FROM taskport_lease.step_result WHERE run_id = ANY($1)`, old))
	require.Positive(t, count(t, pool, `SELECT count(*) FROM taskport_lease.step_result WHERE run_id = $1`, young))
	require.Equal(t, int64(1), count(t, pool, `SELECT count(*) FROM taskport_lease.task_signal WHERE target = $1`, open))
	require.Equal(t, int64(1), count(t, pool, `SELECT count(*) FROM taskport_lease.task_signal`))
	require.Equal(t, int64(1), count(t, pool, `SELECT count(*) FROM taskport.waiter WHERE run_id = $1`, open))
	require.Equal(t, int64(1), count(t, pool, `SELECT count(*) FROM taskport.waiter`))
	require.Equal(t, int64(2), count(t, pool, `SELECT count(*) FROM outbox_event WHERE status IN ('pending', 'failed')`))
	require.Equal(t, int64(2), count(t, pool, `SELECT count(*) FROM outbox_event`))
	require.Equal(t, int64(1), count(t, pool, `SELECT count(*) FROM plan`))
	// The side effects of pruned runs are business truth, never touched.
	require.Equal(t, int64(3), count(t, pool, `SELECT count(*) FROM contract_effect WHERE run_id = $1`, old[0]))

	again, err := cleaner.RunOnce(ctx)
	require.NoError(t, err)
	for table, n := range again {
		require.Zero(t, n, "a second pass finds nothing in %s", table)
	}

	// The open runs still work: the waiting one takes its signal and ends.
	delivered, err = eng.Signal(ctx, "t:open", "done")
	require.NoError(t, err)
	require.Equal(t, 1, delivered)
	waitTaskStatus(t, pool, open, "succeeded")

	// A pruned key is free: Enqueue starts a new run. A kept one dedupes.
	reborn := enqueue(t, eng, kinds.Three, kinds.TagIn{}, "a")
	require.NotEqual(t, old[0], reborn)
	_, err = eng.Get(ctx, old[0])
	require.ErrorIs(t, err, port.ErrNotFound)
	waitTaskStatus(t, pool, reborn, "succeeded")
	require.Equal(t, young, enqueue(t, eng, kinds.Three, kinds.TagIn{}, "young"))
	require.Equal(t, failed, enqueue(t, eng, kinds.NonRetry, kinds.TagIn{}, "failed"), "a dead letter is kept longest")
}

// One pass at a time across processes: while another session holds the
// leader lock, RunOnce deletes nothing; once it is released, it prunes.
// Started, the cleaner prunes on its own until stopped.
func TestRetentionLeaderAndLoop(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newDB(t)
	eng := newEngine(t, pool, fastConfig())
	startEngine(t, eng, port.StartOptions{Concurrency: 2})
	id := enqueue(t, eng, kinds.Three, kinds.TagIn{}, "k")
	waitTaskStatus(t, pool, id, "succeeded")
	_, err := pool.Exec(ctx, `UPDATE taskport.run SET finished_at = now() - interval '2 hours' WHERE id = $1`, id)
	require.NoError(t, err)

	policy := retention.Policy{Completed: time.Hour, Interval: 20 * time.Millisecond}
	cleaner, err := retention.New(pool, []retention.Pruner{eng.Pruner()}, retention.Config{Policy: policy})
	require.NoError(t, err)

	holder, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer holder.Release()
	var got bool
	require.NoError(t, holder.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, retention.LeaderLock).Scan(&got))
	require.True(t, got)
	deleted, err := cleaner.RunOnce(ctx)
	require.NoError(t, err)
	require.Nil(t, deleted, "another process leads")
	require.Equal(t, int64(1), count(t, pool, `SELECT count(*) FROM taskport.run WHERE id = $1`, id))
	_, err = holder.Exec(ctx, `SELECT pg_advisory_unlock($1)`, retention.LeaderLock)
	require.NoError(t, err)

	require.NoError(t, cleaner.Start(ctx))
	require.Eventually(t, func() bool {
		return count(t, pool, `SELECT count(*) FROM taskport.run WHERE id = $1`, id) == 0
	}, 30*time.Second, 20*time.Millisecond)
	require.NoError(t, cleaner.Stop(ctx))
	require.NoError(t, cleaner.Stop(ctx), "a second Stop is a no-op")
	require.Zero(t, count(t, pool, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = $1
		  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`,
		uint32(retention.LeaderLock&0xffffffff)), "the leader lock is released with the pass")
}

// Bad policies are refused before anything runs.
func TestRetentionConfigValidation(t *testing.T) {
	t.Parallel()
	pool := newDB(t)
	eng := newEngine(t, pool, fastConfig())
	_, err := retention.New(pool, []retention.Pruner{eng.Pruner()}, retention.Config{Policy: retention.Policy{Interval: -time.Second}})
	require.ErrorContains(t, err, "interval must be positive")
	_, err = retention.New(pool, []retention.Pruner{eng.Pruner()}, retention.Config{Policy: retention.Policy{BatchSize: -1}})
	require.ErrorContains(t, err, "batch size")
	_, err = retention.New(pool, nil, retention.Config{})
	require.Error(t, err)
}

// A negative age keeps those rows forever: nothing is deleted and nothing
// is reported as overdue, while the other ages still apply.
func TestRetentionNegativeAgeKeepsForever(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newDB(t)
	eng := newEngine(t, pool, fastConfig())
	startEngine(t, eng, port.StartOptions{Concurrency: 2})
	done := enqueue(t, eng, kinds.Three, kinds.TagIn{}, "done")
	failed := enqueue(t, eng, kinds.NonRetry, kinds.TagIn{}, "failed")
	waitTaskStatus(t, pool, done, "succeeded")
	waitTaskStatus(t, pool, failed, "failed")
	_, err := pool.Exec(ctx, `UPDATE taskport.run SET finished_at = now() - interval '2 hours'`)
	require.NoError(t, err)

	policy := retention.Policy{Completed: -1, Canceled: -1, Failed: time.Hour}
	lag, err := eng.Pruner().Lag(ctx, policy.WithDefaults())
	require.NoError(t, err)
	require.InDelta(t, time.Hour.Seconds(), lag["taskport.run"].Seconds(), 60, "only the failed run is overdue")
	cleaner, err := retention.New(pool, []retention.Pruner{eng.Pruner(), outbox.Pruner(pool)}, retention.Config{Policy: policy})
	require.NoError(t, err)
	deleted, err := cleaner.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(1), deleted["taskport.run"])
	require.Equal(t, int64(1), count(t, pool, `SELECT count(*) FROM taskport.run WHERE id = $1`, done))
	require.Zero(t, count(t, pool, `SELECT count(*) FROM taskport.run WHERE id = $1`, failed))
	lag, err = eng.Pruner().Lag(ctx, policy.WithDefaults())
	require.NoError(t, err)
	for table, d := range lag {
		require.Zero(t, d, table)
	}
}
