// Package ledger holds the business tables (plan, approval, download_task,
// decision) and the operation ledger (asset_operation) of ADR 2.3: a side
// effect is recorded as plan -> attempt(fencing token) -> result, and its
// commit is fenced on the attempt token so that a stale attempt can never
// overwrite a newer one.
//
// Every function takes a DBTX, so it works on a pool or inside the caller's
// transaction; Run drives one fenced side effect from Begin to Commit.
package ledger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/taskport/taskport/acquisition"
	"github.com/taskport/taskport/internal/dbtx"
	"github.com/taskport/taskport/port"
)

// DBTX is satisfied by *pgxpool.Pool, *pgx.Conn and pgx.Tx, so every write
// also works inside the caller's transaction.
type DBTX = dbtx.DBTX

// Beginner opens transactions; *pgxpool.Pool satisfies it.
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// InTx runs fn in a transaction on db and commits it when fn returns nil.
func InTx(ctx context.Context, db Beginner, fn func(tx pgx.Tx) error) error {
	tx, err := db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin transaction: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit transaction: %w", err)
	}
	return nil
}

// Plan asks for one media asset.
type Plan struct {
	ID             uuid.UUID
	Title          string
	SourceType     string // magnet, url or torrent
	Source         string // magnet link, .torrent URL, or the .torrent file in base64
	InfoHash       string // 40 lowercase hex digits
	TargetPath     string // absolute, inside the library root
	ExpectedSize   int64
	ExpectedSHA256 string // 64 lowercase hex digits
	Status         acquisition.Status
	// CancelRequestedAt is the business cancel flag (ADR 2.4); zero when unset.
	CancelRequestedAt time.Time
	CancelReason      string
	CreatedAt         time.Time
	UpdatedAt         time.Time
}

// CancelRequested reports whether the business cancel flag is set.
func (p Plan) CancelRequested() bool { return !p.CancelRequestedAt.IsZero() }

// Approval records the decision on a plan.
type Approval struct {
	ID        uuid.UUID
	PlanID    uuid.UUID
	Decision  string // approved or rejected
	DecidedBy string
	Note      string
	CreatedAt time.Time
}

// The approval decisions.
const (
	Approved = "approved"
	Rejected = "rejected"
)

// DownloadState is the state of a download_task.
type DownloadState string

// The download states.
const (
	DownloadPlanned   DownloadState = "planned"
	DownloadSubmitted DownloadState = "submitted"
	DownloadCompleted DownloadState = "completed"
	DownloadRemoved   DownloadState = "removed"
)

// DownloadTask is the download as the business sees it.
type DownloadTask struct {
	ID          uuid.UUID
	PlanID      uuid.UUID
	InfoHash    string
	Tag         string
	SavePath    string
	ContentPath string // where the downloader put the payload; empty until known
	State       DownloadState
	Progress    float64
	CompletedAt time.Time // zero until the download completed
	CreatedAt   time.Time
	UpdatedAt   time.Time
}

// DecisionStatus is the state of a pending decision.
type DecisionStatus string

// The decision statuses: open until a user resolves it as retry or abandon.
const (
	DecisionOpen    DecisionStatus = "open"
	DecisionRetry   DecisionStatus = "retry"
	DecisionAbandon DecisionStatus = "abandon"
)

// Decision is an entry of the pending-decision centre (ADR 2.6).
type Decision struct {
	ID         uuid.UUID
	PlanID     uuid.UUID
	Kind       port.Kind
	RunID      port.RunID
	Input      json.RawMessage // the failed run's input
	Reason     string
	Status     DecisionStatus
	ResolvedBy string
	ResolvedAt time.Time
	CreatedAt  time.Time
}

// notFound maps pgx.ErrNoRows onto port.ErrNotFound.
func notFound(err error, what string) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%s: %w", what, port.ErrNotFound)
	}
	return fmt.Errorf("%s: %w", what, err)
}

func timeOrZero(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
}
