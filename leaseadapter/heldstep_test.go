package leaseadapter_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/port"
)

// A completed step's result is held until the handler's next move; when
// that move is a step, it commits in the group that writes the next step's
// started marker. This test pins what that must keep: the step before is
// durable when the next body starts. (A cancel between the two is among
// the differential test's operations, test/portdiff.)

// heldRow is what the next body reads of the run's row and history.
type heldRow struct {
	Recorded    bool   // step_result holds s1 with its result
	StartedSeq  int    // the run's started_seq
	CurrentStep string // the run's current_step
}

func TestStepBeforeIsDurableWhenTheNextBodyStarts(t *testing.T) {
	t.Parallel()
	pool := newDB(t)
	first := port.DeclareActivity[struct{}, int]("test.held.first")
	probe := port.DeclareActivity[struct{}, heldRow]("test.held.probe")
	seen := make(chan heldRow, 1)
	eng := semEngine(t, pool, port.RetryPolicy{MaxAttempts: 1},
		port.Handle(func(f port.Flow, _ struct{}) error {
			if _, err := first.Run(f, "s1", struct{}{}); err != nil {
				return err
			}
			_, err := probe.Run(f, "s2", struct{}{})
			return err
		}),
		port.Bind(first, func(context.Context, struct{}) (int, error) { return 7, nil }),
		port.Bind(probe, func(ctx context.Context, _ struct{}) (heldRow, error) {
			info, _ := port.StepInfoFrom(ctx)
			var r heldRow
			err := pool.QueryRow(ctx, `SELECT
  EXISTS (SELECT 1 FROM taskport_lease.step_result WHERE run_id = r.id AND seq = 0 AND name = 's1' AND result = '7'),
  r.started_seq, r.current_step
FROM taskport.run r WHERE r.id = $1`, string(info.RunID)).Scan(&r.Recorded, &r.StartedSeq, &r.CurrentStep)
			seen <- r
			return r, err
		}))
	id := enqueue(t, eng, semKind, struct{}{}, "held")
	waitView(t, eng, id, func(v port.RunView) bool { return v.Status == port.StatusSucceeded })
	require.Equal(t, heldRow{Recorded: true, StartedSeq: 1, CurrentStep: "s2"}, <-seen,
		"when s2's body starts, s1's result and s2's started marker have both committed")
}
