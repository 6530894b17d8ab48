package leaseadapter

import (
	"context"
	"log/slog"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/internal/dbtx"
	"github.com/taskport/taskport/internal/testkit/pgtest"
	"github.com/taskport/taskport/port"
)

// A claim that commits on the server while its client sees an error (a
// timeout, a dropped connection: it never reads the answer) leaves the run
// leased to a worker that does not know it. When that lease expires, the
// reaper charges nothing (issue 24, 7): no step started under it. At
// MaxAttempts 1 the run then executes its step once and succeeds, instead of
// failing "out of attempts" without running.
func TestClaimLostByItsClientChargesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	var runs atomic.Int64
	act := port.DeclareActivity[struct{}, int]("test.lostclaim.step")
	reg := port.NewRegistry()
	require.NoError(t, reg.RegisterActivity(port.Bind(act, func(context.Context, struct{}) (int, error) {
		return int(runs.Add(1)), nil
	})))
	require.NoError(t, reg.Register(port.Definition{Kind: "test.lostclaim", Version: 1, Retry: port.RetryPolicy{MaxAttempts: 1},
		Handler: port.Handle(func(f port.Flow, _ struct{}) error {
			_, err := act.Run(f, "s", struct{}{})
			return err
		})}))
	eng, err := New(pool, reg, Config{LeaseDuration: time.Second, PollInterval: 100 * time.Millisecond, StopTimeout: 2 * time.Second,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	require.NoError(t, err)
	id, err := eng.Enqueue(ctx, "test.lostclaim", struct{}{}, port.EnqueueOptions{IdempotencyKey: "lost"})
	require.NoError(t, err)

	// The engine's claim transaction, committed, its answer discarded.
	require.NoError(t, dbtx.BatchTx(ctx, pool, func(b *pgx.Batch) {
		b.Queue(claimPlanSQL)
		b.Queue(claimSQL, []string{"test.lostclaim@1"}, 10, "client-lost-the-answer", int64(1000))
	}))
	var owner string
	require.NoError(t, pool.QueryRow(ctx, `SELECT lease_owner FROM taskport.run WHERE id = $1`, id).Scan(&owner))
	require.Equal(t, "client-lost-the-answer", owner)

	require.NoError(t, eng.Start(ctx, port.StartOptions{Concurrency: 1}))
	t.Cleanup(func() { require.NoError(t, eng.Stop(context.Background())) })
	var status string
	require.Eventually(t, func() bool {
		require.NoError(t, pool.QueryRow(ctx, `SELECT status FROM taskport.run WHERE id = $1`, id).Scan(&status))
		return status == "succeeded" || status == "failed"
	}, 20*time.Second, 10*time.Millisecond)
	require.Equal(t, "succeeded", status)
	require.EqualValues(t, 1, runs.Load(), "the step ran once")
	v, err := eng.Get(ctx, port.RunID(id))
	require.NoError(t, err)
	require.Equal(t, 1, v.Attempts)
}
