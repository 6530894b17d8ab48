package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/app/apptest"
	"github.com/taskport/taskport/internal/testkit/pgtest"
	"github.com/taskport/taskport/outbox"
	"github.com/taskport/taskport/port"
)

func write(t testing.TB, pool *pgxpool.Pool, kind, key string) {
	t.Helper()
	err := pgx.BeginFunc(context.Background(), pool, func(tx pgx.Tx) error {
		_, err := outbox.Write(context.Background(), tx, outbox.Event{Kind: port.Kind(kind), IdempotencyKey: key, BusinessKey: "b", Payload: map[string]string{"k": key}})
		return err
	})
	require.NoError(t, err)
}

type row struct {
	Status   string
	Attempts int
	RunID    *string
	LastErr  string
}

func rows(t testing.TB, pool *pgxpool.Pool) map[string]row {
	t.Helper()
	rs, err := pool.Query(context.Background(), `SELECT idempotency_key, status, attempts, run_id::text, last_error FROM outbox_event`)
	require.NoError(t, err)
	out := map[string]row{}
	for rs.Next() {
		var k string
		var r row
		require.NoError(t, rs.Scan(&k, &r.Status, &r.Attempts, &r.RunID, &r.LastErr))
		out[k] = r
	}
	require.NoError(t, rs.Err())
	return out
}

func TestWriteIsIdempotentOnKindAndKey(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	ins, err := outbox.Write(ctx, pool, outbox.Event{Kind: "a.b", IdempotencyKey: "k1", Payload: 1})
	require.NoError(t, err)
	require.True(t, ins)
	ins, err = outbox.Write(ctx, pool, outbox.Event{Kind: "a.b", IdempotencyKey: "k1", Payload: 2})
	require.NoError(t, err)
	require.False(t, ins)
	_, err = outbox.Write(ctx, pool, outbox.Event{Kind: "a.b", Payload: 1})
	require.ErrorIs(t, err, port.ErrInvalidInput)
	require.Len(t, rows(t, pool), 1)

	// In a rolled-back transaction nothing is written.
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	_, err = outbox.Write(ctx, tx, outbox.Event{Kind: "a.b", IdempotencyKey: "k2", Payload: 1})
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(ctx))
	require.Len(t, rows(t, pool), 1)
}

// Two dispatchers on one table: every row is enqueued, none twice, all end
// dispatched with the run id the engine returned.
func TestTwoDispatchers(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	eng := apptest.NewRecordingEngine(pool, nil)
	const n = 200
	for i := range n {
		write(t, pool, "k.ind", fmt.Sprintf("key-%03d", i))
	}
	var ds []*outbox.Dispatcher
	for range 2 {
		d, err := outbox.NewDispatcher(pool, eng, outbox.Config{BatchSize: 7})
		require.NoError(t, err)
		require.NoError(t, d.Start(context.Background()))
		ds = append(ds, d)
	}
	require.Eventually(t, func() bool {
		for _, r := range rows(t, pool) {
			if r.Status != "dispatched" {
				return false
			}
		}
		return true
	}, 30*time.Second, 20*time.Millisecond)
	for _, d := range ds {
		d.Stop()
		d.Stop() // twice is safe
	}
	var keys []string
	for _, e := range eng.Enqueued() {
		keys = append(keys, e.Key)
	}
	slices.Sort(keys)
	require.Len(t, slices.Compact(slices.Clone(keys)), n, "every row enqueued")
	require.Len(t, keys, n, "no row enqueued twice")
	var runs int
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT count(*) FROM taskport.run`).Scan(&runs))
	require.Equal(t, n, runs)
	for k, r := range rows(t, pool) {
		require.NotNil(t, r.RunID, k)
		require.Equal(t, 1, r.Attempts, k)
	}
}

// failingEngine fails the first n Enqueue calls.
type failingEngine struct {
	*apptest.RecordingEngine
	left atomic.Int32
	err  error
}

func (f *failingEngine) Enqueue(ctx context.Context, kind port.Kind, input any, opts port.EnqueueOptions) (port.RunID, error) {
	if f.left.Add(-1) >= 0 {
		return "", f.err
	}
	return f.RecordingEngine.Enqueue(ctx, kind, input, opts)
}

func TestEnqueueFailureBacksOff(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	eng := &failingEngine{RecordingEngine: apptest.NewRecordingEngine(pool, nil), err: errors.New("engine down")}
	eng.left.Store(2)
	d, err := outbox.NewDispatcher(pool, eng, outbox.Config{})
	require.NoError(t, err)
	write(t, pool, "k.ind", "x")
	ctx := context.Background()

	n, err := d.DispatchOnce(ctx)
	require.Equal(t, 1, n)
	require.ErrorContains(t, err, "engine down")
	r := rows(t, pool)["x"]
	require.Equal(t, row{Status: "pending", Attempts: 1, LastErr: "engine down"}, r)
	n, err = d.DispatchOnce(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "backing off: not due yet")

	_, err = pool.Exec(ctx, `UPDATE outbox_event SET next_attempt_at = now()`)
	require.NoError(t, err)
	_, err = d.DispatchOnce(ctx)
	require.Error(t, err)
	var wait time.Duration
	require.NoError(t, pool.QueryRow(ctx, `SELECT (next_attempt_at - now())::interval FROM outbox_event`).Scan(&wait))
	require.Greater(t, wait, 1500*time.Millisecond, "the second failure waits longer (2s)")

	_, err = pool.Exec(ctx, `UPDATE outbox_event SET next_attempt_at = now()`)
	require.NoError(t, err)
	_, err = d.DispatchOnce(ctx)
	require.NoError(t, err)
	r = rows(t, pool)["x"]
	require.Equal(t, "dispatched", r.Status)
	require.Equal(t, 3, r.Attempts)
	require.Empty(t, r.LastErr)
}

func TestInvalidRowFailsWithoutRetry(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	reg := port.NewRegistry() // knows no kind: every row is refused
	d, err := outbox.NewDispatcher(pool, apptest.NewRecordingEngine(pool, reg), outbox.Config{})
	require.NoError(t, err)
	write(t, pool, "un.known", "x")
	_, err = d.DispatchOnce(context.Background())
	require.NoError(t, err)
	r := rows(t, pool)["x"]
	require.Equal(t, "failed", r.Status)
	require.Contains(t, r.LastErr, "unknown kind")
}

// With polling effectively off, only LISTEN/NOTIFY can wake the dispatcher.
func TestNotifyWakesDispatcher(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	eng := apptest.NewRecordingEngine(pool, nil)
	d, err := outbox.NewDispatcher(pool, eng, outbox.Config{PollInterval: time.Hour})
	require.NoError(t, err)
	require.NoError(t, d.Start(context.Background()))
	t.Cleanup(d.Stop)
	require.ErrorIs(t, d.Start(context.Background()), port.ErrAlreadyStarted)
	// The first wake-up after LISTEN drains what is there; rows written
	// later arrive through notifications only.
	for i := range 3 {
		write(t, pool, "k.ind", fmt.Sprintf("n%d", i))
		want := i + 1
		select {
		case <-eng.Notify():
		case <-time.After(30 * time.Second):
			t.Fatalf("row %d not dispatched", i)
		}
		require.Eventually(t, func() bool { return len(eng.Enqueued()) == want }, 10*time.Second, 5*time.Millisecond)
	}
}
