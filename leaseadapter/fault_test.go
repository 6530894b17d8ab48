package leaseadapter_test

// Fault tests: a worker subprocess killed (SIGKILL) or frozen past its lease
// (SIGSTOP/SIGCONT), and a private Postgres restarted mid-run. They assert on
// the side table (business effects and the fenced ledger commit) and on
// step_result, not on the engine's status alone. Processes and the private
// cluster come from internal/testkit/proc and pgcluster.

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/internal/testkit/pgcluster"
	"github.com/taskport/taskport/internal/testkit/pgtest"
	"github.com/taskport/taskport/internal/testkit/proc"
	"github.com/taskport/taskport/leaseadapter/internal/testkinds"
	"github.com/taskport/taskport/migrations"
	"github.com/taskport/taskport/port"
)

// startWorker runs a testworker (1 s lease, 100 ms poll) on dbURL and
// waits until it serves; it is killed when the test ends.
func startWorker(t *testing.T, dbURL, name string) *proc.Process {
	t.Helper()
	bin := proc.Build(t, "github.com/taskport/taskport/leaseadapter/internal/testworker")
	p := proc.Start(t, name, bin, []string{"-db", dbURL, "-id", name, "-lease", "1s", "-poll", "100ms"})
	require.NoError(t, p.WaitOutput("ready", time.Minute))
	return p
}

func printed(p *proc.Process, s string) bool { return strings.Contains(p.Output(), s) }

func stepResults(t *testing.T, pool *pgxpool.Pool, id port.RunID) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(),
		`SELECT name FROM taskport_lease.step_result WHERE task_id = $1 ORDER BY seq`, id)
	require.NoError(t, err)
	var names []string
	for rows.Next() {
		var n string
		require.NoError(t, rows.Scan(&n))
		names = append(names, n)
	}
	require.NoError(t, rows.Err())
	return names
}

// runInWorkerA starts worker A on a fresh database and a test.slow run
// whose step s2 lasts millis, and returns once A is inside s2.
func runInWorkerA(t *testing.T, millis int, key string) (string, *pgxpool.Pool, *proc.Process, port.RunID) {
	t.Helper()
	url := pgtest.NewDatabase(t)
	pool := pgtest.Connect(t, url)
	_, err := pool.Exec(context.Background(), testkinds.EffectTableSQL)
	require.NoError(t, err)
	client := newEngine(t, pool, fastConfig())
	a := startWorker(t, url, "A")
	id := enqueue(t, client, testkinds.Slow, testkinds.SlowInput{Millis: millis}, key)
	require.Eventually(t, func() bool { _, ok := effects(t, pool, id)["s2"]; return ok }, 30*time.Second, 5*time.Millisecond)
	return url, pool, a, id
}

func TestKilledWorkerRunFinishesElsewhere(t *testing.T) {
	t.Parallel()
	url, pool, a, id := runInWorkerA(t, 2000, "kill")
	require.NoError(t, a.Kill(context.Background()))
	killedAt := time.Now()
	t.Logf("killed worker A (pid %d) in step s2", a.Pid())

	b := startWorker(t, url, "B")
	waitTaskStatus(t, pool, id, "succeeded")
	require.NoError(t, b.WaitOutput("event finished kind=test.slow status=succeeded", time.Minute))
	t.Logf("killed worker A in step s2; run finished on B %s later", time.Since(killedAt).Round(time.Millisecond))

	eff := effects(t, pool, id)
	require.Equal(t, 1, eff["s1"].executions, "a completed step does not rerun")
	require.Equal(t, 2, eff["s2"].executions, "the step that was running reruns")
	require.Equal(t, 1, eff["s3"].executions)
	require.Equal(t, int64(2), eff["s2"].epoch)
	require.Equal(t, eff["s2"].token, eff["s2"].doneBy)
	require.Equal(t, []string{"s1", "s2", "s3"}, stepResults(t, pool, id))
}

func TestStoppedWorkerCommitIsFenced(t *testing.T) {
	t.Parallel()
	url, pool, a, id := runInWorkerA(t, 1500, "stop")
	require.NoError(t, a.Stop())
	t.Logf("stopped worker A (pid %d) in step s2", a.Pid())

	b := startWorker(t, url, "B")
	waitTaskStatus(t, pool, id, "succeeded")
	require.NoError(t, a.Cont())
	require.Eventually(t, func() bool { return printed(a, "event lease_lost") || printed(a, "event fenced_commit") },
		30*time.Second, 10*time.Millisecond, "the stale worker learns that its claim is gone")
	t.Logf("worker A after SIGCONT: lease_lost=%v fenced_commit=%v", printed(a, "event lease_lost"), printed(a, "event fenced_commit"))
	require.False(t, printed(a, "event finished"), "the stale worker finished nothing")
	require.True(t, printed(b, "event finished kind=test.slow status=succeeded"))

	eff := effects(t, pool, id)
	require.Equal(t, 1, eff["s1"].executions)
	require.Equal(t, 1, eff["s3"].executions)
	require.Equal(t, int64(2), eff["s2"].epoch, "B's attempt has the newer epoch")
	require.Equal(t, eff["s2"].token, eff["s2"].doneBy, "only B's attempt committed in the ledger")
	require.Equal(t, []string{"s1", "s2", "s3"}, stepResults(t, pool, id), "one result per step")
}

func TestPostgresRestartMidRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := pgcluster.New(t)
	pool, err := pgxpool.New(ctx, c.URL())
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	require.NoError(t, migrations.Up(ctx, pool))
	_, err = pool.Exec(ctx, testkinds.EffectTableSQL)
	require.NoError(t, err)

	eng := newEngine(t, pool, fastConfig())
	startEngine(t, eng, port.StartOptions{Concurrency: 8})
	const runs = 20
	ids := make([]port.RunID, runs)
	for i := range ids {
		ids[i] = enqueue(t, eng, testkinds.Slow, testkinds.SlowInput{Millis: 400}, fmt.Sprintf("pg-%d", i))
	}
	require.Eventually(t, func() bool {
		var started int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM lease_test_effect WHERE step = 's2'`).Scan(&started))
		return started >= 4
	}, 30*time.Second, 5*time.Millisecond)
	require.NoError(t, c.Restart())
	t.Logf("restarted the private Postgres mid-run")

	require.Eventually(t, func() bool {
		var done int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM taskport_lease.task WHERE status = 'succeeded'`).Scan(&done); err != nil {
			return false
		}
		return done == runs
	}, 90*time.Second, 50*time.Millisecond, "every run completes after the restart")
	for _, id := range ids {
		eff := effects(t, pool, id)
		for _, s := range []string{"s1", "s2", "s3"} {
			require.GreaterOrEqual(t, eff[s].executions, 1, "run %s step %s", id, s)
		}
		require.Equal(t, eff["s2"].token, eff["s2"].doneBy, "the ledger holds the last attempt's commit")
		require.Equal(t, []string{"s1", "s2", "s3"}, stepResults(t, pool, id))
	}
}

// The reaper, on leases left by dead workers: a step with attempts left goes
// back to pending after Backoff(n-1) of its policy (the first loss waits
// none); a step out of attempts is recorded as failed for good by the next
// claim without running, and the handler sees the *port.StepError (here it
// opens its decision), as on Temporal; a run whose failure-recording claim
// was lost too is dead; a canceled run ends canceled, charged nothing. The
// lost claims are simulated on runs enqueued normally, as a crashed worker
// leaves them: running, lease expired.
func TestReaperSettlesLostLeases(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newDB(t)
	eng := newEngine(t, pool, fastConfig())
	retrying := enqueue(t, eng, testkinds.Three, testkinds.Empty{}, "lost-again")
	exhausted := enqueue(t, eng, testkinds.Fail, testkinds.FailInput{}, "lost-last")
	poisoned := enqueue(t, eng, testkinds.Three, testkinds.Empty{}, "lost-recording")
	canceled := enqueue(t, eng, testkinds.Three, testkinds.Empty{}, "lost-canceled")
	// A backoff of an hour keeps the requeued run parked while the test reads it.
	crashed := `UPDATE taskport_lease.task SET status = 'running', lease_owner = 'gone', lease_token = gen_random_uuid(),
  lease_until = now() - interval '1 second', claims = claims + 1, step_attempts = $2, max_attempts = 3,
  backoff_initial = interval '1 hour', backoff_max = interval '2 hours',
  cancel_requested_at = CASE WHEN $3 THEN now() END
WHERE id = $1`
	for _, c := range []struct {
		id       port.RunID
		attempts int
		cancel   bool
	}{{retrying, 1, false}, {exhausted, 2, false}, {poisoned, 3, false}, {canceled, 0, true}} {
		_, err := pool.Exec(ctx, crashed, c.id, c.attempts, c.cancel)
		require.NoError(t, err)
	}
	startEngine(t, eng, port.StartOptions{Concurrency: 2})

	waitTaskStatus(t, pool, exhausted, "failed")
	waitTaskStatus(t, pool, poisoned, "dead")
	waitTaskStatus(t, pool, canceled, "canceled")
	waitTaskStatus(t, pool, retrying, "pending")

	var attempts int
	var wait time.Duration
	var owner *string
	require.NoError(t, pool.QueryRow(ctx, `
SELECT step_attempts, next_run_at - now(), lease_owner FROM taskport_lease.task WHERE id = $1`, retrying).
		Scan(&attempts, &wait, &owner))
	require.Equal(t, 2, attempts)
	require.Greater(t, wait, 50*time.Minute, "the second loss of the step waits Backoff(1) = 1 h")
	require.Nil(t, owner)

	// The exhausted step: recorded as failed, never run again, and the
	// handler reacted to the StepError before failing the run.
	eff := effects(t, pool, exhausted)
	require.NotContains(t, eff, "boom", "the step out of attempts does not run again")
	require.Contains(t, eff["decision"].note, "out of attempts through lost leases", "the handler saw the StepError")
	var failedStep bool
	var stepAttempts int
	require.NoError(t, pool.QueryRow(ctx, `SELECT failed, attempts FROM taskport_lease.step_result WHERE task_id = $1 AND seq = 0`, exhausted).
		Scan(&failedStep, &stepAttempts))
	require.True(t, failedStep, "the history records the step as failed for good, as a failed last attempt does")
	require.Equal(t, 3, stepAttempts, "the two earlier lost attempts and the one reaped")
	view, err := eng.Get(ctx, exhausted)
	require.NoError(t, err)
	require.Equal(t, port.StatusFailed, view.Status)
	require.Contains(t, view.LastError, "out of attempts through lost leases")

	view, err = eng.Get(ctx, poisoned)
	require.NoError(t, err)
	require.Equal(t, port.StatusFailed, view.Status, "a dead run reads as failed")
	require.Contains(t, view.LastError, "lease of worker gone expired")
	require.Empty(t, effects(t, pool, poisoned), "no step of the dead run ran again")
	var deadAt *time.Time
	require.NoError(t, pool.QueryRow(ctx, `SELECT dead_letter_at FROM taskport_lease.task WHERE id = $1`, poisoned).Scan(&deadAt))
	require.NotNil(t, deadAt)

	view, err = eng.Get(ctx, canceled)
	require.NoError(t, err)
	require.Equal(t, port.StatusCanceled, view.Status)
	require.NoError(t, pool.QueryRow(ctx, `SELECT step_attempts FROM taskport_lease.task WHERE id = $1`, canceled).Scan(&attempts))
	require.Zero(t, attempts, "a canceled run is not charged the lost attempt")
	require.Empty(t, effects(t, pool, canceled))

	failed, err := eng.ListRuns(ctx, port.RunFilter{Statuses: []port.Status{port.StatusFailed}})
	require.NoError(t, err)
	require.Len(t, failed, 2)
	require.ElementsMatch(t, []port.RunID{exhausted, poisoned}, []port.RunID{failed[0].ID, failed[1].ID})
}
