package port

import (
	"errors"
	"fmt"
)

// Callers and kind authors: the sentinel errors. Each engine maps its
// driver's errors onto these in one place, so business code can use
// errors.Is regardless of the engine.
var (
	// ErrNotFound: no run (or other record) with that id.
	ErrNotFound = errors.New("taskport: not found")
	// ErrOtherEngine: the run exists but another engine owns it (a database
	// that both engines share, during a move from one to the other). Get,
	// Cancel and Admin.Retry refuse it, naming both engines, and write
	// nothing; Admin.ListRuns does not list it. It wraps ErrNotFound: to
	// this engine the run is not one of its own, and a caller that only
	// asks "is there such a run?" gets the answer it would for an unknown
	// id.
	ErrOtherEngine = fmt.Errorf("%w: the run belongs to another engine", ErrNotFound)
	// ErrInvalidInput: the caller passed something the engine refuses; the
	// concrete error is usually a *FieldError naming the field.
	ErrInvalidInput = errors.New("taskport: invalid input")
	// ErrUnknownKind: the kind (or the kind at that version) is not registered.
	ErrUnknownKind = fmt.Errorf("%w: unknown kind", ErrInvalidInput)
	// ErrUnknownVersion: the kind is registered, but only at versions older
	// than the input needs (EnqueueOptions.MinVersion). It is an unknown kind
	// at that version, so it also matches ErrUnknownKind: another process,
	// with newer code, may know it.
	ErrUnknownVersion = fmt.Errorf("%w: no registered version is new enough", ErrUnknownKind)
	// ErrUnknownActivity: a step names an activity that is not registered.
	ErrUnknownActivity = fmt.Errorf("%w: unknown activity", ErrInvalidInput)
	// ErrPayloadTooLarge: an input, signal payload or step result exceeds
	// MaxPayloadBytes once encoded.
	ErrPayloadTooLarge = fmt.Errorf("%w: payload too large", ErrInvalidInput)
	// ErrFenced: a ledger write carried a fencing token that is no longer the
	// current one; nothing was written.
	ErrFenced = errors.New("taskport: fenced: a newer attempt owns this operation")
	// ErrLeaseLost: the worker's lease on the run expired or was taken over,
	// or the step's attempt ran past its timeout or heartbeat timeout (the
	// cause then also names which): the attempt no longer owns the step, a
	// retry may run elsewhere; the step must stop and commit nothing.
	ErrLeaseLost = errors.New("taskport: lease lost")
	// ErrCanceled: the run was canceled. Flow methods return it once a cancel
	// is seen; activities see it as their context's cause.
	ErrCanceled = errors.New("taskport: run canceled")
	// ErrNondeterminism: on replay a handler asked for a different step (by
	// sequence number and name) than the one recorded. The run fails loudly on
	// both engines instead of silently running different code.
	ErrNondeterminism = errors.New("taskport: nondeterministic handler: step sequence differs from history")
	// ErrAlreadyStarted: Start was called on an engine (or a dispatcher)
	// that is serving; Stop it first.
	ErrAlreadyStarted = errors.New("taskport: engine already started")
)

// Callers and kind authors: FieldError names the offending field of a
// rejected input. It unwraps to ErrInvalidInput (or to the more specific
// sentinel given as Err).
type FieldError struct {
	Field  string // e.g. "idempotency_key", "input", "timeout"
	Reason string // human-readable, e.g. "must not be empty"
	Err    error  // sentinel it unwraps to; ErrInvalidInput when nil
}

// Callers and kind authors: Error says which field and why.
func (e *FieldError) Error() string {
	return fmt.Sprintf("invalid %s: %s", e.Field, e.Reason)
}

// Callers and kind authors: Unwrap returns Err, or ErrInvalidInput.
func (e *FieldError) Unwrap() error {
	if e.Err != nil {
		return e.Err
	}
	return ErrInvalidInput
}

func fieldErr(field, format string, args ...any) error {
	return &FieldError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// nonRetryableError marks an activity error that must fail the step at once,
// without spending the remaining attempts of its RetryPolicy. Unexported:
// NonRetryable and IsNonRetryable are all anyone needs.
type nonRetryableError struct{ err error }

func (e *nonRetryableError) Error() string { return "non-retryable: " + e.err.Error() }
func (e *nonRetryableError) Unwrap() error { return e.err }

// Kind authors: NonRetryable wraps err so that both engines stop retrying the
// step. It returns nil for a nil err.
func NonRetryable(err error) error {
	if err == nil {
		return nil
	}
	return &nonRetryableError{err: err}
}

// Kind authors and engines: IsNonRetryable reports whether err (or anything
// it wraps) was marked with NonRetryable.
func IsNonRetryable(err error) bool {
	var nr *nonRetryableError
	return errors.As(err, &nr)
}

// Kind authors: StepError is what Flow.Step returns when a step failed for
// good: its attempts are exhausted or its error was non-retryable. Handlers
// may inspect it with errors.As (e.g. to open a pending decision) before
// returning it. Engines build it in one place (internal/enginekit).
type StepError struct {
	Step         string
	Activity     string
	Attempts     int
	Message      string // the last attempt's error message
	NonRetryable bool
}

// Kind authors: Error names the step, its activity, the attempts spent and
// why it stopped.
func (e *StepError) Error() string {
	why := "retries exhausted"
	if e.NonRetryable {
		why = "non-retryable"
	}
	return fmt.Sprintf("step %q (activity %s) failed after %d attempt(s), %s: %s",
		e.Step, e.Activity, e.Attempts, why, e.Message)
}

// continueAsNew is what ContinueAsNew returns. It is unexported so that the
// only way to make one is ContinueAsNew; engines recognise it by its
// NextInput method (internal/enginekit.ContinueAsNew) and encode the input
// themselves, so an input that does not encode fails the run as the handler's
// error, with a *FieldError.
type continueAsNew struct{ input any }

func (e *continueAsNew) Error() string  { return "continue as new" }
func (e *continueAsNew) NextInput() any { return e.input }

// Kind authors: ContinueAsNew returns the error a handler returns to end
// this run's history and start the handler again, under the same RunID, with
// input. Handlers return it from long wait loops when Flow.RestartSuggested
// reports true; it is not a failure.
func ContinueAsNew(input any) error { return &continueAsNew{input: input} }
