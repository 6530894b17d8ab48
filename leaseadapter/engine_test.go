package leaseadapter_test

// The lease engine's own mechanics: what the contract suite (test/contract)
// cannot ask of every engine: EnqueueTx, claim order by priority, signals
// kept for a topic, the stop bound that hands a run back, the prefetch
// queue, the claim of a canceled run, the reaper, version markers, its
// config and its metrics hook. What both engines promise is in the suite.
// The kinds are the suite's (test/contract/kinds).

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/internal/testkit/pgtest"
	"github.com/taskport/taskport/leaseadapter"
	"github.com/taskport/taskport/ledger"
	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/test/contract/kinds"
)

// fastConfig keeps the tests quick: a short lease and poll.
func fastConfig() leaseadapter.Config {
	return leaseadapter.Config{
		LeaseDuration: time.Second, PollInterval: 100 * time.Millisecond, StopTimeout: 2 * time.Second,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
}

// newDB returns a pool on a fresh migrated database with the kinds' side
// tables.
func newDB(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool := pgtest.NewPool(t)
	_, err := pool.Exec(context.Background(), kinds.Schema+kinds.LedgerSchema)
	require.NoError(t, err)
	return pool
}

// newEngine is an engine over the effect kinds (defs added) and the ledger
// kinds.
func newEngine(t *testing.T, pool *pgxpool.Pool, cfg leaseadapter.Config, defs ...port.Definition) *leaseadapter.Engine {
	t.Helper()
	reg := port.NewRegistry()
	require.NoError(t, kinds.Register(reg, pool, append(kinds.Definitions(false), defs...)...))
	require.NoError(t, kinds.RegisterLedger(reg, pool))
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

// taskStatus reads the run's row itself (the engine's truth).
func taskStatus(t *testing.T, pool *pgxpool.Pool, id port.RunID) string {
	t.Helper()
	var s string
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT status FROM taskport.run WHERE id = $1`, id).Scan(&s))
	return s
}

func waitTaskStatus(t *testing.T, pool *pgxpool.Pool, id port.RunID, want string) {
	t.Helper()
	require.Eventually(t, func() bool { return taskStatus(t, pool, id) == want },
		30*time.Second, 20*time.Millisecond, "run %s never reached %s", id, want)
}

// effects returns the executions of each effect label of a run.
func effects(t *testing.T, pool *pgxpool.Pool, id port.RunID) map[string]int {
	t.Helper()
	out, err := kinds.Effects(context.Background(), pool, id)
	require.NoError(t, err)
	return out
}

// leaseOf reads a run's status and lease owner.
func leaseOf(t *testing.T, pool *pgxpool.Pool, id port.RunID) (status string, owner *string) {
	t.Helper()
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT status, lease_owner FROM taskport.run WHERE id = $1`, id).Scan(&status, &owner))
	return status, owner
}

// EnqueueTx: nothing exists unless the caller's transaction commits.
func TestEnqueueTxFollowsTheCallersTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newDB(t)
	eng := newEngine(t, pool, fastConfig())
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	rolled, err := eng.EnqueueTx(ctx, tx, kinds.Three, kinds.TagIn{}, port.EnqueueOptions{IdempotencyKey: "tx"})
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(ctx))
	_, err = eng.Get(ctx, rolled)
	require.ErrorIs(t, err, port.ErrNotFound)

	tx, err = pool.Begin(ctx)
	require.NoError(t, err)
	committed, err := eng.EnqueueTx(ctx, tx, kinds.Three, kinds.TagIn{}, port.EnqueueOptions{IdempotencyKey: "tx"})
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	require.Equal(t, "pending", taskStatus(t, pool, committed))
	var runs int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM taskport.run`).Scan(&runs))
	require.Equal(t, 1, runs, "the rolled-back enqueue left no run")
}

// One slot and one active run: the order of first steps follows priority.
// (With more active runs than step slots, the runs a worker holds take free
// slots in no set order: priority orders the claims.)
func TestPriorityOrdersClaims(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newDB(t)
	cfg := fastConfig()
	cfg.ActiveRuns = 1
	eng := newEngine(t, pool, cfg)
	low, err := eng.Enqueue(ctx, kinds.Three, kinds.TagIn{}, port.EnqueueOptions{IdempotencyKey: "low", Priority: 5})
	require.NoError(t, err)
	high, err := eng.Enqueue(ctx, kinds.Three, kinds.TagIn{}, port.EnqueueOptions{IdempotencyKey: "high", Priority: -5})
	require.NoError(t, err)
	startEngine(t, eng, port.StartOptions{Concurrency: 1})
	waitTaskStatus(t, pool, low, "succeeded")
	waitTaskStatus(t, pool, high, "succeeded")
	var highFirst bool
	require.NoError(t, pool.QueryRow(ctx, `
SELECT (SELECT completed_at FROM taskport_lease.step_result WHERE run_id = $1 AND seq = 0)
     < (SELECT completed_at FROM taskport_lease.step_result WHERE run_id = $2 AND seq = 0)`, high, low).Scan(&highFirst))
	require.True(t, highFirst, "the priority -5 run must start before the priority 5 run")
}

// A signal sent before any run waits on its topic is kept in task_signal
// (on Temporal it would find no run to buffer it): the run that waits on
// the topic later consumes it at once.
func TestSignalBeforeTheWaitIsKeptForTheTopic(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newDB(t)
	eng := newEngine(t, pool, fastConfig())
	delivered, err := eng.Signal(ctx, "approval:early", "yes")
	require.NoError(t, err)
	require.Equal(t, 0, delivered, "nobody waits yet")

	startEngine(t, eng, port.StartOptions{Concurrency: 2})
	id := enqueue(t, eng, kinds.Memo, kinds.WaitIn{Topic: "approval:early", Timeout: kinds.Duration(time.Hour)}, "early")
	waitTaskStatus(t, pool, id, "succeeded") // well before the hour's timeout
	require.Equal(t, map[string]int{"a": 1, "b": 1}, effects(t, pool, id))
	var consumedBy string
	require.NoError(t, pool.QueryRow(ctx, `SELECT consumed_by::text FROM taskport_lease.task_signal WHERE topic = 'approval:early'`).Scan(&consumedBy))
	require.Equal(t, string(id), consumedBy)
}

// Stop hands back a run whose step outlives the stop bound: the lease is
// released at once and another worker takes the step over with a newer
// fencing token and commits it.
func TestStopHandsBackAStepThatOutlivesTheBound(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newDB(t)
	cfg := fastConfig()
	cfg.StopTimeout = 200 * time.Millisecond
	first := newEngine(t, pool, cfg)
	require.NoError(t, first.Start(ctx, port.StartOptions{Concurrency: 1}))
	plan, err := uuid.NewV7()
	require.NoError(t, err)
	require.NoError(t, kinds.NewPlan(ctx, pool, plan))
	id := enqueue(t, first, kinds.Steps, kinds.StepsIn{Plan: plan, HoldAt: "s2", Gate: "stop"}, "stop")
	var held ledger.Operation
	require.Eventually(t, func() bool {
		var found bool
		held, found, err = ledger.Read(ctx, pool, plan, "s2")
		require.NoError(t, err)
		return found
	}, 30*time.Second, 10*time.Millisecond, "s2 never began")
	require.NoError(t, first.Stop(ctx))
	require.NoError(t, first.Stop(ctx), "stop twice is safe")
	status, owner := leaseOf(t, pool, id)
	require.Equal(t, "pending", status)
	require.Nil(t, owner, "lease released")

	require.NoError(t, kinds.OpenGate(ctx, pool, "stop"))
	second := newEngine(t, pool, fastConfig())
	startEngine(t, second, port.StartOptions{Concurrency: 1})
	waitTaskStatus(t, pool, id, "succeeded")
	op, _, err := ledger.Read(ctx, pool, plan, "s2")
	require.NoError(t, err)
	require.True(t, op.Done())
	require.NotEqual(t, held.Token, op.Token, "the second worker's attempt committed in the ledger")
	var commits, once int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE commits = 1) FROM fault_commit WHERE run_id = $1`,
		string(id)).Scan(&commits, &once))
	require.Equal(t, len(kinds.StepNames), commits)
	require.Equal(t, commits, once, "each step committed once")
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	pool := newDB(t)
	reg := port.NewRegistry()
	_, err := leaseadapter.New(pool, reg, leaseadapter.Config{LeaseDuration: time.Second, HeartbeatInterval: 2 * time.Second})
	require.ErrorIs(t, err, port.ErrInvalidInput)
	_, err = leaseadapter.New(pool, reg, leaseadapter.Config{ActiveRuns: -1})
	var fe *port.FieldError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "active_runs", fe.Field)
	for _, mode := range pgtest.UntypedModes {
		_, err = leaseadapter.New(pgtest.WithExecMode(t, pool, mode), reg, leaseadapter.Config{})
		require.ErrorAs(t, err, &fe, mode.String())
		require.Equal(t, "pool", fe.Field)
		require.ErrorContains(t, err, "cache_statement")
	}
	eng, err := leaseadapter.New(pool, reg, leaseadapter.Config{})
	require.NoError(t, err)
	require.Error(t, eng.Start(context.Background(), port.StartOptions{}), "a worker with nothing to serve is refused")
}

// A run canceled while it waits behind a busy step, in a worker's prefetch
// queue (one active run) or for the one step slot (two active runs), ends
// canceled at once: it is not left running (its lease renewed by the
// heartbeat until the busy run frees its place, then lost and charged as an
// attempt by the reaper).
func TestCancelWhilePrefetched(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		activeRuns int
	}{{"in the prefetch queue", 1}, {"waiting for a step slot", 2}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cancelQueuedRun(t, tc.activeRuns)
		})
	}
}

func cancelQueuedRun(t *testing.T, activeRuns int) {
	ctx := context.Background()
	pool := newDB(t)
	cfg := fastConfig()
	// A lease far longer than the wait below: only the cancel itself, not an
	// expired lease, may settle the queued run.
	cfg.LeaseDuration = 30 * time.Second
	cfg.ActiveRuns = activeRuns
	eng := newEngine(t, pool, cfg)
	// One step slot and one prefetch place; busy runs its step and queued
	// waits behind it. With one active run, both are enqueued first and
	// one claim takes them in order (busy is older). With two, the runs
	// would race for the slot, so queued is enqueued once busy holds it,
	// and the idle executor's claim takes it.
	busy := enqueue(t, eng, kinds.Hold, kinds.WaitIn{Gate: "never-opens"}, "busy")
	var queued port.RunID
	if activeRuns == 1 {
		queued = enqueue(t, eng, kinds.Three, kinds.TagIn{}, "queued")
	}
	startEngine(t, eng, port.StartOptions{Concurrency: 1})
	require.Eventually(t, func() bool { return effects(t, pool, busy)["hold:started"] == 1 }, 10*time.Second, 10*time.Millisecond)
	if activeRuns > 1 {
		queued = enqueue(t, eng, kinds.Three, kinds.TagIn{}, "queued")
	}
	waitTaskStatus(t, pool, queued, "running")

	require.NoError(t, eng.Cancel(ctx, queued, "not needed"))
	// The deadline is half the lease, not a few poll intervals: the cancel
	// settles the run at the worker's next poll, but a saturated machine
	// (seen while `make tools` built beside the tests) can take seconds to
	// show it. Ending canceled before the lease could expire shows that the
	// cancel, not the reaper, settled it.
	require.Eventually(t, func() bool { return taskStatus(t, pool, queued) == "canceled" },
		cfg.LeaseDuration/2, 10*time.Millisecond, "a canceled run in the prefetch queue must end canceled before its lease could expire")
	view, err := eng.Get(ctx, queued)
	require.NoError(t, err)
	require.Equal(t, port.StatusCanceled, view.Status)
	var stepAttempts, claims int
	var owner *string
	require.NoError(t, pool.QueryRow(ctx, `SELECT step_attempts, claims, lease_owner FROM taskport.run WHERE id = $1`, queued).
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
	id := enqueue(t, eng, kinds.Three, kinds.TagIn{}, "handed-back")
	_, err := pool.Exec(ctx, `UPDATE taskport.run SET cancel_requested_at = now() WHERE id = $1`, id)
	require.NoError(t, err)
	startEngine(t, eng, port.StartOptions{Concurrency: 1})
	waitTaskStatus(t, pool, id, "canceled")
	require.Empty(t, effects(t, pool, id))
	view, err := eng.Get(ctx, id)
	require.NoError(t, err)
	require.Equal(t, port.StatusCanceled, view.Status)
}

// events records what the engine reports through its Metrics hook.
type events struct {
	mu                      sync.Mutex
	claimed                 int
	finished                map[port.Status]int
	leaseLost, fencedCommit int
	depths                  int // queue-depth samples
}

func (e *events) Claimed(n int) { e.mu.Lock(); defer e.mu.Unlock(); e.claimed += n }
func (e *events) Finished(_ port.Kind, s port.Status) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.finished[s]++
}
func (e *events) LeaseLost(port.Kind)    { e.mu.Lock(); defer e.mu.Unlock(); e.leaseLost++ }
func (e *events) FencedCommit(port.Kind) { e.mu.Lock(); defer e.mu.Unlock(); e.fencedCommit++ }
func (e *events) QueueDepth(int)         { e.mu.Lock(); defer e.mu.Unlock(); e.depths++ }

func (e *events) depthSamples() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.depths
}

func (e *events) read() (claimed, succeeded, lost int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.claimed, e.finished[port.StatusSucceeded], e.leaseLost + e.fencedCommit
}

// The Metrics hook hears a claim and a finished run, and a worker whose
// claim was taken from it mid-step learns it: its heartbeat reports the
// lease lost (or its commit is fenced), the step sees port.ErrLeaseLost,
// and it finishes nothing.
func TestMetricsReportClaimsAndALostLease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newDB(t)
	cfg := fastConfig()
	ev := &events{finished: map[port.Status]int{}}
	cfg.Metrics = ev
	eng := newEngine(t, pool, cfg)
	startEngine(t, eng, port.StartOptions{Concurrency: 2})
	done := enqueue(t, eng, kinds.Three, kinds.TagIn{}, "done")
	waitTaskStatus(t, pool, done, "succeeded")
	require.Eventually(t, func() bool { c, s, _ := ev.read(); return c >= 1 && s == 1 }, 10*time.Second, 10*time.Millisecond)

	held := enqueue(t, eng, kinds.Hold, kinds.WaitIn{Gate: "never-opens"}, "held")
	require.Eventually(t, func() bool { return effects(t, pool, held)["hold:started"] == 1 }, 10*time.Second, 10*time.Millisecond)
	// Another worker's claim, as the reaper and a new claim would leave it.
	_, err := pool.Exec(ctx, `UPDATE taskport.run SET lease_token = gen_random_uuid(), lease_owner = 'thief' WHERE id = $1`, held)
	require.NoError(t, err)
	t.Logf("injected: took the claim of run %s from its worker mid-step", held)
	require.Eventually(t, func() bool { _, _, lost := ev.read(); return lost > 0 }, 30*time.Second, 10*time.Millisecond,
		"the worker never learned that its claim is gone")
	require.Eventually(t, func() bool { return effects(t, pool, held)["hold:stopped"] >= 1 }, 10*time.Second, 10*time.Millisecond)
	notes, err := kinds.Notes(ctx, pool, held)
	require.NoError(t, err)
	require.Contains(t, notes["hold:stopped"], port.ErrLeaseLost.Error(), "the step saw why it had to stop")
	_, succeeded, _ := ev.read()
	require.Equal(t, 1, succeeded, "the worker finished nothing it no longer held")
	require.NotContains(t, effects(t, pool, held), "after")
}

// The reaper, on leases left by dead workers: a step with attempts left goes
// back to pending after Backoff(n-1) of its policy (the first loss waits
// none); a step out of attempts is recorded as failed for good by the next
// claim without running, and the handler sees the *port.StepError (here it
// opens its decision), as on Temporal; a run whose failure-recording claim
// was lost too is failed, a dead letter naming the lost lease; a canceled
// run ends canceled, charged nothing. The
// lost claims are simulated on runs enqueued normally, as a crashed worker
// leaves them: running, lease expired.
func TestReaperSettlesLostLeases(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newDB(t)
	eng := newEngine(t, pool, fastConfig())
	retrying := enqueue(t, eng, kinds.Three, kinds.TagIn{}, "lost-again")
	exhausted := enqueue(t, eng, kinds.FailKind, kinds.TagIn{}, "lost-last")
	poisoned := enqueue(t, eng, kinds.Three, kinds.TagIn{}, "lost-recording")
	canceled := enqueue(t, eng, kinds.Three, kinds.TagIn{}, "lost-canceled")
	// A backoff of an hour keeps the requeued run parked while the test reads it.
	// started_seq 0: a heartbeat had reported the first step's body running.
	crashed := `UPDATE taskport.run SET status = 'running', lease_owner = 'gone', lease_token = gen_random_uuid(), started_seq = 0,
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
	waitTaskStatus(t, pool, poisoned, "failed")
	waitTaskStatus(t, pool, canceled, "canceled")
	waitTaskStatus(t, pool, retrying, "pending")

	var attempts int
	var wait time.Duration
	var owner *string
	require.NoError(t, pool.QueryRow(ctx, `
SELECT step_attempts, next_run_at - now(), lease_owner FROM taskport.run WHERE id = $1`, retrying).
		Scan(&attempts, &wait, &owner))
	require.Equal(t, 2, attempts)
	require.Greater(t, wait, 50*time.Minute, "the second loss of the step waits Backoff(1) = 1 h")
	require.Nil(t, owner)

	// The exhausted step: recorded as failed, never run again, and the
	// handler reacted to the StepError before failing the run.
	require.Empty(t, effects(t, pool, exhausted), "the step out of attempts does not run again")
	var decision string
	require.NoError(t, pool.QueryRow(ctx, `SELECT reason FROM contract_decision WHERE run_id = $1`, string(exhausted)).Scan(&decision))
	require.Contains(t, decision, "out of attempts through lost leases", "the handler saw the StepError")
	var failedStep bool
	var stepAttempts int
	require.NoError(t, pool.QueryRow(ctx, `SELECT failed, attempts FROM taskport_lease.step_result WHERE run_id = $1 AND seq = 0`, exhausted).
		Scan(&failedStep, &stepAttempts))
	require.True(t, failedStep, "the history records the step as failed for good, as a failed last attempt does")
	require.Equal(t, 3, stepAttempts, "the two earlier lost attempts and the one reaped")
	view, err := eng.Get(ctx, exhausted)
	require.NoError(t, err)
	require.Equal(t, port.StatusFailed, view.Status)
	require.Contains(t, view.LastError, "out of attempts through lost leases")

	view, err = eng.Get(ctx, poisoned)
	require.NoError(t, err)
	require.Equal(t, port.StatusFailed, view.Status, "a run whose leases were all lost is failed")
	require.Contains(t, view.LastError, "lease of worker gone expired")
	require.Empty(t, effects(t, pool, poisoned), "no step of the dead run ran again")
	var deadAt *time.Time
	require.NoError(t, pool.QueryRow(ctx, `SELECT dead_letter_at FROM taskport.run WHERE id = $1`, poisoned).Scan(&deadAt))
	require.NotNil(t, deadAt)

	view, err = eng.Get(ctx, canceled)
	require.NoError(t, err)
	require.Equal(t, port.StatusCanceled, view.Status)
	require.NoError(t, pool.QueryRow(ctx, `SELECT step_attempts FROM taskport.run WHERE id = $1`, canceled).Scan(&attempts))
	require.Zero(t, attempts, "a canceled run is not charged the lost attempt")
	require.Empty(t, effects(t, pool, canceled))

	failed, err := eng.ListRuns(ctx, port.RunFilter{Statuses: []port.Status{port.StatusFailed}})
	require.NoError(t, err)
	require.Len(t, failed, 2)
	require.ElementsMatch(t, []port.RunID{exhausted, poisoned}, []port.RunID{failed[0].ID, failed[1].ID})
}

// A GetVersion marker is a memoized step result ("version:<change>"); code
// that no longer supports the recorded value fails the run as
// nondeterministic instead of running a branch the history never took. (On
// Temporal the workflow task fails and is retried until a worker supports
// the value again: the replay of the marker itself is in the contract
// suite, version_marker_replays.)
func TestUnsupportedVersionMarkerFailsTheRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newDB(t)
	old := newEngine(t, pool, fastConfig(), kinds.MarkerKind(1, 2))
	require.NoError(t, old.Start(ctx, port.StartOptions{Concurrency: 1}))
	id := enqueue(t, old, kinds.Marker, kinds.WaitIn{Topic: "marker:dropped", Timeout: kinds.Duration(time.Hour)}, "dropped")
	waitTaskStatus(t, pool, id, "waiting")
	require.NoError(t, old.Stop(ctx))
	var recorded string
	require.NoError(t, pool.QueryRow(ctx, `SELECT result::text FROM taskport_lease.step_result WHERE run_id = $1 AND name = 'version:new-step'`,
		id).Scan(&recorded))
	require.Equal(t, "2", recorded)

	newer := newEngine(t, pool, fastConfig(), kinds.MarkerKind(3, 3))
	startEngine(t, newer, port.StartOptions{Concurrency: 1})
	require.Eventually(t, func() bool {
		n, err := newer.Signal(ctx, "marker:dropped", nil)
		require.NoError(t, err)
		return n == 1
	}, 30*time.Second, 20*time.Millisecond)
	waitTaskStatus(t, pool, id, "failed")
	view, err := newer.Get(ctx, id)
	require.NoError(t, err)
	require.Contains(t, view.LastError, `version marker "new-step" recorded 2, supported [3, 3]`)
	require.Equal(t, map[string]int{"before": 1}, effects(t, pool, id), "no step ran past the unsupported marker")
}

// EnqueueMany writes the run row Enqueue writes: for each kind (each with
// its retry policy), the same kind, version, input, priority, availability,
// first claim time and policy, whichever path enqueued it.
func TestEnqueueManyWritesTheRunRowsOfEnqueue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newDB(t)
	eng := newEngine(t, pool, fastConfig())
	later := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	opts := func(key string) port.EnqueueOptions {
		return port.EnqueueOptions{IdempotencyKey: key, Priority: 7, AvailableAt: later, BusinessKey: "plan-x"}
	}
	var items []port.EnqueueItem
	var one []port.RunID
	for _, k := range []port.Kind{kinds.Three, kinds.FailKind} {
		id, err := eng.Enqueue(ctx, k, kinds.TagIn{Tag: "t"}, opts("one"))
		require.NoError(t, err)
		one = append(one, id)
		items = append(items, port.EnqueueItem{Kind: k, Input: kinds.TagIn{Tag: "t"}, Options: opts("many")})
	}
	res, err := eng.EnqueueMany(ctx, items)
	require.NoError(t, err)
	// Every column that Enqueue sets from the call or the kind, and whether
	// the first claim time is the requested availability.
	row := func(id port.RunID) []any {
		var (
			kind, input, status   string
			version, prio, maxAtt int
			next                  time.Time
			initial, maxIv        time.Duration
			coeff                 float64
			seqMatches            bool
		)
		require.NoError(t, pool.QueryRow(ctx, `
SELECT kind, version, input::text, status, priority, next_run_at, max_attempts,
  backoff_initial, backoff_max, backoff_coefficient, next_run_at = available_at
FROM taskport.run WHERE id = $1`, string(id)).Scan(
			&kind, &version, &input, &status, &prio, &next, &maxAtt, &initial, &maxIv, &coeff, &seqMatches))
		return []any{kind, version, input, status, prio, next.UTC(), maxAtt, initial, maxIv, coeff, seqMatches}
	}
	for i, id := range one {
		require.True(t, res[i].Created)
		want := row(id)
		require.Equal(t, want, row(res[i].ID), "kind %s", items[i].Kind)
		require.Equal(t, later.UTC(), want[5], "next_run_at is AvailableAt")
		require.Equal(t, true, want[10], "next_run_at is its available_at")
	}
	var policies int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(DISTINCT (max_attempts, backoff_initial, backoff_max)) FROM taskport.run`).Scan(&policies))
	require.Equal(t, 2, policies, "the two kinds' retry policies differ, so the rows prove each kept its own")
}

// EnqueueMany's insert takes the unique index's entries in its order
// (runstore.InsertRunsWith's ORDER BY): batches racing on the same keys,
// each in another order, never deadlock, and every key gets one run that
// every batch reports (the first inserts it, the others find it through
// the idempotent insert after their first form met a taken key).
func TestEnqueueManyRacingBatchesAgreeOnEachKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newDB(t)
	eng := newEngine(t, pool, fastConfig())
	const batches, keys = 8, 2000
	results := make([][]port.EnqueueResult, batches)
	var wg sync.WaitGroup
	for b := range batches {
		items := make([]port.EnqueueItem, keys)
		for i := range items {
			k := i
			if b%2 == 1 {
				k = keys - 1 - i // the reverse order
			}
			items[i] = port.EnqueueItem{Kind: kinds.Three, Input: kinds.TagIn{Tag: "t"}, Options: port.EnqueueOptions{IdempotencyKey: fmt.Sprintf("k%04d", k)}}
		}
		wg.Go(func() {
			res, err := eng.EnqueueMany(ctx, items)
			assert.NoError(t, err)
			results[b] = res
		})
	}
	wg.Wait()
	byKey := map[string]port.RunID{}
	created := 0
	for b, res := range results {
		require.Len(t, res, keys)
		for i, r := range res {
			k := i
			if b%2 == 1 {
				k = keys - 1 - i
			}
			key := fmt.Sprintf("k%04d", k)
			if id, ok := byKey[key]; ok {
				require.Equal(t, id, r.ID, "key %s", key)
			}
			byKey[key] = r.ID
			if r.Created {
				created++
			}
		}
	}
	require.Equal(t, keys, created, "each key created once")
	var runs int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM taskport.run`).Scan(&runs))
	require.Equal(t, keys, runs)
}
