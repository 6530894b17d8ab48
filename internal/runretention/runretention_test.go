package runretention_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/internal/runretention"
	"github.com/taskport/taskport/internal/runstore"
	"github.com/taskport/taskport/internal/testkit/pgtest"
	"github.com/taskport/taskport/internal/tracing"
	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/retention"
)

// newRun is a run that waits on an early signal.
func newRun(key string) runstore.NewRun {
	return runstore.NewRun{Engine: runstore.EngineTemporal, Kind: "k", Version: 1, Key: key, Input: json.RawMessage(`{}`)}
}

// The run store's pruner deletes the early signals that are done, row by
// row: those a wait took longer ago than the age, and those no wait took
// within the age (expired), in batches, skipping a row another transaction
// holds; never a younger one, and nothing when the age is negative. A kept
// signal that is young is still handed to the next wait.
func TestPrunerDeletesTakenAndExpiredEarlySignals(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	payload := json.RawMessage(`"go"`)
	keep := func(topic port.Topic) {
		t.Helper()
		n, err := runstore.SignalParked(ctx, pool, topic, payload, tracing.Stored{}, func(port.RunID) (bool, error) {
			return false, errors.New("nobody waits: nothing is sent")
		})
		require.NoError(t, err)
		require.Zero(t, n, "nobody waits on %s: the signal is kept", topic)
	}
	take := func(topic port.Topic, key string) {
		t.Helper()
		run, _, err := runstore.Insert(ctx, pool, newRun(key))
		require.NoError(t, err)
		took := 0
		require.NoError(t, runstore.WaitTakingKeptSignal(ctx, pool, topic, run.ID, "wait", func(runstore.KeptSignal) error {
			took++
			return nil
		}))
		require.Equal(t, 1, took)
		require.NoError(t, runstore.RemoveWaiter(ctx, pool, topic, run.ID))
	}
	for _, topic := range []port.Topic{"t:taken-old", "t:taken-young"} {
		keep(topic)
		take(topic, string(topic))
	}
	keep("t:expired")
	keep("t:expired")
	keep("t:locked")
	keep("t:fresh")
	_, err := pool.Exec(ctx, `
UPDATE taskport.early_signal SET created_at = now() - interval '2 hours',
  consumed_at = CASE WHEN consumed_by IS NOT NULL THEN now() - interval '2 hours' END
WHERE topic IN ('t:taken-old', 't:expired', 't:locked')`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `UPDATE taskport.early_signal SET created_at = now() - interval '2 hours' WHERE topic = 't:taken-young'`)
	require.NoError(t, err)
	topics := func() []string {
		t.Helper()
		rows, err := pool.Query(ctx, `SELECT topic FROM taskport.early_signal ORDER BY topic`)
		require.NoError(t, err)
		out, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		return out
	}
	require.Equal(t, []string{"t:expired", "t:expired", "t:fresh", "t:locked", "t:taken-old", "t:taken-young"}, topics())

	policy := retention.Policy{Completed: time.Hour, BatchSize: 1}.WithDefaults()
	pruner := runretention.Pruner(pool, runstore.EngineTemporal)
	lag, err := pruner.Lag(ctx, policy)
	require.NoError(t, err)
	require.InDelta(t, time.Hour.Seconds(), lag[runstore.TableEarlySignal].Seconds(), 60,
		"the oldest done signal became prunable an hour ago")

	// A wait taking the signal holds its row: the cleaner skips it.
	lock, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer lock.Rollback(ctx) //nolint:errcheck // released below; this releases the row on failure
	_, err = lock.Exec(ctx, `SELECT 1 FROM taskport.early_signal WHERE topic = 't:locked' FOR UPDATE`)
	require.NoError(t, err)

	cleaner, err := retention.New(pool, []retention.Pruner{pruner}, retention.Config{Policy: policy})
	require.NoError(t, err)
	deleted, err := cleaner.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(3), deleted[runstore.TableEarlySignal], "batches of 1 drained the taken and the two expired")
	require.Equal(t, []string{"t:fresh", "t:locked", "t:taken-young"}, topics())

	require.NoError(t, lock.Rollback(ctx))
	deleted, err = cleaner.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(1), deleted[runstore.TableEarlySignal], "released, the expired signal goes")
	require.Equal(t, []string{"t:fresh", "t:taken-young"}, topics())
	lag, err = pruner.Lag(ctx, policy)
	require.NoError(t, err)
	require.Zero(t, lag[runstore.TableEarlySignal])

	// A negative age keeps them forever, however old.
	_, err = pool.Exec(ctx, `UPDATE taskport.early_signal SET created_at = now() - interval '1 year',
  consumed_at = CASE WHEN consumed_by IS NOT NULL THEN now() - interval '1 year' END`)
	require.NoError(t, err)
	forever, err := retention.New(pool, []retention.Pruner{pruner},
		retention.Config{Policy: retention.Policy{Completed: -1, Canceled: -1, Failed: -1}})
	require.NoError(t, err)
	deleted, err = forever.RunOnce(ctx)
	require.NoError(t, err)
	require.Zero(t, deleted[runstore.TableEarlySignal])
	require.Equal(t, []string{"t:fresh", "t:taken-young"}, topics())

	// The signal kept and not expired still goes to the next wait.
	run, _, err := runstore.Insert(ctx, pool, newRun("fresh-waiter"))
	require.NoError(t, err)
	var kept []runstore.KeptSignal
	require.NoError(t, runstore.WaitTakingKeptSignal(ctx, pool, "t:fresh", run.ID, "wait", func(k runstore.KeptSignal) error {
		kept = append(kept, k)
		return nil
	}))
	require.Len(t, kept, 1)
	require.JSONEq(t, string(payload), string(kept[0].Payload))
}
