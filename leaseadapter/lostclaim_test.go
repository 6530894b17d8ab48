package leaseadapter

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
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
		b.Queue(claimSQL, []string{"test.lostclaim"}, 10, "client-lost-the-answer", int64(1000), []int32{1})
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

// The reaper charges an expired lease only when its marker names a step
// with no result; a claim lost without one is charged from the
// unstartedLossesCharged-th loss in a row, so that a step or handler that
// kills its worker before any marker commits still runs out of attempts.
func TestReaperChargesStartedStepsAndBoundsUnstartedLosses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	insert := func(key string, results int) uuid.UUID {
		id := uuid.New()
		_, err := pool.Exec(ctx, `
INSERT INTO taskport.run (id, engine, kind, version, idempotency_key, input, max_attempts, backoff_initial, backoff_max,
  backoff_coefficient)
VALUES ($1, 'lease', 'k', 1, $2, '{}', 5, '0s', '0s', 2)`, id, key)
		require.NoError(t, err)
		for seq := range results {
			_, err := pool.Exec(ctx, `INSERT INTO taskport_lease.step_result (run_id, seq, name, result, attempts)
VALUES ($1, $2, $3, '1', 1)`, id, seq, fmt.Sprint("s", seq))
			require.NoError(t, err)
		}
		return id
	}
	// expire leases the run as a killed worker left it, marker marked.
	expire := func(id uuid.UUID, marked *int) {
		_, err := pool.Exec(ctx, `UPDATE taskport.run SET status = 'running', lease_owner = 'gone', lease_token = gen_random_uuid(),
  lease_until = now() - interval '1 second', started_seq = $2 WHERE id = $1`, id, marked)
		require.NoError(t, err)
	}
	reap := func() {
		var requeued, failed, canceled int
		require.NoError(t, dbtx.QueryRowPinned(ctx, pool, claimPlanSQL, reapSQL, []any{100, unstartedLossesCharged},
			&requeued, &failed, &canceled))
	}
	charged := func(id uuid.UUID) (stepAttempts, losses int) {
		require.NoError(t, pool.QueryRow(ctx, `SELECT step_attempts, unstarted_losses FROM taskport.run WHERE id = $1`, id).
			Scan(&stepAttempts, &losses))
		return stepAttempts, losses
	}
	zero, one := 0, 1
	running := insert("running", 1)    // step 1 running (marker 1, no result)
	between := insert("between", 1)    // step 0 done, the next not started (marker 0, result 0)
	unstarted := insert("unmarked", 0) // prefetched: no marker
	for i := 1; i <= unstartedLossesCharged; i++ {
		expire(running, &one)
		expire(between, &zero)
		expire(unstarted, nil)
		reap()
		a, l := charged(running)
		require.Equal(t, [2]int{i, 0}, [2]int{a, l}, "a started step is charged every time")
		want := [2]int{0, i}
		if i == unstartedLossesCharged {
			want = [2]int{1, i - 1}
		}
		a, l = charged(between)
		require.Equal(t, want, [2]int{a, l}, "loss %d of a claim between steps", i)
		a, l = charged(unstarted)
		require.Equal(t, want, [2]int{a, l}, "loss %d of a claim without a marker", i)
	}
}

// An attempt is charged before its body runs: the started marker has
// committed when the body starts, so a worker killed at the body's first
// instruction has spent the attempt (the contract scenario
// worker_dies_on_every_attempt, which caught the marker committing beside
// the body, sees this only when its kill wins that race). Each of the
// step's two attempts reads its own run row from the body.
func TestAttemptChargedBeforeTheBodyRuns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	type seen struct {
		startedSeq *int
		attempts   int
	}
	var (
		mu     sync.Mutex
		bodies []seen
	)
	act := port.DeclareActivity[struct{}, int]("test.charged.step")
	reg := port.NewRegistry()
	require.NoError(t, reg.RegisterActivity(port.Bind(act, func(ctx context.Context, _ struct{}) (int, error) {
		info, _ := port.StepInfoFrom(ctx)
		var s seen
		if err := pool.QueryRow(ctx, `SELECT started_seq, attempts FROM taskport.run WHERE id = $1`, string(info.RunID)).
			Scan(&s.startedSeq, &s.attempts); err != nil {
			return 0, err
		}
		mu.Lock()
		defer mu.Unlock()
		bodies = append(bodies, s)
		if len(bodies) == 1 {
			return 0, fmt.Errorf("first attempt fails")
		}
		return 1, nil
	})))
	require.NoError(t, reg.Register(port.Definition{Kind: "test.charged", Version: 1,
		Retry: port.RetryPolicy{MaxAttempts: 2, InitialInterval: time.Millisecond},
		Handler: port.Handle(func(f port.Flow, _ struct{}) error {
			_, err := act.Run(f, "s", struct{}{})
			return err
		})}))
	eng, err := New(pool, reg, Config{Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	require.NoError(t, err)
	id, err := eng.Enqueue(ctx, "test.charged", struct{}{}, port.EnqueueOptions{IdempotencyKey: "charged"})
	require.NoError(t, err)
	require.NoError(t, eng.Start(ctx, port.StartOptions{Concurrency: 1}))
	t.Cleanup(func() { require.NoError(t, eng.Stop(context.Background())) })
	_, err = port.Wait(ctx, eng, id)
	require.NoError(t, err)
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, bodies, 2)
	for i, s := range bodies {
		require.NotNilf(t, s.startedSeq, "attempt %d: its body ran before its marker committed", i+1)
		require.Equalf(t, i+1, s.attempts, "attempt %d: the run's view did not count it when its body ran", i+1)
	}
}
