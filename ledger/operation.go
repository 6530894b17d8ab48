package ledger

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/taskport/taskport/internal/dbtx"
	"github.com/taskport/taskport/internal/enginekit"
	"github.com/taskport/taskport/port"
)

// Op names an operation type of the ledger; one row per (plan, op).
type Op string

// The operations the task kinds perform.
const (
	OpSubmit     Op = "download.submit"
	OpImport     Op = "asset.import"
	OpVerify     Op = "asset.verify"
	OpCleanup    Op = "download.cleanup"
	OpCompensate Op = "plan.compensate"
)

// ErrNoFencingToken: a fenced operation was attempted outside an activity
// context, so there is no token to fence it with. Nothing was written.
var ErrNoFencingToken = errors.New("ledger: no fencing token: fenced operations run only as a step of an engine")

// Operation is one ledger row: the current attempt and, once committed, the
// result.
type Operation struct {
	ID         uuid.UUID
	PlanID     uuid.UUID
	Op         Op
	Token      string // the recorded attempt's port.FencingToken.String()
	Scope      string
	Epoch      int64
	Generation int64
	// RetiredScopes are the scopes of Generation that a takeover replaced;
	// a Begin from one of them is refused.
	RetiredScopes []string
	StartedAt     time.Time
	// Attempts counts the Begins recorded, this one included.
	Attempts int
	Result   json.RawMessage // nil until committed
	ResultAt time.Time
}

// Done reports whether the operation has a committed result.
func (o Operation) Done() bool { return o.Result != nil }

// Interrupted reports whether an earlier attempt began and left no result:
// its side effect may or may not have happened, so reconcile first.
func (o Operation) Interrupted() bool { return !o.Done() && o.Attempts > 1 }

// Begin records tok as the operation's current attempt and returns the row.
// If the operation already has a result, the row is returned unchanged (check
// Done). Otherwise tok must not be older than the recorded attempt, else Begin
// returns an error wrapping port.ErrFenced and writes nothing. Against the
// recorded attempt, tok is
//   - older when its Generation is lower: its run was created before the run
//     that holds the operation, e.g. the run a decision retry superseded,
//     even while that run's attempt is still stuck in the operation;
//   - newer when its Generation is higher: a later run (a decision retry)
//     takes the operation over;
//   - within the same Generation and Scope, older when its Epoch is lower (an
//     earlier attempt of the same step), else newer;
//   - within the same Generation, from a different Scope (the same run
//     re-executed under a new scope, e.g. a Temporal reset's new run ID):
//     newer the first time, and the scope it replaces is retired; a retired
//     scope is refused from then on, so the superseded execution cannot take
//     the operation back.
//
// Scopes of one generation are not ordered, only told apart: a superseded
// execution whose first Begin comes after its replacement's is taken for a
// replacement and takes over once (retiring the live scope). After a Temporal
// reset only an activity the old run had already started can still Begin, so
// this needs an old attempt that reaches Begin later than the new run's.
//
// An op that is not a port.ValidateName name, or a token whose text
// Postgres cannot store, is a *port.FieldError; a plan that does not exist
// is an error wrapping port.ErrNotFound. None of them writes anything.
func Begin(ctx context.Context, q DBTX, planID uuid.UUID, op Op, tok port.FencingToken) (Operation, error) {
	if !tok.Valid() {
		return Operation{}, fmt.Errorf("begin %q of plan %s: %w", op, planID, ErrNoFencingToken)
	}
	if err := cmp.Or(port.ValidateName("op", string(op)), enginekit.ValidateText("token", tok.String())); err != nil {
		return Operation{}, fmt.Errorf("begin %q of plan %s: %w", op, planID, err)
	}
	id, err := uuid.NewV7()
	if err != nil {
		return Operation{}, fmt.Errorf("new operation id: %w", err)
	}
	// The upsert returns the row it wrote, or none when its WHERE refused
	// the attempt (a result exists, or the recorded attempt outranks tok).
	rows, err := q.Query(ctx, beginOperationSQL, id, planID, op, tok.String(), tok.Scope, tok.Epoch, tok.Generation)
	if err != nil {
		return Operation{}, fmt.Errorf("begin %s of plan %s: %w", op, planID, noPlan(err))
	}
	written, err := pgx.CollectRows(rows, scanOperation)
	if err != nil {
		return Operation{}, fmt.Errorf("begin %s of plan %s: %w", op, planID, noPlan(err))
	}
	if len(written) == 1 {
		return written[0], nil
	}
	cur, found, err := Read(ctx, q, planID, op)
	switch {
	case err != nil:
		return Operation{}, err
	case !found:
		return Operation{}, fmt.Errorf("begin %s of plan %s: row vanished", op, planID)
	case cur.Done():
		return cur, nil
	}
	return Operation{}, fmt.Errorf("begin %s of plan %s with %s (generation %d): %s: %w",
		op, planID, tok, tok.Generation, refusal(cur, tok), port.ErrFenced)
}

// foreignKeyViolation is SQLSTATE 23503: asset_operation.plan_id names no
// plan.
const foreignKeyViolation = "23503"

// noPlan is err, or port.ErrNotFound when err is the foreign key's refusal
// of a plan that does not exist.
func noPlan(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == foreignKeyViolation {
		return fmt.Errorf("%w: %s", port.ErrNotFound, pe.Detail)
	}
	return err
}

// refusal says why cur outranks tok, for the operator reading the error.
func refusal(cur Operation, tok port.FencingToken) string {
	switch {
	case cur.Generation > tok.Generation:
		return fmt.Sprintf("a newer run (generation %d, attempt %s) took the operation over", cur.Generation, cur.Token)
	case cur.Scope == tok.Scope:
		return fmt.Sprintf("attempt %s is newer", cur.Token)
	default:
		return fmt.Sprintf("scope %s was superseded by %s (attempt %s)", tok.Scope, cur.Scope, cur.Token)
	}
}

// Read returns the ledger row of (plan, op); found is false before any Begin.
func Read(ctx context.Context, q DBTX, planID uuid.UUID, op Op) (o Operation, found bool, err error) {
	rows, err := q.Query(ctx, selectOperationSQL, planID, op)
	if err != nil {
		return Operation{}, false, fmt.Errorf("read %s of plan %s: %w", op, planID, err)
	}
	ops, err := pgx.CollectRows(rows, scanOperation) // at most one: UNIQUE (plan_id, op)
	switch {
	case err != nil:
		return Operation{}, false, fmt.Errorf("read %s of plan %s: %w", op, planID, err)
	case len(ops) == 0:
		return Operation{}, false, nil
	}
	return ops[0], true, nil
}

// Commit stores result on o while o's attempt is still the recorded one.
// Otherwise it returns an error wrapping port.ErrFenced and writes nothing;
// the caller must then roll back its transaction. A result that jsonb
// cannot store or that exceeds port.MaxPayloadBytes (see encode) is a
// *port.FieldError, refused before the write.
func Commit(ctx context.Context, q DBTX, o Operation, result any) error {
	raw, err := encode("result", result)
	if err != nil {
		return fmt.Errorf("commit %s of plan %s: %w", o.Op, o.PlanID, err)
	}
	tag, err := q.Exec(ctx, commitOperationSQL, o.ID, o.Token, raw)
	if err != nil {
		return fmt.Errorf("commit %s of plan %s: %w", o.Op, o.PlanID, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("commit %s of plan %s with %s: %w", o.Op, o.PlanID, o.Token, port.ErrFenced)
	}
	return nil
}

// encode is v as JSON, checked as the engines check a step result
// (enginekit.EncodePayload): a U+0000 in a string, which jsonb refuses
// (SQLSTATE 22P05, aborting the caller's transaction), or more than
// port.MaxPayloadBytes is a *port.FieldError naming field.
func encode(field string, v any) (json.RawMessage, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", field, err)
	}
	return enginekit.EncodePayload(field, json.RawMessage(raw))
}

func scanOperation(row pgx.CollectableRow) (Operation, error) {
	var o Operation
	var resultAt *time.Time
	err := row.Scan(&o.ID, &o.PlanID, &o.Op, &o.Token, &o.Scope, &o.Epoch, &o.Generation, &o.RetiredScopes,
		&o.StartedAt, &o.Attempts, &o.Result, &resultAt)
	if resultAt != nil {
		o.ResultAt = *resultAt
	}
	return o, err
}

// Fenced describes one side effect through the ledger (ADR 2.3).
type Fenced[R any] struct {
	PlanID uuid.UUID
	Op     Op
	// Reconcile looks at the outside world after an interrupted attempt. done
	// reports that the effect already happened, described by r; otherwise Do
	// runs again. Nil means "always redo" (Do must then be idempotent).
	Reconcile func(ctx context.Context, o Operation) (r R, done bool, err error)
	// Do performs the side effect. An error commits nothing.
	Do func(ctx context.Context, o Operation) (R, error)
	// Apply writes the business state change that goes with r (plan status,
	// download_task, the next kind's run or outbox row) in the commit transaction,
	// after the fence check. Nil writes nothing besides the result.
	Apply func(ctx context.Context, tx pgx.Tx, r R) error
}

// Run drives a fenced side effect: Begin with the step's token, return the
// stored result if there is one, reconcile after an interrupted attempt, Do,
// then Commit and Apply in one transaction. A stale attempt gets an error
// wrapping port.ErrFenced and its transaction is rolled back. Outside an
// activity context it fails with ErrNoFencingToken before writing anything.
func Run[R any](ctx context.Context, db dbtx.Beginner, f Fenced[R]) (R, error) {
	var zero R
	info, ok := port.StepInfoFrom(ctx)
	if !ok {
		return zero, port.NonRetryable(fmt.Errorf("%s of plan %s: %w", f.Op, f.PlanID, ErrNoFencingToken))
	}
	var o Operation
	err := dbtx.InTx(ctx, db, func(tx pgx.Tx) error {
		var err error
		o, err = Begin(ctx, tx, f.PlanID, f.Op, info.Token)
		return err
	})
	if err != nil {
		return zero, err
	}
	if o.Done() {
		var r R
		if err := json.Unmarshal(o.Result, &r); err != nil {
			return zero, port.NonRetryable(fmt.Errorf("decode stored result of %s of plan %s: %w", f.Op, f.PlanID, err))
		}
		return r, nil
	}
	r, done := zero, false
	if o.Interrupted() && f.Reconcile != nil {
		if r, done, err = f.Reconcile(ctx, o); err != nil {
			return zero, fmt.Errorf("reconcile %s of plan %s: %w", f.Op, f.PlanID, err)
		}
	}
	if !done {
		if r, err = f.Do(ctx, o); err != nil {
			return zero, err
		}
	}
	err = dbtx.InTx(ctx, db, func(tx pgx.Tx) error {
		if err := Commit(ctx, tx, o, r); err != nil {
			return err
		}
		if f.Apply != nil {
			return f.Apply(ctx, tx, r)
		}
		return nil
	})
	if err != nil {
		return zero, err
	}
	return r, nil
}
