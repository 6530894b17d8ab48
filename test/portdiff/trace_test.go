package portdiff

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The comparator reports the one field two traces disagree on, with both
// values, and an entry only one trace has.
func TestCompareReportsTheDifferingField(t *testing.T) {
	entry := func(attempts string) Entry {
		return Entry{Op: 3, What: "release r1/h0", Run: "r1", Program: "pd.p0", Fields: []Field{
			{"status", "running"}, {"attempts", attempts}, {"last_error", ""}}}
	}
	a := Trace{Engine: "lease", Entries: []Entry{entry("1")}}
	b := Trace{Engine: "temporal", Entries: []Entry{entry("2")}}
	require.Empty(t, Compare(a, a))
	divs := Compare(a, b)
	require.Equal(t, []Divergence{{Op: 3, What: "release r1/h0", Run: "r1", Program: "pd.p0", Field: "attempts", A: "1", B: "2"}}, divs)

	b.Entries = append(b.Entries, Entry{Op: 4, What: "final", Run: "r1"})
	divs = Compare(a, b)
	require.Len(t, divs, 2)
	require.Equal(t, Divergence{Op: 4, What: "final", Run: "r1", Field: "(entry)", A: "missing", B: "present"}, divs[1])
}

// The same seed draws the same plan, and plans keep their own rules: a
// run parked in a long sleep is canceled there, a race run's program starts
// with a held step.
func TestPlanIsASeedsFunction(t *testing.T) {
	require.Equal(t, NewPlan(7).String(), NewPlan(7).String())
	for seed := range uint64(300) {
		p := NewPlan(seed)
		for _, r := range p.Runs {
			prog := p.Programs[r.Program]
			parks, _, _ := prog.path()
			if r.Enqueue == enqueueRace {
				require.Equal(t, moveHold, prog.Moves[0].Kind, "seed %d run %s", seed, r.Key)
			}
			if r.Enqueue == enqueueOne || r.Enqueue == enqueueBatch {
				for j, at := range parks {
					if prog.Moves[at].Kind == moveSleep {
						require.True(t, r.CancelAt >= 0 && r.CancelAt <= j, "seed %d run %s: a long sleep is only left by a cancel", seed, r.Key)
						break
					}
				}
			}
		}
	}
}
