// Package outbox hands work to the engine durably (ADR 2.1): a business
// transaction writes an outbox_event row with Write; a Dispatcher claims
// pending rows, calls TaskEngine.Enqueue with the row's idempotency key and
// marks them dispatched. A duplicate dispatch (a dispatcher that died between
// Enqueue and the mark) is absorbed by Enqueue's idempotency.
package outbox

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/taskport/taskport/ledger"
	"github.com/taskport/taskport/port"
)

// DBTX is satisfied by *pgxpool.Pool, *pgx.Conn and pgx.Tx: Write goes into
// the caller's business transaction.
type DBTX = ledger.DBTX

// Event asks for one run of Kind.
type Event struct {
	Kind port.Kind
	// IdempotencyKey is derived from the business meaning (e.g.
	// "plan:<id>:download.submit"); it is also the engine's key.
	IdempotencyKey string
	// BusinessKey is the plan id the run belongs to (for the timeline, the
	// Temporal UI and cancel).
	BusinessKey string
	Payload     any
	// AvailableAt delays the run's start; zero means now.
	AvailableAt time.Time
}

// Write records ev in the caller's transaction. Writing the same (kind, key)
// twice keeps the first row; inserted reports which happened. The insert
// trigger notifies dispatchers when the transaction commits.
func Write(ctx context.Context, q DBTX, ev Event) (inserted bool, err error) {
	if err := port.ValidateName("kind", string(ev.Kind)); err != nil {
		return false, fmt.Errorf("outbox write: %w", err)
	}
	if ev.IdempotencyKey == "" || len(ev.IdempotencyKey) > port.MaxNameLen {
		return false, fmt.Errorf("outbox write %s: %w", ev.Kind,
			&port.FieldError{Field: "idempotency_key", Reason: fmt.Sprintf("must be 1..%d bytes", port.MaxNameLen)})
	}
	payload, err := port.EncodePayload("payload", ev.Payload)
	if err != nil {
		return false, fmt.Errorf("outbox write %s/%s: %w", ev.Kind, ev.IdempotencyKey, err)
	}
	id, err := uuid.NewV7()
	if err != nil {
		return false, fmt.Errorf("outbox write: new id: %w", err)
	}
	var avail *time.Time
	if !ev.AvailableAt.IsZero() {
		avail = &ev.AvailableAt
	}
	tag, err := q.Exec(ctx, insertEventSQL, id, ev.Kind, ev.IdempotencyKey, ev.BusinessKey, payload, avail)
	if err != nil {
		return false, fmt.Errorf("outbox write %s/%s: %w", ev.Kind, ev.IdempotencyKey, err)
	}
	return tag.RowsAffected() == 1, nil
}
