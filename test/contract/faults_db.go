package contract

// Database-level faults (issue 6): the engine's Postgres connections cut by
// a TCP proxy, Postgres restarted or killed mid-run, and one outbox row
// dispatched more than once. Every scenario asserts on business rows, read
// over a pool of its own that the fault does not touch.

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/internal/testkit/pgcluster"
	"github.com/taskport/taskport/internal/testkit/pgtest"
	"github.com/taskport/taskport/migrations"
	"github.com/taskport/taskport/outbox"
	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/test/contract/kinds"
)

// dbFaults are the DB-level fault scenarios; RunFaults runs them beside the
// process faults. The proxy and cluster ones open the engine (w.engine.Open)
// over a pool of their own, which the fault can reach and the assertions
// cannot.
var dbFaults = []scenario{
	{"outbox_row_dispatched_twice", outboxDispatchedTwice},
	{"pg_connections_cut_by_proxy", proxyCut},
	{"pg_restart_mid_run", func(w *world) { clusterFault(w, false) }},
	{"pg_kill9_mid_run", func(w *world) { clusterFault(w, true) }},
}

// The fault kinds' business effect: one row per (run, step label), written
// by the step body with ON CONFLICT DO NOTHING. A step body is at least once
// (ADR (b)): when a fault breaks the commit of a step's result, the engine
// runs the step again, and contract_effect.executions counts that; the
// business unique key absorbs it, so contract_applied is exactly once.
const appliedTable = `
CREATE TABLE contract_applied (
    run_id     text        NOT NULL,
    label      text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (run_id, label)
);`

// faultEffects are the step bodies of the fault runs, over the business
// pool (never the engine's): the suite's, with ct.effect bound to apply.
type faultEffects struct{ kinds.Bodies }

// apply counts an execution, then applies the business effect once.
func (s faultEffects) apply(ctx context.Context, in kinds.EffectIn) (int, error) {
	n, err := s.Record(ctx, in.Label, in.Note)
	if err != nil {
		return 0, err
	}
	run, err := kinds.RunOf(ctx)
	if err != nil {
		return 0, err
	}
	if _, err := s.Pool.Exec(ctx, `INSERT INTO contract_applied (run_id, label) VALUES ($1, $2) ON CONFLICT DO NOTHING`, string(run), in.Label); err != nil {
		return 0, fmt.Errorf("apply %s: %w", in.Label, err)
	}
	return n, nil
}

// faultRetry outlasts an outage of a few seconds: a DB fault fails step
// attempts (the body's own writes, a lost lease) without the run being at
// fault.
var faultRetry = port.RetryPolicy{MaxAttempts: 25, InitialInterval: 50 * time.Millisecond, MaxInterval: 500 * time.Millisecond, BackoffCoefficient: 2}

// faultKinds are the suite's three-step, wait and hold kinds (a DB-checked
// wait; a long step that heartbeats until its gate opens, then one more),
// with a retry policy that outlasts the fault.
func faultKinds() []port.Definition {
	var out []port.Definition
	for _, d := range kinds.Definitions(false) {
		if d.Kind == "ct.three" || d.Kind == "ct.wait" || d.Kind == "ct.hold" {
			d.Retry = faultRetry
			out = append(out, d)
		}
	}
	return out
}

func faultRegistry(t *testing.T, pool *pgxpool.Pool) *port.Registry {
	t.Helper()
	reg := port.NewRegistry()
	s := faultEffects{kinds.Bodies{Pool: pool}}
	require.NoError(t, reg.RegisterActivity(port.Bind(kinds.Effect, s.apply), port.Bind(kinds.Gate, s.Gate), port.Bind(kinds.HoldStep, s.Hold)))
	require.NoError(t, reg.Register(faultKinds()...))
	return reg
}

// createFaultTables adds the fault tables to a migrated database, and the
// suite's side tables when it is not a scenario database (which has them).
func createFaultTables(t *testing.T, pool *pgxpool.Pool, withSide bool) {
	t.Helper()
	ddl := appliedTable
	if withSide {
		ddl = kinds.Schema + ddl
	}
	_, err := pool.Exec(bg, ddl)
	require.NoError(t, err)
}

// workload is the set of runs a DB fault lands on: some mid-step, some
// waiting, some between short steps.
type workload struct {
	three, waits, holds []string // idempotency keys
	ids                 map[string]port.RunID
}

func newWorkload(three, waits, holds int) *workload {
	wl := &workload{ids: map[string]port.RunID{}}
	for i := range three {
		wl.three = append(wl.three, fmt.Sprintf("three-%02d", i))
	}
	for i := range waits {
		wl.waits = append(wl.waits, fmt.Sprintf("wait-%02d", i))
	}
	for i := range holds {
		wl.holds = append(wl.holds, fmt.Sprintf("hold-%02d", i))
	}
	return wl
}

func faultWait(key string) kinds.WaitIn {
	return kinds.WaitIn{Gate: "gate:" + key, Topic: port.Topic("ct:" + key), Timeout: kinds.Duration(250 * time.Millisecond)}
}

// enqueueLong enqueues the waits and the long steps.
func (wl *workload) enqueueLong(w *world, e port.TaskEngine) {
	w.t.Helper()
	for _, k := range wl.waits {
		wl.ids[k] = w.enqueue(e, "ct.wait", faultWait(k), k)
	}
	for _, k := range wl.holds {
		wl.ids[k] = w.enqueue(e, "ct.hold", faultWait(k), k)
	}
}

// enqueueShort enqueues the three-step runs, right before a fault so that
// it lands between their steps.
func (wl *workload) enqueueShort(w *world, e port.TaskEngine) {
	w.t.Helper()
	for _, k := range wl.three {
		wl.ids[k] = w.enqueue(e, "ct.three", kinds.TagIn{Tag: k}, k)
	}
}

// snapshot logs where the runs stand as a fault hits.
func (wl *workload) snapshot(w *world) {
	w.t.Helper()
	var applied, holding, waiting int
	require.NoError(w.t, w.pool.QueryRow(bg, `
SELECT (SELECT count(*) FROM contract_applied),
       (SELECT count(*) FROM contract_effect WHERE label = 'hold:started'),
       (SELECT count(*) FROM taskport.waiter)`).Scan(&applied, &holding, &waiting))
	w.t.Logf("at the fault: %d runs enqueued, %d business effects applied, %d long steps in flight, %d runs waiting",
		len(wl.ids), applied, holding, waiting)
}

// inFlight waits until every hold run is inside its long step and every
// wait run has checked its gate at least once, so the fault lands on runs
// mid-step and waiting.
func (wl *workload) inFlight(w *world) {
	w.t.Helper()
	for _, k := range wl.holds {
		w.waitEffect(wl.ids[k], "hold:started")
	}
	for _, k := range wl.waits {
		require.Eventuallyf(w.t, func() bool {
			var n int
			err := w.pool.QueryRow(bg, `SELECT count(*) FROM taskport.waiter WHERE run_id = $1`, string(wl.ids[k])).Scan(&n)
			return err == nil && n > 0
		}, waitFor, pollEvery, "run %s never waited", k)
	}
}

// openGates opens every wait's and long step's gate: the business truth
// changes, over the business pool.
func (wl *workload) openGates(w *world) {
	w.t.Helper()
	for _, k := range slices.Concat(wl.waits, wl.holds) {
		w.openGate(faultWait(k).Gate)
	}
}

// hint sends the wake-up hints; one lost to a fault is covered by the DB
// check after the wait's timeout.
func (wl *workload) hint(e port.TaskEngine) {
	for _, k := range wl.waits {
		_, _ = e.Signal(bg, faultWait(k).Topic, nil) // a hint only: a lost one costs one timeout
	}
}

// want is the business effect each run must have applied exactly once.
func (wl *workload) want() map[string][]string {
	out := map[string][]string{}
	for _, k := range wl.three {
		out[k] = []string{"s1", "s2", "s3"}
	}
	for _, k := range wl.waits {
		out[k] = []string{"after"}
	}
	for _, k := range wl.holds {
		out[k] = []string{"after"}
	}
	return out
}

// applied reads the business effects by idempotency key.
func (wl *workload) applied(w *world) map[string][]string {
	w.t.Helper()
	rows, err := w.pool.Query(bg, `
SELECT r.idempotency_key, a.label FROM contract_applied a JOIN taskport.run r ON r.id::text = a.run_id
ORDER BY 1, 2`)
	require.NoError(w.t, err)
	out := map[string][]string{}
	var key, label string
	_, err = pgx.ForEachRow(rows, []any{&key, &label}, func() error { out[key] = append(out[key], label); return nil })
	require.NoError(w.t, err)
	return out
}

// check waits until every run has applied its effects, then checks the
// business truth: one run per key, each effect once, nothing extra, every run
// succeeded; and logs how many step bodies ran more than once. A failed check
// is an anomaly (world.expect), counted in soak mode.
func (wl *workload) check(w *world, e port.TaskEngine) {
	w.t.Helper()
	want := wl.want()
	complete := func(got map[string][]string) bool {
		for k, labels := range want {
			if !slices.Equal(got[k], labels) {
				return false
			}
		}
		return true
	}
	got := wl.applied(w)
	for deadline := time.Now().Add(waitFor); !complete(got) && time.Now().Before(deadline); got = wl.applied(w) {
		<-time.After(100 * time.Millisecond) // polling the business tables with a deadline
	}
	var missing, extra []string
	for k, labels := range want {
		if !slices.Equal(got[k], labels) {
			missing = append(missing, fmt.Sprintf("%s: %v, want %v", k, got[k], labels))
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			extra = append(extra, k)
		}
	}
	w.expect(len(missing) == 0, "lost or incomplete runs (business effects by key): %v", missing)
	w.expect(len(extra) == 0, "effects from runs nobody enqueued: %v", extra)

	var runs, keys int
	require.NoError(w.t, w.pool.QueryRow(bg, `SELECT count(*), count(DISTINCT (kind, idempotency_key)) FROM taskport.run`).Scan(&runs, &keys))
	w.expect(runs == len(want) && keys == runs, "taskport.run holds %d runs for %d keys, want one run per each of the %d enqueued keys", runs, keys, len(want))
	for k, id := range wl.ids {
		// The run view is a projection, updated just after the last step.
		v := w.waitStatus(e, id, port.StatusSucceeded, port.StatusFailed, port.StatusCanceled)
		w.expect(v.Status == port.StatusSucceeded, "run %s ended %s, want succeeded (last error %q)", k, v.Status, v.LastError)
	}

	var bodies, reran, maxExec int
	require.NoError(w.t, w.pool.QueryRow(bg, `
SELECT coalesce(sum(executions), 0), count(*) FILTER (WHERE executions > 1), coalesce(max(executions), 0)
FROM contract_effect WHERE label IN ('s1', 's2', 's3', 'after', 'hold:finished')`).Scan(&bodies, &reran, &maxExec))
	effects := 0
	for _, l := range want {
		effects += len(l)
	}
	w.expect(bodies >= effects, "%d step body executions for %d applied effects", bodies, effects)
	w.t.Logf("checked: %d runs (one per key), %d business effects each applied once; step body executions %d "+
		"(%d step(s) ran more than once, max %d: at-least-once bodies absorbed by the business unique key)",
		runs, effects, bodies, reran, maxExec)
}

// proxyCut puts a toxiproxy between the engine's pool and Postgres and cuts
// it three ways mid-run: the proxy disabled (every connection closed, new
// ones refused), a reset_peer toxic (connections reset as soon as they send),
// and a latency toxic. Step bodies and assertions use a direct pool.
func proxyCut(w *world) {
	t := w.t
	createFaultTables(t, w.pool, false)
	direct := w.pool.Config().ConnConfig
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	upstream := net.JoinHostPort(direct.Host, strconv.Itoa(int(direct.Port)))
	proxy := toxiproxy.NewProxy(srv, "postgres", "127.0.0.1:0", upstream)
	require.NoError(t, proxy.Start())
	t.Cleanup(proxy.Stop)
	cfg := w.pool.Config()
	host, listenPort, err := net.SplitHostPort(proxy.Listen)
	require.NoError(t, err)
	p, err := strconv.ParseUint(listenPort, 10, 16)
	require.NoError(t, err)
	cfg.ConnConfig.Host, cfg.ConnConfig.Port = host, uint16(p)
	enginePool, err := pgxpool.NewWithConfig(bg, cfg)
	require.NoError(t, err)
	t.Cleanup(enginePool.Close)
	w.factory = w.engine.Open(t, enginePool)
	t.Logf("engine pool through toxiproxy %s -> %s; step bodies and assertions direct", proxy.Listen, upstream)

	e := w.start(faultRegistry(t, w.pool), port.StartOptions{Concurrency: 8})
	wl := newWorkload(12, 4, 4)
	wl.enqueueLong(w, e)
	wl.inFlight(w)
	wl.enqueueShort(w, e)
	wl.snapshot(w)
	began := time.Now()
	since := func() string { return time.Since(began).Round(time.Millisecond).String() }

	// Cut 1: the proxy goes away.
	proxy.Stop()
	t.Logf("injected at +%s: proxy disabled (engine connections closed, new ones refused)", since())
	// An enqueue while the engine cannot reach Postgres fails or lands; the
	// caller (the outbox dispatcher) retries with the same key either way.
	ctx, cancel := context.WithTimeout(bg, time.Second)
	_, duringErr := e.Enqueue(ctx, "ct.three", kinds.TagIn{Tag: "during-cut"}, port.EnqueueOptions{IdempotencyKey: "three-during-cut"})
	cancel()
	outcome := "landed"
	if duringErr != nil {
		outcome = "failed: " + duringErr.Error()
	}
	t.Logf("enqueue of three-during-cut during the cut %s", outcome)
	outage(1500 * time.Millisecond)
	require.NoError(t, proxy.Start())
	t.Logf("restored at +%s: proxy enabled", since())
	wl.enqueueRetrying(w, e, "three-during-cut")

	// Cut 2: every connection is reset as soon as it sends.
	progress(w, e, wl)
	_, err = proxy.Toxics.AddToxicJson(strings.NewReader(`{"name":"reset","type":"reset_peer","stream":"upstream","attributes":{"timeout":0}}`))
	require.NoError(t, err)
	t.Logf("injected at +%s: reset_peer toxic (TCP RST on the first byte of every engine connection)", since())
	outage(time.Second)
	require.NoError(t, proxy.Toxics.RemoveToxic(bg, "reset"))
	t.Logf("restored at +%s: reset_peer removed", since())

	// Cut 3: slow, not broken.
	progress(w, e, wl)
	_, err = proxy.Toxics.AddToxicJson(strings.NewReader(`{"name":"slow","type":"latency","stream":"downstream","attributes":{"latency":400,"jitter":100}}`))
	require.NoError(t, err)
	t.Logf("injected at +%s: latency toxic 400±100ms on every reply to the engine", since())
	wl.openGates(w)
	outage(1500 * time.Millisecond)
	require.NoError(t, proxy.Toxics.RemoveToxic(bg, "slow"))
	t.Logf("restored at +%s: latency removed", since())
	wl.hint(e)
	wl.check(w, e)
}

// outage holds a fault for d: the fault's length is the point here, nothing
// is being waited for.
func outage(d time.Duration) { <-time.After(d) }

// enqueueRetrying enqueues a three-step run for key until Enqueue
// succeeds: right after a fault it may meet a connection the fault broke,
// and the caller retries with the same key, as the outbox does.
func (wl *workload) enqueueRetrying(w *world, e port.TaskEngine, key string) {
	w.t.Helper()
	require.Eventuallyf(w.t, func() bool {
		id, err := e.Enqueue(bg, "ct.three", kinds.TagIn{Tag: key}, port.EnqueueOptions{IdempotencyKey: key})
		wl.ids[key] = id
		return err == nil
	}, waitFor, pollEvery, "enqueue %s never succeeded after the fault", key)
	wl.three = append(wl.three, key)
}

// progress enqueues a fresh three-step run (checked with the rest) and
// waits for its last effect, so the next fault hits a working engine, not
// one still recovering.
func progress(w *world, e port.TaskEngine, wl *workload) {
	w.t.Helper()
	key := fmt.Sprintf("probe-%02d", len(wl.three))
	wl.enqueueRetrying(w, e, key)
	require.Eventuallyf(w.t, func() bool {
		var n int
		err := w.pool.QueryRow(bg, `SELECT count(*) FROM contract_applied WHERE run_id = $1 AND label = 's3'`, string(wl.ids[key])).Scan(&n)
		return err == nil && n == 1
	}, waitFor, pollEvery, "no run finished after the fault was lifted")
}

// clusterFault runs the workload on a private cluster and restarts Postgres
// under it (fast shutdown, or SIGKILL then start: crash recovery from WAL).
// The engine has its own pool, the step bodies and the test another, both
// on the cluster, so both see the outage.
func clusterFault(w *world, kill bool) {
	t := w.t
	c := pgcluster.New(t)
	ctx, cancel := context.WithTimeout(bg, time.Minute)
	defer cancel()
	biz := pgtest.Connect(t, c.URL())
	require.NoError(t, migrations.Up(ctx, biz))
	createFaultTables(t, biz, true)
	w.pool = biz
	w.factory = w.engine.Open(t, pgtest.Connect(t, c.URL()))

	e := w.start(faultRegistry(t, w.pool), port.StartOptions{Concurrency: 8})
	wl := newWorkload(12, 4, 4)
	wl.enqueueLong(w, e)
	wl.inFlight(w)
	wl.enqueueShort(w, e)
	wl.snapshot(w)
	began := time.Now()
	if kill {
		require.NoError(t, c.Kill())
		t.Logf("injected: postgres (port %d) killed with SIGKILL, runs in flight", c.Port)
		require.NoError(t, c.Start())
		t.Logf("restored after %s: postgres started, crash recovery done", time.Since(began).Round(time.Millisecond))
	} else {
		require.NoError(t, c.Restart())
		t.Logf("injected: postgres (port %d) restarted (fast shutdown) in %s, runs in flight", c.Port, time.Since(began).Round(time.Millisecond))
	}
	progress(w, e, wl)
	wl.openGates(w)
	wl.hint(e)
	wl.check(w, e)
}

// stallingEngine holds every EnqueueMany (the dispatcher's enqueue) of the
// real engine it wraps until the test lets it go, so a second dispatcher can
// claim the same outbox row meanwhile (as it does once a stalled
// dispatcher's claim lease has run out).
type stallingEngine struct {
	port.TaskEngine
	entered chan<- struct{}
	release <-chan struct{}
}

func (s stallingEngine) EnqueueMany(ctx context.Context, items []port.EnqueueItem) ([]port.EnqueueResult, error) {
	s.entered <- struct{}{}
	select {
	case <-s.release:
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
	return s.TaskEngine.EnqueueMany(ctx, items)
}

// outboxDispatchedTwice: one outbox row is enqueued three times: by two
// dispatchers on two workers racing on it (the first stalled inside EnqueueMany
// past its claim lease), then once more after the row was put back to
// pending, as a crash between Enqueue and the "dispatched" update leaves it.
// The engine's idempotency on the row's key must absorb all of it: one run
// in taskport.run, each step's side effect once.
func outboxDispatchedTwice(w *world) {
	workers := []port.TaskEngine{
		w.start(registry(w.t, w.pool, kinds.Definitions(false)...), port.StartOptions{}),
		w.start(registry(w.t, w.pool, kinds.Definitions(false)...), port.StartOptions{}),
	}
	const kind, key = port.Kind("ct.three"), "plan:outbox-1:ct.three"

	var inserted bool
	require.NoError(w.t, pgx.BeginFunc(bg, w.pool, func(tx pgx.Tx) error {
		var err error
		inserted, err = outbox.Write(bg, tx, outbox.Event{Kind: kind, IdempotencyKey: key, BusinessKey: "outbox-1", Payload: kinds.TagIn{Tag: "once"}})
		return err
	}))
	require.True(w.t, inserted)
	var rowID [16]byte
	require.NoError(w.t, w.pool.QueryRow(bg, `SELECT id FROM outbox_event WHERE kind = $1 AND idempotency_key = $2`, kind, key).Scan(&rowID))

	release := make(chan struct{})
	var wg sync.WaitGroup
	claimed := make([]int, len(workers))
	errs := make([]error, len(workers))
	for i, e := range workers {
		entered := make(chan struct{}, 1)
		d, err := outbox.NewDispatcher(w.pool, stallingEngine{TaskEngine: e, entered: entered, release: release}, e.(port.Admin), outbox.Config{})
		require.NoError(w.t, err)
		wg.Go(func() { claimed[i], errs[i] = d.DispatchOnce(bg) })
		<-entered // dispatcher i claimed the row and is inside EnqueueMany
		// Its claim lease runs out: the row is due again for the next one.
		_, err = w.pool.Exec(bg, `UPDATE outbox_event SET next_attempt_at = now() WHERE id = $1`, rowID)
		require.NoError(w.t, err)
	}
	close(release) // both EnqueueMany calls reach their engines at once
	wg.Wait()
	for i := range workers {
		require.NoError(w.t, errs[i], "dispatcher %d", i)
		require.Equal(w.t, 1, claimed[i], "dispatcher %d claimed the row", i)
	}
	w.t.Logf("injected: outbox row %s/%s claimed and enqueued concurrently by 2 dispatchers on 2 workers", kind, key)

	var status, runID string
	require.NoError(w.t, w.pool.QueryRow(bg, `SELECT status, run_id::text FROM outbox_event WHERE id = $1`, rowID).Scan(&status, &runID))
	require.Equal(w.t, "dispatched", status)

	// A crash between Enqueue and the mark: the row is pending again and is
	// dispatched once more.
	_, err := w.pool.Exec(bg, `UPDATE outbox_event SET status = 'pending', run_id = NULL, dispatched_at = NULL, next_attempt_at = now() WHERE id = $1`, rowID)
	require.NoError(w.t, err)
	again, err := outbox.NewDispatcher(w.pool, workers[0], workers[0].(port.Admin), outbox.Config{})
	require.NoError(w.t, err)
	n, err := again.DispatchOnce(bg)
	require.NoError(w.t, err)
	require.Equal(w.t, 1, n)
	var runAgain string
	require.NoError(w.t, w.pool.QueryRow(bg, `SELECT status, run_id::text FROM outbox_event WHERE id = $1`, rowID).Scan(&status, &runAgain))
	require.Equal(w.t, "dispatched", status)
	require.Equal(w.t, runID, runAgain, "the re-dispatch found the same run")
	w.t.Logf("injected: row reset to pending after dispatch (crash before the mark) and dispatched again: 3 Enqueue calls in all")

	id := port.RunID(runID)
	w.waitStatus(workers[0], id, port.StatusSucceeded)
	// A later run finishing on the same workers shows a duplicate had every
	// chance to run.
	probe := w.enqueue(workers[1], "ct.three", kinds.TagIn{}, "probe")
	w.waitStatus(workers[1], probe, port.StatusSucceeded)

	var runs int
	require.NoError(w.t, w.pool.QueryRow(bg, `SELECT count(*) FROM taskport.run WHERE kind = $1 AND idempotency_key = $2`, kind, key).Scan(&runs))
	require.Equal(w.t, 1, runs, "one run for the outbox row's key")
	require.Equal(w.t, 2, w.runRows(), "the outbox run and the probe, nothing else")
	var effects int
	require.NoError(w.t, w.pool.QueryRow(bg, `SELECT count(*) FROM contract_effect WHERE run_id <> $1`, string(probe)).Scan(&effects))
	require.Equal(w.t, 3, effects, "no effect from any other run")
	got := w.effects(id)
	require.Equal(w.t, map[string]int{"s1": 1, "s2": 1, "s3": 1}, got, "each step's side effect once")
	w.t.Logf("checked: runs for the key=%d, runs in all=%d (with the probe), effects=%v", runs, w.runRows(), got)
}
