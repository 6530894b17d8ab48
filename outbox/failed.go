package outbox

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/taskport/taskport/internal/enginekit"
	"github.com/taskport/taskport/port"
)

// FailedRow is a row the dispatchers gave up on: its input is invalid for
// the kind (under every version, since a row that only needs a newer version
// waits for a process that has it). An operator fixes the cause and retries
// it (Retry), or leaves it.
type FailedRow struct {
	ID             uuid.UUID  `json:"id"`
	Action         Action     `json:"action"`
	Kind           port.Kind  `json:"kind,omitempty"`
	Topic          port.Topic `json:"topic,omitempty"`
	IdempotencyKey string     `json:"idempotency_key"`
	BusinessKey    string     `json:"business_key"`
	Attempts       int        `json:"attempts"`
	LastError      string     `json:"last_error"`
	CreatedAt      time.Time  `json:"created_at"`
	// RetriedBy and RetriedAt record the last operator retry; empty and zero
	// when none.
	RetriedBy string    `json:"retried_by,omitempty"`
	RetriedAt time.Time `json:"retried_at,omitzero"`
}

// MaxRetriedBy bounds who retried a row, in characters (as plans.MaxActor
// bounds who acted).
const MaxRetriedBy = 200

// Failed returns the failed rows, oldest first, at most limit of them; a
// negative limit is a *port.FieldError.
func Failed(ctx context.Context, q DBTX, limit int) ([]FailedRow, error) {
	if limit < 0 {
		return nil, fmt.Errorf("list failed outbox rows: %w", &port.FieldError{Field: "limit", Reason: fmt.Sprintf("must not be negative, got %d", limit)})
	}
	rows, err := q.Query(ctx, listFailedSQL, limit)
	if err != nil {
		return nil, fmt.Errorf("list failed outbox rows: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (FailedRow, error) {
		var r FailedRow
		var retried *time.Time
		err := row.Scan(&r.ID, &r.Action, &r.Kind, &r.Topic, &r.IdempotencyKey, &r.BusinessKey, &r.Attempts, &r.LastError,
			&r.CreatedAt, &r.RetriedBy, &retried)
		if retried != nil {
			r.RetriedAt = *retried
		}
		return r, err
	})
	if err != nil {
		return nil, fmt.Errorf("list failed outbox rows: %w", err)
	}
	return out, nil
}

// CountFailed returns how many rows are failed.
func CountFailed(ctx context.Context, q DBTX) (int, error) {
	var n int
	if err := q.QueryRow(ctx, countFailedSQL).Scan(&n); err != nil {
		return 0, fmt.Errorf("count failed outbox rows: %w", err)
	}
	return n, nil
}

// Retry hands a failed row back to the dispatchers with its attempts reset,
// recording who asked. A row that is not failed (unknown, or retried
// already) is an error wrapping port.ErrNotFound; who asked must be one line
// of at most MaxRetriedBy characters, not blank, else the error is a
// *port.FieldError. Either way nothing is written.
func Retry(ctx context.Context, q DBTX, id uuid.UUID, by string) error {
	if err := checkRetriedBy(by); err != nil {
		return fmt.Errorf("retry outbox row %s: %w", id, err)
	}
	tag, err := q.Exec(ctx, retrySQL, id, by)
	if err != nil {
		return fmt.Errorf("retry outbox row %s: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("retry outbox row %s: no failed row with that id: %w", id, port.ErrNotFound)
	}
	if _, err := q.Exec(ctx, notifySQL); err != nil {
		return fmt.Errorf("retry outbox row %s: wake dispatchers: %w", id, err)
	}
	return nil
}

// checkRetriedBy refuses a blank name, one Postgres text cannot store, one
// with a control character (an operator reads it back in a terminal) and
// one longer than MaxRetriedBy characters.
func checkRetriedBy(by string) error {
	const field = "retried_by"
	if strings.TrimSpace(by) == "" {
		return &port.FieldError{Field: field, Reason: "must not be empty"}
	}
	return enginekit.ValidateBoundedLine(field, by, "", MaxRetriedBy)
}
