package acquisition

import (
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/taskport/taskport/port"
)

// ErrConflict: the plan (or decision) is in a state that refuses the call,
// e.g. approving a canceled plan, or a second plan on a target path that
// another plan holds. Nothing was written.
var ErrConflict = errors.New("plan state conflict")

func conflict(format string, args ...any) error {
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), ErrConflict)
}

// TransitionError: a plan was not in a status from which the transition is
// allowed. Nothing was written. It unwraps to ErrConflict.
type TransitionError struct {
	PlanID     uuid.UUID
	Actual     Status
	Transition Transition
}

func (e *TransitionError) Error() string {
	return fmt.Sprintf("plan %s is %s: cannot %s (allowed from %v)", e.PlanID, e.Actual, e.Transition.name, e.Transition.from)
}

func (e *TransitionError) Unwrap() error { return ErrConflict }

// TakenError: another plan holds the target path or the info hash a new plan
// asks for (see Status.HoldsTarget and HoldsInfoHash). Nothing was written.
// It unwraps to ErrConflict.
type TakenError struct {
	Field string // target_path or info_hash
	Value string
	// PlanID is the plan that holds it, and Status that plan's status. Nil
	// when a concurrent plan won the unique index and has ended since.
	PlanID uuid.UUID
	Status Status
}

func (e *TakenError) Error() string {
	if e.PlanID == uuid.Nil {
		return fmt.Sprintf("%s %s was taken by a concurrent plan that has ended since; try again", e.Field, e.Value)
	}
	return fmt.Sprintf("%s %s is held by plan %s (%s)", e.Field, e.Value, e.PlanID, e.Status)
}

func (e *TakenError) Unwrap() error { return ErrConflict }

// Constraint names of migration 00005: a unique violation on one of them is
// a plan that another plan's target path or info hash refused.
const (
	targetIndex = "plan_target_path_held"
	hashIndex   = "plan_info_hash_active"
	// createKeyIndex (migration 00021): a concurrent create with the same
	// idempotency key won; CreatePlan returns its plan.
	createKeyIndex = "plan_create_key"
)

// errCreateKeyTaken is interpretError's unique violation of createKeyIndex.
var errCreateKeyTaken = fmt.Errorf("%w: a plan with this idempotency key was created meanwhile", ErrConflict)

// The SQLSTATE codes interpretError maps.
const (
	foreignKeyViolation = "23503"
	uniqueViolation     = "23505"
)

// interpretError is the one place where the business store's driver errors
// become the errors its callers handle; every statement of the package
// passes through it (see queries.go), and nothing else looks at a pgx or
// pgconn error:
//
//   - no row (pgx.ErrNoRows) is port.ErrNotFound;
//   - a foreign-key violation (an approval, download or decision for a
//     plan that does not exist) is port.ErrNotFound, naming the key;
//   - a unique violation of a plan's target path or info hash index is a
//     *TakenError for that field; the holder is not known here (the
//     transaction is aborted), CreatePlan names it;
//   - anything else (connection loss, cancellation, a CHECK refusing a
//     value the Go validation let through) is returned as is.
func interpretError(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return port.ErrNotFound
	}
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return err
	}
	switch {
	case pe.Code == foreignKeyViolation:
		return fmt.Errorf("%s: %w", pe.Detail, port.ErrNotFound)
	case pe.Code == uniqueViolation && pe.ConstraintName == targetIndex:
		return &TakenError{Field: "target_path"}
	case pe.Code == uniqueViolation && pe.ConstraintName == hashIndex:
		return &TakenError{Field: "info_hash"}
	case pe.Code == uniqueViolation && pe.ConstraintName == createKeyIndex:
		return errCreateKeyTaken
	}
	return err
}
