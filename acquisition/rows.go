package acquisition

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/taskport/taskport/port"
)

// Plan asks for one media asset: a row of the plan table.
type Plan struct {
	ID             uuid.UUID
	Title          string
	SourceType     string // magnet, url or torrent
	Source         string // magnet link, .torrent URL, or the .torrent file in base64
	InfoHash       string // 40 lowercase hex digits
	TargetPath     string // absolute, inside the library root
	ExpectedSize   int64
	ExpectedSHA256 string // 64 lowercase hex digits
	Status         Status
	// CancelRequestedAt is the business cancel flag (ADR 2.4); zero when unset.
	CancelRequestedAt time.Time
	CancelReason      string
	// CancelRequestedBy is who requested the cancel ('' before migration 8).
	CancelRequestedBy string
	CreatedAt         time.Time
	UpdatedAt         time.Time
	// CreateKey is the create request's idempotency key ("" for none):
	// written by CreatePlan, never read back into a Plan.
	CreateKey string
}

// CancelRequested reports whether the business cancel flag is set.
func (p Plan) CancelRequested() bool { return !p.CancelRequestedAt.IsZero() }

// Approval records the decision on a plan.
type Approval struct {
	ID     uuid.UUID
	PlanID uuid.UUID
	// Decision is the status the approval moved the plan to: Approved or
	// Rejected.
	Decision  Status
	DecidedBy string
	Note      string
	CreatedAt time.Time
}

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

// InsertPlan records a new plan as it is, without the checks of CreatePlan;
// ID must be set by the caller. Tests use it to build fixtures.
func InsertPlan(ctx context.Context, q DBTX, p Plan) (Plan, error) {
	out, err := queryOne(ctx, q, insertPlanStmt(p), scanPlan)
	if err != nil {
		return Plan{}, fmt.Errorf("insert plan %s: %w", p.ID, err)
	}
	return out, nil
}

// GetPlan returns a plan, or an error wrapping port.ErrNotFound.
func GetPlan(ctx context.Context, q DBTX, id uuid.UUID) (Plan, error) {
	return onePlan(ctx, q, id, false)
}

// LockPlan returns a plan and locks its row until the transaction q ends, so
// that a commit and a concurrent cancel request are serialized.
func LockPlan(ctx context.Context, q DBTX, id uuid.UUID) (Plan, error) {
	return onePlan(ctx, q, id, true)
}

func onePlan(ctx context.Context, q DBTX, id uuid.UUID, lock bool) (Plan, error) {
	p, err := queryOne(ctx, q, selectPlanStmt(id, lock), scanPlan)
	if err != nil {
		return Plan{}, fmt.Errorf("get plan %s: %w", id, err)
	}
	return p, nil
}

// PlansByHash returns the plans for an info hash, oldest first.
func PlansByHash(ctx context.Context, q DBTX, infoHash string) ([]Plan, error) {
	out, err := queryAll(ctx, q, selectPlansByHashStmt(infoHash), scanPlan)
	if err != nil {
		return nil, fmt.Errorf("plans by hash %s: %w", infoHash, err)
	}
	return out, nil
}

// PlanFilter selects a page of plans. Zero fields select everything.
type PlanFilter struct {
	Status Status
	ID     uuid.UUID
	// InfoHash is 40 lowercase hex digits.
	InfoHash string
	// TitleContains matches titles containing it, ignoring case.
	TitleContains string
	// After is the cursor of the last plan of the previous page: the page
	// holds the plans older than it.
	After PlanCursor
	// Limit is the page size; required.
	Limit int
}

// PlanCursor is a plan's place in the newest-first order.
type PlanCursor struct {
	CreatedAt time.Time
	ID        uuid.UUID
}

// Cursor is p's place in the newest-first order.
func (p Plan) Cursor() PlanCursor { return PlanCursor{CreatedAt: p.CreatedAt, ID: p.ID} }

// ListPlans returns a page of the plans f selects, newest first.
func ListPlans(ctx context.Context, q DBTX, f PlanFilter) ([]Plan, error) {
	out, err := queryAll(ctx, q, listPlansStmt(f), scanPlan)
	if err != nil {
		return nil, fmt.Errorf("list plans: %w", err)
	}
	return out, nil
}

func scanPlan(row pgx.CollectableRow) (Plan, error) {
	var p Plan
	var cancelAt *time.Time
	err := row.Scan(&p.ID, &p.Title, &p.SourceType, &p.Source, &p.InfoHash, &p.TargetPath, &p.ExpectedSize,
		&p.ExpectedSHA256, &p.Status, &cancelAt, &p.CancelReason, &p.CancelRequestedBy, &p.CreatedAt, &p.UpdatedAt)
	p.CancelRequestedAt = timeOrZero(cancelAt)
	return p, err
}

// InsertApproval records the decision on a plan. inserted is false when the
// plan was already decided; the first decision stands.
func InsertApproval(ctx context.Context, q DBTX, a Approval) (inserted bool, err error) {
	tag, err := execBuilt(ctx, q, insertApprovalStmt(a))
	if err != nil {
		return false, fmt.Errorf("insert approval of plan %s: %w", a.PlanID, err)
	}
	return tag.RowsAffected() == 1, nil
}

// GetApproval returns the decision on a plan; found is false while undecided.
func GetApproval(ctx context.Context, q DBTX, planID uuid.UUID) (a Approval, found bool, err error) {
	a, err = queryOne(ctx, q, selectApprovalStmt(planID), scanApproval)
	if errors.Is(err, port.ErrNotFound) {
		return Approval{}, false, nil
	}
	if err != nil {
		return Approval{}, false, fmt.Errorf("get approval of plan %s: %w", planID, err)
	}
	return a, true, nil
}

func scanApproval(row pgx.CollectableRow) (Approval, error) {
	var a Approval
	err := row.Scan(&a.ID, &a.PlanID, &a.Decision, &a.DecidedBy, &a.Note, &a.CreatedAt)
	return a, err
}

// UpsertDownload records the download of a plan in state. A completed
// download stays completed.
func UpsertDownload(ctx context.Context, q DBTX, d DownloadTask) (DownloadTask, error) {
	id := d.ID
	if id == uuid.Nil {
		var err error
		if id, err = uuid.NewV7(); err != nil {
			return DownloadTask{}, fmt.Errorf("new download id: %w", err)
		}
	}
	out, err := queryOneSQL(ctx, q, scanDownload, upsertDownloadSQL, id, d.PlanID, d.InfoHash, d.Tag, d.SavePath, d.State)
	if err != nil {
		return DownloadTask{}, fmt.Errorf("upsert download of plan %s: %w", d.PlanID, err)
	}
	return out, nil
}

// GetDownload returns the download of a plan, or an error wrapping
// port.ErrNotFound before it was submitted.
func GetDownload(ctx context.Context, q DBTX, planID uuid.UUID) (DownloadTask, error) {
	d, err := queryOne(ctx, q, selectDownloadStmt(planID), scanDownload)
	if err != nil {
		return DownloadTask{}, fmt.Errorf("get download of plan %s: %w", planID, err)
	}
	return d, nil
}

// CompleteDownload records that the download finished (contentPath may be
// empty when the reporter does not know it). changed is false when it was
// already recorded, or the download is unknown or removed.
func CompleteDownload(ctx context.Context, q DBTX, planID uuid.UUID, contentPath string) (changed bool, err error) {
	tag, err := execBuilt(ctx, q, completeDownloadStmt(planID, contentPath))
	if err != nil {
		return false, fmt.Errorf("complete download of plan %s: %w", planID, err)
	}
	return tag.RowsAffected() == 1, nil
}

// SetDownloadProgress records progress (0..1) of an unfinished download.
func SetDownloadProgress(ctx context.Context, q DBTX, planID uuid.UUID, progress float64) error {
	if _, err := execBuilt(ctx, q, setDownloadProgressStmt(planID, progress)); err != nil {
		return fmt.Errorf("set download progress of plan %s: %w", planID, err)
	}
	return nil
}

// SetDownloadState moves the download of a plan to state; a plan without a
// download is left alone.
func SetDownloadState(ctx context.Context, q DBTX, planID uuid.UUID, state DownloadState) error {
	if _, err := execBuilt(ctx, q, setDownloadStateStmt(planID, state)); err != nil {
		return fmt.Errorf("set download of plan %s to %s: %w", planID, state, err)
	}
	return nil
}

func scanDownload(row pgx.CollectableRow) (DownloadTask, error) {
	var d DownloadTask
	var completed *time.Time
	var progress float32
	err := row.Scan(&d.ID, &d.PlanID, &d.InfoHash, &d.Tag, &d.SavePath, &d.ContentPath, &d.State, &progress,
		&completed, &d.CreatedAt, &d.UpdatedAt)
	d.Progress = float64(progress)
	d.CompletedAt = timeOrZero(completed)
	return d, err
}

func timeOrZero(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
}
