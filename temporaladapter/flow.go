package temporaladapter

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/taskport/taskport/internal/enginekit"
	"github.com/taskport/taskport/internal/tracing"
	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/port/engineapi"
)

// stepErrorType is the ApplicationError type of a failed step attempt; its
// details carry the attempt number, so the handler's *port.StepError says how
// many attempts were spent.
const stepErrorType = "taskport.StepFailed"

// stepCanceledType is the ApplicationError type of a step attempt that found
// its run's cancel requested before its body started, or whose body the
// cancel watch stopped (activityFunc); the latter carries the attempt in its
// details.
const stepCanceledType = "taskport.StepCanceled"

// canceledBeforeStart is the message of a step attempt that found its
// run's cancel requested before its body started: Cancel, reading the
// history, does not count it as a step the run was in (noStepBody).
const canceledBeforeStart = "run canceled before the step started"

// workflowRegistry is the part of worker.Worker and worker.WorkflowReplayer
// that registers workflows.
type workflowRegistry interface {
	RegisterWorkflowWithOptions(w any, options workflow.RegisterOptions)
}

// workflowFunc is the one wrapper every registered Definition runs in: it
// builds a port.Flow over the workflow context, runs the handler, records
// the terminal projection, and maps the outcome onto Temporal's statuses.
func (e *Engine) workflowFunc(def port.Definition) func(workflow.Context, runInput) (json.RawMessage, error) {
	return func(ctx workflow.Context, in runInput) (json.RawMessage, error) {
		info := workflow.GetInfo(ctx)
		f := &flow{
			ctx:          ctx,
			def:          def,
			runID:        runIDFromWorkflowID(info.WorkflowExecution.ID),
			books:        e.books,
			pending:      in.Pending,
			topics:       in.Topics,
			generation:   in.Generation,
			lastStep:     in.Step,
			lastAttempts: in.Attempts,
			parents:      e.parents,
			laOpts: workflow.LocalActivityOptions{
				ScheduleToCloseTimeout: e.cfg.LocalActivityTimeout,
				StartToCloseTimeout:    min(e.cfg.LocalActivityTimeout, 10*time.Second),
			},
		}
		f.logger = slog.New(replayAwareHandler{ctx: ctx, next: tracing.WithSpan(e.logger.Handler(), f.spanContext)}).
			With(slog.String("run_id", string(f.runID)), slog.String("workflow_type", info.WorkflowType.Name))
		if in.Canceled {
			// Cancel found no workflow and started this one: the run ends
			// as canceled runs end, having run nothing.
			return f.end(port.StatusCanceled, "", nil, fmt.Errorf("%w: %s", port.ErrCanceled, in.Reason))
		}
		next, output, err := enginekit.Outcome(f.run(in.Input))
		if next != nil {
			cont := runInput{Input: next, Pending: f.drain(), Topics: f.topics, Generation: f.generation,
				Step: f.lastStep, Attempts: f.lastAttempts}
			return nil, workflow.NewContinueAsNewError(ctx, info.WorkflowType.Name, cont)
		}
		status, msg := outcome(ctx, err)
		return f.end(status, msg, output, enginekit.Storable(err))
	}
}

// end records the run's terminal projection (status, msg as its last error
// and, for a success, the handler's result) and maps status onto
// Temporal's: a canceled run closes canceled, a failed one failed with err
// as the cause, a succeeded one completed with output as the workflow's
// result, so that the Temporal UI shows it and a projection lost to a
// Postgres crash is repaired with it (Engine.describe).
func (f *flow) end(status port.Status, msg string, output json.RawMessage, err error) (json.RawMessage, error) {
	ctx := f.ctx
	// The projection must be written even when the workflow is canceled.
	pctx, _ := workflow.NewDisconnectedContext(ctx)
	pctx = workflow.WithLocalActivityOptions(pctx, f.laOpts)
	if perr := f.unregister(pctx); perr != nil {
		f.logger.Error("unregister waiters", slog.String("error", perr.Error()))
	}
	var written port.Status
	perr := workflow.ExecuteLocalActivity(pctx, f.books.project, f.runID,
		projection{Status: status, LastError: msg, Step: f.lastStep, Attempts: f.lastAttempts,
			KeepAttempts: f.keepAttempts, PrevStep: f.prevStep, PrevAttempts: f.prevAttempts, Output: output}).Get(pctx, &written)
	if perr != nil {
		f.logger.Error("record terminal projection", slog.String("error", perr.Error()))
	}
	if written == port.StatusCanceled && status != port.StatusCanceled {
		// Cancel flagged the run before this end (runstore.EndLazily): the
		// run ends canceled, as on the lease engine, though the workflow's
		// cancel has not reached it yet or its last step finished anyway.
		status, err = port.StatusCanceled, port.ErrCanceled
	}
	switch status {
	case port.StatusSucceeded:
		return output, nil
	case port.StatusCanceled:
		if ctx.Err() != nil {
			return nil, ctx.Err() // Temporal records Canceled only for its own cancel error
		}
		return nil, temporal.NewCanceledError(err.Error())
	default:
		return nil, temporal.NewNonRetryableApplicationError(msg, "taskport.RunFailed", err)
	}
}

// outcome maps the handler's result onto the port vocabulary: the status
// and the run's last error, which only a failure has (a cancel's reason is
// not an error). A run is canceled only when a cancel reached it: the
// workflow's (here), or Cancel's flag in Postgres, which end's write reads.
// A handler that returns port.ErrCanceled of its own accord fails, as on the
// lease engine.
func outcome(ctx workflow.Context, err error) (port.Status, string) {
	switch {
	case err == nil:
		return port.StatusSucceeded, ""
	case ctx.Err() != nil && (errors.Is(err, port.ErrCanceled) || temporal.IsCanceledError(err)):
		return port.StatusCanceled, ""
	default:
		return port.StatusFailed, enginekit.StorableText(err.Error())
	}
}

// flow implements port.Flow over a workflow.Context. It lives for one
// workflow task sequence of one run (a continue-as-new builds a new one).
type flow struct {
	ctx     workflow.Context
	def     port.Definition
	runID   port.RunID
	books   *bookkeeping
	laOpts  workflow.LocalActivityOptions
	seq     enginekit.StepSequence
	logger  *slog.Logger
	pending map[port.Topic][]json.RawMessage // signals carried over a continue-as-new
	topics  []port.Topic                     // topics registered in the waiter table, in first-wait order
	// generation is the run's, for the fencing tokens of its steps.
	generation int64
	// parents builds the parent span a received signal's trace gives the
	// next activities (continueTrace).
	parents interceptor.Tracer

	projected    bool   // the projection says running since the last wait
	lastStep     string // for the terminal projection
	lastAttempts int    // attempts the last step took; 0 before any step
	// keepAttempts: the run was canceled in lastStep without an attempt
	// count from its activity (canceled before the body reported one, or in
	// a retry's backoff); the end takes the projection's (projection).
	keepAttempts bool
	// prevStep and prevAttempts are the step before lastStep, for the end
	// of a run whose cancel kept lastStep from starting (keepAttempts).
	prevStep     string
	prevAttempts int
}

var _ port.Flow = (*flow)(nil)

// flowPanic carries a panic raised inside a Flow call (by the SDK's
// illegal-state checks, or by this adapter) out through the handler, so
// that run tells it from a panic of the handler's own.
type flowPanic struct{ v any }

// flowFailure is panicked by a Flow call that has no error to return
// (GetVersion) to fail the run with err, as the lease engine's unwind does.
type flowFailure struct{ err error }

// guard, deferred by every Flow method that calls the SDK, marks a panic
// raised inside it as a flowPanic. runtime.Goexit, with which the SDK ends
// an evicted workflow's coroutine, is no panic: recover returns nil.
func (f *flow) guard() {
	if p := recover(); p != nil {
		switch p.(type) {
		case flowPanic, flowFailure:
		default:
			p = flowPanic{p}
		}
		panic(p)
	}
}

// run calls the handler. A panic of the handler's own fails the run with
// the lease engine's words (enginekit.HandlerPanicked), and, as any other
// failure, with its terminal projection; one raised inside a Flow call is
// raised again for the SDK, whose panic policy (worker.FailWorkflow) fails
// the workflow with it.
func (f *flow) run(input json.RawMessage) (out any, err error) {
	defer func() {
		switch p := recover().(type) {
		case nil:
		case flowPanic:
			panic(p.v)
		case flowFailure:
			out, err = nil, p.err
		default:
			out, err = nil, enginekit.HandlerPanicked(p)
		}
	}()
	return engineapi.Run(f.def.Handler, f, input)
}

func (f *flow) RunID() port.RunID    { return f.runID }
func (f *flow) Kind() port.Kind      { return f.def.Kind }
func (f *flow) Version() int         { return f.def.Version }
func (f *flow) Logger() *slog.Logger { return f.logger }

func (f *flow) Now() time.Time {
	defer f.guard()
	return workflow.Now(f.ctx)
}

func (f *flow) RestartSuggested() bool {
	defer f.guard()
	return workflow.GetInfo(f.ctx).GetContinueAsNewSuggested()
}

func (f *flow) GetVersion(changeID string, minSupported, maxSupported int) int {
	if err := enginekit.CheckMarker(changeID, minSupported, maxSupported); err != nil {
		panic(flowFailure{err})
	}
	defer f.guard()
	return int(workflow.GetVersion(f.ctx, changeID, workflow.Version(minSupported), workflow.Version(maxSupported)))
}

// Step runs the activity under a disconnected context, so a workflow cancel
// does not interrupt it (ADR 2.4): the cancel is passed on as an activity
// cancel request (the body learns of the cancel from its worker's cancel
// watch, or the answer to a heartbeat), and the step is awaited to its end. A canceled run starts no further step.
func (f *flow) Step(name, activityName string, in, out any, opts ...port.StepOption) error {
	defer f.guard()
	if _, err := f.seq.Next(name); err != nil {
		return err
	}
	if f.ctx.Err() != nil {
		return port.ErrCanceled
	}
	so, raw, err := enginekit.PrepareStep(f.def, name, activityName, in, opts...)
	if err != nil {
		return err
	}
	actx, cancelActivity := workflow.NewDisconnectedContext(f.ctx)
	defer cancelActivity()
	actx = workflow.WithActivityOptions(actx, workflow.ActivityOptions{
		ActivityID:          name,
		Summary:             name,
		StartToCloseTimeout: so.Timeout,
		HeartbeatTimeout:    so.HeartbeatTimeout,
		WaitForCancellation: true,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:    so.Retry.InitialInterval,
			BackoffCoefficient: so.Retry.BackoffCoefficient,
			MaximumInterval:    so.Retry.MaxInterval,
			MaximumAttempts:    int32(so.Retry.MaxAttempts),
		},
	})
	// The first step of an execution, and the first after a wait, moves
	// the projection to running; the others leave Postgres alone (Describe
	// has the live step), which keeps a step as cheap as a raw activity.
	fut := workflow.ExecuteActivity(actx, activityName, stepCall{Input: raw, Project: !f.projected, Generation: f.generation})
	f.projected = true
	prevStep, prevAttempts := f.lastStep, f.lastAttempts
	f.lastStep, f.lastAttempts = name, 0
	interrupted := false
	sel := workflow.NewSelector(f.ctx)
	sel.AddFuture(fut, func(workflow.Future) {})
	sel.AddReceive(f.ctx.Done(), func(workflow.ReceiveChannel, bool) { interrupted = true })
	sel.Select(f.ctx)
	if interrupted && !fut.IsReady() {
		cancelActivity()
	}
	var result stepResult
	if err := fut.Get(actx, &result); err != nil {
		if attempts, ok := canceledAttempts(err); ok {
			f.lastAttempts = attempts
			if attempts == 0 {
				// No body started: the run was never in this step, as
				// on the lease engine, whose view a step enters only
				// when its body starts.
				f.lastStep, f.lastAttempts = prevStep, prevAttempts
			}
			return port.ErrCanceled
		}
		if interrupted || temporal.IsCanceledError(err) {
			// Canceled before an attempt reported: in a retry's backoff
			// (a failure was projected for this step) or before any body
			// started (the run stays in the step before).
			f.keepAttempts, f.prevStep, f.prevAttempts = true, prevStep, prevAttempts
			return port.ErrCanceled
		}
		se := stepError(name, activityName, so, err)
		f.lastAttempts = se.Attempts
		return se
	}
	f.lastAttempts = result.Attempt
	return enginekit.DecodeStepResult(name, activityName, result.Output, out)
}

// canceledAttempts reports whether err is a step attempt's answer to its
// run's cancel, and the attempts whose body started: the one the activity
// names in its error (activityFunc), or 0 when the attempt found the run
// flagged before its body started.
func canceledAttempts(err error) (int, bool) {
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) && appErr.Type() == stepCanceledType {
		var attempt int
		if appErr.HasDetails() && appErr.Details(&attempt) == nil {
			return attempt, true
		}
		return 0, true
	}
	var canErr *temporal.CanceledError
	if errors.As(err, &canErr) && canErr.HasDetails() {
		var (
			msg     string
			attempt int
		)
		if canErr.Details(&msg, &attempt) == nil && attempt > 0 {
			return attempt, true
		}
	}
	return 0, false
}

// stepError turns the activity's final failure, as Temporal reports it to
// the workflow, into the port's StepError. A failure without the attempt in
// its details (a timeout) spent every attempt.
func stepError(name, activityName string, so port.StepOptions, err error) *port.StepError {
	attempts, msg, nonRetryable := so.Retry.MaxAttempts, err.Error(), false
	var actErr *temporal.ActivityError
	if errors.As(err, &actErr) {
		if cause := errors.Unwrap(actErr); cause != nil {
			msg = cause.Error()
		}
		nonRetryable = actErr.RetryState() == enumspb.RETRY_STATE_NON_RETRYABLE_FAILURE
	}
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		msg = appErr.Message()
		nonRetryable = nonRetryable || appErr.NonRetryable()
		var attempt int
		if appErr.Type() == stepErrorType && appErr.HasDetails() && appErr.Details(&attempt) == nil {
			attempts = attempt
		}
	}
	// The last attempt timed out: the message is the timeout's, as on the
	// lease engine, not an earlier attempt's failure the timeout carries.
	var timeoutErr *temporal.TimeoutError
	if errors.As(err, &timeoutErr) {
		msg = cmp.Or(timeoutMessage(timeoutErr.TimeoutType()), msg)
	}
	// Retries ran out: every attempt was spent, whatever attempt the cause
	// chain names (a timeout can carry an earlier attempt's failure).
	if actErr != nil && actErr.RetryState() == enumspb.RETRY_STATE_MAXIMUM_ATTEMPTS_REACHED && so.Retry.MaxAttempts > 0 {
		attempts = so.Retry.MaxAttempts
	}
	return enginekit.StepFailed(name, activityName, attempts, msg, nonRetryable)
}

// WaitSignal registers the run in the Postgres waiter table as parked on
// topic (a local activity), so a Signal that follows finds it; one sent
// before, while no run was parked there, was kept, and the registration
// sends it to this run. After the wait the run stays registered but not
// parked (stopWaiting): a signal sent while it runs a later step is kept
// for the topic's next wait, this run's or another's. The channel receive
// is recorded in history, so replay takes the same branch. A zero timeout
// only takes a signal already buffered or kept, as on the lease engine; a
// negative one is refused.
func (f *flow) WaitSignal(name string, topic port.Topic, timeout time.Duration, payload any) (bool, error) {
	defer f.guard()
	if _, err := f.seq.Next(name); err != nil {
		return false, err
	}
	if err := enginekit.ValidateTopic(topic); err != nil {
		return false, err
	}
	if err := enginekit.ValidateTimeout("timeout", timeout); err != nil {
		return false, err
	}
	if f.ctx.Err() != nil {
		return false, port.ErrCanceled
	}
	if carried := f.pending[topic]; len(carried) > 0 {
		// A signal the execution before a ContinueAsNew received and did
		// not take: the wait returns it without parking, and is the run's
		// step from now on, as on the lease engine, whose wait takes the
		// signal addressed to the run.
		f.pending[topic] = carried[1:]
		f.lastStep, f.lastAttempts = name, 0
		return true, enginekit.DecodeSignalPayload(name, carried[0], payload)
	}
	if timeout == 0 {
		// A wait that does not park is still the run's last move, as the
		// lease engine records it: the end names it.
		f.lastStep, f.lastAttempts = name, 0
		var raw json.RawMessage
		if workflow.GetSignalChannel(f.ctx, string(topic)).ReceiveAsync(&raw) {
			f.continueTrace(topic)
			return true, enginekit.DecodeSignalPayload(name, raw, payload)
		}
		// A signal sent while the run waited on nothing was kept in
		// Postgres (SignalParked): take it, as a wait that parks would
		// through addWaiter. Runs that passed a zero wait before this
		// change replay without the local activity.
		if workflow.GetVersion(f.ctx, "taskport/zero-wait-takes-kept", workflow.DefaultVersion, 1) == 1 {
			var kept keptSignal
			lctx := workflow.WithLocalActivityOptions(f.ctx, f.laOpts)
			if err := workflow.ExecuteLocalActivity(lctx, f.books.takeKept, f.runID, topic, name).Get(lctx, &kept); err != nil {
				if f.ctx.Err() != nil {
					return false, port.ErrCanceled
				}
				return false, fmt.Errorf("wait %s: take a kept signal: %w", name, err)
			}
			if kept.OK {
				f.continueCarrier(topic, kept.Trace)
				return true, enginekit.DecodeSignalPayload(name, kept.Payload, payload)
			}
		}
		return false, nil
	}
	lctx := workflow.WithLocalActivityOptions(f.ctx, f.laOpts)
	if err := workflow.ExecuteLocalActivity(lctx, f.books.addWaiter, f.runID, topic, name).Get(lctx, nil); err != nil {
		if f.ctx.Err() != nil {
			return false, port.ErrCanceled
		}
		return false, fmt.Errorf("wait %s: register waiter: %w", name, err)
	}
	f.projected = false // addWaiter projected waiting
	f.lastStep, f.lastAttempts = name, 0
	if !slices.Contains(f.topics, topic) {
		f.topics = append(f.topics, topic)
	}

	var raw json.RawMessage
	received, canceled := false, false
	tctx, cancelTimer := workflow.WithCancel(f.ctx)
	defer cancelTimer()
	sel := workflow.NewSelector(f.ctx)
	sel.AddReceive(workflow.GetSignalChannel(f.ctx, string(topic)), func(c workflow.ReceiveChannel, _ bool) {
		c.ReceiveAsync(&raw)
		received = true
	})
	sel.AddReceive(f.ctx.Done(), func(workflow.ReceiveChannel, bool) { canceled = true })
	// Neither received nor canceled after Select means timed out.
	sel.AddFuture(workflow.NewTimerWithOptions(tctx, timeout, workflow.TimerOptions{Summary: name}), func(workflow.Future) {})
	sel.Select(f.ctx)
	if canceled {
		return false, port.ErrCanceled
	}
	signaled, err := f.stopWaiting(topic, name)
	if err != nil {
		return false, err
	}
	if !received {
		if received, canceled = f.takeLateSignal(topic, name, signaled, &raw); canceled {
			return false, port.ErrCanceled
		}
	}
	if received {
		f.continueTrace(topic)
		return true, enginekit.DecodeSignalPayload(name, raw, payload)
	}
	return false, nil
}

// countedSignalWait bounds how long a timed-out wait waits for a signal
// that a Signal counted for it (takeLateSignal). A send normally lands in
// milliseconds; one that never lands (its sender died, or the server
// refused it, which Signal's caller is told) costs the wait this much.
const countedSignalWait = time.Minute

// takeLateSignal takes a signal that reached the run after its wait's
// timer fired: Signal counted the run as parked and sent it, so the signal
// is this wait's, as the lease engine's resumed wait takes a signal
// addressed to it whatever its deadline. Left in the channel, it went to
// the run's next wait on the topic, or was lost with the run if there was
// none. A signal already in the channel is taken at once. If there is none
// but stopWaiting reported that a Signal counted this wait (signaled),
// its send is on its way, and the wait waits for it, for
// countedSignalWait at most. Runs that timed out before each of these
// steps replay without it.
func (f *flow) takeLateSignal(topic port.Topic, name string, signaled bool, raw *json.RawMessage) (received, canceled bool) {
	if workflow.GetVersion(f.ctx, "taskport/wait-takes-late-signal", workflow.DefaultVersion, 1) != 1 {
		return false, false
	}
	ch := workflow.GetSignalChannel(f.ctx, string(topic))
	if ch.ReceiveAsync(raw) {
		return true, false
	}
	if !signaled || workflow.GetVersion(f.ctx, "taskport/wait-awaits-counted-signal", workflow.DefaultVersion, 1) != 1 {
		return false, false
	}
	tctx, cancelTimer := workflow.WithCancel(f.ctx)
	defer cancelTimer()
	sel := workflow.NewSelector(f.ctx)
	sel.AddReceive(ch, func(c workflow.ReceiveChannel, _ bool) { received = c.ReceiveAsync(raw) })
	sel.AddReceive(f.ctx.Done(), func(workflow.ReceiveChannel, bool) { canceled = true })
	// The summary names the wait, as its own timer's does, so that the UI
	// shows what this second timer is for.
	summary := name + ": a counted signal on its way"
	sel.AddFuture(workflow.NewTimerWithOptions(tctx, countedSignalWait, workflow.TimerOptions{Summary: summary}), func(workflow.Future) {})
	sel.Select(f.ctx)
	return received, canceled
}

// stopWaiting marks the run's waiter row on topic as past its wait once the
// wait returned, so that a Signal while the run is past its wait neither
// counts it nor sends it anything, as on the lease engine: the signal is
// kept, with the sender's trace, for the topic's next wait. It reports
// whether a Signal counted this wait (takeLateSignal). One local activity
// per parked wait. Runs that waited before this change count as parked to
// the end and replay without it.
func (f *flow) stopWaiting(topic port.Topic, name string) (signaled bool, err error) {
	if workflow.GetVersion(f.ctx, "taskport/wait-returns", workflow.DefaultVersion, 1) != 1 {
		return false, nil
	}
	lctx := workflow.WithLocalActivityOptions(f.ctx, f.laOpts)
	if err := workflow.ExecuteLocalActivity(lctx, f.books.waitReturned, f.runID, topic).Get(lctx, &signaled); err != nil {
		if f.ctx.Err() != nil {
			return false, port.ErrCanceled
		}
		return false, fmt.Errorf("wait %s: mark the wait returned: %w", name, err)
	}
	return signaled, nil
}

// unregister removes the run's waiter rows once it ends.
func (f *flow) unregister(ctx workflow.Context) error {
	if len(f.topics) == 0 {
		return nil
	}
	return workflow.ExecuteLocalActivity(ctx, f.books.removeWaiters, f.runID, f.topics).Get(ctx, nil)
}

// drain collects the signals still buffered on the topics this run waited
// on (and those carried into it and not consumed), so a continue-as-new
// hands them to the next run instead of dropping them. A signal is buffered
// when it reached the run parked and the wait returned on another branch
// (its timeout, or a second signal), or was sent by an earlier release,
// which buffered signals for a run between two waits.
func (f *flow) drain() map[port.Topic][]json.RawMessage {
	out := map[port.Topic][]json.RawMessage{}
	for topic, carried := range f.pending {
		if len(carried) > 0 {
			out[topic] = append(out[topic], carried...)
		}
	}
	for _, topic := range f.topics {
		ch := workflow.GetSignalChannel(f.ctx, string(topic))
		for {
			var raw json.RawMessage
			if !ch.ReceiveAsync(&raw) {
				break
			}
			out[topic] = append(out[topic], raw)
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// sleepProjectsChange versions Sleep's projection: a run that reached a
// Sleep before it existed has no local activity there in its history, and
// replays without one.
const sleepProjectsChange = "taskport/sleep-projects-waiting"

// Sleep is a durable timer named by the step name (shown in the UI). The
// run reads waiting in the sleep, as in a wait (a local activity projects
// it; Describe shows no timer); a projection that fails is logged, not the
// sleep's failure: it is a read model, which the next step's projection
// repairs.
func (f *flow) Sleep(name string, d time.Duration) error {
	defer f.guard()
	if _, err := f.seq.Next(name); err != nil {
		return err
	}
	if err := enginekit.ValidateSleep(d); err != nil {
		return err
	}
	if f.ctx.Err() != nil {
		return port.ErrCanceled
	}
	f.lastStep, f.lastAttempts = name, 0
	if workflow.GetVersion(f.ctx, sleepProjectsChange, workflow.DefaultVersion, 1) == 1 {
		lctx := workflow.WithLocalActivityOptions(f.ctx, f.laOpts)
		err := workflow.ExecuteLocalActivity(lctx, f.books.project, f.runID, projection{Status: port.StatusWaiting, Step: name}).Get(lctx, nil)
		if f.ctx.Err() != nil {
			return port.ErrCanceled
		}
		if err != nil {
			f.logger.Error("project sleep", slog.String("step", name), slog.String("error", err.Error()))
		}
		f.projected = false
	}
	if err := workflow.NewTimerWithOptions(f.ctx, d, workflow.TimerOptions{Summary: name}).Get(f.ctx, nil); err != nil {
		if temporal.IsCanceledError(err) {
			return port.ErrCanceled
		}
		return fmt.Errorf("sleep %s: %w", name, err)
	}
	return nil
}

// replayAwareHandler drops log lines while the workflow replays history, so
// a handler's log line appears once per real execution.
type replayAwareHandler struct {
	ctx  workflow.Context
	next slog.Handler
}

func (h replayAwareHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return !workflow.IsReplaying(h.ctx) && h.next.Enabled(ctx, l)
}

func (h replayAwareHandler) Handle(ctx context.Context, r slog.Record) error {
	return h.next.Handle(ctx, r)
}

func (h replayAwareHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return replayAwareHandler{ctx: h.ctx, next: h.next.WithAttrs(attrs)}
}

func (h replayAwareHandler) WithGroup(name string) slog.Handler {
	return replayAwareHandler{ctx: h.ctx, next: h.next.WithGroup(name)}
}
