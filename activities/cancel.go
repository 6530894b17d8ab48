package activities

import (
	"context"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5"

	"github.com/taskport/taskport/ledger"
	"github.com/taskport/taskport/outbox"
	"github.com/taskport/taskport/workflows"
)

// Compensate undoes a plan (ADR 2.4): it pauses and deletes the plan's
// torrents (by hash and managed tag) with their files, removes the plan's
// download directory, temp files and the library file an import of the plan
// wrote, then ends the plan as canceled or abandoned and hands on to
// notify.webhook. Every part is idempotent, so a rerun just repeats it.
//
// A library file is removed only when the ledger shows that this plan's
// import touched it; a pre-existing file that the import reconciled counts as
// touched, since the plan adopted it.
func (a *Activities) Compensate(ctx context.Context, in workflows.CancelInput) (workflows.Outcome, error) {
	p, err := a.plan(ctx, in.PlanID)
	if err != nil {
		return workflows.Outcome{}, err
	}
	status, event := ledger.PlanCanceled, "plan.canceled"
	if in.Outcome == workflows.OutcomeAbandoned {
		status, event = ledger.PlanAbandoned, "plan.abandoned"
	}
	return ledger.Run(ctx, a.pool, ledger.Fenced[workflows.Outcome]{
		PlanID: p.ID, Op: ledger.OpCompensate,
		Do: func(ctx context.Context, _ ledger.Operation) (workflows.Outcome, error) {
			if err := a.removeTorrents(ctx, p); err != nil {
				return workflows.Outcome{}, err
			}
			if err := os.RemoveAll(a.saveDir(p.ID)); err != nil {
				return workflows.Outcome{}, fmt.Errorf("remove download dir of plan %s: %w", p.ID, err)
			}
			if err := a.files.RemoveTemps(p.TargetPath); err != nil {
				return workflows.Outcome{}, fmt.Errorf("remove temp files of plan %s: %w", p.ID, err)
			}
			_, touched, err := ledger.Read(ctx, a.pool, p.ID, ledger.OpImport)
			if err != nil {
				return workflows.Outcome{}, err
			}
			if touched {
				if err := removeTarget(p.TargetPath); err != nil {
					return workflows.Outcome{}, err
				}
			}
			return workflows.Outcome{}, nil
		},
		Apply: func(ctx context.Context, tx pgx.Tx, _ workflows.Outcome) error {
			if _, err := ledger.LockPlan(ctx, tx, p.ID); err != nil {
				return err
			}
			if err := ledger.SetDownloadState(ctx, tx, p.ID, ledger.DownloadRemoved); err != nil {
				return err
			}
			if err := ledger.SetPlanStatus(ctx, tx, p.ID, status); err != nil {
				return err
			}
			_, err := outbox.Write(ctx, tx, notification(p.ID, event, status))
			return err
		},
	})
}
