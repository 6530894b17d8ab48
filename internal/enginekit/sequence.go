package enginekit

import (
	"fmt"

	"github.com/taskport/taskport/port"
)

// StepSequence checks the names a handler gives its steps, waits and sleeps
// during one execution, and numbers them. Both engines use it so that the
// same handler is refused or accepted the same way on each: a name must be
// valid and unique within the run (a loop carries its index in the name).
// It is reset when a run continues as new.
type StepSequence struct {
	seen map[string]struct{}
	next int
}

// Next validates name and returns its 0-based sequence number.
func (s *StepSequence) Next(name string) (int, error) {
	if err := port.ValidateName("step", name); err != nil {
		return 0, err
	}
	if s.seen == nil {
		s.seen = map[string]struct{}{}
	}
	if _, dup := s.seen[name]; dup {
		return 0, fieldErr("step", "name %q reused within one run; carry a loop index in names used in loops", name)
	}
	s.seen[name] = struct{}{}
	seq := s.next
	s.next++
	return seq, nil
}

// Len returns how many steps were numbered so far.
func (s *StepSequence) Len() int { return s.next }

// CheckReplay compares a step asked for at seq with the one recorded in the
// history at the same position, and returns a *NondeterminismError on a
// mismatch.
func CheckReplay(seq int, name, recordedName string) error {
	if name == recordedName {
		return nil
	}
	return &NondeterminismError{Seq: seq, Want: recordedName, Got: name}
}

// NondeterminismError describes a replay mismatch. It unwraps to
// port.ErrNondeterminism, which is what callers and handlers match.
type NondeterminismError struct {
	Seq       int
	Want, Got string
}

func (e *NondeterminismError) Error() string {
	return fmt.Sprintf("step #%d: history has %q, handler asked for %q (a step was renamed or reordered within one version; bump the version instead)",
		e.Seq, e.Want, e.Got)
}

func (e *NondeterminismError) Unwrap() error { return port.ErrNondeterminism }
