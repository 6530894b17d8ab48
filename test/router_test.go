package test

// The router over both engines (package router, issue 27) on a real
// Postgres and the dev server: routing by owner, new work to the active
// engine, signals to both, the merged listing, the refusals of switch and
// evacuate, and an evacuation of a reachable engine that moves each open
// run once. The rehearsal with an engine lost mid-way is test/model's
// TestEngineSwitch.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/host"
	"github.com/taskport/taskport/internal/runstore"
	"github.com/taskport/taskport/internal/testkit/pgtest"
	"github.com/taskport/taskport/leaseadapter"
	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/retention"
	"github.com/taskport/taskport/router"
	"github.com/taskport/taskport/temporaladapter"
	"github.com/taskport/taskport/test/contract/kinds"
)

// routerWorld is a database, both engines over it and a router, serving.
type routerWorld struct {
	t    *testing.T
	ctx  context.Context
	pool *pgxpool.Pool
	r    *router.Router
}

func newRouterWorld(t *testing.T) *routerWorld {
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	_, err := pool.Exec(ctx, kinds.Schema)
	require.NoError(t, err)
	reg := port.NewRegistry()
	require.NoError(t, kinds.Register(reg, pool, kinds.Definitions(false)...))
	lease, err := leaseadapter.New(pool, reg, leaseadapter.Config{
		LeaseDuration: 3 * time.Second, PollInterval: 100 * time.Millisecond, StopTimeout: 5 * time.Second, Logger: quiet()})
	require.NoError(t, err)
	s := devServer.Get(t)
	temporal, err := temporaladapter.New(s.Client, pool, reg, temporaladapter.Config{
		TaskQueue: scenarioQueue(pool), WorkerStopTimeout: 5 * time.Second, Logger: quiet()})
	require.NoError(t, err)
	r, err := router.New(pool, map[string]router.Engine{"lease": lease, "temporal": temporal},
		router.Config{Refresh: 100 * time.Millisecond, Logger: quiet()})
	require.NoError(t, err)
	require.NoError(t, r.Start(ctx, port.StartOptions{}))
	t.Cleanup(func() { require.NoError(t, r.Stop(context.Background())) })
	return &routerWorld{t: t, ctx: ctx, pool: pool, r: r}
}

// owner reads the engine a run's row names.
func (w *routerWorld) owner(id port.RunID) string {
	var e string
	require.NoError(w.t, w.pool.QueryRow(w.ctx, `SELECT engine FROM taskport.run WHERE id = $1`, id).Scan(&e))
	return e
}

// wait enqueues a Wait run on gate and topic with key.
func (w *routerWorld) wait(key string) port.RunID {
	id, err := w.r.Enqueue(w.ctx, kinds.Wait, kinds.WaitIn{Gate: key, Topic: port.Topic("t-" + key), Timeout: kinds.Duration(time.Hour)},
		port.EnqueueOptions{IdempotencyKey: key, BusinessKey: "b-" + key})
	require.NoError(w.t, err)
	return id
}

// status polls until run id reads want.
func (w *routerWorld) status(id port.RunID, want port.Status) {
	var last port.RunView
	require.Eventually(w.t, func() bool {
		v, err := w.r.Get(w.ctx, id)
		require.NoError(w.t, err)
		last = v
		return v.Status == want
	}, time.Minute, 20*time.Millisecond, "run %s never became %s: %+v", id, want, last)
}

// evacuate switches to engine to and evacuates engine from, requiring that
// no run failed or was skipped, and returns the replacement of each run it
// moved, with its report.
func (w *routerWorld) evacuate(from, to string) (map[port.RunID]port.RunID, router.Report) {
	_, err := w.r.SwitchTo(w.ctx, to, "router-test", "")
	require.NoError(w.t, err)
	rep, err := w.r.Evacuate(w.ctx, from, "router-test")
	require.NoError(w.t, err)
	require.Empty(w.t, rep.Failed)
	require.Empty(w.t, rep.Skipped)
	moved := map[port.RunID]port.RunID{}
	for _, m := range rep.Moved {
		moved[m.ID] = m.To
	}
	return moved, rep
}

func (w *routerWorld) open(key string) {
	require.NoError(w.t, kinds.OpenEffectGate(w.ctx, w.pool, key))
}

func TestRouterRoutesByOwnerAndEnqueuesOnTheActiveEngine(t *testing.T) {
	t.Parallel()
	w := newRouterWorld(t)
	onTemporal := w.wait("a")
	require.Equal(t, "temporal", w.owner(onTemporal), "no switch recorded: the primary is active")
	w.status(onTemporal, port.StatusWaiting)

	s, err := w.r.SwitchTo(w.ctx, "lease", "router-test", "rehearsal")
	require.NoError(t, err)
	require.Equal(t, "lease", s.Engine)
	onLease := w.wait("b")
	require.Equal(t, "lease", w.owner(onLease), "new work goes to the active engine")
	w.status(onLease, port.StatusWaiting)

	// A key a run of the other engine holds names that run.
	again := w.wait("a")
	require.Equal(t, onTemporal, again)
	res, err := w.r.EnqueueMany(w.ctx, []port.EnqueueItem{
		{Kind: kinds.Wait, Input: kinds.WaitIn{Gate: "a", Topic: "t-a", Timeout: kinds.Duration(time.Hour)}, Options: port.EnqueueOptions{IdempotencyKey: "a"}},
		{Kind: kinds.Wait, Input: kinds.WaitIn{Gate: "c", Topic: "t-c", Timeout: kinds.Duration(time.Hour)}, Options: port.EnqueueOptions{IdempotencyKey: "c"}},
	})
	require.NoError(t, err)
	require.Equal(t, port.EnqueueResult{ID: onTemporal}, res[0])
	require.True(t, res[1].Created)
	require.Equal(t, "lease", w.owner(res[1].ID))
	// An invalid item is refused whichever engine holds its key, as Enqueue
	// and each engine's EnqueueMany refuse it, and nothing of the batch is
	// written (port/spec.go, EnqueueMany).
	_, err = w.r.EnqueueMany(w.ctx, []port.EnqueueItem{
		{Kind: kinds.Wait, Input: kinds.WaitIn{Gate: "a\x00"}, Options: port.EnqueueOptions{IdempotencyKey: "a"}},
		{Kind: kinds.Wait, Input: kinds.WaitIn{Gate: "d"}, Options: port.EnqueueOptions{IdempotencyKey: "d"}},
	})
	var ie *port.ItemError
	require.ErrorAs(t, err, &ie)
	require.Equal(t, 0, ie.Index)
	require.ErrorIs(t, err, port.ErrInvalidInput)
	var written bool
	require.NoError(t, w.pool.QueryRow(w.ctx, `SELECT EXISTS (SELECT 1 FROM taskport.run WHERE idempotency_key = 'd')`).Scan(&written))
	require.False(t, written, "a refused batch wrote a run")

	// The listing merges both engines, newest first, and pages across them.
	all, err := w.r.ListRuns(w.ctx, port.RunFilter{})
	require.NoError(t, err)
	require.Equal(t, []port.RunID{res[1].ID, onLease, onTemporal}, ids(all))
	first, err := w.r.ListRuns(w.ctx, port.RunFilter{Limit: 2})
	require.NoError(t, err)
	rest, err := w.r.ListRuns(w.ctx, port.RunFilter{Limit: 2, After: first[1].Cursor})
	require.NoError(t, err)
	require.Equal(t, ids(all), append(ids(first), ids(rest)...))

	// A signal reaches the waiter on either engine; Get and Cancel reach
	// the owner.
	w.open("a")
	n, err := w.r.Signal(w.ctx, "t-a", "go")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	w.status(onTemporal, port.StatusSucceeded)
	w.open("b")
	n, err = w.r.Signal(w.ctx, "t-b", "go")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	w.status(onLease, port.StatusSucceeded)
	require.NoError(t, w.r.Cancel(w.ctx, res[1].ID, "done with it"))
	w.status(res[1].ID, port.StatusCanceled)
	_, err = w.r.Get(w.ctx, "00000000-0000-7000-8000-000000000000")
	require.ErrorIs(t, err, port.ErrNotFound)
}

func TestRouterRefusesBadSwitchesAndEvacuations(t *testing.T) {
	t.Parallel()
	w := newRouterWorld(t)
	switches := func() int {
		var n int
		require.NoError(t, w.pool.QueryRow(w.ctx, `SELECT count(*) FROM taskport.engine_switch`).Scan(&n))
		return n
	}
	_, err := w.r.SwitchTo(w.ctx, "bogus", "me", "")
	var fe *port.FieldError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "engine", fe.Field)
	_, err = w.r.SwitchTo(w.ctx, "temporal", "me", "")
	require.ErrorIs(t, err, router.ErrAlreadyActive, "temporal is the primary, active while no switch is recorded")
	_, err = w.r.SwitchTo(w.ctx, "lease", "", "")
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "by", fe.Field)
	_, err = w.r.Evacuate(w.ctx, "temporal", "me")
	require.ErrorIs(t, err, router.ErrAlreadyActive)
	_, err = w.r.Evacuate(w.ctx, "bogus", "me")
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "from", fe.Field)
	require.Zero(t, switches(), "a refused switch wrote a row")

	_, err = w.r.SwitchTo(w.ctx, "lease", "me", "")
	require.NoError(t, err)
	_, err = w.r.SwitchTo(w.ctx, "lease", "me", "")
	require.ErrorIs(t, err, router.ErrAlreadyActive)
	require.True(t, errors.Is(err, port.ErrInvalidInput))
	require.Equal(t, 1, switches())
}

func TestEvacuateMovesEachOpenRunOnce(t *testing.T) {
	t.Parallel()
	w := newRouterWorld(t)
	waiting := w.wait("w")
	holding, err := w.r.Enqueue(w.ctx, kinds.Hold, kinds.WaitIn{Gate: "h"}, port.EnqueueOptions{IdempotencyKey: "h", BusinessKey: "b-h"})
	require.NoError(t, err)
	later, err := w.r.Enqueue(w.ctx, kinds.Three, kinds.TagIn{Tag: "later"},
		port.EnqueueOptions{IdempotencyKey: "later", AvailableAt: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	done, err := w.r.Enqueue(w.ctx, kinds.Three, kinds.TagIn{Tag: "done"}, port.EnqueueOptions{IdempotencyKey: "done"})
	require.NoError(t, err)
	w.status(waiting, port.StatusWaiting)
	w.status(holding, port.StatusRunning)
	w.status(done, port.StatusSucceeded)

	moved, rep := w.evacuate("temporal", "lease")
	for _, m := range rep.Moved {
		require.True(t, m.Reached, "the dev server is up: the cancel reached it")
	}
	require.Len(t, moved, 3, "the waiting, holding and delayed runs move; the finished one stays")
	for _, old := range []port.RunID{waiting, holding, later} {
		require.Contains(t, moved, old)
		w.status(old, port.StatusCanceled)
		require.Equal(t, "lease", w.owner(moved[old]))
		var to *string
		require.NoError(t, w.pool.QueryRow(w.ctx, `SELECT evacuated_to::text FROM taskport.run WHERE id = $1`, old).Scan(&to))
		require.NotNil(t, to)
		require.Equal(t, string(moved[old]), *to)
	}
	v, err := w.r.Get(w.ctx, moved[waiting])
	require.NoError(t, err)
	require.Equal(t, "b-w", v.BusinessKey, "the business key moves with the run")
	// The delay moves with the run too: its enqueuer asked that nothing of it
	// start before AvailableAt (port/spec.go, Start: delayed).
	var wanted, replaced time.Time
	require.NoError(t, w.pool.QueryRow(w.ctx, `SELECT o.available_at, n.available_at FROM taskport.run o, taskport.run n
WHERE o.id = $1 AND n.id = $2`, later, moved[later]).Scan(&wanted, &replaced))
	require.True(t, replaced.Equal(wanted), "the delayed run's replacement is available at %s, not at %s", replaced, wanted)

	// The moved runs go on on lease from their first step.
	w.open("w")
	_, err = w.r.Signal(w.ctx, "t-w", "go")
	require.NoError(t, err)
	w.status(moved[waiting], port.StatusSucceeded)
	w.open("h")
	w.status(moved[holding], port.StatusSucceeded)

	again, err := w.r.Evacuate(w.ctx, "temporal", "router-test")
	require.NoError(t, err)
	require.Empty(t, again.Moved, "a second evacuation moves nothing")
	var runs int
	require.NoError(t, w.pool.QueryRow(w.ctx, `SELECT count(*) FROM taskport.run`).Scan(&runs))
	require.Equal(t, 7, runs, "four runs and three replacements")
}

// A run an evacuation moved names its replacement (RunView.MovedTo): Get
// and ListRuns read it the same through the router and through the engine
// that owns the old run (the other refuses it as another engine's, and
// does not list it), a replacement not moved reads none, and Result of the
// old run is still ErrCanceled, naming the run the work goes on in. Each
// engine is evacuated once, so that each owns a moved run: temporal's run
// moves to lease, then lease's runs (its own and that replacement) move
// back to temporal.
func TestEvacuatedRunNamesItsReplacement(t *testing.T) {
	t.Parallel()
	w := newRouterWorld(t)
	// listed is run id as ListRuns of a lists it, if it does.
	listed := func(a port.Admin, id port.RunID) (port.RunView, bool) {
		all, err := a.ListRuns(w.ctx, port.RunFilter{Limit: port.MaxRunsPerPage})
		require.NoError(t, err)
		for _, v := range all {
			if v.ID == id {
				return v, true
			}
		}
		return port.RunView{}, false
	}
	// movedTo asserts that every reader reads old as moved to to.
	movedTo := func(old, to port.RunID) {
		got, err := w.r.Get(w.ctx, old)
		require.NoError(t, err)
		require.Equal(t, port.StatusCanceled, got.Status)
		require.Equal(t, to, got.MovedTo, "router Get of %s", old)
		l, ok := listed(w.r, old)
		require.True(t, ok, "the router lists %s", old)
		require.Equal(t, got, l, "the router lists %s as Get reads it", old)
		owner := w.owner(old)
		for name, e := range w.r.Engines() {
			v, err := e.Get(w.ctx, old)
			l, ok := listed(e, old)
			if name != owner {
				require.ErrorIs(t, err, port.ErrOtherEngine, "%s engine's Get of %s's run", name, owner)
				require.False(t, ok, "the %s engine lists %s's run", name, owner)
				continue
			}
			require.NoError(t, err)
			require.Equal(t, got, v, "the %s engine's Get of %s", name, old)
			require.True(t, ok, "the %s engine lists %s", name, old)
			require.Equal(t, got, l, "the %s engine lists %s as Get reads it", name, old)
		}
		for _, e := range []port.TaskEngine{w.r, w.r.Engines()[owner]} {
			_, err = port.Result[any](w.ctx, e, old)
			require.ErrorIs(t, err, port.ErrCanceled, "the old run is canceled")
			require.ErrorContains(t, err, string(to), "Result of %s names the run its work goes on in", old)
		}
	}
	notMoved := func(id port.RunID) {
		v, err := w.r.Get(w.ctx, id)
		require.NoError(t, err)
		require.Empty(t, v.MovedTo, "run %s was not moved", id)
		l, ok := listed(w.r, id)
		require.True(t, ok)
		require.Empty(t, l.MovedTo)
	}

	first := w.wait("first")
	w.status(first, port.StatusWaiting)
	require.Equal(t, "temporal", w.owner(first))
	moved, _ := w.evacuate("temporal", "lease")
	require.Len(t, moved, 1)
	second := moved[first]
	require.Equal(t, "lease", w.owner(second))
	movedTo(first, second)
	notMoved(second)

	onLease := w.wait("lease")
	w.status(onLease, port.StatusWaiting)
	w.status(second, port.StatusWaiting)
	back, _ := w.evacuate("lease", "temporal")
	require.Len(t, back, 2, "the lease run and the replacement it ran")
	third := back[second]
	require.Equal(t, "temporal", w.owner(third))
	movedTo(second, third)
	movedTo(onLease, back[onLease])
	movedTo(first, second) // still its own replacement, not the last
	notMoved(third)
	notMoved(back[onLease])
}

func ids(views []port.RunView) []port.RunID {
	out := make([]port.RunID, len(views))
	for i, v := range views {
		out[i] = v.ID
	}
	return out
}

// EnqueueTx reads the active engine in the caller's transaction, not from
// the router's last read: a router that read temporal a moment ago still
// enqueues on lease right after a switch (another process's), and a switch
// waits for a transaction that enqueued on the engine before it, so that
// its run exists when the switch does (an evacuation after the switch
// finds it).
func TestEnqueueTxFollowsASwitchAtOnce(t *testing.T) {
	t.Parallel()
	w := newRouterWorld(t)
	// A second router over the same database, as another process, that will
	// not read the active engine again for an hour on its own.
	other, err := router.New(w.pool, map[string]router.Engine{"lease": w.r.Engines()["lease"], "temporal": w.r.Engines()["temporal"]},
		router.Config{Refresh: time.Hour, Logger: quiet()})
	require.NoError(t, err)
	wait := func(key string) port.EnqueueItem {
		return port.EnqueueItem{Kind: kinds.Wait, Input: kinds.WaitIn{Gate: key, Topic: port.Topic("t-" + key), Timeout: kinds.Duration(time.Hour)},
			Options: port.EnqueueOptions{IdempotencyKey: key}}
	}
	enqueueTx := func(tx pgx.Tx, key string) port.RunID {
		it := wait(key)
		id, err := other.EnqueueTx(w.ctx, tx, it.Kind, it.Input, it.Options)
		require.NoError(t, err)
		return id
	}
	it := wait("before")
	before, err := other.Enqueue(w.ctx, it.Kind, it.Input, it.Options) // other now holds temporal, the primary, for an hour
	require.NoError(t, err)
	require.Equal(t, "temporal", w.owner(before))

	// A transaction enqueues on temporal and stays open: the switch waits.
	tx, err := w.pool.Begin(w.ctx)
	require.NoError(t, err)
	defer tx.Rollback(w.ctx) //nolint:errcheck // committed below
	inFlight := enqueueTx(tx, "in-flight")
	switched := make(chan error, 1)
	go func() {
		_, err := w.r.SwitchTo(w.ctx, "lease", "router-test", "rehearsal")
		switched <- err
	}()
	var waiting bool
	require.Eventually(t, func() bool {
		require.NoError(t, w.pool.QueryRow(w.ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted)`).Scan(&waiting))
		return waiting
	}, 30*time.Second, 10*time.Millisecond, "the switch waits for the open enqueue")
	require.NoError(t, tx.Commit(w.ctx))
	require.NoError(t, <-switched)
	require.Equal(t, "temporal", w.owner(inFlight), "enqueued before the switch, committed before it")

	// other last read temporal (an hour ago as far as it knows): its next
	// EnqueueTx reads the switch.
	var after port.RunID
	require.NoError(t, pgx.BeginFunc(w.ctx, w.pool, func(tx pgx.Tx) error { after = enqueueTx(tx, "after"); return nil }))
	require.Equal(t, "lease", w.owner(after))
}

// interrupting is an engine whose Cancel, once it took the cancel of run
// at, interrupts the evacuation that sent it (as an operator's Ctrl-C, a
// killed process or a database that went away would, right after step 1
// of docs/operations.md's evacuation).
type interrupting struct {
	router.Engine
	at        port.RunID
	interrupt context.CancelFunc
}

func (e interrupting) Cancel(ctx context.Context, id port.RunID, reason string) error {
	err := e.Engine.Cancel(ctx, id, reason)
	if id == e.at {
		e.interrupt()
	}
	return err
}

// refusing is an active engine that refuses the enqueue under key, as one
// that went away between steps 2 and 3 of docs/operations.md's evacuation
// would: the run is ended on the old engine and not yet replaced.
type refusing struct {
	router.Engine
	key string
}

func (e refusing) Enqueue(ctx context.Context, kind port.Kind, input any, opts port.EnqueueOptions) (port.RunID, error) {
	if opts.IdempotencyKey == e.key {
		return "", errors.New("refused by the test")
	}
	return e.Engine.Enqueue(ctx, kind, input, opts)
}

// evacuateInterruptedAt evacuates temporal to lease, interrupted once the
// temporal engine took the cancel of run at. lease, when not nil, stands
// for w's lease engine (a refusing one).
func (w *routerWorld) evacuateInterruptedAt(at port.RunID, lease router.Engine) router.Report {
	ctx, cancel := context.WithCancel(w.ctx)
	defer cancel()
	engines := w.r.Engines()
	if lease == nil {
		lease = engines["lease"]
	}
	r, err := router.New(w.pool, map[string]router.Engine{"lease": lease,
		"temporal": interrupting{Engine: engines["temporal"], at: at, interrupt: cancel}}, router.Config{Logger: quiet()})
	require.NoError(w.t, err)
	rep, _ := r.Evacuate(ctx, "temporal", "router-test")
	return rep
}

// failed is the runs rep reports failed.
func failed(rep router.Report) []port.RunID {
	var out []port.RunID
	for _, f := range rep.Failed {
		out = append(out, f.ID)
	}
	return out
}

// An evacuation interrupted after the engine took a run's cancel, before
// the run's row was ended and the run moved, reports it failed; the next
// evacuation moves it ("running it again retries those"). The engine may
// have ended the run canceled on that cancel (a waiting run), or the run
// may still be open with its cancel requested (a run in a step body): the
// evacuation's own cancel is not a cancel someone else requested.
func TestEvacuateInterruptedAfterTheCancelIsResumed(t *testing.T) {
	t.Parallel()
	w := newRouterWorld(t)
	waiting := w.wait("w")
	holding, err := w.r.Enqueue(w.ctx, kinds.Hold, kinds.WaitIn{Gate: "h"}, port.EnqueueOptions{IdempotencyKey: "h"})
	require.NoError(t, err)
	w.status(waiting, port.StatusWaiting)
	w.status(holding, port.StatusRunning)
	_, err = w.r.SwitchTo(w.ctx, "lease", "router-test", "")
	require.NoError(t, err)

	require.Contains(t, failed(w.evacuateInterruptedAt(waiting, nil)), waiting)
	rep := w.evacuateInterruptedAt(holding, nil)
	require.Contains(t, failed(rep), holding)

	rep, err = w.r.Evacuate(w.ctx, "temporal", "router-test")
	require.NoError(t, err)
	require.Empty(t, rep.Failed)
	moved := map[port.RunID]port.RunID{}
	for _, m := range rep.Moved {
		moved[m.ID] = m.To
	}
	for _, old := range []port.RunID{waiting, holding} {
		var to *string
		require.NoError(t, w.pool.QueryRow(w.ctx, `SELECT evacuated_to::text FROM taskport.run WHERE id = $1`, old).Scan(&to))
		require.NotNil(t, to, "run %s was never moved; reports: %+v", old, rep)
		require.Equal(t, "lease", w.owner(port.RunID(*to)))
	}
	// The moved runs go on on lease.
	w.open("w")
	_, err = w.r.Signal(w.ctx, "t-w", "go")
	require.NoError(t, err)
	w.open("h")
	for _, old := range []port.RunID{waiting, holding} {
		var to string
		require.NoError(t, w.pool.QueryRow(w.ctx, `SELECT evacuated_to::text FROM taskport.run WHERE id = $1`, old).Scan(&to))
		w.status(port.RunID(to), port.StatusSucceeded)
	}
}

// interruptedEvacuation leaves on temporal the two runs an interrupted
// evacuation to lease leaves, both canceled and neither open: ended, its
// row ended and its replacement's enqueue refused (evacuated_at set,
// evacuated_to NULL), and canceled, ended canceled by the engine on the
// evacuation's cancel before the evacuation was interrupted (evacuated_at
// NULL). Beside them, withdrawn is a run canceled before, for its own
// reason: nothing to move.
func (w *routerWorld) interruptedEvacuation() (ended, canceled, withdrawn port.RunID) {
	ended, canceled, withdrawn = w.wait("ended"), w.wait("canceled"), w.wait("withdrawn")
	for _, id := range []port.RunID{ended, canceled, withdrawn} {
		w.status(id, port.StatusWaiting)
	}
	require.NoError(w.t, w.r.Cancel(w.ctx, withdrawn, "withdrawn"))
	w.status(withdrawn, port.StatusCanceled)
	_, err := w.r.SwitchTo(w.ctx, "lease", "router-test", "")
	require.NoError(w.t, err)
	rep := w.evacuateInterruptedAt(canceled, refusing{Engine: w.r.Engines()["lease"], key: runstore.EvacuationKey(ended)})
	require.ElementsMatch(w.t, []port.RunID{ended, canceled}, failed(rep))
	for _, want := range []struct {
		id                 port.RunID
		evacuated, movedTo bool
	}{{ended, true, false}, {canceled, false, false}} {
		var status string
		var evacuated, movedTo bool
		require.NoError(w.t, w.pool.QueryRow(w.ctx, `SELECT status, evacuated_at IS NOT NULL, evacuated_to IS NOT NULL
FROM taskport.run WHERE id = $1`, want.id).Scan(&status, &evacuated, &movedTo))
		require.Equal(w.t, "canceled", status, "run %s", want.id)
		require.Equal(w.t, []bool{want.evacuated, want.movedTo}, []bool{evacuated, movedTo}, "run %s: evacuated_at set, evacuated_to set", want.id)
	}
	return ended, canceled, withdrawn
}

// The runs an interrupted evacuation left are no longer open: status
// reports them per engine (table, --json and /admin's overview share its
// JSON) until an evacuation moves them, so that the old engine's 0 open
// runs does not read as an evacuation done.
func TestStatusShowsTheRunsAnInterruptedEvacuationLeft(t *testing.T) {
	t.Parallel()
	w := newRouterWorld(t)
	w.interruptedEvacuation()
	// left is what status reports per engine: open runs, and runs left to
	// move. (Its JSON, which /admin shares, is cmd/taskport's and admin's
	// tests'.)
	left := func() (open map[string]int, unmoved []router.Unmoved) {
		st, err := w.r.Status(w.ctx)
		require.NoError(t, err)
		open = map[string]int{}
		for _, o := range st.Open {
			open[o.Engine] += o.Count
		}
		return open, st.Unmoved
	}
	open, unmoved := left()
	require.Zero(t, open["temporal"], "nothing of temporal is open")
	require.Equal(t, []router.Unmoved{{Engine: "temporal", Count: 2}}, unmoved, "what tells the evacuation is not done")

	rep, err := w.r.Evacuate(w.ctx, "temporal", "router-test")
	require.NoError(t, err)
	require.Len(t, rep.Moved, 2)
	open, unmoved = left()
	require.Equal(t, map[string]int{"lease": 2}, open, "the replacements")
	require.Empty(t, unmoved)
}

// The retention cleaner keeps the runs an interrupted evacuation left,
// however old, until an evacuation moves them: they are canceled, but
// their work is still to be done, and their row is all that remembers it.
// Their lag does not count them.
func TestRetentionKeepsTheRunsAnInterruptedEvacuationLeft(t *testing.T) {
	t.Parallel()
	w := newRouterWorld(t)
	ended, canceled, withdrawn := w.interruptedEvacuation()
	pruners, err := host.EnginePruners(w.r)
	require.NoError(t, err)
	// Every canceled run is past an age of 0; succeeded and failed ones
	// are kept.
	policy := retention.Policy{Completed: -1, Canceled: 0, Failed: -1}
	prune := func() {
		for _, p := range pruners {
			_, err := p.Prune(w.ctx, policy, 1000)
			require.NoError(t, err)
			lag, err := p.Lag(w.ctx, policy)
			require.NoError(t, err)
			require.Zero(t, lag[runstore.TableRun], "what a prune keeps is no backlog")
		}
	}
	kept := func(id port.RunID) bool {
		var n int
		require.NoError(t, w.pool.QueryRow(w.ctx, `SELECT count(*) FROM taskport.run WHERE id = $1`, id).Scan(&n))
		return n == 1
	}
	prune()
	require.False(t, kept(withdrawn), "a canceled run is pruned")
	require.True(t, kept(ended), "the run ended and not replaced (%s) was pruned", ended)
	require.True(t, kept(canceled), "the run canceled by the evacuation's cancel (%s) was pruned", canceled)

	rep, err := w.r.Evacuate(w.ctx, "temporal", "router-test")
	require.NoError(t, err)
	require.Len(t, rep.Moved, 2)
	require.ElementsMatch(t, []port.RunID{ended, canceled}, []port.RunID{rep.Moved[0].ID, rep.Moved[1].ID})
	prune()
	require.False(t, kept(ended), "moved, its row goes with the canceled runs")
	require.False(t, kept(canceled), "moved, its row goes with the canceled runs")
}

// A retry is a new run: after a switch it starts on the active engine, as a
// decision's retry (through the outbox) does, whichever engine the failed
// run belongs to; a retry recorded before the switch is still the one every
// later Retry of that run returns.
func TestRouterRetriesOnTheActiveEngine(t *testing.T) {
	t.Parallel()
	w := newRouterWorld(t)
	failed := func(key string) port.RunID {
		id, err := w.r.Enqueue(w.ctx, kinds.NonRetry, kinds.TagIn{Tag: key}, port.EnqueueOptions{IdempotencyKey: key})
		require.NoError(t, err)
		w.status(id, port.StatusFailed)
		return id
	}
	retry := func(id port.RunID) port.RunID {
		next, err := w.r.Retry(w.ctx, id)
		require.NoError(t, err)
		return next
	}
	before, after := failed("retried-before"), failed("retried-after")
	require.Equal(t, "temporal", w.owner(after))
	early := retry(before)
	require.Equal(t, "temporal", w.owner(early))

	_, err := w.r.SwitchTo(w.ctx, "lease", "router-test", "retry after a switch")
	require.NoError(t, err)
	require.Equal(t, early, retry(before), "a retry recorded before the switch is the run's retry")
	next := retry(after)
	require.Equal(t, "lease", w.owner(next), "the retry of a temporal run started on the engine switched away from")
	require.Equal(t, next, retry(after), "a repeated retry returned another run")
	w.status(next, port.StatusFailed) // the lease engine ran it (its step fails again)
	w.status(after, port.StatusFailed)
}
