package leaseadapter_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/leaseadapter"
	"github.com/taskport/taskport/port"
)

// slotProbe is an activity that counts the steps running at once and keeps
// the most it saw; each call holds until release is closed.
type slotProbe struct {
	now, most atomic.Int64
	release   chan struct{}
}

func (p *slotProbe) run(ctx context.Context, _ int) (int, error) {
	n := p.now.Add(1)
	defer p.now.Add(-1)
	for m := p.most.Load(); n > m && !p.most.CompareAndSwap(m, n); m = p.most.Load() {
	}
	select {
	case <-p.release:
		return 0, nil
	case <-ctx.Done():
		return 0, context.Cause(ctx)
	}
}

// StartOptions.Concurrency bounds the steps a worker runs at once, as the
// port says (and as the Temporal engine's activity slots do), not its runs:
// with 2 step slots and 4 active runs, all 4 runs are claimed and executing
// while no more than 2 of their steps ever run at once, and every run
// completes each of its steps once.
func TestConcurrencyBoundsStepsAtOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newDB(t)
	probe := &slotProbe{release: make(chan struct{})}
	held := port.DeclareActivity[int, int]("test.slot")
	const kind port.Kind = "test.slots"
	reg := port.NewRegistry()
	require.NoError(t, reg.RegisterActivity(port.Bind(held, probe.run)))
	require.NoError(t, reg.Register(port.Definition{Kind: kind, Version: 1, Retry: port.RetryPolicy{MaxAttempts: 1},
		Handler: port.Handle(func(f port.Flow, _ struct{}) error {
			for i := range 2 {
				if _, err := held.Run(f, fmt.Sprintf("s%d", i), i); err != nil {
					return err
				}
			}
			return nil
		})}))
	cfg := fastConfig()
	cfg.LeaseDuration = 30 * time.Second // only the steps' release ends them
	cfg.ActiveRuns, cfg.Prefetch = 4, -1
	eng, err := leaseadapter.New(pool, reg, cfg)
	require.NoError(t, err)
	ids := make([]port.RunID, 4)
	for i := range ids {
		ids[i], err = eng.Enqueue(ctx, kind, struct{}{}, port.EnqueueOptions{IdempotencyKey: fmt.Sprint(i)})
		require.NoError(t, err)
	}
	startEngine(t, eng, port.StartOptions{Concurrency: 2})
	// Every run claimed (each on an executor of its own) and the two slots
	// taken: a run not bounded by the slots would be in its step by now.
	require.Eventually(t, func() bool {
		for _, id := range ids {
			if taskStatus(t, pool, id) != "running" {
				return false
			}
		}
		return probe.now.Load() >= 2
	}, 10*time.Second, 10*time.Millisecond)
	close(probe.release)
	for _, id := range ids {
		waitTaskStatus(t, pool, id, "succeeded")
	}
	require.EqualValues(t, 2, probe.most.Load(), "steps running at once")
	var steps, distinct int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT (run_id, seq)) FROM taskport_lease.step_result`).Scan(&steps, &distinct))
	require.Equal(t, 8, steps)
	require.Equal(t, steps, distinct, "each step recorded once")
}
