package port

import (
	"encoding/json"
	"log/slog"
	"time"
)

// Kind authors: Flow is what a handler sees of the engine (engines implement
// it). It is deliberately not a context.Context: a handler must be
// deterministic, so it gets time, logging and identity from the Flow and
// performs every side effect through a Step.
//
// Rules for handlers (ADR 2.5): no goroutines, clocks, randomness, I/O or
// map-order dependence; every step, wait and sleep has a name unique within
// the run, stable within a version (carry a loop index in names used in
// loops); only append steps at the end or insert idempotent ones within a
// version, bump Version otherwise. This repository's tools/flowcheck reports
// the goroutines, clocks, randomness, I/O and map ranges a handler reaches
// (`flowcheck ./...` in the module that holds the handlers); Temporal's
// workflowcheck finds workflows by a workflow.Context and sees none here.
//
// On replay both engines check each step's (sequence number, name) against
// the history and fail the run with ErrNondeterminism on a mismatch.
type Flow interface {
	RunID() RunID
	Kind() Kind
	Version() int
	// Now is the deterministic current time (recorded on first execution).
	// Before an execution's first step it is when the execution began: not
	// before a delayed run was due, and after a ContinueAsNew not before
	// the continued execution's last Now (conformance rows "Now of a
	// delayed run", "Now after a ContinueAsNew"). It never goes back.
	Now() time.Time
	// Logger does not repeat lines while the engine replays history.
	Logger() *slog.Logger

	// Step runs the registered activity at least once and memoizes its
	// result: on replay a completed step returns the stored result without
	// running again. in is encoded as JSON; out (a pointer, or nil) receives
	// the decoded result. A step that fails for good returns a *StepError;
	// after a cancel Step returns ErrCanceled without starting.
	Step(name, activity string, in, out any, opts ...StepOption) error
	// WaitSignal parks the run until a signal on topic arrives or timeout
	// passes. It reports whether a signal was received and decodes its
	// payload into payload (a pointer, or nil). A signal sent before the run
	// waited is not lost while it is buffered by the engine, but the caller
	// must still treat the business database as the truth (ADR 2.2).
	WaitSignal(name string, topic Topic, timeout time.Duration, payload any) (received bool, err error)
	// Sleep parks the run for d without holding a worker slot.
	Sleep(name string, d time.Duration) error
	// GetVersion marks a compatible in-place change: it returns maxSupported
	// on a first execution and the recorded version on replay; a changeID
	// met again in the same run returns the version it got the first time.
	// A run that went past this point before the call was added (its
	// history goes on without the marker) gets DefaultVersion, so code that
	// keeps such runs on the old path passes DefaultVersion as minSupported
	// and branches on it.
	// "version:" + changeID must be a valid step name (ValidateName) and
	// minSupported must not exceed maxSupported; otherwise, or when the
	// version recorded (or DefaultVersion) lies outside the range, the run
	// fails.
	GetVersion(changeID string, minSupported, maxSupported int) int
	// RestartSuggested reports that the run's history is long; a loop should
	// then return ContinueAsNew with its current state.
	RestartSuggested() bool
}

// Kind authors: StepOptions tune a single step. The kind's Definition
// supplies the defaults; StepOption values override them per call.
type StepOptions struct {
	Retry RetryPolicy
	// Timeout bounds one attempt (Temporal StartToClose). Default 1 minute.
	Timeout time.Duration
	// HeartbeatTimeout, when set, fails an attempt that does not call
	// Heartbeat within it; long steps set it so a stuck worker is noticed
	// before Timeout. Zero disables it.
	HeartbeatTimeout time.Duration
}

// Kind authors: DefaultVersion is what Flow.GetVersion returns to a run
// that went past the call's place in its handler before the call was added
// (Temporal's workflow.DefaultVersion).
const DefaultVersion = -1

// Kind authors: DefaultStepTimeout applies when neither the Definition nor
// the step sets one.
const DefaultStepTimeout = time.Minute

// Kind authors: StepOption overrides one field of StepOptions.
type StepOption func(*StepOptions)

// Kind authors: WithRetry overrides the kind's retry policy for one step.
func WithRetry(p RetryPolicy) StepOption { return func(o *StepOptions) { o.Retry = p } }

// Kind authors: WithTimeout sets the per-attempt timeout of one step.
func WithTimeout(d time.Duration) StepOption { return func(o *StepOptions) { o.Timeout = d } }

// Kind authors: WithHeartbeatTimeout sets the heartbeat timeout of one step.
func WithHeartbeatTimeout(d time.Duration) StepOption {
	return func(o *StepOptions) { o.HeartbeatTimeout = d }
}

// Kind authors: Definition is one version of one task kind.
type Definition struct {
	Kind    Kind
	Version int // >= 1; an incompatible handler change bumps it (ADR 2.5)
	// Retry is the kind's step retry policy; required (ADR 2.6). Use
	// NetworkRetry or FileRetry unless there is a reason not to.
	Retry RetryPolicy
	// StepTimeout is the default per-attempt timeout; zero means DefaultStepTimeout.
	StepTimeout time.Duration
	// HeartbeatTimeout is the default heartbeat timeout; zero disables it.
	HeartbeatTimeout time.Duration
	// ShowInput lets an engine display the beginning of a run's input in its
	// operator UI (the Temporal UI's memo). Off by default: an input can
	// carry what the operators of the engine should not read.
	ShowInput bool
	Handler   Handler
}

// Kind authors: Handler runs a kind's deterministic code. Build one with
// Handle or HandleResult; it is opaque.
type Handler struct {
	run   func(Flow, json.RawMessage) (any, error)
	check func(json.RawMessage) error
}

// Kind authors: Validator is implemented by inputs that check their own
// fields; Enqueue calls it so that bad input is refused before anything is
// written.
type Validator interface{ Validate() error }

// Kind authors: Handle turns a typed handler into a Handler. Inputs are
// decoded strictly (unknown fields are refused) and validated with Validate
// when In has it. A run of such a kind has no result: RunView.Output stays
// nil. A nil fn gives the zero Handler, which Register refuses.
func Handle[In any](fn func(f Flow, in In) error) Handler {
	if fn == nil {
		return Handler{}
	}
	return handler(func(f Flow, in In) (any, error) { return nil, fn(f, in) })
}

// Kind authors: HandleResult is Handle for a kind whose run returns a
// result. When fn returns a nil error, out is encoded as JSON (the limits of
// an input apply: MaxPayloadBytes, nothing Postgres's jsonb refuses) and
// recorded with the run's success, in the same write; RunView.Output carries
// it and Result decodes it. An out that does not encode fails the run with a
// *FieldError "output", not retried. A nil fn gives the zero Handler, which
// Register refuses.
func HandleResult[In, Out any](fn func(f Flow, in In) (Out, error)) Handler {
	if fn == nil {
		return Handler{}
	}
	return handler(func(f Flow, in In) (any, error) {
		out, err := fn(f, in)
		if err != nil {
			return nil, err
		}
		return out, nil
	})
}

func handler[In any](fn func(f Flow, in In) (any, error)) Handler {
	decode := func(raw json.RawMessage) (In, error) {
		var in In
		if err := decodeStrict(raw, &in); err != nil {
			return in, &FieldError{Field: "input", Reason: err.Error()}
		}
		if v, ok := any(&in).(Validator); ok {
			if err := v.Validate(); err != nil {
				return in, &FieldError{Field: "input", Reason: err.Error()}
			}
		}
		return in, nil
	}
	return Handler{
		run: func(f Flow, raw json.RawMessage) (any, error) {
			in, err := decode(raw)
			if err != nil {
				return nil, NonRetryable(err)
			}
			return fn(f, in)
		},
		check: func(raw json.RawMessage) error {
			_, err := decode(raw)
			return err
		},
	}
}

// defined reports whether the handler was built with Handle.
func (h Handler) defined() bool { return h.run != nil }
