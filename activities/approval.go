package activities

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/taskport/taskport/acquisition"
	"github.com/taskport/taskport/internal/dbtx"
	"github.com/taskport/taskport/workflows"
)

// CheckApproval reads the decision on a plan from the business DB, the only
// truth (ADR 2.2).
func (a *Activities) CheckApproval(ctx context.Context, ref workflows.PlanRef) (workflows.ApprovalState, error) {
	p, err := a.plan(ctx, ref.PlanID)
	if err != nil {
		return workflows.ApprovalState{}, err
	}
	if p.CancelRequested() {
		return workflows.ApprovalState{Canceled: true}, nil
	}
	ap, found, err := acquisition.GetApproval(ctx, a.pool, p.ID)
	if err != nil {
		return workflows.ApprovalState{}, err
	}
	return workflows.ApprovalState{Decided: found, Approved: found && ap.Decision == acquisition.Approved}, nil
}

// HandOffApproved writes the outbox row of download.submit for an approved
// plan (plans.Approve moved it to approved). It is a plain idempotent DB
// write (the outbox key is unique), so it needs no ledger row.
func (a *Activities) HandOffApproved(ctx context.Context, ref workflows.PlanRef) (workflows.Outcome, error) {
	id, err := parsePlanID(ref.PlanID)
	if err != nil {
		return workflows.Outcome{}, err
	}
	var out workflows.Outcome
	err = dbtx.InTx(ctx, a.pool, func(tx pgx.Tx) error {
		out.Canceled, err = acquisition.HandOff(ctx, tx, id, acquisition.Approve)
		return err
	})
	if err != nil {
		return workflows.Outcome{}, fmt.Errorf("hand off approved plan %s: %w", id, err)
	}
	return out, nil
}
