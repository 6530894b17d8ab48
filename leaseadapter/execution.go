package leaseadapter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/taskport/taskport/internal/dbtx"
	"github.com/taskport/taskport/internal/enginekit"
	"github.com/taskport/taskport/internal/runstore"
	"github.com/taskport/taskport/internal/tracing"
	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/port/engineapi"
)

// execution is one claim of one run, from the claim to the release.
type execution struct {
	id           dbtx.UUID
	kind         string
	version      int
	input        json.RawMessage
	claims       int64
	generation   int64 // the run's seq: orders its fencing tokens against other runs'
	token        dbtx.UUID
	stepAttempts int
	errorShown   bool // the run row shows a last error, which the next recorded step clears
	canceled     bool
	// beganAt is when the run's current execution began: its first claim,
	// or its ContinueAsNew (execution_at); created_at for a run an earlier
	// release claimed first. Flow.Now reads it until the first step.
	beganAt time.Time
	history []historyEntry
	// trace is the trace the run's steps continue: its enqueuer's, or that
	// of the last signal a wait received (consumeSignalSQL). Only the
	// executor's goroutine touches it.
	trace tracing.Stored

	cancel     context.CancelCauseFunc // the run context: ErrLeaseLost, ErrCanceled, errStopping
	released   atomic.Bool             // the lease was given up on purpose
	handedBack atomic.Bool             // Stop released the lease
	// dequeued leaves 0 once, when whoever ends the run's wait in the
	// prefetch queue takes it: an executor or Stop (take), or a cancel that
	// finishes the queued run itself (settle). The winner forgets the run.
	dequeued atomic.Int32
	// leaseTimer cancels the run context with port.ErrLeaseLost when the
	// lease may have expired on the server: at the deadline of the last
	// renewal that succeeded (leaseDeadline), unless a later one moved it.
	leaseTimer *time.Timer

	mu       sync.Mutex
	step     string  // the step whose body runs now, for the heartbeat ("" between bodies)
	stepSeq  int     // its seq (-1 between bodies): the heartbeat's started-step marker
	progress *string // last Heartbeat progress not yet written
}

type historyEntry struct {
	Seq    int             `json:"seq"`
	Name   string          `json:"name"`
	Result json.RawMessage `json:"result"`
	Failed bool            `json:"failed"`
	At     time.Time       `json:"at"`
}

func (ex *execution) runID() port.RunID { return port.RunID(ex.id.String()) }

// take reports whether the caller takes the run out of the queue to execute
// or release it; false means a cancel settled it first.
func (ex *execution) take() bool { return ex.dequeued.CompareAndSwap(0, 1) }

// settle reports whether a cancel may finish the run while it is queued;
// false means an executor (or Stop) took it first.
func (ex *execution) settle() bool { return ex.dequeued.CompareAndSwap(0, 2) }

// setStep tells the heartbeat which step body runs now (seq -1: none).
func (ex *execution) setStep(name string, seq int) {
	ex.mu.Lock()
	ex.step, ex.stepSeq = name, seq
	ex.mu.Unlock()
}

func (ex *execution) setProgress(p string) {
	ex.mu.Lock()
	ex.progress = &p
	ex.mu.Unlock()
}

// beat returns what the heartbeat writes and forgets the progress it takes.
func (ex *execution) beat() (string, int32, *string) {
	ex.mu.Lock()
	defer ex.mu.Unlock()
	p := ex.progress
	ex.progress = nil
	return ex.step, int32(ex.stepSeq), p
}

// unwind is panicked by Flow methods to leave the handler when the run must
// not go on in this claim: it was parked (waiting, sleeping, backing off),
// its lease is gone, or the history contradicts the handler. The handler's
// own code never sees it as an error value.
type unwind struct {
	why   string
	fatal error // non-nil: the run fails with this error
}

// execute replays the handler from the start and finishes the claim.
func (w *worker) execute(runCtx, dbCtx context.Context, ex *execution) {
	// A closure, not the method value ex.trace.SpanContext, which would
	// copy the trace now: a received signal changes it.
	log := slog.New(tracing.WithSpan(w.log.Handler(), func() trace.SpanContext { return ex.trace.SpanContext() })).
		With(slog.String("run_id", ex.id.String()), slog.String("kind", ex.kind))
	def, err := engineapi.Lookup(w.e.reg, port.Kind(ex.kind), ex.version)
	if err != nil {
		// The claim only takes served pairs, so this is a registry changed
		// under a running worker: hand the run back rather than fail it.
		log.Error("claimed a run of an unregistered definition", slog.Any("error", err))
		w.release(dbCtx, ex)
		return
	}
	f := &flow{w: w, ex: ex, def: def, runCtx: runCtx, dbCtx: dbCtx, now: ex.beganAt, replaying: len(ex.history) > 0}
	f.log = log
	u, out, herr := f.run()
	next, output, herr := enginekit.Outcome(out, herr)
	switch {
	case errors.Is(context.Cause(runCtx), port.ErrLeaseLost):
		// Nothing of a claim whose lease may be gone commits, not even a
		// held step or the run's end: the next claim replays them.
	case u != nil && u.fatal != nil:
		log.Error("run failed", slog.Any("error", u.fatal))
		w.finish(dbCtx, ex, port.StatusFailed, u.fatal.Error(), nil, f.held)
	case u != nil:
		// Parked or abandoned: the claim is already settled.
	case f.sawCancel:
		w.finish(dbCtx, ex, port.StatusCanceled, "", nil, f.held)
	case next != nil:
		w.continueAsNew(dbCtx, ex, next)
	case herr == nil:
		w.finish(dbCtx, ex, port.StatusSucceeded, "", output, f.held)
	default:
		w.finish(dbCtx, ex, port.StatusFailed, herr.Error(), nil, f.held)
	}
}

// finish ends the run with status, its last error and, when it succeeded,
// its result (output), in one commit with the held step.
func (w *worker) finish(ctx context.Context, ex *execution, status port.Status, lastErr string, output json.RawMessage, last *heldStep) {
	ex.released.Store(true)
	end := &runEnd{id: ex.id, token: ex.token, status: string(status), err: enginekit.StorableText(lastErr), output: jsonText(output)}
	if last != nil {
		seq, attempts := int32(last.seq), int32(last.attempt)
		end.seq, end.attempts, end.name, end.result = &seq, &attempts, &last.name, jsonText(last.result)
	}
	err := w.submitReq(ctx, &commitReq{end: end, done: make(chan error, 1)})
	var res commitRes
	if end.ended {
		res.n = 1
	}
	if !w.settled(ctx, ex, res, err, "finish") {
		return
	}
	w.e.cfg.Metrics.Finished(port.Kind(ex.kind), status)
}

// jsonText is a JSON document as one element of a text[] argument that
// SQL casts to jsonb: nil for none (SQL NULL).
func jsonText(doc json.RawMessage) *string {
	if doc == nil {
		return nil
	}
	s := string(doc)
	return &s
}

func (w *worker) continueAsNew(ctx context.Context, ex *execution, input json.RawMessage) {
	ex.released.Store(true)
	res, err := w.commit(ctx, continueAsNewSQL, ex.id, ex.token, input)
	if w.settled(ctx, ex, res, err, "continue as new") {
		w.poke()
	}
}

// release hands the run back without counting an attempt.
func (w *worker) release(ctx context.Context, ex *execution) {
	ex.released.Store(true)
	if err := w.handBack(ctx, ex); err != nil {
		w.log.Warn("hand back failed; the lease will expire", slog.String("run_id", ex.id.String()), slog.Any("error", err))
	}
}

// settled reports whether a lease-checked commit landed. A fenced commit is
// counted; an unknown outcome hands the run back (or leaves it to the
// reaper), and the next claim's replay sees what was written.
func (w *worker) settled(ctx context.Context, ex *execution, res commitRes, err error, what string) bool {
	if err != nil {
		w.log.Warn("commit failed; handing the run back", slog.String("run_id", ex.id.String()),
			slog.String("commit", what), slog.Any("error", err))
		if !ex.handedBack.Load() && ctx.Err() == nil {
			w.release(ctx, ex)
		}
		return false
	}
	if res.n == 0 {
		w.e.cfg.Metrics.FencedCommit(port.Kind(ex.kind))
		w.log.Warn("commit fenced: the lease was lost", slog.String("run_id", ex.id.String()), slog.String("commit", what))
		return false
	}
	return true
}

// flow is the port.Flow of one execution.
type flow struct {
	w         *worker
	ex        *execution
	def       port.Definition
	runCtx    context.Context // canceled on lost lease, cancel, hard stop
	dbCtx     context.Context // for commits: outlives runCtx
	log       *slog.Logger
	seq       enginekit.StepSequence
	markers   map[string]int // the version of each change id met in this execution
	now       time.Time
	replaying bool
	newSteps  int  // steps run (not replayed) in this claim
	sawCancel bool // a Flow method returned port.ErrCanceled
	// held is a completed step whose commit waits for the handler's next
	// move: handler code between Flow calls has no side effects, so the
	// result is committed before anything else starts (flush), with the
	// next step's started marker (beginAttempt), or with the finish when
	// the handler returns, saving a commit per step.
	held *heldStep
}

type heldStep struct {
	seq     int
	name    string
	result  json.RawMessage
	attempt int
}

// flush commits the held step, if any, unless the lease is gone.
func (f *flow) flush() {
	if h := f.held; h != nil {
		f.checkLease()
		f.held = nil
		res, err := f.w.commit(f.dbCtx, recordStepSQL, f.ex.id, f.ex.token, h.name, h.seq, h.result, h.attempt)
		f.committed(res, err, "step "+h.name)
	}
}

var _ port.Flow = (*flow)(nil)

// run calls the handler and turns an unwind panic back into a value.
func (f *flow) run() (u *unwind, out any, herr error) {
	defer func() {
		switch p := recover().(type) {
		case nil:
		case unwind:
			u = &p
		default:
			u = &unwind{why: "panic", fatal: enginekit.HandlerPanicked(p)}
		}
	}()
	out, herr = engineapi.Run(f.def.Handler, f, f.ex.input)
	return nil, out, herr
}

func (f *flow) RunID() port.RunID { return f.ex.runID() }
func (f *flow) Kind() port.Kind   { return port.Kind(f.ex.kind) }
func (f *flow) Version() int      { return f.ex.version }

// Now is when the run's execution began (its first claim, or its
// ContinueAsNew) until the first step, then the commit time of the latest
// step: the same values on every replay.
func (f *flow) Now() time.Time {
	f.flush() // the held step's commit time is the value a replay sees
	return f.now
}

// Logger discards lines while the handler replays recorded history.
func (f *flow) Logger() *slog.Logger {
	if f.replaying {
		return slog.New(slog.DiscardHandler)
	}
	return f.log
}

func (f *flow) RestartSuggested() bool { return f.seq.Len() >= f.w.e.cfg.RestartAfterSteps }

// next numbers a step and returns its recorded entry, if replaying.
func (f *flow) next(name string) (int, *historyEntry, error) {
	seq, err := f.seq.Next(name)
	if err != nil {
		return 0, nil, err
	}
	if seq < len(f.ex.history) {
		h := &f.ex.history[seq]
		if err := enginekit.CheckReplay(seq, name, h.Name); err != nil {
			panic(unwind{why: "nondeterminism", fatal: err})
		}
		f.now = h.At
		f.replaying = seq+1 < len(f.ex.history)
		return seq, h, nil
	}
	f.replaying = false
	return seq, nil, nil
}

// gate is checked before anything new starts: a canceled run starts nothing
// and a stopping worker hands the run back.
func (f *flow) gate() error {
	f.flush()
	if f.sawCancel || errors.Is(context.Cause(f.runCtx), port.ErrCanceled) {
		f.sawCancel = true
		return port.ErrCanceled
	}
	f.checkLease()
	if f.w.isStopping() {
		f.w.release(f.dbCtx, f.ex)
		panic(unwind{why: "stopping"})
	}
	return nil
}

// admit is gate for a step that may start: while nothing keeps the step
// from starting it leaves the held step held, so that it commits with the
// step's started marker (beginAttempt) or, should the step wait for a slot,
// before the wait (takeStepSlot). Anything that would stop the step goes
// through gate, whose flush commits the held step first, as before. The
// conditions only ever become true, so gate sees what admit saw.
func (f *flow) admit() error {
	if f.sawCancel || f.runCtx.Err() != nil || f.w.isStopping() {
		return f.gate()
	}
	return nil
}

// checkLease abandons the claim once the run context says it is gone.
func (f *flow) checkLease() {
	cause := context.Cause(f.runCtx)
	if errors.Is(cause, port.ErrLeaseLost) { // errStopping too
		panic(unwind{why: "lease lost"})
	}
}

// committed settles a lease-checked commit or abandons the claim.
func (f *flow) committed(res commitRes, err error, what string) {
	if !f.w.settled(f.dbCtx, f.ex, res, err, what) {
		panic(unwind{why: "commit not settled"})
	}
	f.now = res.at
}

func (f *flow) Step(name, activity string, in, out any, opts ...port.StepOption) error {
	seq, h, err := f.next(name)
	if err != nil {
		return err
	}
	if h != nil {
		if h.Failed {
			se := &port.StepError{}
			if err := json.Unmarshal(h.Result, se); err != nil {
				return fmt.Errorf("decode recorded failure of step %s: %w", name, err)
			}
			return se
		}
		return enginekit.DecodeStepResult(name, activity, h.Result, out)
	}
	if err := f.admit(); err != nil {
		return err
	}
	// Options and input first, as on Temporal, where they are checked in
	// the workflow and the binding only when the activity runs.
	o, raw, err := enginekit.PrepareStep(f.def, name, activity, in, opts...)
	if err != nil {
		return err
	}
	binding, err := engineapi.Activity(f.w.e.reg, activity)
	if err != nil {
		// Never bound: the step fails at once and for good, as the
		// Temporal engine's dynamic activity fails it, with no attempt
		// that could succeed on this worker.
		return f.failStep(seq, name, activity, 1, err.Error(), true)
	}
	attempt := 1
	if f.newSteps == 0 {
		attempt = f.ex.stepAttempts + 1
	}
	f.newSteps++

	var result json.RawMessage
	var actErr error
	if attempt > o.Retry.MaxAttempts {
		// The reaper found the last attempt's lease lost (its worker died
		// or stalled) and handed the run back to record the failure, which
		// is what Temporal reports when a last attempt times out.
		attempt = f.ex.stepAttempts
		actErr = fmt.Errorf("out of attempts through lost leases: the worker running attempt %d of %d died or stalled past its lease",
			f.ex.stepAttempts, o.Retry.MaxAttempts)
	} else {
		if err := f.takeStepSlot(); err != nil {
			return err
		}
		if err := f.beginAttempt(seq, name); err != nil {
			return err
		}
		result, actErr = f.invoke(binding, raw, seq, name, attempt, o)
		f.checkLease()
		if errors.Is(context.Cause(f.runCtx), port.ErrCanceled) {
			// Whatever the step returned, nothing after it starts.
			f.sawCancel = true
			return port.ErrCanceled
		}
	}
	if actErr == nil {
		if f.ex.stepAttempts > 0 || f.ex.errorShown {
			f.record(seq, name, result, attempt)
		} else {
			f.held = &heldStep{seq: seq, name: name, result: result, attempt: attempt}
		}
		return enginekit.DecodeStepResult(name, activity, result, out)
	}
	final := port.IsNonRetryable(actErr) || attempt >= o.Retry.MaxAttempts
	if !final {
		backoff := o.Retry.Backoff(attempt)
		f.ex.released.Store(true)
		res, err := f.w.commit(f.dbCtx, retryStepSQL, f.ex.id, f.ex.token, name, attempt, backoff.Milliseconds(), actErr.Error())
		f.committed(res, err, "retry "+name)
		f.w.wakeAt(res.at.Add(backoff), res.at)
		panic(unwind{why: "retry backoff"})
	}
	return f.failStep(seq, name, activity, attempt, actErr.Error(), port.IsNonRetryable(actErr))
}

// failStep records step name as failed for good after attempt and returns
// the *port.StepError the handler sees (again on every replay).
func (f *flow) failStep(seq int, name, activity string, attempt int, msg string, nonRetryable bool) error {
	f.flush() // Step's admit may have left the step before held
	se := enginekit.StepFailed(name, activity, attempt, msg, nonRetryable)
	enc, err := json.Marshal(se)
	if err != nil {
		return fmt.Errorf("encode failure of step %s: %w", name, err)
	}
	// The run reads the last attempt's message until it ends (port/spec.go,
	// LastError), as on Temporal, whose attempt projects its own; the
	// StepError's summary is the run's LastError once its handler returns it.
	res, err := f.w.commit(f.dbCtx, commitStepSQL, f.ex.id, f.ex.token, name, seq, enc, true, attempt, msg,
		f.w.e.cfg.LeaseDuration.Milliseconds())
	f.committed(res, err, "failure of "+name)
	f.ex.stepAttempts, f.ex.errorShown = 0, true
	return se
}

// record commits a completed step (or marker) now. The first one of a
// claim that inherited failed attempts, or after a last error the run still
// shows, also resets the run's step attempt count and clears the error
// (commitStepSQL); the others only insert their result (recordStepSQL).
func (f *flow) record(seq int, name string, result json.RawMessage, attempt int) {
	var res commitRes
	var err error
	if f.ex.stepAttempts > 0 || f.ex.errorShown {
		res, err = f.w.commit(f.dbCtx, commitStepSQL, f.ex.id, f.ex.token, name, seq, result, false, attempt, "",
			f.w.e.cfg.LeaseDuration.Milliseconds())
	} else {
		res, err = f.w.commit(f.dbCtx, recordStepSQL, f.ex.id, f.ex.token, name, seq, result, attempt)
	}
	f.committed(res, err, "step "+name)
	f.ex.stepAttempts, f.ex.errorShown = 0, false
}

// beginAttempt reads the run's cancel flag, and charges the attempt, just
// before a step body starts, holding the slot takeStepSlot took. Cancel commits the flag before
// it returns, and its notification or the next heartbeat may reach this
// worker only later: without the read a body could start after Cancel
// returned. One primary-key read per step attempt, sent with the next group
// commit together with the step's started marker (worker.startStep). A run
// found canceled starts nothing (ErrCanceled, as gate) and is charged
// nothing; a failed read abandons the claim, which goes back uncharged, no
// body having started (unless the error came at the group's COMMIT and the
// marker committed after all: then the attempt is charged without a body).
// The step before, if still held (admit), is recorded in the same
// transaction, ahead of the marker: one commit where a flush and the marker
// took two in a row, and the result is durable before this body starts, as
// a flush made it.
func (f *flow) beginAttempt(seq int, step string) error {
	held := f.held
	f.held = nil
	canceled, rec, err := f.w.startStep(f.dbCtx, f.ex, seq, step, held)
	if err == nil && held != nil {
		if rec.n == 0 {
			<-f.w.steps
		}
		f.committed(rec, nil, "step "+held.name) // a fenced record abandons the claim
	}
	if err == nil && !canceled {
		return nil
	}
	<-f.w.steps
	if err != nil {
		f.w.log.Warn("read the run's cancel flag before its step", slog.String("run_id", f.ex.id.String()), slog.String("error", err.Error()))
		panic(unwind{why: "cancel flag unread"})
	}
	f.sawCancel = true
	return port.ErrCanceled
}

// takeStepSlot waits for one of the worker's step slots (Concurrency of
// them), which invoke frees. A run that was canceled, lost its lease or is
// asked to stop while it waits starts nothing: the same outcomes as gate.
// While no slot is free the run counts among the worker's slot waiters,
// which keep the worker from claiming runs beyond its base (runsWanted).
func (f *flow) takeStepSlot() error {
	took := true
	select {
	case f.w.steps <- struct{}{}:
	default:
		f.flush() // a held step does not wait for a slot uncommitted
		f.w.slotWaiters.Add(1)
		select {
		case f.w.steps <- struct{}{}:
		case <-f.runCtx.Done():
			took = false
		case <-f.w.stopping:
			took = false
		}
		f.w.slotWaiters.Add(-1)
	}
	if took {
		if f.runCtx.Err() == nil && !f.w.isStopping() {
			return nil
		}
		<-f.w.steps
	}
	if err := f.gate(); err != nil {
		return err
	}
	// The run context ended for a cause gate does not know (the engine's
	// own context): abandon the claim, as for a lost lease.
	panic(unwind{why: "run context ended"})
}

// invoke runs one attempt through the engines' one activity runtime
// (enginekit.RunActivity), with the lease engine's fencing token, under the
// attempt's timeout and heartbeat timeout, which this engine enforces itself.
func (f *flow) invoke(b port.ActivityBinding, raw json.RawMessage, seq int, step string, attempt int, o port.StepOptions) (json.RawMessage, error) {
	defer func() { <-f.w.steps }() // the slot takeStepSlot took
	ctx, cancel := context.WithCancelCause(f.runCtx)
	defer cancel(nil)
	ctx, cancelT := context.WithTimeoutCause(ctx, o.Timeout, enginekit.ErrAttemptTimeout)
	defer cancelT()
	hb, disarm := enginekit.WatchHeartbeats(heartbeat{ex: f.ex}, o.HeartbeatTimeout, cancel)
	defer disarm()
	f.ex.setStep(step, seq)
	defer f.ex.setStep("", -1)
	info := port.StepInfo{
		RunID: f.ex.runID(), Kind: port.Kind(f.ex.kind), Version: f.ex.version, Step: step, Attempt: attempt,
		Token: enginekit.LeaseToken(f.ex.runID(), step, f.ex.claims, f.ex.token.String(), f.ex.generation),
	}
	ctx, span := f.w.e.tracer.Start(f.ex.trace.Into(ctx), SpanStepPrefix+b.Name(), trace.WithAttributes(
		attribute.String("taskport.run_id", string(info.RunID)), attribute.String("taskport.kind", f.ex.kind),
		attribute.String("taskport.step", step), attribute.Int("taskport.attempt", attempt)))
	defer span.End()
	out, err := enginekit.RunActivity(ctx, b, info, hb, raw)
	switch timedOut := enginekit.TimedOut(ctx); {
	case timedOut != nil:
		// The attempt ran past its timeout or heartbeat timeout: what its
		// body returned after that, a result or its own error, is not
		// the attempt's outcome, as on Temporal, whose server records the
		// timeout.
		out, err = nil, timedOut
	case err == nil && ctx.Err() != nil:
		// Canceled or its lease lost while it ran: its result is not
		// trusted either.
		err = context.Cause(ctx)
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	return out, err
}

// SpanStepPrefix starts the name of a step attempt's span, followed by the
// activity's name ("step:asset.import").
const SpanStepPrefix = "step:"

// heartbeat is the lease engine's half of the activity runtime
// (enginekit.Beater) for one attempt.
type heartbeat struct{ ex *execution }

// Beat records progress; the worker writes it with its next lease renewal.
// A cancel or a lost lease shows as the cause of the attempt's context,
// which port.Heartbeat checks; the heartbeat timeout is
// enginekit.WatchHeartbeats'.
func (h heartbeat) Beat(_ context.Context, progress any) error {
	if progress != nil {
		if b, err := enginekit.EncodePayload("progress", progress); err == nil {
			h.ex.setProgress(string(b))
		}
	}
	return nil
}

// waitOutcome is the recorded result of a WaitSignal.
type waitOutcome struct {
	Received bool            `json:"received"`
	Payload  json.RawMessage `json:"payload,omitempty"`
}

func (f *flow) WaitSignal(name string, topic port.Topic, timeout time.Duration, payload any) (bool, error) {
	seq, h, err := f.next(name)
	if err != nil {
		return false, err
	}
	if h == nil {
		if err := enginekit.ValidateTopic(topic); err != nil {
			return false, err
		}
		if err := enginekit.ValidateTimeout("timeout", timeout); err != nil {
			return false, err
		}
		if err := f.gate(); err != nil {
			return false, err
		}
		if h, err = f.wait(seq, name, string(topic), timeout); err != nil {
			return false, err
		}
	}
	var o waitOutcome
	if err := json.Unmarshal(h.Result, &o); err != nil {
		return false, fmt.Errorf("decode recorded wait %s: %w", name, err)
	}
	if o.Received {
		if err := enginekit.DecodeSignalPayload(name, o.Payload, payload); err != nil {
			return true, err
		}
	}
	return o.Received, nil
}

func (f *flow) Sleep(name string, d time.Duration) error {
	seq, h, err := f.next(name)
	if err != nil {
		return err
	}
	if h != nil {
		return nil
	}
	if err := enginekit.ValidateSleep(d); err != nil {
		return err
	}
	if err := f.gate(); err != nil {
		return err
	}
	_, err = f.wait(seq, name, "", d)
	return err
}

// wait runs a WaitSignal (topic set) or Sleep in one transaction under the
// topic lock: it consumes a signal, or records the timeout, or parks the run
// (releasing the claim; the handler unwinds). It returns the recorded entry,
// or port.ErrCanceled for a run whose cancel was requested.
func (f *flow) wait(seq int, name, topic string, d time.Duration) (*historyEntry, error) {
	// Marked released before the transaction that may park the run, so that
	// a heartbeat racing with it does not take the park for a lost lease.
	f.ex.released.Store(true)
	rec, parkedUntil, dbNow, err := f.w.waitTx(f.dbCtx, f.ex, seq, name, topic, d)
	switch {
	case errors.Is(err, port.ErrCanceled):
		f.ex.released.Store(false)
		f.sawCancel = true
		return nil, port.ErrCanceled
	case errors.Is(err, port.ErrLeaseLost):
		f.w.e.cfg.Metrics.FencedCommit(port.Kind(f.ex.kind))
		panic(unwind{why: "lease lost"})
	case err != nil:
		f.w.settled(f.dbCtx, f.ex, commitRes{}, err, "wait "+name)
		panic(unwind{why: "wait failed"})
	case rec == nil:
		f.w.wakeAt(parkedUntil, dbNow)
		panic(unwind{why: "parked"})
	}
	f.ex.released.Store(false)
	f.ex.stepAttempts, f.ex.errorShown = 0, false // as commitStepSQL left the row
	f.now = rec.At
	return rec, nil
}

func (w *worker) waitTx(ctx context.Context, ex *execution, seq int, name, topic string, d time.Duration) (rec *historyEntry, parkedUntil, dbNow time.Time, err error) {
	tx, err := w.e.pool.Begin(ctx)
	if err != nil {
		return nil, time.Time{}, time.Time{}, fmt.Errorf("begin wait %s: %w", name, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after commit
	if topic != "" {
		if _, err := tx.Exec(ctx, topicLockSQL, topic); err != nil {
			return nil, time.Time{}, time.Time{}, fmt.Errorf("lock topic %s: %w", topic, err)
		}
	}
	var (
		curStep   string
		waitTopic *string
		waitUntil *time.Time
		canceled  bool
	)
	err = runstore.InterpretError(tx.QueryRow(ctx, lockClaimSQL, ex.id, ex.token).Scan(&curStep, &waitTopic, &waitUntil, &dbNow, &canceled))
	switch {
	case errors.Is(err, port.ErrNotFound):
		// No run row holds this claim's lease_token any more.
		return nil, time.Time{}, time.Time{}, port.ErrLeaseLost
	case err != nil:
		return nil, time.Time{}, time.Time{}, fmt.Errorf("check claim for wait %s: %w", name, err)
	case canceled:
		// Cancel found the run running and left it to this worker, whose
		// notification may not have come yet: the wait neither records
		// nor parks, as a step would not start.
		return nil, time.Time{}, time.Time{}, port.ErrCanceled
	}
	resumed := curStep == name && waitUntil != nil && (waitTopic == nil) == (topic == "")
	deadline := dbNow.Add(d)
	if resumed {
		deadline = *waitUntil
	}
	var outcome any
	if topic != "" {
		var payload json.RawMessage
		var signalled tracing.Stored
		err := runstore.InterpretError(tx.QueryRow(ctx, consumeSignalSQL, topic, ex.id).Scan(&payload, &signalled.Parent, &signalled.State))
		switch {
		case err == nil:
			outcome = waitOutcome{Received: true, Payload: payload}
			if signalled.Parent != "" {
				ex.trace = signalled // as consumeSignalSQL did to the run row
			}
		case !errors.Is(err, port.ErrNotFound): // not found: no signal waiting
			return nil, time.Time{}, time.Time{}, fmt.Errorf("consume signal on %s: %w", topic, err)
		case !deadline.After(dbNow):
			outcome = waitOutcome{}
		}
	} else if !deadline.After(dbNow) {
		outcome = struct{}{}
	}
	if outcome == nil {
		if topic != "" {
			if err := runstore.AddWaiter(ctx, tx, port.Topic(topic), ex.runID(), name); err != nil {
				return nil, time.Time{}, time.Time{}, err
			}
		}
		var topicArg *string
		if topic != "" {
			topicArg = &topic
		}
		if _, err := tx.Exec(ctx, parkSQL, ex.id, ex.token, name, deadline, topicArg); err != nil {
			return nil, time.Time{}, time.Time{}, fmt.Errorf("park at %s: %w", name, err)
		}
		if err := tx.Commit(ctx); err != nil {
			return nil, time.Time{}, time.Time{}, fmt.Errorf("commit park at %s: %w", name, err)
		}
		return nil, deadline, dbNow, nil
	}
	result, err := json.Marshal(outcome)
	if err != nil {
		return nil, time.Time{}, time.Time{}, fmt.Errorf("encode outcome of %s: %w", name, err)
	}
	var n int64
	var at time.Time
	if err := tx.QueryRow(ctx, commitStepSQL, ex.id, ex.token, name, seq, result, false, 0, "",
		w.e.cfg.LeaseDuration.Milliseconds()).Scan(&n, &at); err != nil {
		return nil, time.Time{}, time.Time{}, fmt.Errorf("record %s: %w", name, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, time.Time{}, time.Time{}, fmt.Errorf("commit %s: %w", name, err)
	}
	return &historyEntry{Seq: seq, Name: name, Result: result, At: at}, time.Time{}, dbNow, nil
}

// GetVersion records a marker the first time and returns it on replay. A
// change id met again in the same execution returns the version it got the
// first time, as on Temporal, without a record of its own.
func (f *flow) GetVersion(changeID string, minSupported, maxSupported int) int {
	if err := enginekit.CheckMarker(changeID, minSupported, maxSupported); err != nil {
		panic(unwind{why: "bad marker", fatal: err})
	}
	if v, ok := f.markers[changeID]; ok {
		f.checkMarker(changeID, v, minSupported, maxSupported)
		return v
	}
	if f.markers == nil {
		f.markers = map[string]int{}
	}
	if at := f.seq.Len(); at < len(f.ex.history) && f.ex.history[at].Name != enginekit.MarkerStep(changeID) {
		// The run went past this point before the call was added: as on
		// Temporal, it gets DefaultVersion, and nothing is recorded (the
		// history goes on with what is there).
		if port.DefaultVersion < minSupported || port.DefaultVersion > maxSupported {
			panic(unwind{why: "marker", fatal: fmt.Errorf("version marker %q: the run went past it before it was added (DefaultVersion), supported [%d, %d]: %w",
				changeID, minSupported, maxSupported, port.ErrNondeterminism)})
		}
		f.markers[changeID] = port.DefaultVersion
		return port.DefaultVersion
	}
	seq, h, err := f.next(enginekit.MarkerStep(changeID))
	if err != nil {
		panic(unwind{why: "bad marker", fatal: fmt.Errorf("version marker %q: %w", changeID, err)})
	}
	if h != nil {
		var v int
		if err := json.Unmarshal(h.Result, &v); err != nil {
			panic(unwind{why: "marker", fatal: fmt.Errorf("version marker %q recorded %s: %w", changeID, h.Result, err)})
		}
		f.checkMarker(changeID, v, minSupported, maxSupported)
		f.markers[changeID] = v
		return v
	}
	f.markers[changeID] = maxSupported
	f.flush()
	f.checkLease()
	// A marker is no step: it leaves the view's step, attempts and last
	// error as they are (recordStepSQL only adds to the history).
	name := enginekit.MarkerStep(changeID)
	res, err := f.w.commit(f.dbCtx, recordStepSQL, f.ex.id, f.ex.token, name, seq, json.RawMessage(fmt.Sprint(maxSupported)), 0)
	f.committed(res, err, "marker "+name)
	return maxSupported
}

// checkMarker fails the run when the version v recorded for changeID lies
// outside what the code now supports.
func (f *flow) checkMarker(changeID string, v, minSupported, maxSupported int) {
	if v < minSupported || v > maxSupported {
		panic(unwind{why: "marker", fatal: fmt.Errorf("version marker %q recorded %d, supported [%d, %d]: %w",
			changeID, v, minSupported, maxSupported, port.ErrNondeterminism)})
	}
}
