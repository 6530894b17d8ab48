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
// truth (ADR 2.2). It serves approval.await, which is retired (the plans
// API's approval hands the plan on itself, acquisition.Decide): only the
// runs that a release before this one started still call it.
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

// HandOffApproved is the hand-off of a retired approval.await run (started
// by a release before this one). A plan that an older release's API
// approved is still approved, waiting for it: it enqueues download.submit
// in its transaction (acquisition.HandOff), keyed as the approval's own, so
// that handing it on twice enqueues once. A plan anywhere else was handed
// on already (this release's approval does it in its own transaction), or
// was canceled: nothing is written. It is a plain idempotent DB write, so it
// needs no ledger row.
func (a *Activities) HandOffApproved(ctx context.Context, ref workflows.PlanRef) (workflows.Outcome, error) {
	id, err := parsePlanID(ref.PlanID)
	if err != nil {
		return workflows.Outcome{}, err
	}
	var out workflows.Outcome
	err = dbtx.InTx(ctx, a.pool, func(tx pgx.Tx) error {
		p, err := acquisition.LockPlan(ctx, tx, id)
		if err != nil {
			return err
		}
		if p.Status != acquisition.Approved || p.CancelRequested() {
			out.Canceled = p.CancelRequested()
			return nil
		}
		out.Canceled, err = acquisition.HandOff(ctx, tx, a.enqueuer(), id, acquisition.Approve)
		return err
	})
	if err != nil {
		return workflows.Outcome{}, fmt.Errorf("hand off approved plan %s: %w", id, err)
	}
	return out, nil
}
