package acquisition

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/taskport/taskport/internal/dbtx"
	"github.com/taskport/taskport/outbox"
	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/workflows"
)

// DBTX is satisfied by *pgxpool.Pool, *pgx.Conn and pgx.Tx: every change
// goes into the caller's transaction.
type DBTX = dbtx.DBTX

// Move applies t to the plan with a guarded update: the plan moves to
// t.To() only from one of t's statuses. A plan already in t.To(), or further
// along the main chain, has taken t before (a step retried after its
// commit): nothing changes and Move returns nil. Otherwise it returns a
// *TransitionError and writes nothing; an unknown plan is an error wrapping
// port.ErrNotFound.
func Move(ctx context.Context, q DBTX, id uuid.UUID, t Transition) error {
	tag, err := execSQL(ctx, q, moveSQL, id, names(t.from), t.to)
	if err != nil {
		return fmt.Errorf("plan %s: %s: %w", id, t.name, err)
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	return refused(ctx, q, id, t)
}

// refused explains why t matched no row: the plan is unknown, took t
// already, or is in a status that refuses it.
func refused(ctx context.Context, q DBTX, id uuid.UUID, t Transition) error {
	s, err := queryOneSQL(ctx, q, pgx.RowTo[Status], statusSQL, id)
	if err != nil {
		return fmt.Errorf("plan %s: %s: %w", id, t.name, err)
	}
	if t.repeats(s) {
		return nil
	}
	return &TransitionError{PlanID: id, Actual: s, Transition: t}
}

// RequestCancel sets the plan's business cancel flag (ADR 2.4; the first
// requester and reason win) and moves it to canceling, in one guarded
// update. by is who asked: an operator, or a decision's resolver. first is
// false when the plan was already canceling: the earlier request stands and
// nothing changes. A final plan is a *TransitionError.
func RequestCancel(ctx context.Context, q DBTX, id uuid.UUID, by, reason string) (first bool, err error) {
	tag, err := execSQL(ctx, q, requestCancelSQL, id, names(CancelRequest.from), reason, by)
	if err != nil {
		return false, fmt.Errorf("plan %s: %s: %w", id, CancelRequest.name, err)
	}
	if tag.RowsAffected() == 1 {
		return true, nil
	}
	return false, refused(ctx, q, id, CancelRequest)
}

// HandOff is the tail of a main-chain step's commit, or of compensation: it
// locks the plan, applies t, and enqueues the kind that runs next
// (Next(t.To())), in the caller's transaction: through e's EnqueueTx (the
// run is recorded in tx, outbox.Send), or as an outbox row when e is nil. A
// plan with a cancel request is not moved along the main chain: HandOff then
// reports canceled and writes nothing (the row lock orders this against
// RequestCancel).
func HandOff(ctx context.Context, tx pgx.Tx, e outbox.Enqueuer, id uuid.UUID, t Transition) (canceled bool, err error) {
	cancelRequested, err := queryOneSQL(ctx, tx, pgx.RowTo[bool], lockSQL, id)
	if err != nil {
		return false, fmt.Errorf("lock plan %s: %w", id, err)
	}
	if cancelRequested && chainIndex(t.to) >= 0 {
		return true, nil
	}
	if err := Move(ctx, tx, id, t); err != nil {
		return false, err
	}
	if ev, ok := nextRun(id.String(), t.to); ok {
		if err := outbox.Send(ctx, tx, e, ev); err != nil {
			return false, err
		}
	}
	return false, nil
}

// Decide takes the operator's decision on a plan awaiting approval, once,
// in the caller's transaction: it applies t (Approve or Reject), records a
// (a.Decision must be t.To()) and writes the outbox row of the kind that
// runs next (download.submit after an approval; nothing after a
// rejection). A plan in any other status, a canceling one included, is
// refused with a *TransitionError and nothing is written; so a plan that was
// canceled or rejected never proceeds. No run waits for the decision: the
// approval is taken here, and nowhere else. The caller locks the plan and
// answers a repeated decision (GetApproval) before it calls Decide.
func Decide(ctx context.Context, tx DBTX, t Transition, a Approval) error {
	if t.To() != a.Decision || (t.To() != Approved && t.To() != Rejected) {
		return fmt.Errorf("plan %s: decide %s with an approval that says %s", a.PlanID, t.name, a.Decision)
	}
	if s, err := queryOneSQL(ctx, tx, pgx.RowTo[Status], statusSQL, a.PlanID); err != nil {
		return fmt.Errorf("plan %s: %s: %w", a.PlanID, t.name, err)
	} else if s != AwaitingApproval {
		// Move would take a repeat for a success; a decision is not
		// repeated here (the caller answered a recorded one).
		return &TransitionError{PlanID: a.PlanID, Actual: s, Transition: t}
	}
	if err := Move(ctx, tx, a.PlanID, t); err != nil {
		return err
	}
	if inserted, err := InsertApproval(ctx, tx, a); err != nil {
		return err
	} else if !inserted {
		return conflict("plan %s is already decided", a.PlanID)
	}
	if ev, ok := nextRun(a.PlanID.String(), t.To()); ok {
		if _, err := outbox.Write(ctx, tx, ev); err != nil {
			return err
		}
	}
	return nil
}

// Enqueue is the enqueue of kind for a plan under key (an outbox row, or
// an EnqueueTx through outbox.Send), recording the kind's current version
// as the lowest that understands input.
func Enqueue(kind port.Kind, key, planID string, input any) outbox.Event {
	return outbox.Event{Kind: kind, IdempotencyKey: key, BusinessKey: planID, Payload: input, MinVersion: workflows.Version(kind)}
}

// nextRun is the outbox row of the kind that runs while a plan is in s, keyed
// by the plan and the kind (a notification by the plan and its event).
func nextRun(planID string, s Status) (outbox.Event, bool) {
	switch kind := Next(s); kind {
	case "":
		return outbox.Event{}, false
	case workflows.KindNotifyWebhook:
		in := workflows.NotifyInput{PlanID: planID, Event: "plan." + string(s), Status: string(s)}
		return Enqueue(kind, in.IdempotencyKey(), planID, in), true
	case workflows.KindPlanCancel:
		return Compensation(planID, workflows.PlanKey(planID, kind), workflows.OutcomeCanceled), true
	case workflows.KindDownloadAwait:
		return Enqueue(kind, workflows.PlanKey(planID, kind), planID, workflows.WaitInput{PlanID: planID}), true
	default:
		return Enqueue(kind, workflows.PlanKey(planID, kind), planID, workflows.PlanRef{PlanID: planID}), true
	}
}

// Compensation is the outbox row of plan.cancel, which compensates the plan
// and ends it as outcome (workflows.OutcomeCanceled or OutcomeAbandoned).
func Compensation(planID, key, outcome string) outbox.Event {
	return Enqueue(workflows.KindPlanCancel, key, planID, workflows.CancelInput{PlanID: planID, Outcome: outcome})
}

// CancelRuns is the outbox row that cancels the plan's open runs in the
// engine, sparing the kinds a cancel starts (SparedByCancel). Each call is a
// new request with a key of its own: canceling runs twice is harmless, and a
// repeated cancel that finds a run still open cancels it again.
func CancelRuns(planID, reason string) (outbox.Event, error) {
	req, err := uuid.NewV7()
	if err != nil {
		return outbox.Event{}, fmt.Errorf("new cancel request id: %w", err)
	}
	return outbox.Event{
		Action: outbox.ActionCancelPlanRuns, IdempotencyKey: "plan:" + planID + ":cancel-runs:" + req.String(), BusinessKey: planID,
		Payload: outbox.CancelRuns{Reason: reason, Spare: SparedByCancel()},
	}, nil
}

// Wake is the outbox row that signals topic after the commit: the waiting
// run re-reads the business DB (ADR 2.2). key names what happened (an
// approval, a completed download), so that one change wakes once.
func Wake(planID string, topic port.Topic, key string) outbox.Event {
	return outbox.Event{Action: outbox.ActionSignal, Topic: topic, IdempotencyKey: key, BusinessKey: planID}
}

// CreatePlan records a plan awaiting approval, in one transaction on db; no
// run starts until it is approved (Decide). A target path or
// info hash that another plan holds (Status.HoldsTarget, HoldsInfoHash) is
// refused with a *TakenError naming that plan, and nothing is written. The
// unique indexes of migration 00005 back the check, so of two concurrent
// creates one loses, with the same *TakenError. A p.CreateKey already
// recorded returns the plan created with it and writes nothing (the rest of
// p is not compared), also when a concurrent create with that key won.
func CreatePlan(ctx context.Context, db dbtx.DB, p Plan) (Plan, error) {
	if p.CreateKey != "" {
		// A retried create: the plan its first attempt created, and
		// nothing written.
		existing, err := queryOne(ctx, db, selectPlanByCreateKeyStmt(p.CreateKey), scanPlan)
		if !errors.Is(err, port.ErrNotFound) {
			return existing, err
		}
	}
	var out Plan
	err := dbtx.InTx(ctx, db, func(tx pgx.Tx) error {
		if err := CheckFree(ctx, tx, p.TargetPath, p.InfoHash); err != nil {
			return err
		}
		var err error
		out, err = InsertPlan(ctx, tx, p)
		return err
	})
	if err != nil && p.CreateKey != "" {
		// A concurrent create with the same key won: its plan, whichever
		// index (the key's, or its target's or hash's) refused this one.
		existing, kerr := queryOne(ctx, db, selectPlanByCreateKeyStmt(p.CreateKey), scanPlan)
		if kerr == nil {
			return existing, nil
		}
	}
	var taken *TakenError
	if errors.As(err, &taken) && taken.PlanID == uuid.Nil {
		// A concurrent create won the index after CheckFree passed; name it
		// from outside the aborted transaction.
		return Plan{}, lostRace(ctx, db, taken, p)
	}
	return out, err
}

// CheckFree returns a *TakenError naming the plan that holds target or hash
// (see Status.HoldsTarget and HoldsInfoHash), or nil when both are free.
func CheckFree(ctx context.Context, q DBTX, target, hash string) error {
	type holder struct {
		ID       uuid.UUID
		Status   Status
		ByTarget bool
	}
	h, err := queryOneSQL(ctx, q, pgx.RowToStructByPos[holder], holderSQL,
		target, names(filter(Status.HoldsTarget)), hash, names(filter(Status.HoldsInfoHash)))
	switch {
	case errors.Is(err, port.ErrNotFound):
		return nil
	case err != nil:
		return fmt.Errorf("check target %s and info hash %s: %w", target, hash, err)
	case h.ByTarget:
		return &TakenError{Field: "target_path", Value: target, PlanID: h.ID, Status: h.Status}
	}
	return &TakenError{Field: "info_hash", Value: hash, PlanID: h.ID, Status: h.Status}
}

// lostRace completes the *TakenError of a plan p whose insert lost a unique
// index of migration 00005 to a concurrent plan that passed the same check:
// it names that plan, read on q (outside the aborted transaction). When the
// winner has ended meanwhile, lost is returned with the value it lost on.
func lostRace(ctx context.Context, q DBTX, lost *TakenError, p Plan) error {
	if err := CheckFree(ctx, q, p.TargetPath, p.InfoHash); err != nil {
		return err
	}
	lost.Value = p.TargetPath
	if lost.Field == "info_hash" {
		lost.Value = p.InfoHash
	}
	return lost
}

func filter(keep func(Status) bool) []Status {
	var out []Status
	for _, s := range statuses {
		if keep(s) {
			out = append(out, s)
		}
	}
	return out
}

func names(ss []Status) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = string(s)
	}
	return out
}
