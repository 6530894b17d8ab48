package temporaladapter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"go.opentelemetry.io/otel/propagation"
	otelinterceptor "go.temporal.io/sdk/contrib/opentelemetry"
	"log/slog"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	"github.com/taskport/taskport/internal/dbtx"
	"github.com/taskport/taskport/internal/enginekit"
	"github.com/taskport/taskport/internal/runstore"
	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/port/engineapi"
)

// activityFunc wraps a registered activity body as a Temporal activity. It
// runs the attempt through the engines' one activity runtime
// (enginekit.RunActivity) with the step's identity and Temporal's fencing
// token, maps Temporal's cancellation causes onto port.ErrCanceled and
// port.ErrLeaseLost, projects the step into Postgres, and marks the error
// non-retryable when the body asked for it.
func (e *Engine) activityFunc(b port.ActivityBinding, watch *cancelWatch) func(context.Context, stepCall) (stepResult, error) {
	return func(ctx context.Context, call stepCall) (stepResult, error) {
		ai := activity.GetInfo(ctx)
		kind, version := parseWorkflowType(ai.WorkflowType.Name)
		info := port.StepInfo{
			RunID:   runIDFromWorkflowID(ai.WorkflowExecution.ID),
			Kind:    kind,
			Version: version,
			Step:    ai.ActivityID,
			Attempt: int(ai.Attempt),
			Token: enginekit.TemporalToken(ai.WorkflowExecution.ID, ai.WorkflowExecution.RunID, ai.ActivityID,
				int(ai.Attempt), call.Generation),
		}
		log := e.logger.With(slog.String("run_id", string(info.RunID)), slog.String("step", info.Step), slog.Int("attempt", info.Attempt))
		// The body's context ends when Temporal's does, but with the port's
		// cause; it does not inherit Temporal's cause, hence WithoutCancel.
		// The cancel watch ends it too, sooner: registered before the flag
		// read below, it reaches a body whose cancel that read missed.
		sctx, stop := context.WithCancelCause(context.WithoutCancel(ctx))
		defer stop(nil)
		release := context.AfterFunc(ctx, func() { stop(stopCause(ctx)) })
		defer release()
		defer watch.add(info.RunID, stop)()
		// Cancel writes the run's flag before it cancels the workflow, and
		// this task may have been handed out in between (a slot freed
		// before the workflow saw the cancel): no body starts once Cancel
		// returned. One primary-key read per attempt; the attempt that
		// moves the run's projection to running reads it in the same
		// statement (runstore.StartStep).
		var canceled bool
		var err error
		if call.Project && info.Attempt == 1 {
			canceled, err = runstore.StartStep(ctx, e.pool, info.RunID, info.Step, 1)
		} else {
			canceled, err = runstore.CancelRequested(ctx, e.pool, info.RunID)
		}
		switch {
		case err != nil:
			return stepResult{}, fmt.Errorf("step %s: %w", info.Step, err)
		case canceled:
			return stepResult{}, temporal.NewNonRetryableApplicationError(canceledBeforeStart, stepCanceledType, nil)
		}
		if info.Attempt > 1 {
			e.unstick(ctx, log, ai)
		}

		// Temporal's server times the attempt out at its heartbeat
		// timeout, but its worker learns of it only from a heartbeat's
		// answer, which a stalled body never asks for: the body's context
		// ends here at the same bound, as the lease engine's does.
		hb, disarm := enginekit.WatchHeartbeats(heartbeat{activityCtx: ctx}, ai.HeartbeatTimeout, stop)
		defer disarm()
		out, err := enginekit.RunActivity(sctx, b, info, hb, call.Input)
		if timedOut := enginekit.TimedOut(sctx); timedOut != nil {
			// What the body returned after its timeout is not the
			// attempt's outcome (the server records the timeout); the
			// projection reads the timeout, as the lease engine's does.
			out, err = nil, timedOut
		}
		if err == nil {
			if info.Attempt > 1 {
				// The failure projected by the attempt before is not the
				// step's any more: the run reads this attempt, no error.
				e.books.projectQuietly(ctx, log, info.RunID, projection{Status: port.StatusRunning, Attempts: info.Attempt, Step: info.Step})
			}
			return stepResult{Output: out, Attempt: info.Attempt}, nil
		}
		if errors.As(context.Cause(ctx), new(*temporal.CanceledError)) {
			// Reported as canceled, not failed, so Temporal does not retry.
			// The attempt rides along: the run ends with it as its Attempts.
			return stepResult{}, temporal.NewCanceledError(err.Error(), info.Attempt)
		}
		if errors.Is(context.Cause(sctx), port.ErrCanceled) {
			// The cancel watch ended the body before Temporal told the
			// activity: failed for good, with the attempt, so the run
			// ends canceled with it as its Attempts (canceledAttempts).
			return stepResult{}, temporal.NewApplicationErrorWithOptions(err.Error(), stepCanceledType, temporal.ApplicationErrorOptions{
				NonRetryable: true,
				Details:      []any{info.Attempt},
			})
		}
		e.books.projectQuietly(ctx, log, info.RunID, projection{Status: port.StatusRunning, Attempts: info.Attempt, Step: info.Step, LastError: err.Error()})
		return stepResult{}, temporal.NewApplicationErrorWithOptions(err.Error(), stepErrorType, temporal.ApplicationErrorOptions{
			NonRetryable: port.IsNonRetryable(err),
			Cause:        err,
			Details:      []any{info.Attempt},
		})
	}
}

// unknownActivity is the worker's dynamic activity: Temporal hands it the
// steps whose activity this worker has no body for (never bound in the
// registry). It fails the step at once, for good, with the registry's
// error, as the lease engine does; without it the SDK would retry the step
// with "unable to find activityType" until its attempts ran out. A dynamic
// activity, rather than a registry check in the workflow before
// scheduling, leaves the history of every bound step as it was, and keeps
// the workflow code free of worker state that a replay on another worker
// could see differently (a step recorded as scheduled would not be, or the
// reverse).
func (e *Engine) unknownActivity(ctx context.Context, _ converter.EncodedValues) (stepResult, error) {
	ai := activity.GetInfo(ctx)
	_, err := engineapi.Activity(e.reg, ai.ActivityType.Name)
	if err == nil {
		// Bound after Start: this worker did not register it.
		err = fmt.Errorf("activity %q: %w", ai.ActivityType.Name, port.ErrUnknownActivity)
	}
	return stepResult{}, temporal.NewApplicationErrorWithOptions(err.Error(), stepErrorType, temporal.ApplicationErrorOptions{
		NonRetryable: true,
		Details:      []any{int(ai.Attempt)},
	})
}

// unstick sends the run's next workflow task to the task queue that every
// worker polls instead of the sticky queue of the worker that ran its last
// one. A retried attempt often follows a worker that died or froze (its
// attempt timed out), and the workflow task this attempt's completion
// schedules would wait on that worker's sticky queue until the sticky
// schedule-to-start timeout (Config.StickyScheduleToStartTimeout) moved it
// on: about a second of every takeover (docs/engines.md, the recovery soak). The cost,
// once per retried attempt: whichever worker takes that workflow task
// replays the run's history. A failed reset costs only that second.
func (e *Engine) unstick(ctx context.Context, log *slog.Logger, ai activity.Info) {
	ctx, cancel := context.WithTimeout(ctx, unstickTimeout)
	defer cancel()
	_, err := e.client.WorkflowService().ResetStickyTaskQueue(ctx, &workflowservice.ResetStickyTaskQueueRequest{
		Namespace: ai.Namespace,
		Execution: &commonpb.WorkflowExecution{WorkflowId: ai.WorkflowExecution.ID, RunId: ai.WorkflowExecution.RunID},
	})
	if err != nil {
		log.WarnContext(ctx, "reset the run's sticky task queue", slog.String("error", err.Error()))
	}
}

// unstickTimeout bounds the reset, which delays the step's body.
const unstickTimeout = 2 * time.Second

// stopCause says why Temporal ended an activity context: a cancel request
// seen by a heartbeat means the run was canceled; its deadline (the step
// timeout) is enginekit.ErrAttemptTimeout; anything else (the server timed
// the attempt out and a retry may be running elsewhere, the worker is
// stopping) means this attempt no longer owns the step. Both of the latter
// match port.ErrLeaseLost.
func stopCause(ctx context.Context) error {
	switch {
	case errors.As(context.Cause(ctx), new(*temporal.CanceledError)):
		return port.ErrCanceled
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return enginekit.ErrAttemptTimeout
	}
	return port.ErrLeaseLost
}

// heartbeat is Temporal's half of the activity runtime (enginekit.Beater).
// It reads Temporal's activity context directly: the heartbeat that learns
// of a cancel ends it synchronously, before the body's context follows.
type heartbeat struct{ activityCtx context.Context }

// Beat records progress (shown in the Temporal UI as heartbeat details); a
// cancel request or a lost attempt is learned from its response. The
// progress is encoded once, here, as the lease engine encodes it, and
// handed to the SDK as that JSON; progress that does not encode is dropped,
// as there (the SDK would panic on it, and the attempt fail).
func (h heartbeat) Beat(ctx context.Context, progress any) error {
	if b, err := enginekit.EncodePayload("progress", progress); err != nil {
		activity.RecordHeartbeat(ctx)
	} else {
		activity.RecordHeartbeat(ctx, b)
	}
	if h.activityCtx.Err() == nil {
		return nil
	}
	return stopCause(h.activityCtx)
}

// bookkeeping is the adapter's own Postgres work, run by workflows as local
// activities (cheap: no task-queue round trip) and by activities inline.
type bookkeeping struct {
	pool   *dbtx.Pool
	client client.Client // hands kept signals to the runs that wait (addWaiter)
	logger *slog.Logger
}

// stepCall is the argument of every step activity: the step's encoded input,
// whether this attempt moves the run's projection to running, and the run's
// generation for the step's fencing token (see runInput).
type stepCall struct {
	Input      json.RawMessage `json:"input"`
	Project    bool            `json:"project,omitempty"`
	Generation int64           `json:"generation,omitempty"`
}

// stepResult is what a step activity returns: the body's encoded output and
// the attempt that produced it, so the terminal projection needs no read.
type stepResult struct {
	Output  json.RawMessage `json:"output"`
	Attempt int             `json:"attempt"`
}

// projection is the argument of the project local activity. An empty Step
// keeps the recorded step and attempts (one read more); LastError is always
// written as given. KeepAttempts (a run canceled in Step before an attempt
// reported) takes the attempts recorded for Step, those of the failed
// attempts projected before a retry's backoff; when the record is of
// another step, no body of Step started, and the run ends in PrevStep with
// PrevAttempts.
type projection struct {
	Status       port.Status
	Attempts     int
	Step         string
	LastError    string
	KeepAttempts bool   `json:",omitempty"`
	PrevStep     string `json:",omitempty"`
	PrevAttempts int    `json:",omitempty"`
	// Output is the result of a run that succeeded (runstore.Projection).
	Output json.RawMessage `json:",omitempty"`
}

// project writes the run's projection without waiting for the disk
// (runstore.ProjectLazily): this write sits on every run's path (the first
// step, the end), and one lost to a Postgres crash is repaired as every
// missing projection is: a later write of the run, the reconciler, or a Get
// that finds the workflow closed. A terminal write is the workflow's end
// (runstore.EndLazily): it returns the status written, canceled when the
// run's cancel was requested whatever p says, "" when the row was terminal
// already. Histories recorded before it returned a status replay with "".
func (b *bookkeeping) project(ctx context.Context, id port.RunID, p projection) (port.Status, error) {
	rp := runstore.Projection{Status: p.Status, Attempts: p.Attempts, LastError: p.LastError, CurrentStep: p.Step, Output: p.Output}
	if p.Step == "" || p.KeepAttempts {
		run, err := runstore.Get(ctx, b.pool, id)
		if err != nil {
			return "", err
		}
		switch {
		case p.Step == "":
			rp.CurrentStep, rp.Attempts = run.CurrentStep, run.Attempts
		case run.CurrentStep == p.Step:
			rp.Attempts = run.Attempts
		default:
			rp.CurrentStep, rp.Attempts = p.PrevStep, p.PrevAttempts
		}
	}
	if p.Status.Terminal() {
		return runstore.EndLazily(ctx, b.pool, id, rp)
	}
	return p.Status, runstore.ProjectLazily(ctx, b.pool, id, rp)
}

// projectQuietly is for activities: the projection is a read model, so a
// failed write is logged rather than failing the step.
func (b *bookkeeping) projectQuietly(ctx context.Context, log *slog.Logger, id port.RunID, p projection) {
	if _, err := b.project(ctx, id, p); err != nil {
		log.WarnContext(ctx, "project step", slog.String("error", err.Error()))
	}
}

// keptSignal is what takeKept found: a signal kept for the topic, or none.
// Trace is its sender's span in the tracing interceptor's header format,
// for the wait to continue as it would a signal's header (continueTrace);
// none in a history written before it was added.
type keptSignal struct {
	Payload json.RawMessage   `json:"payload,omitempty"`
	OK      bool              `json:"ok"`
	Trace   map[string]string `json:"trace,omitempty"`
}

// takeKept is the local activity of a wait that does not park (a zero
// timeout): it takes a signal kept for the topic, if any
// (runstore.TakeOneKeptSignal). The sender's trace is written as the
// tracing interceptor writes a header: with its propagator, which
// tracerOptions leaves at the SDK's default.
func (b *bookkeeping) takeKept(ctx context.Context, id port.RunID, topic port.Topic, step string) (keptSignal, error) {
	k, ok, err := runstore.TakeOneKeptSignal(ctx, b.pool, topic, id, step)
	if err != nil || !ok {
		return keptSignal{}, err
	}
	out := keptSignal{Payload: k.Payload, OK: true}
	if k.Trace.Parent != "" {
		carrier := propagation.MapCarrier{}
		otelinterceptor.DefaultTextMapPropagator.Inject(k.Trace.Into(context.Background()), carrier)
		if len(carrier) > 0 {
			out.Trace = carrier
		}
	}
	return out, nil
}

// addWaiter registers the run as waiting on topic and projects it waiting,
// in one transaction: registered before it reads waiting, as before
// 49f6fb8, whose projection ahead of the registration let a Signal find a
// waiting run unparked and keep its signal. A signal sent to the
// topic while nobody waited was kept (Engine.Signal): addWaiter sends the
// oldest one to the run now, so the wait that follows receives it at once,
// and marks it taken by this wait in the same transaction
// (runstore.WaitTakingKeptSignal). The others stay kept, one for each wait
// that follows, this run's or another's.
func (b *bookkeeping) addWaiter(ctx context.Context, id port.RunID, topic port.Topic, step string) error {
	return runstore.WaitTakingKeptSignal(ctx, b.pool, topic, id, step, func(k runstore.KeptSignal) error {
		// Sent under the sender's trace, which the wait then continues
		// (continueTrace), as it would a signal sent to it directly.
		if err := interpretError(b.client.SignalWorkflow(k.Trace.Into(ctx), WorkflowID(id), "", string(topic), k.Payload)); err != nil {
			return fmt.Errorf("hand the kept signal %d on %s to run %s: %w", k.ID, topic, id, err)
		}
		return nil
	})
}

// waitReturned marks the run's registration on topic as past its wait and
// reports whether a Signal counted the wait (runstore.WaitReturned). A
// worker of an earlier release recorded no result; replayed, it reads
// false.
func (b *bookkeeping) waitReturned(ctx context.Context, id port.RunID, topic port.Topic) (bool, error) {
	return runstore.WaitReturned(ctx, b.pool, topic, id)
}

func (b *bookkeeping) removeWaiters(ctx context.Context, id port.RunID, topics []port.Topic) error {
	for _, topic := range topics {
		if err := runstore.RemoveWaiter(ctx, b.pool, topic, id); err != nil {
			return err
		}
	}
	return nil
}
