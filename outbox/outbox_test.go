package outbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/app/apptest"
	"github.com/taskport/taskport/internal/runstore"
	"github.com/taskport/taskport/internal/startstop"
	"github.com/taskport/taskport/internal/testkit/pgtest"
	"github.com/taskport/taskport/leaseadapter"
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
		d, err := outbox.NewDispatcher(pool, eng, eng, outbox.Config{BatchSize: 7})
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
		require.NoError(t, d.Stop(context.Background()))
		require.NoError(t, d.Stop(context.Background()), "twice is safe")
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

// failingEngine fails the first n EnqueueMany calls (the dispatcher's).
type failingEngine struct {
	*apptest.RecordingEngine
	left atomic.Int32
	err  error
}

func (f *failingEngine) EnqueueMany(ctx context.Context, items []port.EnqueueItem) ([]port.EnqueueResult, error) {
	if f.left.Add(-1) >= 0 {
		return nil, f.err
	}
	return f.RecordingEngine.EnqueueMany(ctx, items)
}

func TestEnqueueFailureBacksOff(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	eng := &failingEngine{RecordingEngine: apptest.NewRecordingEngine(pool, nil), err: errors.New("engine down")}
	eng.left.Store(2)
	for _, mode := range pgtest.UntypedModes {
		_, err := outbox.NewDispatcher(pgtest.WithExecMode(t, pool, mode), eng, eng, outbox.Config{})
		var fe *port.FieldError
		require.ErrorAs(t, err, &fe, "a pool whose statements would fail: %s", mode)
		require.Equal(t, "pool", fe.Field)
	}
	d, err := outbox.NewDispatcher(pool, eng, eng, outbox.Config{})
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

	backoffPassed(t, pool)
	_, err = d.DispatchOnce(ctx)
	require.Error(t, err)
	var wait time.Duration
	require.NoError(t, pool.QueryRow(ctx, `SELECT (next_attempt_at - now())::interval FROM outbox_event`).Scan(&wait))
	require.Greater(t, wait, 1500*time.Millisecond, "the second failure waits longer (2s)")

	backoffPassed(t, pool)
	_, err = d.DispatchOnce(ctx)
	require.NoError(t, err)
	r = rows(t, pool)["x"]
	require.Equal(t, "dispatched", r.Status)
	require.Equal(t, 3, r.Attempts)
	require.Empty(t, r.LastErr)
}

// A backoff given without MaxAttempts (the dispatcher has no attempt
// limit) paces the retries as given. Before, it was replaced whole by the
// default, and a row failing against an engine that was down came back
// after 1s instead of an hour.
func TestBackoffWithoutMaxAttemptsIsKept(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	eng := &failingEngine{RecordingEngine: apptest.NewRecordingEngine(pool, nil), err: errors.New("engine down")}
	eng.left.Store(1)
	d, err := outbox.NewDispatcher(pool, eng, eng, outbox.Config{Backoff: port.RetryPolicy{InitialInterval: time.Hour, MaxInterval: time.Hour}})
	require.NoError(t, err)
	write(t, pool, "k.ind", "x")
	_, err = d.DispatchOnce(ctx)
	require.ErrorContains(t, err, "engine down")
	var wait time.Duration
	require.NoError(t, pool.QueryRow(ctx, `SELECT (next_attempt_at - now())::interval FROM outbox_event`).Scan(&wait))
	require.Greater(t, wait, 50*time.Minute, "the hour given, not the default 1s")
}

// kindWith registers kind at version, taking an input with the fields of
// in only (unknown fields are refused, as for every kind).
func kindWith[In any](t testing.TB, kind port.Kind, version int) *port.Registry {
	t.Helper()
	reg := port.NewRegistry()
	require.NoError(t, reg.Register(port.Definition{Kind: kind, Version: version, Retry: port.NetworkRetry(),
		Handler: port.Handle(func(port.Flow, In) error { return nil })}))
	return reg
}

// Defect 7: a process that does not know a kind (an old worker during a
// rolling deploy) leaves the row pending with a visible error and a backoff,
// so that a dispatcher that knows the kind takes it.
func TestUnknownKindWaitsForADispatcherThatKnowsIt(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	write(t, pool, "new.kind", "x")
	_, err := dispatchOnce(t, pool, port.NewRegistry())
	require.ErrorIs(t, err, port.ErrUnknownKind)
	r := rows(t, pool)["x"]
	require.Equal(t, "pending", r.Status, "try later, not failed")
	require.Equal(t, 1, r.Attempts)
	require.Contains(t, r.LastErr, "unknown kind")

	backoffPassed(t, pool)
	_, err = dispatchOnce(t, pool, kindWith[map[string]string](t, "new.kind", 1))
	require.NoError(t, err)
	require.Equal(t, "dispatched", rows(t, pool)["x"].Status)
}

// dispatchOnce runs one batch on a dispatcher whose engine registers reg.
func dispatchOnce(t testing.TB, pool *pgxpool.Pool, reg *port.Registry) (*apptest.RecordingEngine, error) {
	t.Helper()
	eng := apptest.NewRecordingEngine(pool, reg)
	d, err := outbox.NewDispatcher(pool, eng, eng, outbox.Config{})
	require.NoError(t, err)
	_, err = d.DispatchOnce(context.Background())
	return eng, err
}

// backoffPassed makes every row due now.
func backoffPassed(t testing.TB, pool *pgxpool.Pool) {
	t.Helper()
	_, err := pool.Exec(context.Background(), `UPDATE outbox_event SET next_attempt_at = now()`)
	require.NoError(t, err)
}

// unrelatedInput is a kind's input that has none of the fields the test
// rows carry: those rows are invalid for the kind.
type unrelatedInput struct {
	Other string `json:"other"`
}

// Input that the kind refuses (here: a field the kind does not have) is
// given up as failed: no process that knows the kind will take it.
func TestInvalidRowFailsWithoutRetry(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	write(t, pool, "k.ind", "x")
	_, err := dispatchOnce(t, pool, kindWith[unrelatedInput](t, "k.ind", 1))
	require.NoError(t, err)
	r := rows(t, pool)["x"]
	require.Equal(t, "failed", r.Status)
	require.Contains(t, r.LastErr, "invalid input")
}

// With polling effectively off, only LISTEN/NOTIFY can wake the dispatcher.
func TestNotifyWakesDispatcher(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	eng := apptest.NewRecordingEngine(pool, nil)
	d, err := outbox.NewDispatcher(pool, eng, eng, outbox.Config{PollInterval: time.Hour})
	require.NoError(t, err)
	start(t, d)
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

// Defect 7: input written by newer code records the version of the kind
// that understands it. A process whose newest version is older leaves the
// row pending with the reason, for a process that has that version.
func TestNewerInputWaitsForANewerVersion(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	type v2Input struct {
		K     string `json:"k"`
		Extra string `json:"extra"`
	}
	_, err := outbox.Write(ctx, pool, outbox.Event{Kind: "k.ind", IdempotencyKey: "x", Payload: v2Input{K: "x", Extra: "new field"}, MinVersion: 2})
	require.NoError(t, err)

	oldEngine, err := dispatchOnce(t, pool, kindWith[map[string]string](t, "k.ind", 1))
	require.ErrorIs(t, err, port.ErrUnknownVersion)
	r := rows(t, pool)["x"]
	require.Equal(t, "pending", r.Status, "not failed: a newer process understands it")
	require.Contains(t, r.LastErr, "needs version 2, newest registered is 1")
	require.Empty(t, oldEngine.Enqueued())

	backoffPassed(t, pool)
	_, err = dispatchOnce(t, pool, kindWith[v2Input](t, "k.ind", 2))
	require.NoError(t, err)
	require.Equal(t, "dispatched", rows(t, pool)["x"].Status)
}

// A signal row signals its topic; a cancel row cancels the open runs of its
// business key, except the kinds it spares and the runs of other keys.
func TestSignalAndCancelRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	eng := apptest.NewRecordingEngine(pool, nil)
	enqueue := func(kind port.Kind, key, businessKey string) port.RunID {
		id, err := eng.Enqueue(ctx, kind, map[string]string{}, port.EnqueueOptions{IdempotencyKey: key, BusinessKey: businessKey})
		require.NoError(t, err)
		return id
	}
	chain := enqueue("chain.step", "a", "plan-1")
	spared := enqueue("compensate", "b", "plan-1")
	other := enqueue("chain.step", "c", "plan-2")
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := outbox.Write(ctx, tx, outbox.Event{Action: outbox.ActionSignal, Topic: "approval:plan-1", IdempotencyKey: "s1", BusinessKey: "plan-1"}); err != nil {
			return err
		}
		_, err := outbox.Write(ctx, tx, outbox.Event{Action: outbox.ActionCancelPlanRuns, IdempotencyKey: "c1", BusinessKey: "plan-1",
			Payload: outbox.CancelRuns{Reason: "stop", Spare: []port.Kind{"compensate"}}})
		return err
	})
	require.NoError(t, err)
	d, err := outbox.NewDispatcher(pool, eng, eng, outbox.Config{})
	require.NoError(t, err)
	_, err = d.DispatchOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, []port.Topic{"approval:plan-1"}, eng.Signals())
	require.Equal(t, []port.RunID{chain}, eng.Canceled())
	for _, id := range []port.RunID{spared, other} {
		v, err := eng.Get(ctx, id)
		require.NoError(t, err)
		require.Equal(t, port.StatusPending, v.Status)
	}
	for k, r := range rows(t, pool) {
		require.Equal(t, "dispatched", r.Status, k)
		require.Nil(t, r.RunID, "%s: no run of its own", k)
	}
}

// Each action takes exactly its own fields; a malformed row is refused and
// nothing is written.
func TestWriteRefusesMalformedRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	for name, ev := range map[string]outbox.Event{
		"enqueue without kind":        {IdempotencyKey: "k"},
		"enqueue with topic":          {Kind: "a.b", Topic: "t", IdempotencyKey: "k"},
		"negative min version":        {Kind: "a.b", IdempotencyKey: "k", MinVersion: -1},
		"signal without topic":        {Action: outbox.ActionSignal, IdempotencyKey: "k"},
		"signal with kind":            {Action: outbox.ActionSignal, Kind: "a.b", Topic: "t", IdempotencyKey: "k"},
		"signal with min version":     {Action: outbox.ActionSignal, Topic: "t", IdempotencyKey: "k", MinVersion: 2},
		"cancel without plan":         {Action: outbox.ActionCancelPlanRuns, IdempotencyKey: "k", Payload: outbox.CancelRuns{}},
		"cancel with another payload": {Action: outbox.ActionCancelPlanRuns, IdempotencyKey: "k", BusinessKey: "p", Payload: 1},
		"unknown action":              {Action: "launch", IdempotencyKey: "k"},
		// Keys and times the engines refuse at dispatch (the row would
		// fail there) or Postgres refuses in the caller's transaction.
		"key with U+0000":                     {Kind: "a.b", IdempotencyKey: "k\x00"},
		"key not UTF-8":                       {Kind: "a.b", IdempotencyKey: "k\xff"},
		"key with a control character":        {Kind: "a.b", IdempotencyKey: "k\x1b[2J"},
		"key too long":                        {Kind: "a.b", IdempotencyKey: strings.Repeat("k", port.MaxNameLen+1)},
		"business key with U+0000":            {Kind: "a.b", IdempotencyKey: "k", BusinessKey: "p\x00"},
		"business key too long":               {Kind: "a.b", IdempotencyKey: "k", BusinessKey: strings.Repeat("p", port.MaxNameLen+1)},
		"signal key with a control character": {Action: outbox.ActionSignal, Topic: "t", IdempotencyKey: "s\u0085"},
		"cancel business key not UTF-8": {Action: outbox.ActionCancelPlanRuns, IdempotencyKey: "k", BusinessKey: "p\xff",
			Payload: outbox.CancelRuns{}},
		"available after year 9999": {Kind: "a.b", IdempotencyKey: "k", AvailableAt: time.Date(10000, 1, 2, 0, 0, 0, 0, time.UTC)},
	} {
		_, err := outbox.Write(ctx, pool, ev)
		require.ErrorIs(t, err, port.ErrInvalidInput, name)
	}
	require.Empty(t, rows(t, pool))

	// A refused row leaves the caller's transaction usable.
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := outbox.Write(ctx, tx, outbox.Event{Kind: "a.b", IdempotencyKey: "k\x00"})
		require.ErrorIs(t, err, port.ErrInvalidInput)
		_, err = outbox.Write(ctx, tx, outbox.Event{Kind: "a.b", IdempotencyKey: "k"})
		return err
	})
	require.NoError(t, err)
	require.Len(t, rows(t, pool), 1)
}

// gauge records what the dispatcher reports through its metrics hook.
type gauge struct{ last atomic.Int64 }

func (g *gauge) FailedRows(n int) { g.last.Store(int64(n)) }

// A failed row is listed and counted (the metrics hook reports it) until an
// operator retries it: it is then pending again with its attempts reset and
// the operator recorded (also in the timeline), and the count goes back to
// zero.
func TestFailedRowsAreCountedAndRetried(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	eng := apptest.NewRecordingEngine(pool, kindWith[unrelatedInput](t, "k.ind", 1))
	failed := &gauge{}
	failed.last.Store(-1)
	d, err := outbox.NewDispatcher(pool, eng, eng, outbox.Config{PollInterval: 20 * time.Millisecond, Metrics: failed})
	require.NoError(t, err)
	write(t, pool, "k.ind", "x")
	start(t, d)
	require.Eventually(t, func() bool { return failed.last.Load() == 1 }, 30*time.Second, 10*time.Millisecond)

	list, err := outbox.Failed(ctx, pool, 10)
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.Equal(t, "x", list[0].IdempotencyKey)
	require.Equal(t, outbox.ActionEnqueue, list[0].Action)
	require.Contains(t, list[0].LastError, "invalid input")

	require.NoError(t, d.Stop(ctx)) // the row would fail again at once: look at it pending
	require.ErrorIs(t, outbox.Retry(ctx, pool, list[0].ID, " "), port.ErrInvalidInput, "who retries is recorded")
	for _, by := range []string{"ann\x00", "ann\xff", "ann\x1b[2J", strings.Repeat("a", outbox.MaxRetriedBy+1)} {
		require.ErrorIs(t, outbox.Retry(ctx, pool, list[0].ID, by), port.ErrInvalidInput, "retried by %q", by)
	}
	require.Equal(t, "failed", rows(t, pool)["x"].Status, "a refused retry writes nothing")
	_, err = outbox.Failed(ctx, pool, -1)
	require.ErrorIs(t, err, port.ErrInvalidInput, "a negative limit")
	require.NoError(t, outbox.Retry(ctx, pool, list[0].ID, "ann"))
	r := rows(t, pool)["x"]
	require.Equal(t, "pending", r.Status)
	require.Zero(t, r.Attempts)
	var by string
	require.NoError(t, pool.QueryRow(ctx, `SELECT retried_by FROM outbox_event WHERE id = $1`, list[0].ID).Scan(&by))
	require.Equal(t, "ann", by)
	tl, err := outbox.Timeline(ctx, pool, "b")
	require.NoError(t, err)
	require.Len(t, tl, 2)
	require.Equal(t, "retried by ann", tl[1].Event, "the business timeline says who retried the hand-off")
	n, err := outbox.CountFailed(ctx, pool)
	require.NoError(t, err)
	require.Zero(t, n)
	require.ErrorIs(t, outbox.Retry(ctx, pool, list[0].ID, "ann"), port.ErrNotFound, "only a failed row is retried")
}

// start starts d and stops it when the test ends.
func start(t testing.TB, d *outbox.Dispatcher) {
	t.Helper()
	require.NoError(t, d.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		require.NoError(t, d.Stop(ctx))
	})
}

// The dispatcher has the engines' lifecycle (port.TaskEngine): Stop before
// Start and twice is a no-op, Done is closed while it does not run, and a
// stopped dispatcher runs again after Start.
func TestDispatcherLifecycle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	eng := apptest.NewRecordingEngine(pool, nil)
	d, err := outbox.NewDispatcher(pool, eng, eng, outbox.Config{PollInterval: 20 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, d.Stop(ctx), "Stop before Start")
	require.False(t, startstop.Serving(d), "not running before Start")

	for round := range 2 {
		require.NoError(t, d.Start(ctx), "round %d", round)
		require.True(t, startstop.Serving(d))
		key := fmt.Sprintf("round-%d", round)
		write(t, pool, "k.ind", key)
		require.Eventually(t, func() bool { return rows(t, pool)[key].Status == "dispatched" }, 30*time.Second, 10*time.Millisecond,
			"round %d: the row was not dispatched", round)
		require.NoError(t, d.Stop(ctx))
		require.False(t, startstop.Serving(d), "round %d: Done closes at Stop", round)
		require.NoError(t, d.Err(), "a graceful stop is no error")
		require.NoError(t, d.Stop(ctx), "Stop twice")
	}
}

// claimState is what the rows record of their claims: attempts, and
// whether each is due now.
func claimState(t testing.TB, pool *pgxpool.Pool) map[string]string {
	t.Helper()
	rs, err := pool.Query(context.Background(), `SELECT idempotency_key, status, attempts, next_attempt_at <= now() FROM outbox_event`)
	require.NoError(t, err)
	out := map[string]string{}
	for rs.Next() {
		var key, status string
		var attempts int
		var due bool
		require.NoError(t, rs.Scan(&key, &status, &attempts, &due))
		out[key] = fmt.Sprintf("%s, attempts %d, due %t", status, attempts, due)
	}
	require.NoError(t, rs.Err())
	return out
}

// dispatched is what a DispatchOnce returned.
type dispatched struct {
	n   int
	err error
}

// dispatchInBackground runs one DispatchOnce until stop ends its context,
// as Stop ends the dispatcher's; returned gets its result.
func dispatchInBackground(d *outbox.Dispatcher) (stop context.CancelFunc, returned <-chan dispatched) {
	ctx, stop := context.WithCancel(context.Background())
	ch := make(chan dispatched, 1)
	go func() {
		n, err := d.DispatchOnce(ctx)
		ch <- dispatched{n, err}
	}()
	return stop, ch
}

// A claim in flight when the dispatcher stops is not abandoned: pgx gives
// up on a canceled statement without telling the server, which commits the
// claim anyway, and the rows stayed hidden by a claim nobody held until the
// claim lease ended (CI failure of TestDispatcherLifecycle: a row written
// after a restart was taken by the claim of the stopped loop). The claim
// here waits on a table lock while the dispatch's context ends. It is
// prepared beforehand, on the dispatcher's one connection, as a running
// dispatcher's is: a statement still being prepared when the client gives
// up is never executed.
func TestAClaimInFlightAtStopIsHandedBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	cfg := pool.Config().Copy()
	cfg.MaxConns = 1
	one, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(one.Close)
	eng := apptest.NewRecordingEngine(pool, nil)
	d, err := outbox.NewDispatcher(one, eng, eng, outbox.Config{})
	require.NoError(t, err)
	n, err := d.DispatchOnce(ctx)
	require.NoError(t, err)
	require.Zero(t, n)
	write(t, pool, "k.ind", "x")

	lock, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer lock.Rollback(ctx) //nolint:errcheck // committed below
	_, err = lock.Exec(ctx, `LOCK TABLE outbox_event IN SHARE MODE`)
	require.NoError(t, err)

	stop, returned := dispatchInBackground(d)
	claimRuns := func(state string) bool {
		var n int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid() AND state = $1
			AND query LIKE '%UPDATE outbox_event%SKIP LOCKED%'`, state).Scan(&n))
		return n > 0
	}
	require.Eventually(t, func() bool { return claimRuns("active") }, 30*time.Second, 5*time.Millisecond, "the claim waits on the lock")
	stop()
	require.NoError(t, lock.Commit(ctx))
	select {
	case <-returned:
	case <-time.After(time.Minute):
		t.Fatal("DispatchOnce did not return")
	}
	// An abandoned claim's backend runs on until it fails to answer.
	require.Eventually(t, func() bool { return !claimRuns("active") }, 30*time.Second, 5*time.Millisecond)
	require.Equal(t, map[string]string{"x": "pending, attempts 0, due true"}, claimState(t, pool),
		"the claim landed and its row was handed back, uncharged")
	require.Empty(t, eng.Enqueued(), "nothing was carried out after the stop")
}

// blockingEngine's EnqueueMany is entered (reported on entered) and returns
// only when its context ends: an engine call that Stop cuts short.
type blockingEngine struct {
	*apptest.RecordingEngine
	entered chan struct{}
}

func (b *blockingEngine) EnqueueMany(ctx context.Context, _ []port.EnqueueItem) ([]port.EnqueueResult, error) {
	b.entered <- struct{}{}
	<-ctx.Done()
	return nil, ctx.Err()
}

// Rows whose action a stop cuts short, and the rest of their batch, are
// handed back uncharged and due at once, not left hidden until the claim
// lease ends.
func TestStopHandsBackTheRowsOfTheBatchInHand(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	write(t, pool, "k.ind", "e")
	_, err := outbox.Write(ctx, pool, outbox.Event{Action: outbox.ActionSignal, Topic: "approval:b", IdempotencyKey: "s", BusinessKey: "b"})
	require.NoError(t, err)
	eng := &blockingEngine{RecordingEngine: apptest.NewRecordingEngine(pool, nil), entered: make(chan struct{}, 1)}
	d, err := outbox.NewDispatcher(pool, eng, eng, outbox.Config{})
	require.NoError(t, err)

	stop, returned := dispatchInBackground(d)
	<-eng.entered
	stop()
	require.Equal(t, 2, (<-returned).n, "both rows were claimed")
	require.Equal(t, map[string]string{"e": "pending, attempts 0, due true", "s": "pending, attempts 0, due true"},
		claimState(t, pool))
	require.Empty(t, eng.Signals(), "the signal after the stopped enqueue was not sent")
}

// countingEngine counts EnqueueMany calls.
type countingEngine struct {
	*apptest.RecordingEngine
	calls atomic.Int32
}

func (c *countingEngine) EnqueueMany(ctx context.Context, items []port.EnqueueItem) ([]port.EnqueueResult, error) {
	c.calls.Add(1)
	return c.RecordingEngine.EnqueueMany(ctx, items)
}

// A claimed batch goes to the engine as one EnqueueMany, yet each row is
// settled as if alone: the rows the engine accepts are dispatched with
// their runs, a row of a kind unknown here waits for a process that knows
// it, and a row with input its kind refuses fails; one bad row holds up
// none of the others.
func TestBatchSettlesEachRow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	reg := kindWith[map[string]string](t, "k.ind", 1)
	require.NoError(t, reg.Register(port.Definition{Kind: "k.strict", Version: 1, Retry: port.NetworkRetry(),
		Handler: port.Handle(func(port.Flow, unrelatedInput) error { return nil })}))
	for _, r := range []struct{ kind, key string }{{"k.ind", "a"}, {"k.unknown", "u"}, {"k.ind", "b"}, {"k.strict", "bad"}, {"k.ind", "c"}} {
		write(t, pool, r.kind, r.key)
	}
	eng := &countingEngine{RecordingEngine: apptest.NewRecordingEngine(pool, reg)}
	d, err := outbox.NewDispatcher(pool, eng, eng, outbox.Config{})
	require.NoError(t, err)
	n, err := d.DispatchOnce(ctx)
	require.Equal(t, 5, n)
	require.ErrorIs(t, err, port.ErrUnknownKind, "the unknown kind's row is due again")
	// The unknown kind refuses the batch, then the refused input; the third
	// call carries the three good rows.
	require.Equal(t, int32(3), eng.calls.Load())

	got := rows(t, pool)
	runs := map[string]bool{}
	for _, k := range []string{"a", "b", "c"} {
		require.Equal(t, "dispatched", got[k].Status, k)
		require.NotNil(t, got[k].RunID, k)
		runs[*got[k].RunID] = true
	}
	require.Len(t, runs, 3, "a run per row")
	require.Equal(t, "pending", got["u"].Status)
	require.Contains(t, got["u"].LastErr, "unknown kind")
	require.NotContains(t, got["u"].LastErr, "item", "the row's own error, not the batch's")
	require.Equal(t, "failed", got["bad"].Status)
	require.Contains(t, got["bad"].LastErr, "invalid input")
	var recorded int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM taskport.run`).Scan(&recorded))
	require.Equal(t, 3, recorded, "the refused rows recorded no run")
	var keys []string
	for _, e := range eng.Enqueued() {
		keys = append(keys, e.Key)
	}
	require.ElementsMatch(t, []string{"a", "b", "c"}, keys)
}

// During a switch of engines, a process serving one engine dispatches a row
// whose key is already the other engine's run (the row was handed over, but
// its dispatcher died before marking it). The enqueue it asks for has
// happened: the row is dispatched, not retried forever, and no second run
// is recorded.
func TestRowOfAnotherEnginesRunIsDispatched(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	reg := kindWith[map[string]string](t, "k.ind", 1)
	write(t, pool, "k.ind", "theirs")
	write(t, pool, "k.ind", "ours")
	_, _, err := runstore.Insert(ctx, pool, runstore.NewRun{Engine: runstore.EngineTemporal, Kind: "k.ind", Version: 1,
		Key: "theirs", Input: json.RawMessage(`{"k":"theirs"}`)})
	require.NoError(t, err)
	eng, err := leaseadapter.New(pool, reg, leaseadapter.Config{})
	require.NoError(t, err)
	d, err := outbox.NewDispatcher(pool, eng, eng, outbox.Config{})
	require.NoError(t, err)
	_, err = d.DispatchOnce(ctx)
	require.NoError(t, err)

	got := rows(t, pool)
	require.Equal(t, "dispatched", got["theirs"].Status)
	require.Nil(t, got["theirs"].RunID, "the run is the other engine's to name")
	require.Equal(t, "dispatched", got["ours"].Status)
	require.NotNil(t, got["ours"].RunID)
	var engines []string
	require.NoError(t, pool.QueryRow(ctx, `SELECT array_agg(engine || ':' || idempotency_key ORDER BY idempotency_key) FROM taskport.run`).Scan(&engines))
	require.Equal(t, []string{"lease:ours", "temporal:theirs"}, engines)
}

// heldEngine's EnqueueMany is entered (reported on entered) and returns
// when its context ends, or with the error sent on fail: an engine call
// that outlives the dispatcher's claim lease.
type heldEngine struct {
	*apptest.RecordingEngine
	entered chan struct{}
	fail    chan error
}

func newHeldEngine(pool *pgxpool.Pool) *heldEngine {
	return &heldEngine{RecordingEngine: apptest.NewRecordingEngine(pool, nil), entered: make(chan struct{}, 1), fail: make(chan error, 1)}
}

func (h *heldEngine) EnqueueMany(ctx context.Context, _ []port.EnqueueItem) ([]port.EnqueueResult, error) {
	h.entered <- struct{}{}
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case err := <-h.fail:
		return nil, err
	}
}

// A dispatcher whose engine call outlives its claim lease has lost the row
// to the next claim: when its call then ends, by a stop or an error, what it
// writes must leave the new claim alone. Before, its hand-back made the row
// due at once (and uncounted) and its backoff made it due after 1s, while
// the second dispatcher's call was still in flight, so a third dispatcher
// carried the row out again beside it.
func TestAStaleClaimLeavesTheNextClaimAlone(t *testing.T) {
	t.Parallel()
	for name, end := range map[string]func(stop context.CancelFunc, first *heldEngine){
		"stopped": func(stop context.CancelFunc, _ *heldEngine) { stop() },
		"erring":  func(_ context.CancelFunc, first *heldEngine) { first.fail <- errors.New("engine timed out") },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			pool := pgtest.NewPool(t)
			write(t, pool, "k.ind", "x")
			dispatcher := func(eng port.TaskEngine) *outbox.Dispatcher {
				d, err := outbox.NewDispatcher(pool, eng, eng.(port.Admin), outbox.Config{})
				require.NoError(t, err)
				return d
			}
			first, second := newHeldEngine(pool), newHeldEngine(pool)
			stopFirst, firstReturned := dispatchInBackground(dispatcher(first))
			defer stopFirst()
			<-first.entered
			backoffPassed(t, pool) // the first claim's lease ends
			stopSecond, secondReturned := dispatchInBackground(dispatcher(second))
			<-second.entered
			claim := func() (c struct {
				Attempts int
				Until    time.Time
			}) {
				require.NoError(t, pool.QueryRow(ctx, `SELECT attempts, next_attempt_at FROM outbox_event`).Scan(&c.Attempts, &c.Until))
				return c
			}
			held := claim()
			require.Equal(t, 2, held.Attempts, "the second dispatcher claimed the row")

			end(stopFirst, first)
			<-firstReturned
			require.Equal(t, held, claim(), "the second claim is left as it was")
			third := apptest.NewRecordingEngine(pool, nil)
			n, err := dispatcher(third).DispatchOnce(ctx)
			require.NoError(t, err)
			require.Zero(t, n, "no other dispatcher takes a row whose claim is in flight")
			require.Empty(t, third.Enqueued())

			stopSecond()
			<-secondReturned
			require.Equal(t, map[string]string{"x": "pending, attempts 1, due true"}, claimState(t, pool),
				"the second claim, stopped, hands the row back")
		})
	}
}

// slowSignals's first Signal returns, successful, only once the server
// says the claim lease of every row has passed: a batch whose first action
// outlives the lease, in an engine that does not heed the call's deadline.
type slowSignals struct {
	*apptest.RecordingEngine
	pool  *pgxpool.Pool
	calls atomic.Int32
}

func (s *slowSignals) Signal(ctx context.Context, topic port.Topic, payload any) (int, error) {
	if s.calls.Add(1) == 1 {
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); <-tick.C {
			var passed bool
			if err := s.pool.QueryRow(context.WithoutCancel(ctx), `SELECT bool_and(next_attempt_at <= now()) FROM outbox_event`).Scan(&passed); err != nil {
				return 0, err
			}
			if passed {
				break
			}
		}
	}
	return s.RecordingEngine.Signal(ctx, topic, payload)
}

// The rows of a batch not yet begun when its claim lease ends are handed
// back, not carried out: another dispatcher may have claimed them by then.
// Before, the dispatcher went on through the batch, carrying out rows that
// were no longer its own.
func TestRowsLeftWhenTheClaimLeaseEndsAreHandedBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		for _, topic := range []port.Topic{"t:first", "t:second"} {
			if _, err := outbox.Write(ctx, tx, outbox.Event{Action: outbox.ActionSignal, Topic: topic, IdempotencyKey: string(topic), BusinessKey: "b"}); err != nil {
				return err
			}
		}
		return nil
	})
	require.NoError(t, err)
	eng := &slowSignals{RecordingEngine: apptest.NewRecordingEngine(pool, nil), pool: pool}
	d, err := outbox.NewDispatcher(pool, eng, eng, outbox.Config{ClaimLease: time.Second})
	require.NoError(t, err)
	n, err := d.DispatchOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	require.Equal(t, []port.Topic{"t:first"}, eng.Signals(), "the second row's lease had ended before it was begun")
	require.Equal(t, map[string]string{"t:first": "dispatched, attempts 1, due true", "t:second": "pending, attempts 0, due true"},
		claimState(t, pool))
}

// An engine call that would outlast the claim lease is cut short there,
// and its rows back off as after any failure: the dispatcher goes on with
// other rows, and no call of it runs on for rows that are no longer its
// own. Before, a hung call held the dispatcher (and, with one dispatcher,
// every row) until Stop.
func TestAnEngineCallEndsWithTheClaimLease(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	write(t, pool, "k.ind", "x")
	eng := &blockingEngine{RecordingEngine: apptest.NewRecordingEngine(pool, nil), entered: make(chan struct{}, 1)}
	d, err := outbox.NewDispatcher(pool, eng, eng, outbox.Config{ClaimLease: time.Second})
	require.NoError(t, err)
	stop, returned := dispatchInBackground(d)
	defer stop()
	<-eng.entered
	select {
	case got := <-returned:
		require.Equal(t, 1, got.n)
		require.ErrorIs(t, got.err, context.DeadlineExceeded)
	case <-time.After(30 * time.Second):
		t.Fatal("the engine call outlived the 1s claim lease by 30s")
	}
	r := rows(t, pool)["x"]
	require.Equal(t, "pending", r.Status)
	require.Equal(t, 1, r.Attempts, "charged: the row backs off")
	require.Contains(t, r.LastErr, "deadline exceeded")
}

// wholeBatchRefusal refuses every batch of more than one item with err as a
// whole, naming no item (as the router's "keys kept being taken by another
// engine" does), and enqueues single items.
type wholeBatchRefusal struct {
	*apptest.RecordingEngine
	err error
}

func (w *wholeBatchRefusal) EnqueueMany(ctx context.Context, items []port.EnqueueItem) ([]port.EnqueueResult, error) {
	if len(items) > 1 {
		return nil, w.err
	}
	return w.RecordingEngine.EnqueueMany(ctx, items)
}

// A batch refused as a whole, for a reason that would settle a row for good
// (its key is another engine's run; its input is invalid) but without
// naming the row, is not taken as every row's answer: each row goes to the
// engine alone. Before, every row of the batch was marked dispatched (with
// no run: the hand-offs were lost) or failed.
func TestABatchRefusedAsAWholeIsEnqueuedRowByRow(t *testing.T) {
	t.Parallel()
	for _, refusal := range []error{
		fmt.Errorf("enqueue batch: keys kept being taken by another engine: %w", port.ErrOtherEngine),
		fmt.Errorf("enqueue batch: %w", port.ErrInvalidInput),
	} {
		t.Run(refusal.Error(), func(t *testing.T) {
			t.Parallel()
			pool := pgtest.NewPool(t)
			write(t, pool, "k.ind", "a")
			write(t, pool, "k.ind", "b")
			eng := &wholeBatchRefusal{RecordingEngine: apptest.NewRecordingEngine(pool, nil), err: refusal}
			d, err := outbox.NewDispatcher(pool, eng, eng, outbox.Config{})
			require.NoError(t, err)
			n, err := d.DispatchOnce(context.Background())
			require.NoError(t, err)
			require.Equal(t, 2, n)
			var keys []string
			for _, e := range eng.Enqueued() {
				keys = append(keys, e.Key)
			}
			require.ElementsMatch(t, []string{"a", "b"}, keys, "each row enqueued")
			for k, r := range rows(t, pool) {
				require.Equal(t, "dispatched", r.Status, k)
				require.NotNil(t, r.RunID, "%s: dispatched with its run", k)
			}
		})
	}
}
