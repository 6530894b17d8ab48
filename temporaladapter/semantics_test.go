package temporaladapter_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"

	"github.com/taskport/taskport/internal/runstore"
	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/temporaladapter"
	"github.com/taskport/taskport/test/contract/kinds"
)

// These tests hold the RunView and Cancel rows of the port's semantics
// (issue 24) where Temporal had its own reading.

// waitClosed polls until the run's workflow has closed, and returns how.
func (h *harness) waitClosed(id port.RunID) enumspb.WorkflowExecutionStatus {
	h.t.Helper()
	var status enumspb.WorkflowExecutionStatus
	require.EventuallyWithT(h.t, func(c *assert.CollectT) {
		desc, err := h.c.DescribeWorkflow(context.Background(), temporaladapter.WorkflowID(id), "")
		require.NoError(c, err)
		status = desc.Status
		require.NotEqual(c, enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, status)
	}, 60*time.Second, 50*time.Millisecond)
	return status
}

// getEventually polls Get until cond holds on the view.
func getEventually(t *testing.T, eng *temporaladapter.Engine, id port.RunID, cond func(c *assert.CollectT, v port.RunView)) port.RunView {
	t.Helper()
	var v port.RunView
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var err error
		v, err = eng.Get(context.Background(), id)
		require.NoError(c, err)
		cond(c, v)
	}, 60*time.Second, 50*time.Millisecond)
	return v
}

// A Cancel that lands after the run's row is committed and before its
// workflow starts is kept: the start that follows (EnqueueMany's, still in
// flight) finds the workflow Cancel started with the canceled mark, and the
// run ends canceled without running a step. Get, ListRuns and the step's
// side table agree.
func TestCancelBeforeTheWorkflowStartsIsHonoured(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	eng := h.engine(temporaladapter.Config{})
	ctx := context.Background()
	input, err := json.Marshal(kinds.TagIn{Tag: "early-cancel"})
	require.NoError(t, err)
	run, created, err := runstore.Insert(ctx, h.pool, runstore.NewRun{
		Engine: runstore.EngineTemporal, Kind: kinds.Three, Version: 1, Key: "early-cancel", Input: input,
	})
	require.NoError(t, err)
	require.True(t, created)

	require.NoError(t, eng.Cancel(ctx, run.ID, "changed my mind"))
	// The start of the Enqueue that read the run before the cancel.
	require.NoError(t, temporaladapter.StartWorkflow(ctx, eng, run))

	require.Equal(t, enumspb.WORKFLOW_EXECUTION_STATUS_CANCELED, h.waitClosed(run.ID))
	stored := h.waitStatus(run.ID, port.StatusCanceled)
	require.Empty(t, stored.LastError)
	view, err := eng.Get(ctx, run.ID)
	require.NoError(t, err)
	require.Equal(t, port.StatusCanceled, view.Status)
	require.Empty(t, view.LastError)
	listed, err := eng.ListRuns(ctx, port.RunFilter{Kind: kinds.Three})
	require.NoError(t, err)
	require.Len(t, listed, 1)
	require.Equal(t, port.StatusCanceled, listed[0].Status)
	require.Empty(t, h.effects(run.ID), "no step ran")
}

// The reproduction: one EnqueueMany of 300 runs, 50 of them
// canceled at once while their workflows are being started. Every canceled
// run ends canceled, and none of them ran its step.
func TestCancelsDuringEnqueueManyAreHonoured(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	eng := h.engine(temporaladapter.Config{})
	ctx := context.Background()
	items := make([]port.EnqueueItem, 300)
	for i := range items {
		bk := "kept"
		if i >= 250 {
			bk = "withdrawn"
		}
		items[i] = port.EnqueueItem{Kind: kinds.Three, Input: kinds.TagIn{Tag: fmt.Sprint(i)},
			Options: port.EnqueueOptions{IdempotencyKey: fmt.Sprintf("many:%d", i), BusinessKey: bk}}
	}
	ids := make(chan port.RunID, 50)
	enqueued := make(chan error, 1)
	go func() {
		_, err := eng.EnqueueMany(ctx, items)
		enqueued <- err
	}()
	// The rows are committed in one statement before any start: cancel the
	// last 50 as soon as they are there.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		runs, err := eng.ListRuns(ctx, port.RunFilter{Kind: kinds.Three, BusinessKey: "withdrawn"})
		require.NoError(c, err)
		require.Len(c, runs, 50)
		for _, r := range runs {
			ids <- r.ID
		}
	}, 60*time.Second, time.Millisecond)
	close(ids)
	var canceled []port.RunID
	errs := make(chan error, 50)
	for id := range ids {
		canceled = append(canceled, id)
		go func() { errs <- eng.Cancel(ctx, id, "batch withdrawn") }()
	}
	for range canceled {
		require.NoError(t, <-errs)
	}
	require.NoError(t, <-enqueued)
	for _, id := range canceled {
		h.waitClosed(id)
		require.Equal(t, port.StatusCanceled, h.waitStatus(id, port.StatusCanceled).Status)
		view, err := eng.Get(ctx, id)
		require.NoError(t, err)
		require.Equal(t, port.StatusCanceled, view.Status, "run %s", id)
		require.Empty(t, h.effects(id), "run %s ran a step after its cancel returned", id)
	}
}

// unbound is declared and never bound: no worker has a body for it.
var unbound = port.DeclareActivity[string, int]("tp.unbound")

// A step whose activity was never bound fails at once, for good, with the
// registry's error, as on the lease engine: one attempt, not Temporal's
// retries ending in the SDK's "unable to find activityType".
func TestUnboundActivityFailsAtOnceAndForGood(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	var got *port.StepError
	def := port.Definition{Kind: "tp.unbound", Version: 1, Retry: kinds.FastRetry, Handler: port.Handle(func(f port.Flow, _ kinds.TagIn) error {
		_, err := unbound.Run(f, "missing", "x")
		errors.As(err, &got)
		return err
	})}
	eng := h.engine(temporaladapter.Config{}, def)
	id := h.enqueue(eng, def.Kind, kinds.TagIn{Tag: "unbound"}, port.EnqueueOptions{IdempotencyKey: "unbound"})
	run := h.waitStatus(id, port.StatusFailed)

	want := &port.StepError{Step: "missing", Activity: "tp.unbound", Attempts: 1, NonRetryable: true,
		Message: `activity "tp.unbound": taskport: invalid input: unknown activity`}
	require.Equal(t, want, got)
	require.Equal(t, want.Error(), run.LastError)
	var scheduled, failed int
	for _, ev := range h.history(id) {
		switch ev.GetEventType() {
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
			scheduled++
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_FAILED:
			failed++
		}
	}
	require.Equal(t, []int{1, 1}, []int{scheduled, failed})
}

// A run canceled while it waits ends canceled with no last error: the
// cancel's reason is not an error.
func TestCanceledRunHasNoLastError(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	eng := h.engine(temporaladapter.Config{})
	ctx := context.Background()
	id := h.enqueue(eng, kinds.Wait, wait("cancel-no-error"), port.EnqueueOptions{IdempotencyKey: "cancel-no-error"})
	h.waitStatus(id, port.StatusWaiting)
	require.NoError(t, eng.Cancel(ctx, id, "not needed"))

	require.Equal(t, enumspb.WORKFLOW_EXECUTION_STATUS_CANCELED, h.waitClosed(id))
	run := h.waitStatus(id, port.StatusCanceled)
	require.Empty(t, run.LastError)
	require.Equal(t, "wait-0", run.CurrentStep)
	require.Zero(t, run.Attempts, "a wait is not an attempt")
	view, err := eng.Get(ctx, id)
	require.NoError(t, err)
	require.Equal(t, port.StatusCanceled, view.Status)
	require.Empty(t, view.LastError)
}

// Between two attempts of a step (its retry backoff) no worker holds the
// run: Get reads pending, with the one attempt that ran and its error (the
// pending activity, SCHEDULED for attempt 2, reports Attempt 2).
func TestRetryBackoffReadsPendingWithTheAttemptsThatRan(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	def := port.Definition{Kind: "tp.backoff", Version: 1,
		Retry: port.RetryPolicy{MaxAttempts: 3, InitialInterval: time.Hour, MaxInterval: time.Hour, BackoffCoefficient: 2},
		Handler: port.Handle(func(f port.Flow, _ kinds.TagIn) error {
			_, err := kinds.Fail.Run(f, "fail", "retryable")
			return err
		})}
	eng := h.engine(temporaladapter.Config{}, def)
	id := h.enqueue(eng, def.Kind, kinds.TagIn{Tag: "backoff"}, port.EnqueueOptions{IdempotencyKey: "backoff"})

	view := getEventually(t, eng, id, func(c *assert.CollectT, v port.RunView) {
		require.Equal(c, "attempt 1 failed", v.LastError)
	})
	require.Equal(t, port.StatusPending, view.Status)
	require.Equal(t, 1, view.Attempts)
	require.Equal(t, "fail", view.CurrentStep)
	require.Equal(t, map[string]int{"fail:retryable": 1}, h.effects(id))
	require.NoError(t, eng.Cancel(context.Background(), id, "done looking"))
	h.waitStatus(id, port.StatusCanceled)
}

// A step scheduled and due but not yet started (every activity slot of the
// one worker is taken) reads running with no attempt, and is not the run's
// CurrentStep: its body has not started (as on the lease engine).
func TestScheduledStepIsNotTheRunsStepUntilItStarts(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	reg := port.NewRegistry()
	require.NoError(t, kinds.Register(reg, h.pool, kinds.Definitions(false)...))
	eng, err := temporaladapter.New(h.c, h.pool, reg, temporaladapter.Config{TaskQueue: h.queue, WorkerStopTimeout: 5 * time.Second, Logger: testLogger()})
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, eng.Start(ctx, port.StartOptions{Concurrency: 1}))
	t.Cleanup(func() { _ = eng.Stop(context.Background()) })

	holder := h.enqueue(eng, kinds.Hold, kinds.WaitIn{Gate: "slot"}, port.EnqueueOptions{IdempotencyKey: "holder"})
	require.Eventually(t, func() bool { return h.effects(holder)["hold:started"] == 1 }, 60*time.Second, 50*time.Millisecond)
	started := getEventually(t, eng, holder, func(c *assert.CollectT, v port.RunView) {
		require.Equal(c, port.StatusRunning, v.Status)
	})
	require.Equal(t, 1, started.Attempts, "the holder's attempt started")

	queued := h.enqueue(eng, kinds.Hold, kinds.WaitIn{Gate: "slot"}, port.EnqueueOptions{IdempotencyKey: "queued"})
	view := getEventually(t, eng, queued, func(c *assert.CollectT, v port.RunView) {
		require.Equal(c, port.StatusRunning, v.Status)
	})
	pendingActivities := func() int {
		desc, err := h.c.DescribeWorkflow(ctx, temporaladapter.WorkflowID(queued), "")
		require.NoError(t, err)
		return len(desc.RawResponse.GetPendingActivities())
	}
	require.Eventually(t, func() bool { return pendingActivities() == 1 }, 60*time.Second, 50*time.Millisecond, "the step was never scheduled")
	view, err = eng.Get(ctx, queued)
	require.NoError(t, err)
	require.Equal(t, port.StatusRunning, view.Status)
	require.Empty(t, view.CurrentStep, "the run is not in a step no body of which started")
	require.Zero(t, view.Attempts)
	require.Empty(t, h.effects(queued), "its body has not started")

	require.NoError(t, kinds.OpenEffectGate(ctx, h.pool, "slot"))
	h.waitStatus(holder, port.StatusSucceeded)
	h.waitStatus(queued, port.StatusSucceeded)
}

// flaky fails the first two attempts of its step and succeeds on the third.
var flaky = port.DeclareActivity[string, int]("tp.flaky")

// A step that succeeded on its third attempt leaves no last error. The
// projection (what ListRuns reads) says so while the next step runs, which
// the Temporal engine does not project; the wait after it reads no attempt;
// the run ended reads the wait it was last in.
func TestStepSucceededAfterRetriesClearsTheLastError(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	def := port.Definition{Kind: "tp.flaky", Version: 1, Retry: kinds.FastRetry, Handler: port.Handle(func(f port.Flow, in kinds.WaitIn) error {
		if _, err := flaky.Run(f, "flaky", "x"); err != nil {
			return err
		}
		if _, err := kinds.HoldStep.Run(f, "hold", kinds.HoldIn{Gate: in.Gate}); err != nil {
			return err
		}
		_, err := f.WaitSignal("wait", in.Topic, time.Hour, nil)
		return err
	})}
	reg := port.NewRegistry()
	require.NoError(t, kinds.Register(reg, h.pool))
	require.NoError(t, reg.RegisterActivity(port.Bind(flaky, func(ctx context.Context, _ string) (int, error) {
		info, _ := port.StepInfoFrom(ctx)
		if info.Attempt < 3 {
			return 0, fmt.Errorf("attempt %d failed", info.Attempt)
		}
		return info.Attempt, nil
	})))
	require.NoError(t, reg.Register(def))
	eng := h.serve(temporaladapter.Config{}, reg)
	ctx := context.Background()
	id := h.enqueue(eng, def.Kind, kinds.WaitIn{Gate: "flaky", Topic: "flaky"}, port.EnqueueOptions{IdempotencyKey: "flaky"})

	require.Eventually(t, func() bool { return h.effects(id)["hold:started"] == 1 }, 60*time.Second, 50*time.Millisecond)
	run, err := runstore.Get(ctx, h.pool, id)
	require.NoError(t, err)
	require.Equal(t, []any{port.StatusRunning, "flaky", 3, ""}, []any{run.Status, run.CurrentStep, run.Attempts, run.LastError})
	require.NoError(t, kinds.OpenEffectGate(ctx, h.pool, "flaky"))

	run = h.waitStatus(id, port.StatusWaiting)
	require.Equal(t, []any{"wait", 0, ""}, []any{run.CurrentStep, run.Attempts, run.LastError})
	_, err = eng.Signal(ctx, "flaky", nil)
	require.NoError(t, err)
	run = h.waitStatus(id, port.StatusSucceeded)
	require.Equal(t, []any{"wait", 0, ""}, []any{run.CurrentStep, run.Attempts, run.LastError})
}

// A run in a Sleep reads waiting, in the sleep, with no attempt, in the
// projection as in Get.
func TestSleepingRunReadsWaitingInTheSleep(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	eng := h.engine(temporaladapter.Config{})
	ctx := context.Background()
	in := wait("nap")
	in.Nap = kinds.Duration(time.Hour)
	id := h.enqueue(eng, kinds.Wait, in, port.EnqueueOptions{IdempotencyKey: "nap"})

	run := h.waitStatus(id, port.StatusWaiting)
	require.Equal(t, []any{"nap", 0, ""}, []any{run.CurrentStep, run.Attempts, run.LastError})
	view, err := eng.Get(ctx, id)
	require.NoError(t, err)
	require.Equal(t, []any{port.StatusWaiting, "nap", 0, ""}, []any{view.Status, view.CurrentStep, view.Attempts, view.LastError})
	require.NoError(t, eng.Cancel(ctx, id, "woken"))
	run = h.waitStatus(id, port.StatusCanceled)
	require.Equal(t, []any{"nap", 0, ""}, []any{run.CurrentStep, run.Attempts, run.LastError})
	require.Empty(t, h.effects(id))
}

// A step that never heartbeats learns of its run's cancel all the same, as
// on the lease engine: Temporal would tell it only in the answer to a
// heartbeat, so the adapter's cancel watch does. Through Cancel's NOTIFY
// (with the watch's poll an hour away), and through the poll alone (the
// flag written with no NOTIFY and no workflow cancel, as a NOTIFY missed
// while the worker's listener reconnected leaves it). Either way the body
// stops with port.ErrCanceled, nothing runs after it, and the run ends
// canceled with the one attempt that ran.
func TestCancelReachesAStepThatNeverHeartbeats(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		cfg    temporaladapter.Config
		cancel func(eng *temporaladapter.Engine, pool *pgxpool.Pool, id port.RunID) error
	}{
		{"notify", temporaladapter.Config{CancelPollInterval: time.Hour}, func(eng *temporaladapter.Engine, _ *pgxpool.Pool, id port.RunID) error {
			return eng.Cancel(context.Background(), id, "stop the copy")
		}},
		{"poll", temporaladapter.Config{CancelPollInterval: 200 * time.Millisecond}, func(_ *temporaladapter.Engine, pool *pgxpool.Pool, id port.RunID) error {
			_, err := runstore.RequestCancel(context.Background(), pool, runstore.EngineTemporal, id, "stop the copy")
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			eng := h.engine(tc.cfg)
			id := h.enqueue(eng, kinds.Hold, kinds.WaitIn{Gate: "never-opens", Quiet: true}, port.EnqueueOptions{IdempotencyKey: "quiet"})
			require.EventuallyWithT(t, func(c *assert.CollectT) {
				require.Equal(c, 1, h.effects(id)["hold:started"])
			}, 60*time.Second, 20*time.Millisecond)

			require.NoError(t, tc.cancel(eng, h.pool, id))
			run := h.waitStatus(id, port.StatusCanceled)
			require.Equal(t, 1, run.Attempts)
			require.Empty(t, run.LastError)
			notes, err := kinds.Notes(context.Background(), h.pool, id)
			require.NoError(t, err)
			require.Contains(t, notes["hold:stopped"], port.ErrCanceled.Error(), "the body's context said why it ended")
			require.Equal(t, map[string]int{"hold:started": 1, "hold:stopped": 1}, h.effects(id), "one attempt, and no step after it")
		})
	}
}
