package acquisition

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/taskport/taskport/port"
)

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

// OpenDecision records that a run of kind exhausted its retries. Opening the
// same (plan, kind, run) twice returns the first decision.
func OpenDecision(ctx context.Context, q DBTX, planID uuid.UUID, kind port.Kind, runID port.RunID, input json.RawMessage, reason string) (Decision, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return Decision{}, fmt.Errorf("new decision id: %w", err)
	}
	if _, err := execBuilt(ctx, q, insertDecisionStmt(id, planID, kind, runID, input, reason)); err != nil {
		return Decision{}, fmt.Errorf("open decision for %s run %s: %w", kind, runID, err)
	}
	d, err := queryOne(ctx, q, selectDecisionByRunStmt(planID, kind, runID), scanDecision)
	if err != nil {
		return Decision{}, fmt.Errorf("open decision for %s run %s: %w", kind, runID, err)
	}
	return d, nil
}

// GetDecision returns a decision, or an error wrapping port.ErrNotFound.
func GetDecision(ctx context.Context, q DBTX, id uuid.UUID) (Decision, error) {
	d, err := queryOne(ctx, q, selectDecisionStmt(id), scanDecision)
	if err != nil {
		return Decision{}, fmt.Errorf("get decision %s: %w", id, err)
	}
	return d, nil
}

// ListDecisions returns decisions in status (empty: all), oldest first.
func ListDecisions(ctx context.Context, q DBTX, status DecisionStatus, limit int) ([]Decision, error) {
	out, err := queryAll(ctx, q, listDecisionsStmt(status, limit), scanDecision)
	if err != nil {
		return nil, fmt.Errorf("list decisions: %w", err)
	}
	return out, nil
}

// OpenDecisionsOf returns the open decisions of a plan, oldest first.
func OpenDecisionsOf(ctx context.Context, q DBTX, planID uuid.UUID) ([]Decision, error) {
	out, err := queryAll(ctx, q, openDecisionsOfStmt(planID), scanDecision)
	if err != nil {
		return nil, fmt.Errorf("open decisions of plan %s: %w", planID, err)
	}
	return out, nil
}

// CheckRunRetry refuses, wrapping ErrConflict, a bare retry of a failed
// run (port.Admin.Retry, from /admin or `taskport runs retry`) that the
// decision centre owns. A business kind's step that failed for good opened
// a decision on its plan; resolving it to retry is the business retry,
// which also moves the plan back to the status the kind runs in, where a
// bare run retry would leave the plan failed. A decision resolved to retry
// has started its run already. One resolved to abandon gave the run up, and
// retrying it anyway is the operator's call (the business steps still check
// the plan). A run that opened no decision may be retried. An id that is
// no uuid names no run and no decision: it is passed on, for the engine's
// Retry to refuse as the unknown run it is (a NUL in it would otherwise
// reach Postgres, which cannot take one in text).
func CheckRunRetry(ctx context.Context, q DBTX, runID port.RunID) error {
	if _, err := uuid.Parse(string(runID)); err != nil {
		return nil
	}
	ds, err := queryAll(ctx, q, decisionOfRunStmt(runID), scanDecision)
	if err != nil || len(ds) == 0 {
		return err
	}
	switch d := ds[0]; d.Status {
	case DecisionOpen:
		return fmt.Errorf("run %s failed into decision %s of plan %s, which is open: retry it with `taskport decision resolve %s retry` "+
			"or on its /admin page (it also moves the plan back), or resolve it to abandon before retrying the run: %w",
			runID, d.ID, d.PlanID, d.ID, ErrConflict)
	case DecisionRetry:
		return fmt.Errorf("run %s was retried already through decision %s (by %s): %w", runID, d.ID, d.ResolvedBy, ErrConflict)
	}
	return nil
}

// ResolveDecision closes an open decision. resolved is false when it was
// already resolved (the first resolution stands).
func ResolveDecision(ctx context.Context, q DBTX, id uuid.UUID, status DecisionStatus, by string) (resolved bool, err error) {
	tag, err := execBuilt(ctx, q, resolveDecisionStmt(id, status, by))
	if err != nil {
		return false, fmt.Errorf("resolve decision %s: %w", id, err)
	}
	return tag.RowsAffected() == 1, nil
}

func scanDecision(row pgx.CollectableRow) (Decision, error) {
	var d Decision
	var resolved *time.Time
	err := row.Scan(&d.ID, &d.PlanID, &d.Kind, &d.RunID, &d.Input, &d.Reason, &d.Status, &d.ResolvedBy, &resolved, &d.CreatedAt)
	d.ResolvedAt = timeOrZero(resolved)
	return d, err
}
