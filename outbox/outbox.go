// Package outbox hands work to the engine durably (ADR 2.1): a business
// transaction writes an outbox_event row with Write; a Dispatcher claims
// pending rows, carries them out and marks them dispatched. A duplicate
// dispatch (a dispatcher that died between the engine call and the mark) is
// absorbed by the engine's idempotency for enqueues, and is harmless for the
// other actions (a signal is a hint, canceling a canceled run is a no-op).
//
// Three actions ride the outbox, so that nothing a business transaction
// decides is lost when its process dies right after the commit: enqueue a
// run of a kind, signal a topic (the wake-up after a completed download),
// and cancel the open runs of a plan.
//
// Where an engine is at hand, an enqueue needs no row: Send hands it to the
// engine's EnqueueTx in the same transaction (porttx.Enqueuer, on both
// engines and the router), and writes a row only for the other actions, for
// a kind the engine does not know, and without an engine (the plans API).
// The dispatcher still carries out every row, including those that a
// release before Send wrote for every hand-over.
package outbox

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/taskport/taskport/internal/dbtx"
	"github.com/taskport/taskport/internal/enginekit"
	"github.com/taskport/taskport/internal/tracing"
	"github.com/taskport/taskport/port"
)

// DBTX is satisfied by *pgxpool.Pool, *pgx.Conn and pgx.Tx: Write goes into
// the caller's business transaction.
type DBTX = dbtx.DBTX

// Action is what the dispatcher does with a row.
type Action string

// The actions.
const (
	// ActionEnqueue calls TaskEngine.Enqueue(Kind, Payload) with the row's
	// idempotency key. It is the default.
	ActionEnqueue Action = "enqueue"
	// ActionSignal calls TaskEngine.Signal(Topic, Payload).
	ActionSignal Action = "signal"
	// ActionCancelPlanRuns cancels every open run whose business key is the
	// row's BusinessKey, except the kinds the CancelRuns payload spares.
	ActionCancelPlanRuns Action = "cancel_plan_runs"
)

// Event is one row: an action to carry out after the business commit.
type Event struct {
	// Action; empty means ActionEnqueue.
	Action Action
	// Kind to enqueue (ActionEnqueue only).
	Kind port.Kind
	// Topic to signal (ActionSignal only).
	Topic port.Topic
	// IdempotencyKey is derived from the business meaning (e.g.
	// "plan:<id>:download.submit"): writing the same (kind, key) twice keeps
	// the first row. For an enqueue it is also the engine's key.
	IdempotencyKey string
	// BusinessKey is the plan id the row belongs to (for the timeline, the
	// Temporal UI and cancel). Required for ActionCancelPlanRuns.
	BusinessKey string
	// Payload: the run's input (enqueue), the signal's payload, or a
	// CancelRuns (cancel).
	Payload any
	// AvailableAt delays the run's start; zero means now (enqueue only).
	AvailableAt time.Time
	// MinVersion is the lowest version of Kind that understands Payload
	// (enqueue only); zero means any. A dispatcher whose engine has only
	// older versions leaves the row for a newer process (port.ErrUnknownVersion).
	MinVersion int
}

// keysOnly stands in for the kind of a row that has none (a signal or a
// cancel), whose keys validate checks as an enqueue's.
const keysOnly port.Kind = "outbox.keys"

// CancelRuns is the payload of an ActionCancelPlanRuns row.
type CancelRuns struct {
	Reason string `json:"reason"`
	// Spare are the kinds left running (e.g. the compensation a cancel starts).
	Spare []port.Kind `json:"spare,omitempty"`
}

// validate refuses what the engines would refuse at dispatch, so that the
// row is refused in the caller's transaction rather than failing later, and
// what Postgres cannot store, which would abort that transaction: the keys
// and times as the engines check them (enginekit.CheckOptions), for every
// action.
func (ev Event) validate() error {
	enqueue := ev.Action == ActionEnqueue
	if err := enginekit.CheckOptions(cmp.Or(ev.Kind, keysOnly), port.EnqueueOptions{IdempotencyKey: ev.IdempotencyKey,
		BusinessKey: ev.BusinessKey, AvailableAt: ev.AvailableAt, MinVersion: ev.MinVersion}); err != nil {
		return err
	}
	if enqueue != (ev.Kind != "") {
		return &port.FieldError{Field: "kind", Reason: fmt.Sprintf("required for %s rows only", ActionEnqueue)}
	}
	if (ev.Action == ActionSignal) != (ev.Topic != "") {
		return &port.FieldError{Field: "topic", Reason: fmt.Sprintf("required for %s rows only", ActionSignal)}
	}
	if !enqueue && (!ev.AvailableAt.IsZero() || ev.MinVersion != 0) {
		return &port.FieldError{Field: "available_at", Reason: fmt.Sprintf("available_at and min_version are for %s rows only", ActionEnqueue)}
	}
	switch ev.Action {
	case ActionEnqueue:
		return nil // the kind and min_version: CheckOptions
	case ActionSignal:
		return port.ValidateName("topic", string(ev.Topic))
	case ActionCancelPlanRuns:
		if ev.BusinessKey == "" {
			return &port.FieldError{Field: "business_key", Reason: "names the plan whose runs are canceled: required"}
		}
		if _, ok := ev.Payload.(CancelRuns); !ok {
			return &port.FieldError{Field: "payload", Reason: fmt.Sprintf("must be an outbox.CancelRuns, got %T", ev.Payload)}
		}
		return nil
	}
	return &port.FieldError{Field: "action", Reason: fmt.Sprintf("unknown action %q", ev.Action)}
}

// Write records ev in the caller's transaction. Writing the same (kind, key)
// twice keeps the first row; inserted reports which happened. The insert
// trigger notifies dispatchers when the transaction commits. The row keeps
// the trace context of ctx (the business transaction's span, if any), which
// the dispatcher continues.
func Write(ctx context.Context, q DBTX, ev Event) (inserted bool, err error) {
	if ev.Action == "" {
		ev.Action = ActionEnqueue
	}
	if err := ev.validate(); err != nil {
		return false, fmt.Errorf("outbox write %s %s/%q: %w", ev.Action, ev.Kind, ev.IdempotencyKey, err)
	}
	// Encoded as the engine will encode it at dispatch, so that a payload
	// the engine would refuse (too large, not JSON) is refused here, in the
	// caller's transaction, rather than failing the row later.
	payload, err := enginekit.EncodePayload("payload", ev.Payload)
	if err != nil {
		return false, fmt.Errorf("outbox write %s %s/%s: %w", ev.Action, ev.Kind, ev.IdempotencyKey, err)
	}
	id, err := uuid.NewV7()
	if err != nil {
		return false, fmt.Errorf("outbox write: new id: %w", err)
	}
	var avail *time.Time
	if !ev.AvailableAt.IsZero() {
		avail = &ev.AvailableAt
	}
	tc := tracing.FromContext(ctx)
	tag, err := q.Exec(ctx, insertEventSQL, id, ev.Action, ev.Kind, ev.Topic, ev.IdempotencyKey, ev.BusinessKey, payload, avail,
		max(ev.MinVersion, 1), tc.Parent, tc.State)
	if err != nil {
		return false, fmt.Errorf("outbox write %s %s/%s: %w", ev.Action, ev.Kind, ev.IdempotencyKey, err)
	}
	return tag.RowsAffected() == 1, nil
}
