package activities

import (
	"context"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5"

	"github.com/taskport/taskport/acquisition"
	"github.com/taskport/taskport/internal/dbtx"
	"github.com/taskport/taskport/ledger"
	"github.com/taskport/taskport/workflows"
)

// Compensate undoes a plan (ADR 2.4): it pauses and deletes the plan's
// torrents (those carrying its managed tag) with their files, removes the
// plan's download directory, its import's temp files and the library file
// its import created, then ends the plan as canceled or abandoned and hands
// on to notify.webhook. Every part is idempotent, so a rerun just repeats it.
//
// A library file is removed only when the plan's import created it and it
// still has the size and hash the ledger noted: an identical file that the
// import adopted, or a file changed since, is left alone.
//
// A compensation whose result an earlier run already stored still ends a
// plan left in canceling: the result says the undoing was done, and ending
// the plan is idempotent.
func (a *Activities) Compensate(ctx context.Context, in workflows.CancelInput) (workflows.Outcome, error) {
	defer a.keepBeating(ctx)()
	p, err := a.plan(ctx, in.PlanID)
	if err != nil {
		return workflows.Outcome{}, err
	}
	end := acquisition.EndCanceled
	if in.Outcome == workflows.OutcomeAbandoned {
		end = acquisition.EndAbandoned
	}
	ran := false
	out, err := ledger.Run(ctx, a.pool, ledger.Fenced[workflows.Outcome]{
		PlanID: p.ID, Op: ledger.OpCompensate,
		Do: func(ctx context.Context, _ ledger.Operation) (workflows.Outcome, error) {
			ran = true
			if err := a.removeTorrents(ctx, p); err != nil {
				return workflows.Outcome{}, err
			}
			if err := os.RemoveAll(a.saveDir(p.ID)); err != nil {
				return workflows.Outcome{}, fmt.Errorf("remove download dir of plan %s: %w", p.ID, err)
			}
			return workflows.Outcome{}, a.discard(ctx, p)
		},
		Apply: func(ctx context.Context, tx pgx.Tx, _ workflows.Outcome) error {
			return a.endPlan(ctx, tx, p, end)
		},
	})
	if err != nil || ran {
		return out, err
	}
	err = dbtx.InTx(ctx, a.pool, func(tx pgx.Tx) error { return a.endPlan(ctx, tx, p, end) })
	if err != nil {
		return workflows.Outcome{}, fmt.Errorf("end compensated plan %s: %w", p.ID, err)
	}
	return out, nil
}

// endPlan ends a compensated plan that is still canceling, marks its
// download removed and writes the notification of its end. A plan that
// already ended (another compensation of it got there first) is left as it
// is.
func (a *Activities) endPlan(ctx context.Context, tx pgx.Tx, p acquisition.Plan, end acquisition.Transition) error {
	cur, err := acquisition.LockPlan(ctx, tx, p.ID)
	if err != nil || cur.Status.Final() {
		return err
	}
	if err := acquisition.SetDownloadState(ctx, tx, p.ID, acquisition.DownloadRemoved); err != nil {
		return err
	}
	_, err = acquisition.HandOff(ctx, tx, a.enqueuer(), p.ID, end)
	return err
}
