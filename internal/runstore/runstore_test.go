package runstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/internal/runstore"
	"github.com/taskport/taskport/internal/testkit/pgtest"
	"github.com/taskport/taskport/internal/tracing"
	"github.com/taskport/taskport/port"
)

func newRun(key string) runstore.NewRun {
	return runstore.NewRun{Engine: runstore.EngineLease, Kind: "asset.import", Version: 1, Key: key,
		BusinessKey: "plan-1", Input: json.RawMessage(`{"a":1}`)}
}

// insertRun inserts newRun(key) as a run of engine.
func insertRun(t *testing.T, pool *pgxpool.Pool, engine runstore.Engine, key string) runstore.Run {
	t.Helper()
	nr := newRun(key)
	nr.Engine = engine
	r, _, err := runstore.Insert(context.Background(), pool, nr)
	require.NoError(t, err)
	return r
}

// Concurrent inserts of one key create exactly one run and all callers get
// its id: the UNIQUE constraint, not a time window, is the authority.
func TestInsertIsIdempotentUnderConcurrency(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	const n = 16
	ids := make([]port.RunID, n)
	seqs := make([]int64, n)
	created := make([]bool, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, c, err := runstore.Insert(ctx, pool, newRun("plan-1:import"))
			require.NoError(t, err)
			ids[i], seqs[i], created[i] = r.ID, r.Seq, c
		}()
	}
	wg.Wait()
	creators := 0
	for i := range n {
		require.Equal(t, ids[0], ids[i])
		require.Equal(t, seqs[0], seqs[i], "every caller reads the one run's sequence")
		if created[i] {
			creators++
		}
	}
	require.Equal(t, 1, creators)
	var rows int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM taskport.run").Scan(&rows))
	require.Equal(t, 1, rows)

	other, c, err := runstore.Insert(ctx, pool, newRun("plan-1:import:retry-1"))
	require.NoError(t, err)
	require.True(t, c)
	require.NotEqual(t, ids[0], other.ID)
	require.Greater(t, other.Seq, seqs[0], "a run created later has a larger sequence (the generation of its fencing tokens)")
}

func TestGetCancelProjectList(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)

	_, err := runstore.Get(ctx, pool, "not-a-uuid")
	require.ErrorIs(t, err, port.ErrNotFound)
	_, err = runstore.Get(ctx, pool, "0190a5c6-0000-7000-8000-000000000000")
	require.ErrorIs(t, err, port.ErrNotFound)
	_, err = runstore.RequestCancel(ctx, pool, runstore.EngineLease, "0190a5c6-0000-7000-8000-000000000000", "x")
	require.ErrorIs(t, err, port.ErrNotFound)

	r, _, err := runstore.Insert(ctx, pool, newRun("k1"))
	require.NoError(t, err)
	got, err := runstore.Get(ctx, pool, r.ID)
	require.NoError(t, err)
	require.Equal(t, port.StatusPending, got.Status)
	require.Equal(t, "plan-1", got.BusinessKey)
	require.True(t, got.CancelRequestedAt.IsZero())

	flagged, err := runstore.RequestCancel(ctx, pool, runstore.EngineLease, r.ID, "user asked")
	require.NoError(t, err)
	require.True(t, flagged)
	c1, err := runstore.Get(ctx, pool, r.ID)
	require.NoError(t, err)
	flagged, err = runstore.RequestCancel(ctx, pool, runstore.EngineLease, r.ID, "again")
	require.NoError(t, err)
	require.True(t, flagged, "an open run is flagged again")
	c2, err := runstore.Get(ctx, pool, r.ID)
	require.NoError(t, err)
	require.Equal(t, "user asked", c2.CancelReason, "the first request's reason is kept")
	require.Equal(t, c1.CancelRequestedAt, c2.CancelRequestedAt)

	require.NoError(t, runstore.Project(ctx, pool, r.ID, runstore.Projection{Status: port.StatusRunning, Attempts: 2, CurrentStep: "copy"}))
	require.NoError(t, runstore.Project(ctx, pool, r.ID, runstore.Projection{Status: port.StatusFailed, Attempts: 3, LastError: "boom", CurrentStep: "copy"}))
	require.NoError(t, runstore.Project(ctx, pool, r.ID, runstore.Projection{Status: port.StatusRunning}))
	got, err = runstore.Get(ctx, pool, r.ID)
	require.NoError(t, err)
	require.Equal(t, port.StatusFailed, got.Status, "a terminal run never moves back")
	require.Equal(t, "boom", got.LastError)
	require.False(t, got.FinishedAt.IsZero())
	require.ErrorIs(t, runstore.Project(ctx, pool, r.ID, runstore.Projection{Status: "dead"}), port.ErrInvalidInput)

	v2 := newRun("k2")
	v2.Version = 2
	_, _, err = runstore.Insert(ctx, pool, v2)
	require.NoError(t, err)
	dead, err := runstore.List(ctx, pool, runstore.EngineLease, port.RunFilter{Statuses: []port.Status{port.StatusFailed}})
	require.NoError(t, err)
	require.Len(t, dead, 1)
	require.Equal(t, r.ID, dead[0].ID)
	old, err := runstore.List(ctx, pool, runstore.EngineLease, port.RunFilter{Kind: "asset.import", BelowVersion: 2})
	require.NoError(t, err)
	require.Len(t, old, 1)
	all, err := runstore.List(ctx, pool, runstore.EngineLease, port.RunFilter{})
	require.NoError(t, err)
	require.Len(t, all, 2)
	other := newRun("k3")
	other.BusinessKey = "plan-2"
	_, _, err = runstore.Insert(ctx, pool, other)
	require.NoError(t, err)
	ofPlan, err := runstore.List(ctx, pool, runstore.EngineLease, port.RunFilter{BusinessKey: "plan-1"})
	require.NoError(t, err)
	require.Len(t, ofPlan, 2, "only the runs of plan-1")
}

// ProjectLazily writes what Project writes, keeps a terminal row as it is,
// and leaves synchronous_commit alone on the connection it ran on.
func TestProjectLazily(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pgtest.NewDatabase(t))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	r, _, err := runstore.Insert(ctx, conn, newRun("lazy"))
	require.NoError(t, err)

	require.NoError(t, runstore.ProjectLazily(ctx, conn, r.ID, runstore.Projection{Status: port.StatusRunning, Attempts: 1, CurrentStep: "copy"}))
	got, err := runstore.Get(ctx, conn, r.ID)
	require.NoError(t, err)
	require.Equal(t, port.StatusRunning, got.Status)
	require.Equal(t, "copy", got.CurrentStep)
	var setting string
	require.NoError(t, conn.QueryRow(ctx, `SHOW synchronous_commit`).Scan(&setting))
	require.Equal(t, "on", setting, "the lazy commit is the batch's own")

	require.NoError(t, runstore.ProjectLazily(ctx, conn, r.ID, runstore.Projection{Status: port.StatusFailed, Attempts: 3, LastError: "boom", CurrentStep: "copy"}))
	require.NoError(t, runstore.ProjectLazily(ctx, conn, r.ID, runstore.Projection{Status: port.StatusRunning, Attempts: 4}))
	got, err = runstore.Get(ctx, conn, r.ID)
	require.NoError(t, err)
	require.Equal(t, port.StatusFailed, got.Status, "a terminal run never moves back")
	require.Equal(t, 3, got.Attempts)
	require.Equal(t, "boom", got.LastError)
	require.False(t, got.FinishedAt.IsZero())
	require.ErrorIs(t, runstore.ProjectLazily(ctx, conn, r.ID, runstore.Projection{Status: "dead"}), port.ErrInvalidInput)
	require.ErrorIs(t, runstore.ProjectLazily(ctx, conn, "not-a-uuid", runstore.Projection{Status: port.StatusRunning}), port.ErrNotFound)
}

// signalParked signals topic (runstore.SignalParked) with a send that
// reaches every run, and returns the runs sent to.
func signalParked(t *testing.T, pool *pgxpool.Pool, topic port.Topic, payload string, trace tracing.Stored) []port.RunID {
	t.Helper()
	var sent []port.RunID
	n, err := runstore.SignalParked(context.Background(), pool, topic, json.RawMessage(payload), trace, func(id port.RunID) (bool, error) {
		sent = append(sent, id)
		return true, nil
	})
	require.NoError(t, err)
	require.Equal(t, len(sent), n)
	return sent
}

// SignalParked sends to the Temporal engine's runs parked on the topic,
// oldest wait first, and to no lease run and no run past its wait; a run
// that ended meanwhile is not counted, and a failed send ends the sending
// with the runs reached before it counted. Each parked wait, and only that
// wait, reads signaled when it returns, reached or not: the record is
// written before the sends.
func TestSignalParkedSendsToParkedTemporalRuns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	returned := func(topic port.Topic, id port.RunID) bool {
		t.Helper()
		signaled, err := runstore.WaitReturned(ctx, pool, topic, id)
		require.NoError(t, err)
		return signaled
	}
	park := func(topic port.Topic, keys ...string) []port.RunID {
		t.Helper()
		var ids []port.RunID
		for _, key := range keys {
			r := insertRun(t, pool, runstore.EngineTemporal, string(topic)+key)
			require.NoError(t, runstore.AddWaiter(ctx, pool, topic, r.ID, "wait-0"))
			ids = append(ids, r.ID)
		}
		return ids
	}

	lease := insertRun(t, pool, runstore.EngineLease, "lease")
	require.NoError(t, runstore.AddWaiter(ctx, pool, "approval:p1", lease.ID, "wait-0"))
	runs := park("approval:p1", "a", "past", "c")
	a, past, c := runs[0], runs[1], runs[2]
	require.NoError(t, runstore.AddWaiter(ctx, pool, "approval:p1", a, "wait-0"), "registering twice is harmless; the wait is a's newest")
	require.False(t, returned("approval:p1", past))
	require.Equal(t, []port.RunID{c, a}, signalParked(t, pool, "approval:p1", `"go"`, tracing.Stored{}))
	require.True(t, returned("approval:p1", a), "the signal was sent to this wait")
	require.True(t, returned("approval:p1", a), "a retried mark reads the same")
	require.True(t, returned("approval:p1", c))
	require.NoError(t, runstore.AddWaiter(ctx, pool, "approval:p1", a, "wait-1"))
	require.False(t, returned("approval:p1", a), "the run's next wait was sent nothing")
	require.False(t, returned("approval:p1", "01a22945-0000-7000-8000-00000000dead"), "an unregistered run was sent nothing")

	runs = park("approval:p2", "ended", "e")
	n, err := runstore.SignalParked(ctx, pool, "approval:p2", json.RawMessage(`"x"`), tracing.Stored{}, func(id port.RunID) (bool, error) {
		return id != runs[0], nil
	})
	require.NoError(t, err)
	require.Equal(t, 1, n, "the run that ended as the send reached for it is not counted")
	require.Equal(t, []bool{true, true}, []bool{returned("approval:p2", runs[0]), returned("approval:p2", runs[1])})

	runs = park("approval:p3", "f", "refused")
	refused := errors.New("refused")
	n, err = runstore.SignalParked(ctx, pool, "approval:p3", json.RawMessage(`"x"`), tracing.Stored{}, func(id port.RunID) (bool, error) {
		if id == runs[1] {
			return false, refused
		}
		return true, nil
	})
	require.ErrorIs(t, err, refused)
	require.Equal(t, 1, n, "the older wait was reached before the other's send failed")
	require.Equal(t, []bool{true, true}, []bool{returned("approval:p3", runs[0]), returned("approval:p3", runs[1])})
}

// A wait that marks itself returned while a Signal is sending to it reads
// that it was counted: the record commits before the sends, which hold no
// lock, so the mark is not held back by a send (one to an unreachable
// server may take its caller's whole deadline).
func TestWaitReturnedReadsTheCountDuringTheSend(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	r := insertRun(t, pool, runstore.EngineTemporal, "r")
	require.NoError(t, runstore.AddWaiter(ctx, pool, "approval:p4", r.ID, "wait"))
	n, err := runstore.SignalParked(ctx, pool, "approval:p4", json.RawMessage(`"late"`), tracing.Stored{}, func(port.RunID) (bool, error) {
		mctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		signaled, err := runstore.WaitReturned(mctx, pool, "approval:p4", r.ID)
		require.NoError(t, err, "the mark is not held back by the send")
		require.True(t, signaled, "the wait learns that a signal was counted for it")
		return true, nil
	})
	require.NoError(t, err)
	require.Equal(t, 1, n)
}

// SignalParked keeps the signal when only a lease run waits on the topic:
// the Temporal engine neither signals that run (through a server that may
// be gone, as after a switch away from Temporal) nor drops the signal that
// its own next wait on the topic is owed.
func TestSignalParkedIgnoresLeaseWaiters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	lease := insertRun(t, pool, runstore.EngineLease, "lease")
	require.NoError(t, runstore.AddWaiter(ctx, pool, "download:p1", lease.ID, "wait-download"))
	require.Empty(t, signalParked(t, pool, "download:p1", `"done"`, tracing.Stored{}), "a lease run is not a target of the Temporal engine")
	m := insertRun(t, pool, runstore.EngineTemporal, "mine")
	kept := waitTaking(t, pool, "download:p1", m.ID, "wait-download")
	require.Len(t, kept, 1, "the signal was kept for the Temporal engine's next wait")
	require.JSONEq(t, `"done"`, string(kept[0].Payload))
}

// waitTaking registers id's wait on topic at step and returns the kept
// signals it handed to the run.
func waitTaking(t *testing.T, pool *pgxpool.Pool, topic port.Topic, id port.RunID, step string) []runstore.KeptSignal {
	t.Helper()
	var sent []runstore.KeptSignal
	require.NoError(t, runstore.WaitTakingKeptSignal(context.Background(), pool, topic, id, step, func(k runstore.KeptSignal) error {
		sent = append(sent, k)
		return nil
	}))
	return sent
}

// A wait takes one kept signal, the oldest, and is then past its wait: a
// signal sent next is kept, not counted for it. A wait whose hand-over
// fails takes nothing and registers nothing.
func TestAWaitTakesOneKeptSignal(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	const topic = "approval:p3"
	for _, p := range []string{`"one"`, `"two"`} {
		require.Empty(t, signalParked(t, pool, topic, p, tracing.Stored{}))
	}
	failing := insertRun(t, pool, runstore.EngineTemporal, "failing")
	err := runstore.WaitTakingKeptSignal(ctx, pool, topic, failing.ID, "wait", func(runstore.KeptSignal) error { return errors.New("server down") })
	require.ErrorContains(t, err, "server down")
	var waiters int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM taskport.waiter WHERE topic = $1`, topic).Scan(&waiters))
	require.Zero(t, waiters, "a wait whose hand-over failed stays unregistered")
	require.Equal(t, port.StatusPending, getRun(t, pool, failing.ID).Status, "and does not read waiting")

	first := insertRun(t, pool, runstore.EngineTemporal, "first")
	kept := waitTaking(t, pool, topic, first.ID, "wait")
	require.Len(t, kept, 1, "one signal per wait")
	require.JSONEq(t, `"one"`, string(kept[0].Payload), "the oldest first")
	require.Empty(t, signalParked(t, pool, topic, `"three"`, tracing.Stored{}), "a wait that took its signal is past it")

	second := insertRun(t, pool, runstore.EngineTemporal, "second")
	kept = waitTaking(t, pool, topic, second.ID, "wait")
	require.Len(t, kept, 1)
	require.JSONEq(t, `"two"`, string(kept[0].Payload))
	rows, err := pool.Query(ctx, `SELECT consumed_by::text FROM taskport.early_signal WHERE topic = $1 ORDER BY id`, topic)
	require.NoError(t, err)
	takers, err := pgx.CollectRows(rows, pgx.RowTo[*string])
	require.NoError(t, err)
	require.Len(t, takers, 3)
	require.Equal(t, string(first.ID), *takers[0])
	require.Equal(t, string(second.ID), *takers[1])
	require.Nil(t, takers[2], "the third is kept for the next wait")
}

// A run reads waiting only once it is parked, never before: the
// registration and the projection commit together, so a Signal that reads
// the run waiting (as a caller polling Get does) finds it parked and counts
// it. While the wait's transaction is open, here inside its hand-over of a
// kept signal, the run still reads pending from another connection.
func TestARunReadsWaitingOnlyOnceParked(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	const topic = "approval:p4"
	parked := insertRun(t, pool, runstore.EngineTemporal, "parked")
	require.Empty(t, waitTaking(t, pool, topic, parked.ID, "wait-approval"))
	got := getRun(t, pool, parked.ID)
	require.Equal(t, port.StatusWaiting, got.Status)
	require.Equal(t, "wait-approval", got.CurrentStep)
	require.Equal(t, []port.RunID{parked.ID}, signalParked(t, pool, topic, `"now"`, tracing.Stored{}))

	require.Empty(t, signalParked(t, pool, "approval:p5", `"early"`, tracing.Stored{}))
	taking := insertRun(t, pool, runstore.EngineTemporal, "taking")
	var during port.Status
	require.NoError(t, runstore.WaitTakingKeptSignal(ctx, pool, "approval:p5", taking.ID, "wait-approval", func(runstore.KeptSignal) error {
		during = getRun(t, pool, taking.ID).Status
		return nil
	}))
	require.Equal(t, port.StatusPending, during, "not waiting before the registration commits")
	require.Equal(t, port.StatusWaiting, getRun(t, pool, taking.ID).Status)
}

func getRun(t *testing.T, pool *pgxpool.Pool, id port.RunID) runstore.Run {
	t.Helper()
	r, err := runstore.Get(context.Background(), pool, id)
	require.NoError(t, err)
	return r
}

// A run registered on the topic but past its wait is not a target: the
// signal is kept, with the sender's trace, for whichever wait on the topic
// comes next, that run's or another's; a parked run is one, and then
// nothing is kept.
func TestSignalParkedKeepsWhatNoParkedRunTakes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	past := insertRun(t, pool, runstore.EngineTemporal, "past")
	require.NoError(t, runstore.AddWaiter(ctx, pool, "approval:p2", past.ID, "wait-approval"))
	_, err := runstore.WaitReturned(ctx, pool, "approval:p2", past.ID)
	require.NoError(t, err)
	sent := tracing.Stored{Parent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", State: "k=v"}
	require.Empty(t, signalParked(t, pool, "approval:p2", `"between"`, sent), "a run between two waits is not parked")

	other := insertRun(t, pool, runstore.EngineTemporal, "other")
	kept := waitTaking(t, pool, "approval:p2", other.ID, "wait-approval")
	require.Len(t, kept, 1, "the next wait on the topic, another run's, finds it kept")
	require.JSONEq(t, `"between"`, string(kept[0].Payload))
	require.Equal(t, sent, kept[0].Trace)
	// Its next wait finds nothing kept and parks.
	require.Empty(t, waitTaking(t, pool, "approval:p2", other.ID, "wait-approval-2"))

	require.Equal(t, []port.RunID{other.ID}, signalParked(t, pool, "approval:p2", `"parked"`, tracing.Stored{}), "the parked run is the target")
	var open int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM taskport.early_signal WHERE topic = 'approval:p2' AND consumed_by IS NULL`).Scan(&open))
	require.Zero(t, open, "a signal that reaches a parked run is not kept as well")
}

// StaleTemporal pages through the open Temporal runs not written for a
// while, oldest write first, and reads the partial index, generic plan
// included.
func TestStaleTemporalPagesOpenRunsByIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	insert := func(engine runstore.Engine, key string, status port.Status, age time.Duration) port.RunID {
		r := newRun(key)
		r.Engine = engine
		run, _, err := runstore.Insert(ctx, pool, r)
		require.NoError(t, err)
		_, err = pool.Exec(ctx, `UPDATE taskport.run SET status = $2, updated_at = now() - $3 * interval '1 millisecond' WHERE id = $1`,
			run.ID, status, age.Milliseconds())
		require.NoError(t, err)
		return run.ID
	}
	oldest := insert(runstore.EngineTemporal, "a", port.StatusWaiting, 3*time.Hour)
	older := insert(runstore.EngineTemporal, "b", port.StatusRunning, 2*time.Hour)
	old := insert(runstore.EngineTemporal, "c", port.StatusPending, time.Hour)
	insert(runstore.EngineTemporal, "fresh", port.StatusRunning, 0)
	insert(runstore.EngineTemporal, "ended", port.StatusFailed, 4*time.Hour)
	insert(runstore.EngineLease, "lease", port.StatusWaiting, 4*time.Hour)

	ids := func(runs []runstore.Run) []port.RunID {
		out := make([]port.RunID, len(runs))
		for i, r := range runs {
			out[i] = r.ID
		}
		return out
	}
	page, err := runstore.StaleTemporal(ctx, pool, time.Minute, runstore.Cursor{}, 2)
	require.NoError(t, err)
	require.Equal(t, []port.RunID{oldest, older}, ids(page))
	page, err = runstore.StaleTemporal(ctx, pool, time.Minute, runstore.After(page[1]), 2)
	require.NoError(t, err)
	require.Equal(t, []port.RunID{old}, ids(page), "open Temporal runs only, and not the fresh one")

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck // read only
	_, err = tx.Exec(ctx, `SET LOCAL enable_seqscan = off`)
	require.NoError(t, err)
	pgtest.ExplainGeneric(t, tx, runstore.StaleTemporalSQL, int64(60000), time.Time{}, uuid.UUID{}, 100).
		RequireIndexed(t, "the batch reads the partial index, as a generic plan", "run_open_temporal")
}

// StartStep reads the cancel flag as CancelRequested does and projects the
// step as running only when the run is open and its cancel not requested.
func TestStartStep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)

	_, err := runstore.StartStep(ctx, pool, "0190a5c6-0000-7000-8000-000000000000", "copy", 1)
	require.ErrorIs(t, err, port.ErrNotFound)
	_, err = runstore.StartStep(ctx, pool, "not-a-uuid", "copy", 1)
	require.ErrorIs(t, err, port.ErrNotFound)

	open, _, err := runstore.Insert(ctx, pool, newRun("open"))
	require.NoError(t, err)
	require.NoError(t, runstore.Project(ctx, pool, open.ID, runstore.Projection{Status: port.StatusRunning, Attempts: 2, LastError: "before", CurrentStep: "fetch"}))
	canceled, err := runstore.StartStep(ctx, pool, open.ID, "copy", 1)
	require.NoError(t, err)
	require.False(t, canceled)
	got, err := runstore.Get(ctx, pool, open.ID)
	require.NoError(t, err)
	require.Equal(t, port.StatusRunning, got.Status)
	require.Equal(t, "copy", got.CurrentStep)
	require.Equal(t, 1, got.Attempts)
	require.Empty(t, got.LastError)

	flagged, _, err := runstore.Insert(ctx, pool, newRun("flagged"))
	require.NoError(t, err)
	_, err = runstore.RequestCancel(ctx, pool, runstore.EngineLease, flagged.ID, "user asked")
	require.NoError(t, err)
	canceled, err = runstore.StartStep(ctx, pool, flagged.ID, "copy", 1)
	require.NoError(t, err)
	require.True(t, canceled)
	got, err = runstore.Get(ctx, pool, flagged.ID)
	require.NoError(t, err)
	require.Equal(t, port.StatusPending, got.Status, "a run whose cancel was requested is not projected running")
	require.Empty(t, got.CurrentStep)

	ended, _, err := runstore.Insert(ctx, pool, newRun("ended"))
	require.NoError(t, err)
	require.NoError(t, runstore.Project(ctx, pool, ended.ID, runstore.Projection{Status: port.StatusSucceeded, Attempts: 1, CurrentStep: "fetch"}))
	canceled, err = runstore.StartStep(ctx, pool, ended.ID, "copy", 1)
	require.NoError(t, err)
	require.False(t, canceled)
	got, err = runstore.Get(ctx, pool, ended.ID)
	require.NoError(t, err)
	require.Equal(t, port.StatusSucceeded, got.Status, "a terminal run never moves back")
	require.Equal(t, "fetch", got.CurrentStep)
}

// RecordSwitch refuses what `engine status` could not show as written (a
// by or reason that is not valid UTF-8, holds U+0000 or an escape code, or
// is over its bound) naming the field, before it writes anything; an empty
// reason is recorded.
func TestRecordSwitchRefusesBadText(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	for _, tc := range []struct{ by, reason, field string }{
		{"ops", "bad\xff", "reason"},
		{"ops", "a\x00b", "reason"},
		{"ops", "\x1b[2J", "reason"},
		{"ops", strings.Repeat("r", runstore.MaxSwitchReason+1), "reason"},
		{"", "why", "by"},
		{"ann\xff", "why", "by"},
		{"ann\tx", "why", "by"},
		{strings.Repeat("b", runstore.MaxSwitchBy+1), "why", "by"},
	} {
		_, err := runstore.RecordSwitch(ctx, pool, runstore.EngineLease, tc.by, tc.reason)
		var fe *port.FieldError
		require.ErrorAs(t, err, &fe, "%q %q", tc.by, tc.reason)
		require.Equal(t, tc.field, fe.Field, "%q %q", tc.by, tc.reason)
	}
	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM taskport.engine_switch`).Scan(&n))
	require.Zero(t, n, "nothing written")
	s, err := runstore.RecordSwitch(ctx, pool, runstore.EngineLease, "ops", "")
	require.NoError(t, err)
	require.Empty(t, s.Reason)
}

// A run whose cancel was requested takes no kept signal, parking or not:
// its workflow's cancel is on its way, and the signal stays kept for the
// topic's next wait (the lease engine's wait refuses it the same way).
func TestACanceledRunTakesNoKeptSignal(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	const topic = "approval:p6"
	require.Empty(t, signalParked(t, pool, topic, `"kept"`, tracing.Stored{}))
	canceled := insertRun(t, pool, runstore.EngineTemporal, "canceled")
	flagged, err := runstore.RequestCancel(ctx, pool, runstore.EngineTemporal, canceled.ID, "operator")
	require.NoError(t, err)
	require.True(t, flagged)
	require.Empty(t, waitTaking(t, pool, topic, canceled.ID, "wait-approval"), "a parking wait")
	_, ok, err := runstore.TakeOneKeptSignal(ctx, pool, topic, canceled.ID, "wait-zero")
	require.NoError(t, err)
	require.False(t, ok, "a zero wait")

	next := insertRun(t, pool, runstore.EngineTemporal, "next")
	kept := waitTaking(t, pool, topic, next.ID, "wait-approval")
	require.Len(t, kept, 1, "the next wait on the topic takes it")
	require.JSONEq(t, `"kept"`, string(kept[0].Payload))
}
