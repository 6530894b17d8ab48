package activities

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/taskport/taskport/acquisition"
	"github.com/taskport/taskport/internal/dbtx"
	"github.com/taskport/taskport/outbox"
	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/workflows"
)

// OpenDecision records a run that failed for good in the pending-decision
// centre (ADR 2.6) and fails a plan whose main chain it was on. Opening the
// same run's decision twice is a no-op.
func (a *Activities) OpenDecision(ctx context.Context, req workflows.DecisionRequest) (workflows.DecisionOpened, error) {
	id, err := parsePlanID(req.PlanID)
	if err != nil {
		return workflows.DecisionOpened{}, err
	}
	var d acquisition.Decision
	err = dbtx.InTx(ctx, a.pool, func(tx pgx.Tx) error {
		p, err := acquisition.LockPlan(ctx, tx, id)
		if err != nil {
			return err
		}
		if d, err = acquisition.OpenDecision(ctx, tx, id, req.Kind, req.RunID, req.Input, req.Reason); err != nil {
			return err
		}
		// A webhook or compensation failure, or one on a plan that ended or
		// is being canceled, leaves the plan's status alone.
		if _, chain := acquisition.MainChain(req.Kind); !chain || !acquisition.Fail.Allows(p.Status) {
			return nil
		}
		return acquisition.Move(ctx, tx, id, acquisition.Fail)
	})
	if err != nil {
		return workflows.DecisionOpened{}, fmt.Errorf("open decision for plan %s: %w", id, err)
	}
	return workflows.DecisionOpened{DecisionID: d.ID.String()}, nil
}

// ResolveDecision carries out a resolved decision, by the rules of
// acquisition.RetryEffect and AbandonEffect. Retry re-enqueues the failed
// kind with its original input under a key derived from the decision (a new
// run, whose ledger Begin takes the operation over and reconciles); a failed
// plan resumes in the status that kind runs in. Abandon gives up a
// notification, leaves a plan that ended (or is being canceled) alone, and
// otherwise requests the cancel and enqueues plan.cancel with the abandoned
// outcome. A retry that a cancel overtook since it was resolved reports
// Canceled and enqueues nothing.
func (a *Activities) ResolveDecision(ctx context.Context, ref workflows.DecisionRef) (workflows.Outcome, error) {
	id, err := uuid.Parse(ref.DecisionID)
	if err != nil {
		return workflows.Outcome{}, port.NonRetryable(fmt.Errorf("decision id %q: %w", ref.DecisionID, err))
	}
	d, err := acquisition.GetDecision(ctx, a.pool, id)
	if errors.Is(err, port.ErrNotFound) {
		return workflows.Outcome{}, port.NonRetryable(err)
	}
	if err != nil {
		return workflows.Outcome{}, err
	}
	var out workflows.Outcome
	err = dbtx.InTx(ctx, a.pool, func(tx pgx.Tx) error {
		p, err := acquisition.LockPlan(ctx, tx, d.PlanID)
		if err != nil {
			return err
		}
		switch d.Status {
		case acquisition.DecisionRetry:
			if _, _, err := acquisition.RetryEffect(d.Kind, p); err != nil {
				out.Canceled = true // overtaken by a cancel (or the plan's end) since the retry was resolved
				return nil
			}
			if t, ok := acquisition.Retry(d.Kind); ok && t.Allows(p.Status) {
				if err := acquisition.Move(ctx, tx, p.ID, t); err != nil {
					return err
				}
			}
			return outbox.Send(ctx, tx, a.enqueuer(), acquisition.Enqueue(d.Kind, "decision:"+d.ID.String()+":retry", p.ID.String(), d.Input))
		case acquisition.DecisionAbandon:
			if effect, _ := acquisition.AbandonEffect(d.Kind, p); effect != acquisition.Compensate {
				return nil
			}
			reason := "abandoned after decision " + d.ID.String()
			if _, err := acquisition.RequestCancel(ctx, tx, p.ID, d.ResolvedBy, reason); err != nil {
				return err
			}
			// Keyed by the decision, not the plan: abandoning a failed
			// compensation must start a new one.
			if err := outbox.Send(ctx, tx, a.enqueuer(), acquisition.Compensation(p.ID.String(), "decision:"+d.ID.String()+":abandon", workflows.OutcomeAbandoned)); err != nil {
				return err
			}
			cancelRuns, err := acquisition.CancelRuns(p.ID.String(), reason)
			if err != nil {
				return err
			}
			_, err = outbox.Write(ctx, tx, cancelRuns)
			return err
		}
		return port.NonRetryable(fmt.Errorf("decision %s is %s, not resolved", d.ID, d.Status))
	})
	if err != nil {
		return workflows.Outcome{}, fmt.Errorf("carry out decision %s: %w", id, err)
	}
	return out, nil
}
