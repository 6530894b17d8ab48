package acquisition

import (
	"errors"
	"fmt"

	"github.com/google/uuid"
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
	Field  string // target_path or info_hash
	Value  string
	PlanID uuid.UUID // the plan that holds it
	Status Status    // that plan's status
}

func (e *TakenError) Error() string {
	return fmt.Sprintf("%s %s is held by plan %s (%s)", e.Field, e.Value, e.PlanID, e.Status)
}

func (e *TakenError) Unwrap() error { return ErrConflict }
