package leaseadapter_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/leaseadapter"
	"github.com/taskport/taskport/port"
)

// slotsKind is a kind of two steps, each a call of probe.
const slotsKind port.Kind = "test.slots"

// slotRuns returns an engine with cfg (its lease long: only the steps'
// release ends the runs) that knows slotsKind, and n runs of it enqueued.
func slotRuns(t *testing.T, pool *pgxpool.Pool, probe *slotProbe, cfg leaseadapter.Config, n int) (*leaseadapter.Engine, []port.RunID) {
	t.Helper()
	held := port.DeclareActivity[int, int]("test.slot")
	reg := port.NewRegistry()
	require.NoError(t, reg.RegisterActivity(port.Bind(held, probe.run)))
	require.NoError(t, reg.Register(port.Definition{Kind: slotsKind, Version: 1, Retry: port.RetryPolicy{MaxAttempts: 1},
		Handler: port.Handle(func(f port.Flow, _ struct{}) error {
			for i := range 2 {
				if _, err := held.Run(f, fmt.Sprintf("s%d", i), i); err != nil {
					return err
				}
			}
			return nil
		})}))
	cfg.LeaseDuration = 30 * time.Second
	eng, err := leaseadapter.New(pool, reg, cfg)
	require.NoError(t, err)
	ids := make([]port.RunID, n)
	for i := range ids {
		ids[i], err = eng.Enqueue(context.Background(), slotsKind, struct{}{}, port.EnqueueOptions{IdempotencyKey: fmt.Sprint(i)})
		require.NoError(t, err)
	}
	return eng, ids
}

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
	cfg := fastConfig()
	cfg.ActiveRuns, cfg.Prefetch = 4, -1
	eng, ids := slotRuns(t, pool, probe, cfg, 4)
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

// With the default ActiveRuns, a worker whose steps hold every slot claims
// no runs beyond its base (twice the concurrency executing) and its
// prefetch (the concurrency): the extra executors, up to four times the
// concurrency, are for runs that wait on their commits and leave slots
// idle, not for runs that would only wait for a slot, holding leases
// another worker could serve.
func TestBusySlotsClaimNoRunsBeyondTheBase(t *testing.T) {
	t.Parallel()
	pool := newDB(t)
	probe := &slotProbe{release: make(chan struct{})}
	cfg := fastConfig()
	seen := &events{finished: map[port.Status]int{}}
	cfg.Metrics = seen
	eng, ids := slotRuns(t, pool, probe, cfg, 12)
	startEngine(t, eng, port.StartOptions{Concurrency: 2})
	const held = 2*2 + 2
	claimed := func() int64 {
		return count(t, pool, `SELECT count(*) FROM taskport.run WHERE status = 'running'`)
	}
	require.Eventually(t, func() bool { return probe.now.Load() == 2 && claimed() == held }, 10*time.Second, 10*time.Millisecond)
	// The reaper samples the queue depth once per poll interval, the
	// interval of the claim loop's poll: three more samples span polls at
	// which the worker could have claimed more.
	from := seen.depthSamples()
	require.Eventually(t, func() bool { return seen.depthSamples() >= from+3 }, 10*time.Second, 10*time.Millisecond)
	require.EqualValues(t, held, claimed(), "runs claimed while every step slot is busy")
	close(probe.release)
	for _, id := range ids {
		waitTaskStatus(t, pool, id, "succeeded")
	}
}
