package leaseadapter_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/internal/testkit/pgtest"
	"github.com/taskport/taskport/leaseadapter"
	"github.com/taskport/taskport/leaseadapter/internal/testkinds"
	"github.com/taskport/taskport/port"
)

// fastConfig keeps the tests quick: a short lease and poll.
func fastConfig() leaseadapter.Config {
	return leaseadapter.Config{
		LeaseDuration: time.Second, PollInterval: 100 * time.Millisecond, StopTimeout: 2 * time.Second,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
}

// newDB returns a pool on a fresh migrated database with the side table.
func newDB(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool := pgtest.NewPool(t)
	_, err := pool.Exec(context.Background(), testkinds.EffectTableSQL)
	require.NoError(t, err)
	return pool
}

func newEngine(t *testing.T, pool *pgxpool.Pool, cfg leaseadapter.Config, versions ...int) *leaseadapter.Engine {
	t.Helper()
	reg := port.NewRegistry()
	require.NoError(t, testkinds.Register(reg, pool, versions...))
	eng, err := leaseadapter.New(pool, reg, cfg)
	require.NoError(t, err)
	return eng
}

// startEngine starts eng as a worker and stops it when the test ends.
func startEngine(t *testing.T, eng *leaseadapter.Engine, opts port.StartOptions) {
	t.Helper()
	require.NoError(t, eng.Start(context.Background(), opts))
	t.Cleanup(func() { require.NoError(t, eng.Stop(context.Background())) })
}

func enqueue(t *testing.T, eng *leaseadapter.Engine, kind port.Kind, input any, key string) port.RunID {
	t.Helper()
	id, err := eng.Enqueue(context.Background(), kind, input, port.EnqueueOptions{IdempotencyKey: key})
	require.NoError(t, err)
	return id
}

// taskStatus reads the lease table itself (the engine's truth).
func taskStatus(t *testing.T, pool *pgxpool.Pool, id port.RunID) string {
	t.Helper()
	var s string
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT status FROM taskport_lease.task WHERE id = $1`, id).Scan(&s))
	return s
}

func waitTaskStatus(t *testing.T, pool *pgxpool.Pool, id port.RunID, want string) {
	t.Helper()
	require.Eventually(t, func() bool { return taskStatus(t, pool, id) == want },
		30*time.Second, 20*time.Millisecond, "run %s never reached %s", id, want)
}

// effects returns executions and notes per step of a run, from the side table.
func effects(t *testing.T, pool *pgxpool.Pool, id port.RunID) map[string]effect {
	t.Helper()
	rows, err := pool.Query(context.Background(),
		`SELECT step, executions, note, epoch, token, done_by FROM lease_test_effect WHERE run_id = $1`, id)
	require.NoError(t, err)
	out := map[string]effect{}
	var step string
	var e effect
	_, err = pgx.ForEachRow(rows, []any{&step, &e.executions, &e.note, &e.epoch, &e.token, &e.doneBy}, func() error {
		out[step] = e
		return nil
	})
	require.NoError(t, err)
	return out
}

type effect struct {
	executions int
	note       string
	epoch      int64
	token      string
	doneBy     string
}

func TestThreeStepsRunOnceEach(t *testing.T) {
	t.Parallel()
	pool := newDB(t)
	eng := newEngine(t, pool, fastConfig())
	startEngine(t, eng, port.StartOptions{Concurrency: 4})
	id := enqueue(t, eng, testkinds.Three, testkinds.Empty{}, "one")
	waitTaskStatus(t, pool, id, "succeeded")

	eff := effects(t, pool, id)
	require.Len(t, eff, 3)
	for _, s := range []string{"s1", "s2", "s3"} {
		require.Equal(t, 1, eff[s].executions, "step %s", s)
	}
	view, err := eng.Get(context.Background(), id)
	require.NoError(t, err)
	require.Equal(t, port.StatusSucceeded, view.Status)
	require.Equal(t, "s3", view.CurrentStep)
	require.Equal(t, 1, view.Attempts)
	require.False(t, view.FinishedAt.IsZero())
	var results int
	require.NoError(t, pool.QueryRow(context.Background(),
		`SELECT count(*) FROM taskport_lease.step_result WHERE task_id = $1`, id).Scan(&results))
	require.Equal(t, 3, results)
}

func TestEnqueueIsIdempotentWithoutWindow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newDB(t)
	eng := newEngine(t, pool, fastConfig())
	a := enqueue(t, eng, testkinds.Three, testkinds.Empty{}, "same")
	// A run enqueued long ago still dedupes: age the row by a year.
	_, err := pool.Exec(ctx, `UPDATE taskport.run SET created_at = now() - interval '1 year' WHERE id = $1`, a)
	require.NoError(t, err)
	b := enqueue(t, eng, testkinds.Three, testkinds.Empty{}, "same")
	require.Equal(t, a, b)
	var tasks int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM taskport_lease.task`).Scan(&tasks))
	require.Equal(t, 1, tasks)

	// EnqueueTx: nothing exists unless the caller's transaction commits.
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	rolled, err := eng.EnqueueTx(ctx, tx, testkinds.Three, testkinds.Empty{}, port.EnqueueOptions{IdempotencyKey: "tx"})
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(ctx))
	_, err = eng.Get(ctx, rolled)
	require.ErrorIs(t, err, port.ErrNotFound)

	tx, err = pool.Begin(ctx)
	require.NoError(t, err)
	committed, err := eng.EnqueueTx(ctx, tx, testkinds.Three, testkinds.Empty{}, port.EnqueueOptions{IdempotencyKey: "tx"})
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	require.Equal(t, "pending", taskStatus(t, pool, committed))

	_, err = eng.Enqueue(ctx, "no.such.kind", testkinds.Empty{}, port.EnqueueOptions{IdempotencyKey: "x"})
	require.ErrorIs(t, err, port.ErrUnknownKind)
}

func TestAvailableAtAndPriority(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newDB(t)
	eng := newEngine(t, pool, fastConfig())
	later, err := eng.Enqueue(ctx, testkinds.Three, testkinds.Empty{}, port.EnqueueOptions{
		IdempotencyKey: "later", AvailableAt: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	low, err := eng.Enqueue(ctx, testkinds.Three, testkinds.Empty{}, port.EnqueueOptions{IdempotencyKey: "low", Priority: 5})
	require.NoError(t, err)
	high, err := eng.Enqueue(ctx, testkinds.Three, testkinds.Empty{}, port.EnqueueOptions{IdempotencyKey: "high", Priority: -5})
	require.NoError(t, err)
	// One slot: the order of first steps follows priority.
	startEngine(t, eng, port.StartOptions{Concurrency: 1})
	waitTaskStatus(t, pool, low, "succeeded")
	waitTaskStatus(t, pool, high, "succeeded")
	var highFirst bool
	require.NoError(t, pool.QueryRow(ctx, `
SELECT (SELECT completed_at FROM taskport_lease.step_result WHERE task_id = $1 AND seq = 0)
     < (SELECT completed_at FROM taskport_lease.step_result WHERE task_id = $2 AND seq = 0)`, high, low).Scan(&highFirst))
	require.True(t, highFirst, "the priority -5 run must start before the priority 5 run")
	require.Equal(t, "pending", taskStatus(t, pool, later))
	require.Empty(t, effects(t, pool, later))
}

// Two workers on 200 runs: each step executes exactly once.
func TestTwoWorkersExactlyOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newDB(t)
	const runs = 200
	// A lease long enough that no claim expires on a loaded machine: any
	// second execution here would be a bug, not a recovery.
	cfg := fastConfig()
	cfg.LeaseDuration = 10 * time.Second
	a := newEngine(t, pool, cfg)
	b := newEngine(t, pool, cfg)
	for i := range runs {
		enqueue(t, a, testkinds.Three, testkinds.Empty{}, fmt.Sprintf("run-%d", i))
	}
	startEngine(t, a, port.StartOptions{Concurrency: 8})
	startEngine(t, b, port.StartOptions{Concurrency: 8})
	require.Eventually(t, func() bool {
		var done int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM taskport_lease.task WHERE status = 'succeeded'`).Scan(&done))
		return done == runs
	}, time.Minute, 50*time.Millisecond)

	var rows, total, maxExec, owners int
	require.NoError(t, pool.QueryRow(ctx,
		`SELECT count(*), sum(executions), max(executions) FROM lease_test_effect`).Scan(&rows, &total, &maxExec))
	require.Equal(t, 3*runs, rows)
	if total != 3*runs {
		var dup string
		require.NoError(t, pool.QueryRow(ctx, `
SELECT e.run_id || '/' || e.step || ' x' || e.executions || ' claims ' || t.claims || ' last_error ' || t.last_error
FROM lease_test_effect e JOIN taskport_lease.task t ON t.id = e.run_id WHERE e.executions > 1 LIMIT 1`).Scan(&dup))
		t.Fatalf("a step ran more than once: %s", dup)
	}
	require.Equal(t, 1, maxExec)
	var claims int
	require.NoError(t, pool.QueryRow(ctx, `SELECT sum(claims) FROM taskport_lease.task`).Scan(&claims))
	require.Equal(t, runs, claims, "no run was claimed twice")
	require.NoError(t, pool.QueryRow(ctx,
		`SELECT count(*) FROM taskport.run WHERE status <> 'succeeded'`).Scan(&owners))
	require.Zero(t, owners, "every projection row says succeeded")
}

func TestEarlySignalIsNotLost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newDB(t)
	eng := newEngine(t, pool, fastConfig())
	delivered, err := eng.Signal(ctx, "approval:early", "yes")
	require.NoError(t, err)
	require.Equal(t, 0, delivered, "nobody waits yet")

	startEngine(t, eng, port.StartOptions{Concurrency: 2})
	id := enqueue(t, eng, testkinds.Wait, testkinds.WaitInput{Topic: "approval:early", TimeoutMillis: int(time.Hour / time.Millisecond)}, "early")
	waitTaskStatus(t, pool, id, "succeeded")
	require.Equal(t, "signal:yes", effects(t, pool, id)["after"].note)
	var consumedBy string
	require.NoError(t, pool.QueryRow(ctx, `SELECT consumed_by::text FROM taskport_lease.task_signal WHERE topic = 'approval:early'`).Scan(&consumedBy))
	require.Equal(t, string(id), consumedBy)
}

func TestSignalWakesEveryWaiter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newDB(t)
	eng := newEngine(t, pool, fastConfig())
	// One slot and two waiters: a waiting run holds no slot.
	startEngine(t, eng, port.StartOptions{Concurrency: 1})
	in := testkinds.WaitInput{Topic: "download:42", TimeoutMillis: int(time.Hour / time.Millisecond), SleepMillis: 30}
	a := enqueue(t, eng, testkinds.Wait, in, "a")
	b := enqueue(t, eng, testkinds.Wait, in, "b")
	waitTaskStatus(t, pool, a, "waiting")
	waitTaskStatus(t, pool, b, "waiting")
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM taskport.waiter WHERE topic = 'download:42'`).Scan(&n))
		return n == 2
	}, 10*time.Second, 20*time.Millisecond, "both runs past their sleep and registered as waiters")
	view, err := eng.Get(ctx, a)
	require.NoError(t, err)
	require.Equal(t, port.StatusWaiting, view.Status)
	require.Equal(t, "wait", view.CurrentStep)

	delivered, err := eng.Signal(ctx, "download:42", "done")
	require.NoError(t, err)
	require.Equal(t, 2, delivered)
	waitTaskStatus(t, pool, a, "succeeded")
	waitTaskStatus(t, pool, b, "succeeded")
	require.Equal(t, "signal:done", effects(t, pool, a)["after"].note)
	require.Equal(t, "signal:done", effects(t, pool, b)["after"].note)
	var waiters int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM taskport.waiter`).Scan(&waiters))
	require.Zero(t, waiters)
}

// No signal ever comes: the wait times out and the handler goes on (the
// business database is the truth; the signal was only a hint).
func TestLostSignalTimesOut(t *testing.T) {
	t.Parallel()
	pool := newDB(t)
	eng := newEngine(t, pool, fastConfig())
	startEngine(t, eng, port.StartOptions{Concurrency: 2})
	id := enqueue(t, eng, testkinds.Wait, testkinds.WaitInput{Topic: "approval:never", TimeoutMillis: 300}, "lost")
	waitTaskStatus(t, pool, id, "succeeded")
	eff := effects(t, pool, id)
	require.Equal(t, "timeout", eff["after"].note)
	require.Equal(t, 1, eff["before"].executions)
	require.Equal(t, 1, eff["after"].executions)
}

func TestCancelWhileWaiting(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newDB(t)
	eng := newEngine(t, pool, fastConfig())
	startEngine(t, eng, port.StartOptions{Concurrency: 2})
	id := enqueue(t, eng, testkinds.Wait, testkinds.WaitInput{Topic: "approval:c", TimeoutMillis: int(time.Hour / time.Millisecond)}, "cw")
	waitTaskStatus(t, pool, id, "waiting")
	require.NoError(t, eng.Cancel(ctx, id, "user asked"))
	require.Equal(t, "canceled", taskStatus(t, pool, id))

	var reason string
	var flagged bool
	require.NoError(t, pool.QueryRow(ctx,
		`SELECT cancel_reason, cancel_requested_at IS NOT NULL FROM taskport.run WHERE id = $1`, id).Scan(&reason, &flagged))
	require.True(t, flagged)
	require.Equal(t, "user asked", reason)
	view, err := eng.Get(ctx, id)
	require.NoError(t, err)
	require.Equal(t, port.StatusCanceled, view.Status)

	// A later signal wakes nobody and the step after the wait never runs.
	delivered, err := eng.Signal(ctx, "approval:c", "late")
	require.NoError(t, err)
	require.Zero(t, delivered)
	require.NotContains(t, effects(t, pool, id), "after")
	require.NoError(t, eng.Cancel(ctx, id, "again"), "canceling a finished run is a no-op")
}

func TestCancelWhileRunning(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newDB(t)
	eng := newEngine(t, pool, fastConfig())
	startEngine(t, eng, port.StartOptions{Concurrency: 2})
	id := enqueue(t, eng, testkinds.Cancel, testkinds.Empty{}, "cr")
	require.Eventually(t, func() bool { _, ok := effects(t, pool, id)["long"]; return ok }, 10*time.Second, 10*time.Millisecond)
	running, err := eng.Get(ctx, id)
	require.NoError(t, err)
	require.Equal(t, port.StatusRunning, running.Status)
	listed, err := eng.ListRuns(ctx, port.RunFilter{Kind: testkinds.Cancel})
	require.NoError(t, err)
	require.Len(t, listed, 1)
	require.Equal(t, port.StatusRunning, listed[0].Status)
	require.NoError(t, eng.Cancel(ctx, id, "stop it"))
	waitTaskStatus(t, pool, id, "canceled")
	eff := effects(t, pool, id)
	require.Equal(t, "saw cancel", eff["long.stop"].note, "the running step saw the cancel through its context")
	require.NotContains(t, eff, "after", "no later step runs")
	view, err := eng.Get(ctx, id)
	require.NoError(t, err)
	require.Equal(t, port.StatusCanceled, view.Status)
}

func TestRetryExhaustionFailsRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newDB(t)
	eng := newEngine(t, pool, fastConfig())
	startEngine(t, eng, port.StartOptions{Concurrency: 2})
	id := enqueue(t, eng, testkinds.Fail, testkinds.FailInput{}, "retry")
	waitTaskStatus(t, pool, id, "failed")
	eff := effects(t, pool, id)
	require.Equal(t, testkinds.Retry.MaxAttempts, eff["boom"].executions)
	require.Contains(t, eff["decision"].note, "attempt 3 of boom failed", "the handler saw the StepError")

	var lastErr string
	var dead, claims int
	require.NoError(t, pool.QueryRow(ctx,
		`SELECT last_error, (dead_letter_at IS NOT NULL)::int, claims FROM taskport_lease.task WHERE id = $1`, id).Scan(&lastErr, &dead, &claims))
	require.Contains(t, lastErr, "retries exhausted")
	require.Equal(t, 1, dead)
	require.Equal(t, testkinds.Retry.MaxAttempts, claims, "each retry is a new claim (a new fencing epoch)")
	requireDeadLetter(t, eng, id, "retries exhausted")
}

// requireDeadLetter checks that the run reads as failed with lastErr in its
// error, and is the one dead letter ListRuns returns.
func requireDeadLetter(t *testing.T, eng *leaseadapter.Engine, id port.RunID, lastErr string) {
	t.Helper()
	ctx := context.Background()
	view, err := eng.Get(ctx, id)
	require.NoError(t, err)
	require.Equal(t, port.StatusFailed, view.Status)
	require.Contains(t, view.LastError, lastErr)
	failed, err := eng.ListRuns(ctx, port.RunFilter{Statuses: []port.Status{port.StatusFailed}})
	require.NoError(t, err)
	require.Len(t, failed, 1)
	require.Equal(t, id, failed[0].ID)
}

func TestNonRetryableFailsAtOnce(t *testing.T) {
	t.Parallel()
	pool := newDB(t)
	eng := newEngine(t, pool, fastConfig())
	startEngine(t, eng, port.StartOptions{Concurrency: 2})
	id := enqueue(t, eng, testkinds.Fail, testkinds.FailInput{NonRetryable: true}, "nr")
	waitTaskStatus(t, pool, id, "failed")
	require.Equal(t, 1, effects(t, pool, id)["boom"].executions)
	view, err := eng.Get(context.Background(), id)
	require.NoError(t, err)
	require.Contains(t, view.LastError, "non-retryable")
}

// A v1 run with no worker serving v1 stays pending and visible; a worker
// that serves v1 then runs it on v1 code.
func TestUnservedVersionStaysPending(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newDB(t)
	old := newEngine(t, pool, fastConfig(), 1)
	v1 := enqueue(t, old, testkinds.Versioned, testkinds.Empty{}, "old")

	both := newEngine(t, pool, fastConfig(), 1, 2)
	v2 := enqueue(t, both, testkinds.Versioned, testkinds.Empty{}, "new")
	startEngine(t, both, port.StartOptions{Concurrency: 2, Versions: map[port.Kind][]int{testkinds.Versioned: {2}}})
	waitTaskStatus(t, pool, v2, "succeeded")
	require.Contains(t, effects(t, pool, v2), "v2")

	// Past a few poll intervals the v1 run is still pending, not failed.
	require.Never(t, func() bool { return taskStatus(t, pool, v1) != "pending" }, 500*time.Millisecond, 50*time.Millisecond)
	open, err := both.ListRuns(ctx, port.RunFilter{Kind: testkinds.Versioned, BelowVersion: 2})
	require.NoError(t, err)
	require.Len(t, open, 1)
	require.Equal(t, v1, open[0].ID)
	require.Equal(t, port.StatusPending, open[0].Status)

	startEngine(t, old, port.StartOptions{Concurrency: 1})
	waitTaskStatus(t, pool, v1, "succeeded")
	require.Contains(t, effects(t, pool, v1), "v1")
}

// Stop hands back a run whose step outlives the stop bound: the lease is
// released and another worker finishes it.
func TestStopHandsBackInFlightRuns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newDB(t)
	cfg := fastConfig()
	cfg.StopTimeout = 200 * time.Millisecond
	first := newEngine(t, pool, cfg)
	require.NoError(t, first.Start(ctx, port.StartOptions{Concurrency: 1}))
	id := enqueue(t, first, testkinds.Slow, testkinds.SlowInput{Millis: 3000}, "stop")
	require.Eventually(t, func() bool { _, ok := effects(t, pool, id)["s2"]; return ok }, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, first.Stop(ctx))
	require.NoError(t, first.Stop(ctx), "stop twice is safe")
	var status string
	var owner *string
	require.NoError(t, pool.QueryRow(ctx, `SELECT status, lease_owner FROM taskport_lease.task WHERE id = $1`, id).Scan(&status, &owner))
	require.Equal(t, "pending", status)
	require.Nil(t, owner, "lease released")

	second := newEngine(t, pool, fastConfig())
	startEngine(t, second, port.StartOptions{Concurrency: 1})
	waitTaskStatus(t, pool, id, "succeeded")
	eff := effects(t, pool, id)
	require.Equal(t, 1, eff["s1"].executions)
	require.Equal(t, 1, eff["s3"].executions)
	require.Equal(t, eff["s2"].token, eff["s2"].doneBy, "the second worker's attempt committed in the ledger")
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	pool := newDB(t)
	reg := port.NewRegistry()
	_, err := leaseadapter.New(pool, reg, leaseadapter.Config{LeaseDuration: time.Second, HeartbeatInterval: 2 * time.Second})
	require.ErrorIs(t, err, port.ErrInvalidInput)
	eng, err := leaseadapter.New(pool, reg, leaseadapter.Config{})
	require.NoError(t, err)
	require.Error(t, eng.Start(context.Background(), port.StartOptions{}), "a worker with nothing to serve is refused")
}

// A run canceled while it waits in a worker's prefetch queue, behind a busy
// executor, ends canceled at once: it is not left running (its lease renewed
// by the heartbeat until an executor frees, then lost and charged as an
// attempt by the reaper).
func TestCancelWhilePrefetched(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newDB(t)
	cfg := fastConfig()
	// A lease far longer than the wait below: only the cancel itself, not an
	// expired lease, may settle the queued run.
	cfg.LeaseDuration = 30 * time.Second
	eng := newEngine(t, pool, cfg)
	busy := enqueue(t, eng, testkinds.Cancel, testkinds.Empty{}, "busy")
	queued := enqueue(t, eng, testkinds.Three, testkinds.Empty{}, "queued")
	// One executor and one prefetch place: the first claim takes both runs,
	// busy (older) runs, queued waits behind it.
	startEngine(t, eng, port.StartOptions{Concurrency: 1})
	require.Eventually(t, func() bool { _, ok := effects(t, pool, busy)["long"]; return ok }, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, "running", taskStatus(t, pool, queued), "the second run is claimed into the prefetch queue")

	require.NoError(t, eng.Cancel(ctx, queued, "not needed"))
	require.Eventually(t, func() bool { return taskStatus(t, pool, queued) == "canceled" },
		10*cfg.PollInterval, 10*time.Millisecond, "a canceled run in the prefetch queue must end canceled within about a poll interval")
	view, err := eng.Get(ctx, queued)
	require.NoError(t, err)
	require.Equal(t, port.StatusCanceled, view.Status)
	var stepAttempts, claims int
	var owner *string
	require.NoError(t, pool.QueryRow(ctx, `SELECT step_attempts, claims, lease_owner FROM taskport_lease.task WHERE id = $1`, queued).
		Scan(&stepAttempts, &claims, &owner))
	require.Zero(t, stepAttempts, "no attempt was charged")
	require.Equal(t, 1, claims)
	require.Nil(t, owner, "lease released")
	require.Empty(t, effects(t, pool, queued), "no step of the canceled run ran")
	require.Equal(t, "running", taskStatus(t, pool, busy), "the busy run is untouched")
	require.NoError(t, eng.Cancel(ctx, busy, "done"))
	waitTaskStatus(t, pool, busy, "canceled")
}

// A run whose cancel arrived while it was being handed back (Stop, or a
// retry backoff committed just after the cancel) is pending with the cancel
// flag: the claim that takes it ends it canceled without running anything.
func TestClaimedCanceledRunEndsCanceled(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newDB(t)
	eng := newEngine(t, pool, fastConfig())
	id := enqueue(t, eng, testkinds.Three, testkinds.Empty{}, "handed-back")
	_, err := pool.Exec(ctx, `UPDATE taskport_lease.task SET cancel_requested_at = now() WHERE id = $1`, id)
	require.NoError(t, err)
	startEngine(t, eng, port.StartOptions{Concurrency: 1})
	waitTaskStatus(t, pool, id, "canceled")
	require.Empty(t, effects(t, pool, id))
	view, err := eng.Get(ctx, id)
	require.NoError(t, err)
	require.Equal(t, port.StatusCanceled, view.Status)
}
