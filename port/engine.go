package port

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// Callers and kind authors: Kind names a task kind, e.g. "asset.import".
// Kinds are stable identifiers: they appear in idempotency rows, Temporal
// workflow types and the admin UI.
type Kind string

// Callers and kind authors: RunID identifies one run of a kind. It is
// assigned by Enqueue from the Postgres idempotency row, so it outlives any
// engine's retention window.
type RunID string

// Callers and kind authors: Topic addresses a signal, e.g.
// "approval:<plan id>".
type Topic string

// Callers: Status is the engine-neutral lifecycle of a run. Both engines map
// their own states onto exactly this vocabulary.
type Status string

// Callers: the statuses a RunView can report.
const (
	StatusPending   Status = "pending"   // enqueued, not yet picked up (or delayed by AvailableAt)
	StatusRunning   Status = "running"   // a worker is executing the handler or one of its steps
	StatusWaiting   Status = "waiting"   // parked in WaitSignal or Sleep; holds no worker slot
	StatusSucceeded Status = "succeeded" // the handler returned nil
	StatusFailed    Status = "failed"    // the handler returned an error (e.g. a step exhausted its retries)
	StatusCanceled  Status = "canceled"  // Cancel was called and the run stopped before finishing
)

// Callers: Terminal reports whether no further progress will happen.
func (s Status) Terminal() bool {
	return s == StatusSucceeded || s == StatusFailed || s == StatusCanceled
}

// Callers: Valid reports whether s is one of the six statuses.
func (s Status) Valid() bool {
	switch s {
	case StatusPending, StatusRunning, StatusWaiting, StatusSucceeded, StatusFailed, StatusCanceled:
		return true
	}
	return false
}

// Callers: TaskEngine is the only thing business code depends on (ADR-002
// section 1). Engines implement it; business code never imports one.
//
// Enqueue is idempotent on (kind, IdempotencyKey) for as long as the run is
// recorded: the Postgres row with UNIQUE(kind, idempotency_key) is the
// authority on both engines, and an engine's own retention (Temporal's
// namespace) does not shorten it. The row stays while the run is open and,
// once it finished, until the retention cleaner deletes it (package
// retention: by default 7 days after it succeeded or was canceled, 30 after
// it failed; never where no cleaner runs). After that, Enqueue with the same
// key starts a new run with a new RunID. Callers normally do not call Enqueue directly but
// write an outbox row in their business transaction (ADR 2.1).
//
// Lifecycle. Enqueue, Signal, Cancel and Get work whether or not the engine
// serves; Start makes the process serve (run steps) and Stop ends it. The
// rules are the same for both engines and for the outbox dispatcher:
//   - Start on a serving engine returns ErrAlreadyStarted and changes
//     nothing; a Start that fails leaves the engine stopped.
//   - Stop before any Start, and a second Stop, return nil and do nothing.
//   - Stop always ends the serving: an error reports what did not stop
//     cleanly within its bound (steps not handed back, a drain still going
//     on), never an engine that still serves.
//   - Start after Stop serves again: engines are restartable.
//   - The engine serves until Stop, not until Start's context ends.
//   - Done is closed while the engine does not serve: before the first
//     Start, after Stop, and once a fatal error stopped it on its own (the
//     Temporal worker gave up, e.g. its namespace was deleted). Err then
//     returns that error, until the next Start; after a graceful Stop it is
//     nil. A process watches Done after Start and exits (or turns unready and
//     unlive) when it closes without a Stop. An engine stopped by a fatal
//     error still takes a Stop, which releases what it holds.
type TaskEngine interface {
	// Enqueue starts a run of the current version of kind, or returns the run
	// already recorded for (kind, opts.IdempotencyKey). The input is not
	// compared with the existing run's input. Invalid input is refused with
	// a *FieldError (wrapping ErrInvalidInput) naming the field, before
	// anything is written; that includes what Postgres cannot store: a
	// U+0000 in any JSON string of the input, a lone surrogate escape or
	// bytes that are not UTF-8, and in the idempotency or business key a
	// NUL, another control character or bytes that are not UTF-8. The same
	// rule holds for a step's result (the step fails at once, not retried,
	// naming "result").
	Enqueue(ctx context.Context, kind Kind, input any, opts EnqueueOptions) (RunID, error)
	// EnqueueMany is Enqueue for a batch, in one transaction: a result per
	// item, in the items' order. Every item is validated as Enqueue would
	// before anything is written, and one bad item refuses the whole batch
	// with a *ItemError naming it; nothing is written. Idempotency holds
	// per item: a key already recorded returns its run (Created false), and
	// items of one batch with the same kind and key name one run, whose
	// input is the first of them (the later ones report Created false). An
	// empty batch is a no-op. Batches of a few thousand items are the
	// intended size: the batch is one transaction.
	EnqueueMany(ctx context.Context, items []EnqueueItem) ([]EnqueueResult, error)
	// Signal wakes the runs waiting on topic and returns how many accepted it.
	// It is a hint only: a waiter re-reads the business database after waking,
	// and a signal nobody waits for returns 0 and breaks nothing. A payload
	// Enqueue would refuse as an input is a *FieldError "payload".
	Signal(ctx context.Context, topic Topic, payload any) (delivered int, err error)
	// Cancel records the cancel request in Postgres first (the run's cancel
	// flag and reason; a later request keeps the first's), then cancels in
	// the engine, and returns nil. A running step is not interrupted by the
	// engine; it learns of the cancel through its context, whose cause is
	// ErrCanceled, whether or not it heartbeats, and stops itself. Later
	// steps never start.
	// Canceling a finished run (succeeded, failed or canceled) writes
	// nothing at all and returns nil. An unknown id (malformed or not) is
	// ErrNotFound, a run of another engine ErrOtherEngine, a reason that
	// Postgres's text cannot store (a NUL, bytes that are not UTF-8) a
	// *FieldError "reason"; none of them writes anything.
	Cancel(ctx context.Context, id RunID, reason string) error
	// Get returns the read-only projection of a run. An unknown id is
	// ErrNotFound, a run of another engine ErrOtherEngine; neither writes
	// anything.
	Get(ctx context.Context, id RunID) (RunView, error)
	// Start begins serving the given roles. It returns once the engine is
	// serving; work happens in the background until Stop.
	Start(ctx context.Context, opts StartOptions) error
	// Stop is graceful: in-flight steps finish or are handed back to another
	// worker within the engine's documented bound (or ctx's deadline, if
	// earlier). Safe to call twice, and before Start.
	Stop(ctx context.Context) error
	// Done is closed when the engine stops serving: after Stop, or on a fatal
	// error. Each Start makes a new channel: take it after Start returned.
	Done() <-chan struct{}
	// Err is nil while the engine serves and after a graceful Stop; once a
	// fatal error stopped it, Err returns that error until the next Start.
	Err() error
}

// Callers: EnqueueOptions tune one Enqueue call.
type EnqueueOptions struct {
	// IdempotencyKey is required. Derive it from the business meaning of the
	// request (e.g. "plan:<id>:import"), never from time or randomness.
	IdempotencyKey string
	// AvailableAt delays the first step until this instant. Zero means now.
	AvailableAt time.Time
	// Priority orders runs that are ready at the same time: lower runs first.
	// Zero is the default; it must lie in [MinPriority, MaxPriority]. The
	// lease engine orders its claims by it; the Temporal engine records it
	// but its server dispatches in its own order (docs/engines.md, "Known
	// differences").
	Priority int
	// BusinessKey is a free-form business identifier (a plan id) recorded with
	// the run so that operators can find it, e.g. in the Temporal UI. Optional.
	BusinessKey string
	// MinVersion is the lowest version of the kind that understands this
	// input; zero means any. A process whose newest registered version of the
	// kind is lower refuses the call with an error wrapping ErrUnknownVersion,
	// so that input written by newer code (a rolling deploy) waits for a
	// process that has that code instead of being misread or given up.
	MinVersion int
}

// Callers: EnqueueItem is one run of an EnqueueMany batch: the arguments
// of one Enqueue call.
type EnqueueItem struct {
	Kind    Kind
	Input   any
	Options EnqueueOptions
}

// Callers: EnqueueResult is what EnqueueMany reports for one item.
type EnqueueResult struct {
	ID RunID
	// Created is true when this item started the run; false when the run
	// was already recorded for its (kind, key), before the batch or by an
	// earlier item of the same batch.
	Created bool
}

// Callers: ItemError is EnqueueMany's refusal of a batch because of one
// item: Index is its position in the batch, Err why (as Enqueue would have
// refused it, usually a *FieldError). Nothing of the batch was written. It
// unwraps to Err, so errors.Is(err, ErrUnknownKind) tells a refusal that
// another process may not make.
type ItemError struct {
	Index int
	Err   error
}

// Callers: Error names the item and the reason.
func (e *ItemError) Error() string {
	return fmt.Sprintf("enqueue batch item %d: %s", e.Index, e.Err.Error())
}

// Callers: Unwrap returns Err.
func (e *ItemError) Unwrap() error { return e.Err }

// Callers: the bounds of EnqueueOptions.Priority, inclusive.
const (
	MinPriority = -100
	MaxPriority = 100
)

// Callers: Role is a responsibility an engine process can take on.
type Role string

// Callers: RoleWorker executes runs. Enqueue, Signal, Cancel and Get work
// without any role: a process that only submits work does not Start a worker.
const RoleWorker Role = "worker"

// Callers: MaxConcurrency bounds StartOptions.Concurrency: an engine sizes
// its queues and slots by it, and a larger value (a typo's extra zeros)
// would exhaust the process's memory before serving anything.
const MaxConcurrency = 10000

// Callers: StartOptions configure Start.
type StartOptions struct {
	// Roles to serve. Empty means [RoleWorker].
	Roles []Role
	// Concurrency is the number of steps this process runs at once. Zero
	// means the engine's default (documented by each engine); negative or
	// above MaxConcurrency is an error.
	Concurrency int
	// Versions restricts which registered versions this worker serves, per
	// kind. Nil means every registered version. A run whose version no worker
	// serves stays pending (visible, not failed).
	Versions map[Kind][]int
}

// Callers: RunView is the engine-neutral, read-only projection of a run.
// Both engines fill it with the same vocabulary.
type RunView struct {
	ID          RunID
	Kind        Kind
	Version     int
	BusinessKey string
	Status      Status
	// Attempts is the attempt number of the current (or last) step; 0 before
	// any step ran.
	Attempts int
	// LastError is the most recent failure message, empty if none.
	LastError string
	// CurrentStep is the name of the step, wait or sleep the run is in (or
	// last was in); empty before the first step.
	CurrentStep string
	CreatedAt   time.Time
	UpdatedAt   time.Time
	// FinishedAt is zero until the run is terminal.
	FinishedAt time.Time
	// Output is the result the kind's handler returned (HandleResult),
	// encoded as JSON, once the run succeeded; nil while it is open, when it
	// failed or was canceled, and for a kind built with Handle. Result
	// decodes it.
	Output json.RawMessage
	// MovedTo is the run an evacuation (router.Evacuate) moved this one to,
	// set when the run is ended by the evacuation and its replacement
	// recorded; empty otherwise. A canceled run with MovedTo goes on as
	// that run: its work was not given up, and a caller waiting for it
	// waits for MovedTo instead.
	MovedTo RunID
	// Cursor is the run's position in the listing order of Admin.ListRuns
	// (newest first), opaque: pass the last run's Cursor of a page as
	// RunFilter.After to list the next page.
	Cursor string
}

// Callers: RunFilter selects runs for the admin listings.
type RunFilter struct {
	Kind Kind // empty: every kind
	// Version, when non-zero, keeps only runs of this handler version.
	Version int
	// BelowVersion, when non-zero, keeps only runs of versions lower than it:
	// "runs still on an old version". Either version outside [0,
	// math.MaxInt32] is refused with ErrInvalidInput.
	BelowVersion int
	Statuses     []Status // empty: every status
	// BusinessKey, when non-empty, keeps only the runs enqueued with this
	// business key (a plan's runs).
	BusinessKey string
	// After, when non-empty, is the Cursor of the last run of the previous
	// page: the listing goes on with the runs listed after it (keyset
	// paging, so runs created meanwhile shift no page). A cursor that is not
	// one is refused with ErrInvalidInput.
	After string
	// Limit is the page size: zero means DefaultRunsPerPage; negative or
	// above MaxRunsPerPage is refused with ErrInvalidInput.
	Limit int
}

// Callers: the page sizes of RunFilter.Limit.
const (
	DefaultRunsPerPage = 100
	MaxRunsPerPage     = 1000
)

// Callers: Admin is implemented by both engines for the operator surface:
// dead letters (Statuses: failed) and runs still open on an old version
// (ADR 2.5, 2.6).
type Admin interface {
	// ListRuns returns up to filter.Limit of this engine's runs matching
	// filter, newest first (by creation, then id); the runs of another
	// engine sharing the database are not listed. A page shorter than the
	// limit is the last one.
	ListRuns(ctx context.Context, filter RunFilter) ([]RunView, error)
	// Retry starts a new run for a failed run (a dead letter): the same
	// kind, input and business key, at the kind's current version, whose
	// input must still be accepted (the failed run's version is the input's
	// MinVersion). An engine whose registry lacks the kind (a process that
	// only administers runs) starts it at the failed run's version with the
	// stored input, as stored. Its idempotency key is derived from the failed run's id
	// (RetryKey), so a repeated Retry returns the same new run. The failed
	// run stays as it is, listed as failed. A run of another engine is
	// refused with ErrOtherEngine (whatever its status), a run that is not
	// failed with an error wrapping ErrInvalidInput, and an unknown run with
	// ErrNotFound; none of them writes anything.
	Retry(ctx context.Context, id RunID) (RunID, error)
}

// Callers: RetryKey is the idempotency key of the run Admin.Retry starts
// for the failed run id.
func RetryKey(id RunID) string { return "retry:" + string(id) }
