package activities

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/taskport/taskport/ledger"
	"github.com/taskport/taskport/outbox"
	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/workflows"
)

// OpenDecision records a run that failed for good in the pending-decision
// centre (ADR 2.6) and marks a plan still in progress as failed. Opening the
// same run's decision twice is a no-op.
func (a *Activities) OpenDecision(ctx context.Context, req workflows.DecisionRequest) (workflows.DecisionOpened, error) {
	id, err := parsePlanID(req.PlanID)
	if err != nil {
		return workflows.DecisionOpened{}, err
	}
	var d ledger.Decision
	err = ledger.InTx(ctx, a.pool, func(tx pgx.Tx) error {
		p, err := ledger.LockPlan(ctx, tx, id)
		if err != nil {
			return err
		}
		if d, err = ledger.OpenDecision(ctx, tx, id, req.Kind, req.RunID, req.Input, req.Reason); err != nil {
			return err
		}
		// Only a failure on the plan's main chain fails the plan: a finished
		// or canceling plan keeps its status, and so does any plan whose
		// webhook or compensation failed.
		if _, chain := resumeStatus(req.Kind); !chain || p.Status.Final() || p.CancelRequested() {
			return nil
		}
		return ledger.SetPlanStatus(ctx, tx, id, ledger.PlanFailed)
	})
	if err != nil {
		return workflows.DecisionOpened{}, fmt.Errorf("open decision for plan %s: %w", id, err)
	}
	return workflows.DecisionOpened{DecisionID: d.ID.String()}, nil
}

// resumeStatus is the plan status while kind runs, restored when a decision
// is resolved as retry; ok is false for kinds that do not move the plan.
func resumeStatus(kind port.Kind) (status ledger.PlanStatus, ok bool) {
	switch kind {
	case workflows.KindApprovalAwait:
		return ledger.PlanAwaitingApproval, true
	case workflows.KindDownloadSubmit:
		return ledger.PlanApproved, true
	case workflows.KindDownloadAwait:
		return ledger.PlanDownloading, true
	case workflows.KindAssetImport:
		return ledger.PlanDownloaded, true
	case workflows.KindAssetVerify:
		return ledger.PlanImported, true
	case workflows.KindDownloadCleanup:
		return ledger.PlanVerified, true
	}
	return "", false
}

// ResolveDecision carries out a resolved decision. Retry re-enqueues the
// failed kind with its original input under a key derived from the decision
// (a new run, whose ledger Begin takes the operation over and reconciles).
// Abandon sets the cancel flag and enqueues plan.cancel with the abandoned
// outcome.
func (a *Activities) ResolveDecision(ctx context.Context, ref workflows.DecisionRef) (workflows.Outcome, error) {
	id, err := uuid.Parse(ref.DecisionID)
	if err != nil {
		return workflows.Outcome{}, port.NonRetryable(fmt.Errorf("decision id %q: %w", ref.DecisionID, err))
	}
	d, err := ledger.GetDecision(ctx, a.pool, id)
	if errors.Is(err, port.ErrNotFound) {
		return workflows.Outcome{}, port.NonRetryable(err)
	}
	if err != nil {
		return workflows.Outcome{}, err
	}
	var out workflows.Outcome
	err = ledger.InTx(ctx, a.pool, func(tx pgx.Tx) error {
		p, err := ledger.LockPlan(ctx, tx, d.PlanID)
		if err != nil {
			return err
		}
		switch d.Status {
		case ledger.DecisionRetry:
			if p.CancelRequested() {
				out.Canceled = true
				return nil
			}
			if st, ok := resumeStatus(d.Kind); ok && p.Status == ledger.PlanFailed {
				if err := ledger.SetPlanStatus(ctx, tx, p.ID, st); err != nil {
					return err
				}
			}
			_, err = outbox.Write(ctx, tx, outbox.Event{
				Kind: d.Kind, IdempotencyKey: "decision:" + d.ID.String() + ":retry", BusinessKey: p.ID.String(), Payload: d.Input,
			})
			return err
		case ledger.DecisionAbandon:
			if err := ledger.RequestPlanCancel(ctx, tx, p.ID, "abandoned after decision "+d.ID.String()); err != nil {
				return err
			}
			// Keyed by the decision, not the plan: abandoning a failed
			// compensation must start a new one.
			_, err = outbox.Write(ctx, tx, outbox.Event{
				Kind: workflows.KindPlanCancel, IdempotencyKey: "decision:" + d.ID.String() + ":abandon", BusinessKey: p.ID.String(),
				Payload: workflows.CancelInput{PlanID: p.ID.String(), Outcome: workflows.OutcomeAbandoned},
			})
			return err
		}
		return port.NonRetryable(fmt.Errorf("decision %s is %s, not resolved", d.ID, d.Status))
	})
	if err != nil {
		return workflows.Outcome{}, fmt.Errorf("carry out decision %s: %w", id, err)
	}
	return out, nil
}
