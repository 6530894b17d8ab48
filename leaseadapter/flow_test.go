package leaseadapter_test

// Flow features the other tests do not reach: GetVersion markers across a
// code change, and per-step heartbeat timeouts.

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/leaseadapter"
	"github.com/taskport/taskport/leaseadapter/internal/testkinds"
	"github.com/taskport/taskport/port"
)

var echoAct = port.DeclareActivity[int, int]("test.echo")

const markerKind port.Kind = "test.marker"

// stepResult reads the recorded result of one step of a run.
func stepResult(t *testing.T, pool *pgxpool.Pool, id port.RunID, step string) json.RawMessage {
	t.Helper()
	var res json.RawMessage
	require.NoError(t, pool.QueryRow(context.Background(),
		`SELECT result FROM taskport_lease.step_result WHERE task_id = $1 AND name = $2`, id, step).Scan(&res))
	return res
}

// A GetVersion marker is recorded the first time and returned on every
// replay, whatever the code supports by then; a recorded value the code no
// longer supports fails the run as nondeterministic instead of running a
// branch the history never took.
func TestGetVersionMarkerReplays(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newDB(t)
	var lo, hi atomic.Int64
	lo.Store(1)
	hi.Store(2)
	reg := port.NewRegistry()
	require.NoError(t, reg.RegisterActivity(port.Bind(echoAct, func(_ context.Context, v int) (int, error) { return v, nil })))
	require.NoError(t, reg.Register(port.Definition{Kind: markerKind, Version: 1, Retry: testkinds.Retry,
		Handler: port.Handle(func(f port.Flow, topic string) error {
			v := f.GetVersion("new-step", int(lo.Load()), int(hi.Load()))
			if _, err := echoAct.Run(f, "before", v); err != nil {
				return err
			}
			if _, err := f.WaitSignal("go", port.Topic(topic), time.Hour, nil); err != nil {
				return err
			}
			_, err := echoAct.Run(f, "after", v)
			return err
		})}))
	eng, err := leaseadapter.New(pool, reg, fastConfig())
	require.NoError(t, err)
	startEngine(t, eng, port.StartOptions{Concurrency: 2})

	kept := enqueue(t, eng, markerKind, "marker:kept", "kept")
	dropped := enqueue(t, eng, markerKind, "marker:dropped", "dropped")
	waitTaskStatus(t, pool, kept, "waiting")
	waitTaskStatus(t, pool, dropped, "waiting")

	// New code supports up to 3: a new run takes 3, the parked one replays 2.
	hi.Store(3)
	fresh := enqueue(t, eng, markerKind, "marker:fresh", "fresh")
	waitTaskStatus(t, pool, fresh, "waiting")
	for _, topic := range []port.Topic{"marker:kept", "marker:fresh"} {
		n, err := eng.Signal(ctx, topic, nil)
		require.NoError(t, err)
		require.Equal(t, 1, n)
	}
	waitTaskStatus(t, pool, kept, "succeeded")
	waitTaskStatus(t, pool, fresh, "succeeded")
	require.JSONEq(t, "2", string(stepResult(t, pool, kept, "version:new-step")))
	require.JSONEq(t, "2", string(stepResult(t, pool, kept, "after")), "the replayed marker returned the recorded 2")
	require.JSONEq(t, "3", string(stepResult(t, pool, fresh, "before")))
	require.JSONEq(t, "3", string(stepResult(t, pool, fresh, "after")))

	// Newer code drops support for 2: the run that recorded 2 fails loudly.
	lo.Store(3)
	_, err = eng.Signal(ctx, "marker:dropped", nil)
	require.NoError(t, err)
	waitTaskStatus(t, pool, dropped, "failed")
	view, err := eng.Get(ctx, dropped)
	require.NoError(t, err)
	require.Contains(t, view.LastError, `version marker "new-step" recorded 2, supported [3, 3]`)
	var afters int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM taskport_lease.step_result WHERE task_id = $1 AND name = 'after'`,
		dropped).Scan(&afters))
	require.Zero(t, afters, "no step ran past the unsupported marker")
}

var silentAct = port.DeclareActivity[int, int]("test.silent")

// A step with a heartbeat timeout whose activity never heartbeats loses each
// attempt when the timeout fires (its context is canceled with that cause),
// is retried per the policy, and fails the run once attempts run out.
func TestHeartbeatTimeoutFailsSilentAttempts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newDB(t)
	var attempts atomic.Int64
	reg := port.NewRegistry()
	require.NoError(t, reg.RegisterActivity(port.Bind(silentAct, func(ctx context.Context, _ int) (int, error) {
		attempts.Add(1)
		<-ctx.Done() // works without ever calling port.Heartbeat
		return 0, context.Cause(ctx)
	})))
	require.NoError(t, reg.Register(port.Definition{Kind: "test.silent", Version: 1, Retry: testkinds.Retry,
		Handler: port.Handle(func(f port.Flow, _ testkinds.Empty) error {
			_, err := silentAct.Run(f, "s1", 0, port.WithHeartbeatTimeout(100*time.Millisecond))
			return err
		})}))
	eng, err := leaseadapter.New(pool, reg, fastConfig())
	require.NoError(t, err)
	startEngine(t, eng, port.StartOptions{Concurrency: 1})

	id := enqueue(t, eng, "test.silent", testkinds.Empty{}, "silent")
	waitTaskStatus(t, pool, id, "failed")
	require.EqualValues(t, testkinds.Retry.MaxAttempts, attempts.Load())
	view, err := eng.Get(ctx, id)
	require.NoError(t, err)
	require.Contains(t, view.LastError, "step missed its heartbeat timeout")
	require.Equal(t, testkinds.Retry.MaxAttempts, view.Attempts)
}
