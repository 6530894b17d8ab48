package port

import (
	"errors"
	"fmt"
)

// Sentinel errors. Each engine maps its driver's errors onto these in one
// place, so business code can use errors.Is regardless of the engine.
var (
	// ErrNotFound: no run (or other record) with that id.
	ErrNotFound = errors.New("taskport: not found")
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
	// ErrLeaseLost: the worker's lease on the run expired or was taken over;
	// the step must stop and commit nothing.
	ErrLeaseLost = errors.New("taskport: lease lost")
	// ErrCanceled: the run was canceled. Flow methods return it once a cancel
	// is seen; activities see it as their context's cause.
	ErrCanceled = errors.New("taskport: run canceled")
	// ErrNondeterminism: on replay a handler asked for a different step (by
	// sequence number and name) than the one recorded. The run fails loudly on
	// both engines instead of silently running different code.
	ErrNondeterminism = errors.New("taskport: nondeterministic handler: step sequence differs from history")
	// ErrNotStarted / ErrStopped guard lifecycle misuse.
	ErrNotStarted     = errors.New("taskport: engine not started")
	ErrAlreadyStarted = errors.New("taskport: engine already started")
)

// FieldError names the offending field of a rejected input. It unwraps to
// ErrInvalidInput (or to the more specific sentinel given as Err).
type FieldError struct {
	Field  string // e.g. "idempotency_key", "input", "timeout"
	Reason string // human-readable, e.g. "must not be empty"
	Err    error  // sentinel it unwraps to; ErrInvalidInput when nil
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("invalid %s: %s", e.Field, e.Reason)
}

func (e *FieldError) Unwrap() error {
	if e.Err != nil {
		return e.Err
	}
	return ErrInvalidInput
}

func fieldErr(field, format string, args ...any) error {
	return &FieldError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// NonRetryableError marks an activity error that must fail the step at once,
// without spending the remaining attempts of its RetryPolicy.
type NonRetryableError struct{ Err error }

func (e *NonRetryableError) Error() string { return "non-retryable: " + e.Err.Error() }
func (e *NonRetryableError) Unwrap() error { return e.Err }

// NonRetryable wraps err so that both engines stop retrying the step.
// It returns nil for a nil err.
func NonRetryable(err error) error {
	if err == nil {
		return nil
	}
	return &NonRetryableError{Err: err}
}

// IsNonRetryable reports whether err (or anything it wraps) was marked with
// NonRetryable.
func IsNonRetryable(err error) bool {
	var nr *NonRetryableError
	return errors.As(err, &nr)
}

// StepError is what Flow.Step returns when a step failed for good: its
// attempts are exhausted or its error was non-retryable. Handlers may inspect
// it (e.g. to open a pending decision) before returning it.
type StepError struct {
	Step         string
	Activity     string
	Attempts     int
	Message      string // the last attempt's error message
	NonRetryable bool
}

func (e *StepError) Error() string {
	why := "retries exhausted"
	if e.NonRetryable {
		why = "non-retryable"
	}
	return fmt.Sprintf("step %q (activity %s) failed after %d attempt(s), %s: %s",
		e.Step, e.Activity, e.Attempts, why, e.Message)
}

// ContinueAsNewError asks the engine to end this run's history and start the
// handler again, under the same RunID, with a fresh input. Handlers return it
// from long wait loops when Flow.RestartSuggested reports true; it is not a
// failure.
type ContinueAsNewError struct {
	Input []byte // JSON-encoded new input
}

func (e *ContinueAsNewError) Error() string { return "continue as new" }

// ContinueAsNew returns the error a handler returns to restart itself with
// input. Encoding errors are returned as a *FieldError instead.
func ContinueAsNew(input any) error {
	b, err := EncodePayload("input", input)
	if err != nil {
		return err
	}
	return &ContinueAsNewError{Input: b}
}
