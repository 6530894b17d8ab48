package enginekit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/taskport/taskport/internal/stepctx"
	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/port/engineapi"
)

// Beater is the engine-specific half of an activity's heartbeat, the only
// part of the activity runtime that differs between the engines.
type Beater interface {
	// Beat records progress (nil when the activity reported none) and
	// returns port.ErrCanceled or port.ErrLeaseLost once the engine knows
	// the attempt must stop, nil otherwise. port.Heartbeat checks the
	// activity's context after it.
	Beat(ctx context.Context, progress any) error
}

// runtime is the activity runtime port reads (through internal/stepctx): the
// step's identity and its engine's heartbeat.
type runtime struct {
	info port.StepInfo
	beat Beater // nil: heartbeats only check the context
}

func (r runtime) Info() port.StepInfo { return r.info }

func (r runtime) Heartbeat(ctx context.Context, progress any) error {
	if r.beat == nil {
		return nil
	}
	return r.beat.Beat(ctx, progress)
}

// WithStep makes ctx the context of an activity running as the step info:
// port.StepInfoFrom returns info and port.Heartbeat calls b (nil: heartbeats
// only check ctx). RunActivity uses it; so do tests of code that runs inside
// activities and needs a step identity (the ledger's).
func WithStep(ctx context.Context, info port.StepInfo, b Beater) context.Context {
	return stepctx.With(ctx, runtime{info: info, beat: b})
}

// RunActivity runs one attempt of the activity body b as the step info
// (its Activity is set to b's name), with the JSON input, under ctx made an
// activity context (WithStep). It returns the result encoded as the engines
// store it. Both engines run every attempt through it, so an attempt fails
// the same way on each: the body's error as returned, a panic as a retryable
// error, and a result that does not encode (or exceeds
// port.MaxPayloadBytes) as a non-retryable one.
func RunActivity(ctx context.Context, b port.ActivityBinding, info port.StepInfo, beat Beater, input json.RawMessage) (out json.RawMessage, err error) {
	info.Activity = b.Name()
	defer func() {
		if p := recover(); p != nil {
			out, err = nil, fmt.Errorf("activity %s panicked: %v", info.Activity, p)
		}
		err = Storable(err)
	}()
	res, err := engineapi.Invoke(WithStep(ctx, info, beat), b, input)
	if err != nil {
		return nil, err
	}
	out, err = EncodePayload("result", res)
	if err != nil {
		return nil, port.NonRetryable(fmt.Errorf("activity %s: %w", info.Activity, err))
	}
	return out, nil
}

// StepFailed is the *port.StepError a step returns once it failed for good,
// the only place one is built: after attempts attempts, the last one's error
// message, and whether that error was marked with port.NonRetryable (the
// lease engine sees the error itself; Temporal carries the mark back from the
// activity).
func StepFailed(step, activity string, attempts int, message string, nonRetryable bool) *port.StepError {
	return &port.StepError{Step: step, Activity: activity, Attempts: attempts, Message: message, NonRetryable: nonRetryable}
}

// ErrAttemptTimeout and ErrHeartbeatTimeout end an attempt's context when
// it runs past its step timeout, or goes its heartbeat timeout without a
// heartbeat, on both engines. Each matches port.ErrLeaseLost (the attempt
// no longer owns the step: a retry may run elsewhere), so StopReason reads
// the same on both, and each is the attempt's error, whatever the body
// returned after it: the run's LastError (and the StepError's Message once
// the retries ran out) reads its text on both.
var (
	ErrAttemptTimeout   error = stepTimeout("step attempt timed out")
	ErrHeartbeatTimeout error = stepTimeout("step missed its heartbeat timeout")
)

type stepTimeout string

func (e stepTimeout) Error() string { return string(e) }
func (stepTimeout) Unwrap() error   { return port.ErrLeaseLost }

// WatchHeartbeats ends an attempt whose body goes timeout without a
// heartbeat, with stop(ErrHeartbeatTimeout), as both engines do: it
// returns b with each Beat resetting that bound first, and the func that
// disarms it once the body returned. A timeout of 0 (none) leaves b as it
// is.
func WatchHeartbeats(b Beater, timeout time.Duration, stop context.CancelCauseFunc) (Beater, func()) {
	if timeout <= 0 {
		return b, func() {}
	}
	w := watchedBeater{Beater: b, timeout: timeout, timer: time.AfterFunc(timeout, func() { stop(ErrHeartbeatTimeout) })}
	return w, func() { w.timer.Stop() }
}

type watchedBeater struct {
	Beater
	timer   *time.Timer
	timeout time.Duration
}

func (w watchedBeater) Beat(ctx context.Context, progress any) error {
	w.timer.Reset(w.timeout)
	return w.Beater.Beat(ctx, progress)
}

// TimedOut is the timeout that ended ctx (ErrAttemptTimeout or
// ErrHeartbeatTimeout), or nil when ctx is live or ended otherwise.
func TimedOut(ctx context.Context) error {
	var st stepTimeout
	if ctx.Err() != nil && errors.As(context.Cause(ctx), &st) {
		return st
	}
	return nil
}

// TemporalToken is the fencing token of a Temporal activity attempt: its
// scope is the workflow ID, run ID and activity ID (a reset starts a new run
// ID, hence a new scope), its epoch the activity attempt, which Temporal
// increments on every retry, including one after a timed-out attempt that is
// still running. See port.FencingToken for the order.
func TemporalToken(workflowID, runID, activityID string, attempt int, generation int64) port.FencingToken {
	return port.FencingToken{Scope: workflowID + "/" + runID + "/" + activityID, Epoch: int64(attempt), Generation: generation}
}

// LeaseToken is the fencing token of a lease-engine step: its scope is the
// run and the step, its epoch the run's claim count (a new claim after a lost
// lease is a later epoch), its nonce the claim's lease_token, which tells two
// claims apart should they ever share a count.
func LeaseToken(run port.RunID, step string, claims int64, leaseToken string, generation int64) port.FencingToken {
	return port.FencingToken{Scope: string(run) + "/" + step, Epoch: claims, Nonce: leaseToken, Generation: generation}
}
