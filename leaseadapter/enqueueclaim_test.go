package leaseadapter_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/leaseadapter"
	"github.com/taskport/taskport/port"
)

// An enqueue in a process whose worker has a free place is claimed in the
// transaction that inserts it: when Enqueue returns, the run is already
// this worker's. Without that, it reads pending until the poked claim loop
// has committed a claim transaction of its own, a commit later.
func TestEnqueueOnAnIdleWorkerIsClaimedInItsCommit(t *testing.T) {
	t.Parallel()
	pool := newDB(t)
	release := make(chan struct{})
	hold := port.DeclareActivity[bool, int]("test.enqclaim.hold")
	reg := port.NewRegistry()
	require.NoError(t, reg.RegisterActivity(port.Bind(hold, func(ctx context.Context, wait bool) (int, error) {
		if wait {
			select {
			case <-release:
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		}
		return 1, nil
	})))
	require.NoError(t, reg.Register(port.Definition{Kind: semKind, Version: 1, Retry: port.RetryPolicy{MaxAttempts: 1},
		Handler: port.Handle(func(f port.Flow, wait bool) error {
			_, err := hold.Run(f, "hold", wait)
			return err
		})}))
	cfg := fastConfig()
	// No poll: the only claims are the startup claim, the enqueues' and
	// the pokes'.
	cfg.PollInterval = time.Hour
	cfg.WorkerID = "enqueue-claims"
	eng, err := leaseadapter.New(pool, reg, cfg)
	require.NoError(t, err)
	startEngine(t, eng, port.StartOptions{Concurrency: 2})

	// A first run, so that the startup claim has ended.
	first := enqueue(t, eng, semKind, false, "first")
	waitView(t, eng, first, func(v port.RunView) bool { return v.Status == port.StatusSucceeded })

	// A claim already in flight when the enqueue commits (the claim loop,
	// woken by an earlier poke) books the worker's places, so the enqueue's
	// group does not claim, and the run is taken by the claim loop that its
	// poke wakes, a commit later, as it should be. The test gives the engine
	// four enqueues to show the property, each after the claim loop took
	// the one before: each holds one of the worker's four active runs (the
	// claim loop claims only for an idle executor), and without the
	// property every one reads pending when Enqueue returns.
	var held []port.RunID
	claimed := false
	for i := range 4 {
		id := enqueue(t, eng, semKind, true, fmt.Sprint("held", i))
		held = append(held, id)
		var status string
		var owner *string
		require.NoError(t, pool.QueryRow(context.Background(),
			`SELECT status, lease_owner FROM taskport.run WHERE id = $1`, id).Scan(&status, &owner))
		if status == "running" {
			require.Equal(t, cfg.WorkerID, *owner)
			claimed = true
			break
		}
		waitView(t, eng, id, func(v port.RunView) bool { return v.Status == port.StatusRunning })
	}
	close(release)
	require.True(t, claimed, "no enqueue of four was claimed in its own commit")
	for _, id := range held {
		waitView(t, eng, id, func(v port.RunView) bool { return v.Status == port.StatusSucceeded })
	}
}
