package temporaladapter_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"

	"github.com/taskport/taskport/internal/runstore"
	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/temporaladapter"
	"github.com/taskport/taskport/temporaladapter/internal/testkinds"
)

func TestEnqueueIsIdempotentEvenAfterCompletion(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	eng := h.engine(true)
	ctx := context.Background()
	opts := port.EnqueueOptions{IdempotencyKey: "plan:1:steps", BusinessKey: "plan-1"}

	id, err := eng.Enqueue(ctx, testkinds.KindSteps, testkinds.StepsIn{Steps: 3}, opts)
	require.NoError(t, err)
	again, err := eng.Enqueue(ctx, testkinds.KindSteps, testkinds.StepsIn{Steps: 3}, opts)
	require.NoError(t, err)
	require.Equal(t, id, again)

	h.waitStatus(id, port.StatusSucceeded)
	for _, step := range []string{"s1", "s2", "s3"} {
		row, ok := h.ledger(id, step)
		require.True(t, ok, step)
		require.Equal(t, 1, row.Commits, step)
		require.Equal(t, 1, row.Begins, step)
	}

	after, err := eng.Enqueue(ctx, testkinds.KindSteps, testkinds.StepsIn{Steps: 3}, opts)
	require.NoError(t, err)
	require.Equal(t, id, after)
	require.Equal(t, 3, h.count(`SELECT count(*) FROM tp_test_ledger`), "re-enqueue after completion ran nothing")
	require.Equal(t, 3, h.count(`SELECT sum(begins) FROM tp_test_ledger`))

	view, err := eng.Get(ctx, id)
	require.NoError(t, err)
	require.Equal(t, port.StatusSucceeded, view.Status)
	require.Equal(t, "plan-1", view.BusinessKey)
	require.Equal(t, 1, h.count(`SELECT count(*) FROM taskport.run`))

	// Findable in the Temporal UI by kind, version and plan.
	desc, err := h.c.DescribeWorkflow(ctx, temporaladapter.WorkflowID(id), "")
	require.NoError(t, err)
	require.Equal(t, "test.steps@v1", desc.WorkflowType.Name)
	sa := desc.TypedSearchAttributes
	kind, _ := sa.GetKeyword(temporal.NewSearchAttributeKeyKeyword(temporaladapter.AttrKind))
	version, _ := sa.GetInt64(temporal.NewSearchAttributeKeyInt64(temporaladapter.AttrVersion))
	plan, _ := sa.GetKeyword(temporal.NewSearchAttributeKeyKeyword(temporaladapter.AttrBusinessKey))
	require.Equal(t, []any{"test.steps", int64(1), "plan-1"}, []any{kind, version, plan})
	require.Contains(t, desc.Memo.GetFields(), "taskport")
	var memo struct {
		IdempotencyKey string `json:"idempotency_key"`
		Input          string `json:"input"`
	}
	require.NoError(t, json.Unmarshal(desc.Memo.GetFields()["taskport"].GetData(), &memo))
	require.Equal(t, "plan:1:steps", memo.IdempotencyKey)
	require.Empty(t, memo.Input, "the input is shown only for kinds that opt in (ShowInput)")
}

func TestAvailableAtDelaysTheFirstStep(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	eng := h.engine(true)
	ctx := context.Background()
	at := time.Now().Add(3 * time.Second)

	id, err := eng.Enqueue(ctx, testkinds.KindSteps, testkinds.StepsIn{Steps: 1}, port.EnqueueOptions{IdempotencyKey: "delayed", AvailableAt: at})
	require.NoError(t, err)
	view, err := eng.Get(ctx, id)
	require.NoError(t, err)
	require.Equal(t, port.StatusPending, view.Status)

	h.waitStatus(id, port.StatusSucceeded)
	var began time.Time
	require.NoError(t, h.pool.QueryRow(ctx, `SELECT created_at FROM taskport.run WHERE id = $1`, id).Scan(new(time.Time)))
	require.NoError(t, h.pool.QueryRow(ctx, `SELECT began FROM tp_test_ledger WHERE op = $1`, string(id)+"/s1").Scan(&began))
	require.False(t, began.Before(at), "first step began at %s, before AvailableAt %s", began, at)
}

func TestRetryExhaustionFailsTheRunAndListsADeadLetter(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	eng := h.engine(true)
	ctx := context.Background()

	id, err := eng.Enqueue(ctx, testkinds.KindSteps,
		testkinds.StepsIn{Steps: 3, Slow: 2, Step: testkinds.EffectIn{FailTimes: 99}}, port.EnqueueOptions{IdempotencyKey: "doomed"})
	require.NoError(t, err)
	run := h.waitStatus(id, port.StatusFailed)
	require.Contains(t, run.LastError, "injected failure on attempt 3")
	require.Equal(t, "s2", run.CurrentStep)

	row, ok := h.ledger(id, "s2")
	require.True(t, ok)
	require.Equal(t, testkinds.Retry.MaxAttempts, row.Begins, "every attempt of the policy ran")
	require.Equal(t, 0, row.Commits)
	_, ok = h.ledger(id, "s3")
	require.False(t, ok, "no step after the failed one")

	dead, err := eng.ListRuns(ctx, port.RunFilter{Statuses: []port.Status{port.StatusFailed}})
	require.NoError(t, err)
	require.Len(t, dead, 1)
	require.Equal(t, id, dead[0].ID)

	view, err := eng.Get(ctx, id)
	require.NoError(t, err)
	require.Equal(t, port.StatusFailed, view.Status)
	require.Contains(t, view.LastError, "injected failure")
}

func TestCancelMidStepLetsTheStepStopAndStartsNothingAfter(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	eng := h.engine(true)
	ctx := context.Background()

	id, err := eng.Enqueue(ctx, testkinds.KindSteps,
		testkinds.StepsIn{Steps: 3, Slow: 2, Step: testkinds.EffectIn{Chunks: 300, ChunkMS: 100}}, port.EnqueueOptions{IdempotencyKey: "cancel-mid-step"})
	require.NoError(t, err)
	h.waitBegun(id, "s2")
	view, err := eng.Get(ctx, id)
	require.NoError(t, err)
	require.Equal(t, port.StatusRunning, view.Status)
	require.Equal(t, "s2", view.CurrentStep)
	require.Equal(t, 1, view.Attempts)

	require.NoError(t, eng.Cancel(ctx, id, "user asked"))
	h.waitStatus(id, port.StatusCanceled)

	stored, err := runstore.Get(ctx, h.pool, id)
	require.NoError(t, err)
	require.False(t, stored.CancelRequestedAt.IsZero())
	require.Equal(t, "user asked", stored.CancelReason)
	var cause string
	require.NoError(t, h.pool.QueryRow(ctx, `SELECT string_agg(cause, ',') FROM tp_test_heartbeat_stop WHERE op = $1`, string(id)+"/s2").Scan(&cause))
	require.Equal(t, port.ErrCanceled.Error(), cause, "the running step learned of the cancel through its heartbeat")
	row, _ := h.ledger(id, "s2")
	require.Equal(t, 0, row.Commits)
	_, ok := h.ledger(id, "s3")
	require.False(t, ok, "a step after the cancel started")

	view, err = eng.Get(ctx, id)
	require.NoError(t, err)
	require.Equal(t, port.StatusCanceled, view.Status)
	require.NoError(t, eng.Cancel(ctx, id, "again"), "canceling a finished run is a no-op")
	require.ErrorIs(t, eng.Cancel(ctx, "00000000-0000-0000-0000-000000000000", "x"), port.ErrNotFound)
}

func TestCancelWhileWaiting(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	eng := h.engine(true)
	ctx := context.Background()

	id, err := eng.Enqueue(ctx, testkinds.KindWait, testkinds.WaitIn{Topic: "approval:plan-7"}, port.EnqueueOptions{IdempotencyKey: "cancel-waiting"})
	require.NoError(t, err)
	h.waitStatus(id, port.StatusWaiting)
	require.Equal(t, 1, h.count(`SELECT count(*) FROM taskport.waiter WHERE run_id = $1`, id))

	require.NoError(t, eng.Cancel(ctx, id, "no longer wanted"))
	h.waitStatus(id, port.StatusCanceled)
	_, ok := h.ledger(id, "after")
	require.False(t, ok, "the step after the wait started")
	require.Equal(t, 0, h.count(`SELECT count(*) FROM taskport.waiter WHERE run_id = $1`, id))
	n, err := eng.Signal(ctx, "approval:plan-7", "late")
	require.NoError(t, err)
	require.Zero(t, n)
}

func TestSignalWakesAWaiterAndTimeoutWithout(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	eng := h.engine(true)
	ctx := context.Background()

	id, err := eng.Enqueue(ctx, testkinds.KindWait, testkinds.WaitIn{Topic: "approval:plan-8"}, port.EnqueueOptions{IdempotencyKey: "signal"})
	require.NoError(t, err)
	h.waitStatus(id, port.StatusWaiting)
	n, err := eng.Signal(ctx, "approval:plan-8", "approved")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	h.waitStatus(id, port.StatusSucceeded)
	row, ok := h.ledger(id, "after")
	require.True(t, ok)
	require.Equal(t, "approved", row.Result)

	timed, err := eng.Enqueue(ctx, testkinds.KindWait, testkinds.WaitIn{Topic: "approval:plan-9", TimeoutMS: 200}, port.EnqueueOptions{IdempotencyKey: "timeout"})
	require.NoError(t, err)
	h.waitStatus(timed, port.StatusSucceeded)
	row, ok = h.ledger(timed, "after")
	require.True(t, ok)
	require.Equal(t, "timeout", row.Result)
}

func TestInvalidEnqueueIsRefusedBeforeAnythingIsWritten(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	eng := h.engine(false)
	ctx := context.Background()
	_, err := eng.Enqueue(ctx, "no.such.kind", nil, port.EnqueueOptions{IdempotencyKey: "k"})
	require.ErrorIs(t, err, port.ErrUnknownKind)
	_, err = eng.Enqueue(ctx, testkinds.KindSteps, map[string]int{"bogus": 1}, port.EnqueueOptions{IdempotencyKey: "k"})
	require.ErrorIs(t, err, port.ErrInvalidInput)
	_, err = eng.Get(ctx, "not-a-uuid")
	require.ErrorIs(t, err, port.ErrNotFound)
	require.Equal(t, 0, h.count(`SELECT count(*) FROM taskport.run`))
}

func TestSignalDuringAStepIsKeptForTheNextWait(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	eng := h.engine(true)
	ctx := context.Background()

	id, err := eng.Enqueue(ctx, testkinds.KindWait,
		testkinds.WaitIn{Topic: "import:plan-3", Middle: testkinds.EffectIn{Chunks: 100, ChunkMS: 50}}, port.EnqueueOptions{IdempotencyKey: "early"})
	require.NoError(t, err)
	h.waitStatus(id, port.StatusWaiting)
	n, err := eng.Signal(ctx, "import:plan-3", "one")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	h.waitBegun(id, "middle")
	n, err = eng.Signal(ctx, "import:plan-3", "two")
	require.NoError(t, err)
	require.Equal(t, 1, n, "a run between two waits on the topic accepts the signal")
	middle, _ := h.ledger(id, "middle")
	require.False(t, middle.Done, "the signal was sent while the step ran")

	h.waitStatus(id, port.StatusSucceeded)
	after, ok := h.ledger(id, "after")
	require.True(t, ok)
	require.Equal(t, "one+two", after.Result, "the second wait received the signal sent during the step")
	require.Equal(t, 0, h.count(`SELECT count(*) FROM taskport.waiter WHERE run_id = $1`, id))
}

func TestStopLetsTheInFlightStepFinish(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	eng := h.engine(true)
	ctx := context.Background()

	id, err := eng.Enqueue(ctx, testkinds.KindSteps,
		testkinds.StepsIn{Steps: 2, Slow: 1, Step: testkinds.EffectIn{Chunks: 10, ChunkMS: 100}}, port.EnqueueOptions{IdempotencyKey: "graceful"})
	require.NoError(t, err)
	h.waitBegun(id, "s1")
	require.NoError(t, eng.Stop(ctx)) // WorkerStopTimeout 5s > the step's 1s
	require.NoError(t, eng.Stop(ctx), "stop twice")
	s1, _ := h.ledger(id, "s1")
	require.True(t, s1.Done, "the in-flight step finished during Stop")
	require.Equal(t, int64(1), s1.Epoch)

	require.NoError(t, eng.Start(ctx, port.StartOptions{}))
	h.waitStatus(id, port.StatusSucceeded)
	s1, _ = h.ledger(id, "s1")
	require.Equal(t, 1, s1.Begins)
	require.NoError(t, eng.Stop(ctx))
}

func TestRenamedStepFailsTheRunLoudly(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := context.Background()
	v1 := h.engine(true, 1)
	id, err := v1.Enqueue(ctx, testkinds.KindVersioned, testkinds.WaitIn{Topic: "nondet:1"}, port.EnqueueOptions{IdempotencyKey: "nondet"})
	require.NoError(t, err)
	h.waitStatus(id, port.StatusWaiting)
	require.NoError(t, v1.Stop(ctx))

	// Same kind and version, first step renamed: the history no longer
	// matches, and the run must fail instead of blocking.
	// Its reconciler records the failure in the projection: the SDK fails
	// the workflow without the run's own terminal projection.
	reg := port.NewRegistry()
	require.NoError(t, reg.Register(renamedV1()))
	require.NoError(t, reg.RegisterActivity(port.Bind(testkinds.Effect, testkinds.Ledger{Pool: h.pool}.Effect)))
	changed, err := temporaladapter.New(h.c, h.pool, reg, temporaladapter.Config{TaskQueue: h.queue, Logger: testLogger(),
		ReconcileInterval: 100 * time.Millisecond, ReconcileAfter: 100 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, changed.Start(ctx, port.StartOptions{}))
	t.Cleanup(func() { _ = changed.Stop(ctx) })
	_, err = changed.Signal(ctx, "nondet:1", nil)
	require.NoError(t, err)

	run := h.waitStatus(id, port.StatusFailed) // the projection, without a Get
	require.Contains(t, run.LastError, "TMPRL1100", "the SDK's nondeterminism error, from the close event")
	view, err := changed.Get(ctx, id)
	require.NoError(t, err)
	require.Equal(t, port.StatusFailed, view.Status)
	_, ran := h.ledger(id, "v1.renamed")
	require.False(t, ran, "the renamed step never ran")
	dead, err := changed.ListRuns(ctx, port.RunFilter{Statuses: []port.Status{port.StatusFailed}})
	require.NoError(t, err)
	require.Len(t, dead, 1)
	_, ran = h.ledger(id, "v1.second")
	require.False(t, ran)
}
