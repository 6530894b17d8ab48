package temporaladapter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/taskport/taskport/internal/runstore"
	"github.com/taskport/taskport/internal/startstop"
	"github.com/taskport/taskport/port"
)

// reconciler keeps the Postgres projection of open runs true when their
// workflow ended without writing it: terminated by an operator, failed by the
// SDK on nondeterminism, or finished while its own terminal projection write
// failed. Otherwise only a Get notices, and the dead-letter list (ListRuns
// with Statuses failed) and plan views show such runs as open for good.
//
// Every Config.ReconcileInterval, one worker per database (the one that takes
// a transaction-level advisory lock; the others skip the round) reads up to
// Config.ReconcileBatch open Temporal runs whose projection was not written
// for Config.ReconcileAfter (an index range scan of run_open_temporal,
// continuing where the last round stopped, so that every open run is visited
// in turn) and describes each run's workflow. The writes only move an open
// row to a terminal status (runstore.Project never reopens a terminal row),
// so a round racing with the workflow's own write, or with another worker's
// round, is harmless.
//
// Why DescribeWorkflow per run rather than a visibility query for closed
// workflows: visibility is eventually consistent, so a query needs a lag
// margin and still misses late records; it lists a reset's terminated run
// while the workflow goes on under a new run ID, which would need a second
// lookup anyway; and a first round would have to read every execution closed
// within the retention. Describe answers for the workflow's current run, at
// once; its cost is bounded by the batch, and rounds visit only runs Postgres
// still holds open.
type reconciler struct {
	e      *Engine
	cancel context.CancelCauseFunc
	done   chan struct{}
	once   sync.Once
	// cursor is where the next round starts; only the loop touches it.
	cursor runstore.Cursor
}

// errReconcilerStopped is the cause of a stopped reconciler's context.
var errReconcilerStopped = errors.New("temporal projection reconciler stopped")

// reconcileLockSQL elects the round's reconciler among the workers of one
// database; the lock ends with the round's transaction.
const reconcileLockSQL = `SELECT pg_try_advisory_xact_lock(hashtextextended('taskport.temporal.reconcile', 0))`

// startReconciler runs the loop until stop. ctx is the engine's service
// context (startstop): it lives until Stop, and a fatal worker error cancels
// it, which ends the loop too.
func (e *Engine) startReconciler(ctx context.Context) *reconciler {
	ctx, cancel := context.WithCancelCause(ctx)
	r := &reconciler{e: e, cancel: cancel, done: make(chan struct{})}
	go r.loop(ctx)
	return r
}

// stop ends the loop and waits for the round in progress. Safe to call twice.
func (r *reconciler) stop() {
	r.once.Do(func() { r.cancel(errReconcilerStopped) })
	<-r.done
}

func (r *reconciler) loop(ctx context.Context) {
	defer close(r.done)
	startstop.Every(ctx, r.e.cfg.ReconcileInterval, func(ctx context.Context) {
		corrected, err := r.round(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			r.e.logger.WarnContext(ctx, "reconcile run projections", slog.String("error", err.Error()))
		case corrected > 0:
			r.e.logger.InfoContext(ctx, "reconciled run projections with Temporal", slog.Int("corrected", corrected))
		}
	})
}

// round checks one batch if this worker holds the round's lock, and returns
// how many projections it corrected.
func (r *reconciler) round(ctx context.Context) (int, error) {
	tx, err := r.e.pool.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("begin reconcile round: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // it only holds the lock
	var leader bool
	if err := tx.QueryRow(ctx, reconcileLockSQL).Scan(&leader); err != nil {
		return 0, fmt.Errorf("take reconcile lock: %w", err)
	}
	if !leader {
		return 0, nil
	}
	runs, err := runstore.StaleTemporal(ctx, r.e.pool, r.e.cfg.ReconcileAfter, r.cursor, r.e.cfg.ReconcileBatch)
	if err != nil {
		return 0, err
	}
	if len(runs) < r.e.cfg.ReconcileBatch {
		r.cursor = runstore.Cursor{} // the end: the next round starts over
	} else {
		r.cursor = runstore.After(runs[len(runs)-1])
	}
	corrected := 0
	var errs []error
	for _, run := range runs {
		_, fixed, err := r.e.describe(ctx, run)
		if errors.Is(err, errNoWorkflow) {
			fixed, err = r.e.startUnstarted(ctx, run)
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if fixed {
			corrected++
		}
	}
	return corrected, errors.Join(errs...)
}

// startUnstarted starts the workflow of a run recorded without one: its
// Enqueue's start failed after the insert (the server unreachable, the
// namespace without the search attributes, the caller's deadline) or its
// process died in between, and nobody enqueued the key again. Without it
// the run read pending for ever. Only a run that never began is started:
// pending, no step, no attempt, no cancel (a run Temporal forgot after it
// ran, past the namespace's retention, is left alone). It reports whether
// it started one; a start that fails is tried again at the next round.
func (e *Engine) startUnstarted(ctx context.Context, run runstore.Run) (bool, error) {
	if run.Status != port.StatusPending || run.CurrentStep != "" || run.Attempts != 0 || !run.CancelRequestedAt.IsZero() {
		return false, nil
	}
	if err := e.start(ctx, run, runInput{}); err != nil {
		return false, err
	}
	e.logger.InfoContext(ctx, "started the workflow of a run recorded without one", slog.String("run_id", string(run.ID)))
	return true, nil
}

// errNoWorkflow is describe's answer for a run whose workflow Temporal does
// not know: never started, or past the namespace's retention.
var errNoWorkflow = errors.New("no workflow")

// describe reads run's workflow (its current Temporal run) and returns the
// view over the projection. When the workflow ended without the run's own
// terminal projection, it records what Temporal says and reports fixed. A
// workflow Temporal does not know returns the projection as it is, with
// errNoWorkflow.
func (e *Engine) describe(ctx context.Context, run runstore.Run) (view port.RunView, fixed bool, err error) {
	wid := WorkflowID(run.ID)
	desc, err := e.client.DescribeWorkflow(ctx, wid, "")
	if err = interpretError(err); errors.Is(err, port.ErrNotFound) {
		return run.RunView, false, fmt.Errorf("run %s: %w", run.ID, errNoWorkflow)
	}
	if err != nil {
		return port.RunView{}, false, fmt.Errorf("describe workflow of run %s: %w", run.ID, err)
	}
	view = viewFromDescription(run.RunView, desc)
	if !view.Status.Terminal() || run.Status.Terminal() {
		return view, false, nil
	}
	if msg := e.closeMessage(ctx, desc); msg != "" {
		view.LastError = msg
	}
	if view.Status == port.StatusSucceeded {
		// The workflow's result is the handler's (flow.end), read through
		// the client's data converter, so a payload codec is undone.
		ex := desc.WorkflowExecution
		if err := e.client.GetWorkflow(ctx, ex.ID, ex.RunID).Get(ctx, &view.Output); err != nil {
			return port.RunView{}, false, fmt.Errorf("read the result of run %s: %w", run.ID, err)
		}
	}
	err = runstore.Project(ctx, e.pool, run.ID, runstore.Projection{
		Status: view.Status, Attempts: view.Attempts, LastError: view.LastError, CurrentStep: view.CurrentStep,
		Output: view.Output,
	})
	if err != nil {
		return port.RunView{}, false, err
	}
	// The handler's own terminal projection, written just before the
	// workflow closes, may have landed after the first read: Project left
	// it alone, and its outcome (the handler's error, not "workflow
	// failed", and the attempts and step of its last step, not those of
	// the first read) is what the run reports.
	cur, err := runstore.Get(ctx, e.pool, run.ID)
	if err != nil {
		return port.RunView{}, false, err
	}
	fixed = cur.Status == view.Status && cur.LastError == view.LastError && cur.Attempts == view.Attempts && cur.CurrentStep == view.CurrentStep
	if fixed {
		e.logger.InfoContext(ctx, "recorded a run's end that its workflow did not project",
			slog.String("run_id", string(run.ID)), slog.String("status", string(view.Status)), slog.String("last_error", view.LastError))
	}
	// The row as written, not the description: its FinishedAt and
	// UpdatedAt are the Postgres clock's, which every later Get reads (the
	// workflow's close time, returned before, moved on the next Get).
	return viewFromDescription(cur.RunView, desc), fixed, nil
}

// closeMessage reads why a workflow closed from its close event, for the
// dead-letter view: the failure message (the handler's error, or the SDK's
// on nondeterminism) or the operator's termination reason. Empty when the
// event says nothing more than the status, or cannot be read.
func (e *Engine) closeMessage(ctx context.Context, desc *client.WorkflowExecutionDescription) string {
	ex := desc.WorkflowExecution
	it := e.client.GetWorkflowHistory(ctx, ex.ID, ex.RunID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_CLOSE_EVENT)
	if !it.HasNext() {
		return ""
	}
	ev, err := it.Next()
	if err != nil {
		e.logger.WarnContext(ctx, "read close event", slog.String("workflow_id", ex.ID), slog.String("error", err.Error()))
		return ""
	}
	switch ev.GetEventType() {
	case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED:
		// The SDK wraps what went wrong (e.g. TMPRL1100) as the cause of
		// its own "failed on panic" message.
		var msgs []string
		for f := ev.GetWorkflowExecutionFailedEventAttributes().GetFailure(); f != nil; f = f.GetCause() {
			if n := len(msgs); n == 0 || msgs[n-1] != f.GetMessage() { // a handler's error is its own cause
				msgs = append(msgs, f.GetMessage())
			}
		}
		return strings.Join(msgs, ": ")
	case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED:
		if reason := ev.GetWorkflowExecutionTerminatedEventAttributes().GetReason(); reason != "" {
			return "workflow terminated: " + reason
		}
	}
	return ""
}
