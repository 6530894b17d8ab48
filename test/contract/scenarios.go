package contract

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/internal/startstop"
	"github.com/taskport/taskport/port"
)

type scenario struct {
	name string
	run  func(w *world)
}

var scenarios = []scenario{
	{"idempotent_enqueue", idempotentEnqueue},
	{"retention_frees_pruned_key", retentionFreesPrunedKey},
	{"available_at", availableAt},
	{"step_memoization_across_restart", memoization},
	{"step_renamed_in_same_version_fails_loudly", renamedStep},
	{"step_name_reused_is_refused", reusedStep},
	{"early_signal", earlySignal},
	{"lost_signal_timeout_and_db_check", lostSignal},
	{"signal_wakes_waiter", signalWakes},
	{"signal_nobody_waits", signalNobody},
	{"cancel_before_start", cancelBeforeStart},
	{"cancel_during_step", cancelDuringStep},
	{"cancel_while_waiting", cancelWhileWaiting},
	{"retry_limit_dead_letter", retryLimit},
	{"non_retryable_fails_at_once", nonRetryable},
	{"version_upgrade", versionUpgrade},
	{"get_unknown_run", getUnknown},
	{"bad_input_rejected_nothing_written", badInput},
	{"superseded_run_cannot_take_operation_back", supersededRunCannotTakeOver},
	{"lifecycle_restart", lifecycle},
}

var bg = context.Background()

func (w *world) effects(id port.RunID) map[string]int {
	w.t.Helper()
	rows, err := w.pool.Query(bg, `SELECT label, executions FROM contract_effect WHERE run_id = $1`, string(id))
	require.NoError(w.t, err)
	out := map[string]int{}
	var label string
	var n int
	_, err = pgx.ForEachRow(rows, []any{&label, &n}, func() error { out[label] = n; return nil })
	require.NoError(w.t, err)
	return out
}

func (w *world) waitEffect(id port.RunID, label string) {
	w.t.Helper()
	require.Eventuallyf(w.t, func() bool { return w.effects(id)[label] > 0 }, waitFor, pollEvery, "run %s never recorded %q", id, label)
}

func (w *world) openGate(key string) {
	w.t.Helper()
	_, err := w.pool.Exec(bg, `INSERT INTO contract_gate (key) VALUES ($1) ON CONFLICT DO NOTHING`, key)
	require.NoError(w.t, err)
}

func (w *world) runRows() int {
	w.t.Helper()
	var n int
	require.NoError(w.t, w.pool.QueryRow(bg, `SELECT count(*) FROM taskport.run`).Scan(&n))
	return n
}

func (w *world) enqueue(e port.TaskEngine, kind port.Kind, in any, key string) port.RunID {
	w.t.Helper()
	id, err := e.Enqueue(bg, kind, in, port.EnqueueOptions{IdempotencyKey: key})
	require.NoError(w.t, err)
	return id
}

func longWait(gate string) waitIn {
	return waitIn{Gate: gate, Topic: port.Topic("ct:" + gate), Timeout: Duration(10 * time.Minute)}
}

func idempotentEnqueue(w *world) {
	e := w.start(registry(w.t, w.pool, kinds(false)...), port.StartOptions{})
	a := w.enqueue(e, "ct.three", tagIn{Tag: "first"}, "k1")
	again := w.enqueue(e, "ct.three", tagIn{Tag: "other input, same key"}, "k1")
	require.Equal(w.t, a, again, "same key, same run (input is not compared)")
	b := w.enqueue(e, "ct.three", tagIn{}, "k2")
	require.NotEqual(w.t, a, b, "a new key starts a new run")
	w.waitStatus(e, a, port.StatusSucceeded)
	w.waitStatus(e, b, port.StatusSucceeded)

	after := w.enqueue(e, "ct.three", tagIn{}, "k1")
	require.Equal(w.t, a, after, "a key reused after completion returns the old run")
	// A run enqueued after the re-enqueue finishing proves the worker had
	// the chance to (wrongly) run k1 again.
	c := w.enqueue(e, "ct.three", tagIn{}, "k3")
	w.waitStatus(e, c, port.StatusSucceeded)
	for _, id := range []port.RunID{a, b, c} {
		require.Equal(w.t, map[string]int{"s1": 1, "s2": 1, "s3": 1}, w.effects(id), "run %s: each step's side effect exactly once", id)
	}
	require.Equal(w.t, 3, w.runRows())
	v, err := e.Get(bg, a)
	require.NoError(w.t, err)
	require.Equal(w.t, port.StatusSucceeded, v.Status)
}

func availableAt(w *world) {
	e := w.start(registry(w.t, w.pool, kinds(false)...), port.StartOptions{})
	var dbNow time.Time
	require.NoError(w.t, w.pool.QueryRow(bg, `SELECT clock_timestamp()`).Scan(&dbNow))
	at := dbNow.Add(1500 * time.Millisecond)
	id, err := e.Enqueue(bg, "ct.three", tagIn{}, port.EnqueueOptions{IdempotencyKey: "later", AvailableAt: at})
	require.NoError(w.t, err)
	v, err := e.Get(bg, id)
	require.NoError(w.t, err)
	require.Equal(w.t, port.StatusPending, v.Status)
	w.waitStatus(e, id, port.StatusSucceeded)
	var first time.Time
	require.NoError(w.t, w.pool.QueryRow(bg, `SELECT min(first_at) FROM contract_effect WHERE run_id = $1`, string(id)).Scan(&first))
	require.False(w.t, first.Before(at), "first step ran at %s, before AvailableAt %s", first, at)
}

// The first step's side effect must not repeat when the run resumes on a
// new worker after a restart.
func memoization(w *world) {
	reg := registry(w.t, w.pool, kinds(false)...)
	e := w.start(reg, port.StartOptions{})
	in := longWait("memo")
	id := w.enqueue(e, "ct.memo", in, "memo")
	w.waitStatus(e, id, port.StatusWaiting)
	w.stop(e)

	e2 := w.start(registry(w.t, w.pool, kinds(false)...), port.StartOptions{})
	w.signalUntilDelivered(e2, in.Topic)
	w.waitStatus(e2, id, port.StatusSucceeded)
	require.Equal(w.t, map[string]int{"a": 1, "b": 1}, w.effects(id))
}

// signalUntilDelivered re-sends a hint until a waiter takes it: after a
// restart the run registers as a waiter again only once a worker replays it.
func (w *world) signalUntilDelivered(e port.TaskEngine, topic port.Topic) {
	w.t.Helper()
	require.Eventually(w.t, func() bool {
		n, err := e.Signal(bg, topic, nil)
		return err == nil && n > 0
	}, waitFor, 50*time.Millisecond, "no waiter on %s took the signal", topic)
}

func renamedStep(w *world) {
	e := w.start(registry(w.t, w.pool, kinds(false)...), port.StartOptions{})
	in := longWait("renamed")
	id := w.enqueue(e, "ct.renamed", in, "renamed")
	w.waitStatus(e, id, port.StatusWaiting)
	w.stop(e)

	// Same kind, same version, first step renamed: replay must refuse it.
	e2 := w.start(registry(w.t, w.pool, kinds(true)...), port.StartOptions{})
	w.signalUntilDelivered(e2, in.Topic)
	v := w.waitStatus(e2, id, port.StatusFailed)
	require.NotEmpty(w.t, v.LastError)
	require.Equal(w.t, map[string]int{"first": 1}, w.effects(id), "neither the renamed step nor a later one may run")
}

func reusedStep(w *world) {
	e := w.start(registry(w.t, w.pool, kinds(false)...), port.StartOptions{})
	id := w.enqueue(e, "ct.reused", tagIn{}, "reused")
	v := w.waitStatus(e, id, port.StatusFailed)
	require.Contains(w.t, v.LastError, "same")
	require.Equal(w.t, map[string]int{"same-1": 1}, w.effects(id), "the second use of the name never runs")
}

// The business truth is written and the hint sent before the run exists:
// the DB check finds it at once, no wait.
func earlySignal(w *world) {
	e := w.start(registry(w.t, w.pool, kinds(false)...), port.StartOptions{})
	in := longWait("early")
	w.openGate(in.Gate)
	_, err := e.Signal(bg, in.Topic, map[string]string{"why": "approved"})
	require.NoError(w.t, err)
	id := w.enqueue(e, "ct.wait", in, "early")
	w.waitStatus(e, id, port.StatusSucceeded)
	require.Equal(w.t, map[string]int{"after": 1}, w.effects(id))
}

// No signal at all: the timeout and the DB check still finish the run.
func lostSignal(w *world) {
	e := w.start(registry(w.t, w.pool, kinds(false)...), port.StartOptions{})
	in := waitIn{Gate: "lost", Topic: "ct:lost", Timeout: Duration(300 * time.Millisecond)}
	id := w.enqueue(e, "ct.wait", in, "lost")
	w.waitStatus(e, id, port.StatusWaiting)
	w.openGate(in.Gate) // the truth changes; the hint is lost
	w.waitStatus(e, id, port.StatusSucceeded)
	require.Equal(w.t, map[string]int{"after": 1}, w.effects(id))
}

func signalWakes(w *world) {
	e := w.start(registry(w.t, w.pool, kinds(false)...), port.StartOptions{})
	in := longWait("wake")
	id := w.enqueue(e, "ct.wait", in, "wake")
	w.waitStatus(e, id, port.StatusWaiting)
	w.openGate(in.Gate)
	n, err := e.Signal(bg, in.Topic, json.RawMessage(`{"approved":true}`))
	require.NoError(w.t, err)
	require.Equal(w.t, 1, n)
	w.waitStatus(e, id, port.StatusSucceeded)
	require.Equal(w.t, map[string]int{"after": 1}, w.effects(id))
}

func signalNobody(w *world) {
	e := w.start(registry(w.t, w.pool, kinds(false)...), port.StartOptions{})
	in := longWait("bystander")
	id := w.enqueue(e, "ct.wait", in, "bystander")
	w.waitStatus(e, id, port.StatusWaiting)
	n, err := e.Signal(bg, "ct:nobody-waits", nil)
	require.NoError(w.t, err)
	require.Zero(w.t, n)
	v, err := e.Get(bg, id)
	require.NoError(w.t, err)
	require.Equal(w.t, port.StatusWaiting, v.Status, "a signal on another topic leaves the waiter alone")
	require.Empty(w.t, w.effects(id))
}

func cancelBeforeStart(w *world) {
	e := w.start(registry(w.t, w.pool, kinds(false)...), port.StartOptions{})
	id, err := e.Enqueue(bg, "ct.three", tagIn{}, port.EnqueueOptions{IdempotencyKey: "never", AvailableAt: time.Now().Add(time.Hour)})
	require.NoError(w.t, err)
	require.NoError(w.t, e.Cancel(bg, id, "user changed their mind"))
	w.waitStatus(e, id, port.StatusCanceled)
	require.NoError(w.t, e.Cancel(bg, id, "twice"), "canceling a canceled run is a no-op")
	require.Empty(w.t, w.effects(id))
	var reason string
	require.NoError(w.t, w.pool.QueryRow(bg, `SELECT cancel_reason FROM taskport.run WHERE id = $1`, string(id)).Scan(&reason))
	require.Equal(w.t, "user changed their mind", reason, "the cancel request is recorded in Postgres")
}

func cancelDuringStep(w *world) {
	e := w.start(registry(w.t, w.pool, kinds(false)...), port.StartOptions{})
	id := w.enqueue(e, "ct.hold", waitIn{Gate: "never-opens"}, "hold")
	w.waitEffect(id, "hold:started")
	require.NoError(w.t, e.Cancel(bg, id, "stop the copy"))
	w.waitStatus(e, id, port.StatusCanceled)
	got := w.effects(id)
	require.Equal(w.t, 1, got["hold:stopped"], "the running step saw the cancel and stopped itself")
	require.Zero(w.t, got["after"], "no step after the cancel runs")
	require.Equal(w.t, 1, got["hold:started"])
}

func cancelWhileWaiting(w *world) {
	e := w.start(registry(w.t, w.pool, kinds(false)...), port.StartOptions{})
	in := longWait("cancel-wait")
	id := w.enqueue(e, "ct.wait", in, "cancel-wait")
	w.waitStatus(e, id, port.StatusWaiting)
	require.NoError(w.t, e.Cancel(bg, id, "no longer wanted"))
	w.waitStatus(e, id, port.StatusCanceled)
	w.openGate(in.Gate)
	n, err := e.Signal(bg, in.Topic, nil)
	require.NoError(w.t, err)
	require.Zero(w.t, n, "a canceled run is no longer a waiter")
	// A later run on the same engine finishing shows the canceled one had
	// every chance to (wrongly) go on.
	probe := w.enqueue(e, "ct.three", tagIn{}, "probe")
	w.waitStatus(e, probe, port.StatusSucceeded)
	require.Empty(w.t, w.effects(id))
}

func retryLimit(w *world) {
	e := w.start(registry(w.t, w.pool, kinds(false)...), port.StartOptions{})
	id := w.enqueue(e, "ct.fail", tagIn{}, "fail")
	v := w.waitStatus(e, id, port.StatusFailed)
	require.NotEmpty(w.t, v.LastError)
	require.Equal(w.t, map[string]int{"fail:retryable": fastRetry.MaxAttempts}, w.effects(id), "exactly MaxAttempts attempts")
	var reason string
	require.NoError(w.t, w.pool.QueryRow(bg, `SELECT reason FROM contract_decision WHERE run_id = $1`, string(id)).Scan(&reason))
	require.Contains(w.t, reason, "retries exhausted")
	admin, ok := e.(port.Admin)
	require.True(w.t, ok, "engines implement port.Admin")
	dead, err := admin.ListRuns(bg, port.RunFilter{Statuses: []port.Status{port.StatusFailed}})
	require.NoError(w.t, err)
	require.Len(w.t, dead, 1)
	require.Equal(w.t, id, dead[0].ID)
}

func nonRetryable(w *world) {
	e := w.start(registry(w.t, w.pool, kinds(false)...), port.StartOptions{})
	id := w.enqueue(e, "ct.nonretry", tagIn{}, "nonretry")
	w.waitStatus(e, id, port.StatusFailed)
	require.Equal(w.t, map[string]int{"fail:non-retryable": 1}, w.effects(id), "no retry after a non-retryable error")
	var reason string
	require.NoError(w.t, w.pool.QueryRow(bg, `SELECT reason FROM contract_decision WHERE run_id = $1`, string(id)).Scan(&reason))
	require.Contains(w.t, reason, "non-retryable")
}

func versionUpgrade(w *world) {
	e := w.start(registry(w.t, w.pool, kinds(false)...), port.StartOptions{})
	in := longWait("upgrade")
	old := w.enqueue(e, "ct.versioned", in, "old")
	w.waitStatus(e, old, port.StatusWaiting)
	w.stop(e)

	// The worker restarts with v1 and v2 registered.
	e2 := w.start(registry(w.t, w.pool, append(kinds(false), versionTwo())...), port.StartOptions{})
	fresh := w.enqueue(e2, "ct.versioned", in, "new")
	w.waitStatus(e2, fresh, port.StatusSucceeded)
	require.Equal(w.t, map[string]int{"v2-a": 1, "v2-b": 1}, w.effects(fresh), "new runs use v2")

	admin := e2.(port.Admin)
	onOld, err := admin.ListRuns(bg, port.RunFilter{Kind: "ct.versioned", BelowVersion: 2,
		Statuses: []port.Status{port.StatusPending, port.StatusRunning, port.StatusWaiting}})
	require.NoError(w.t, err)
	require.Len(w.t, onOld, 1)
	require.Equal(w.t, old, onOld[0].ID)

	w.signalUntilDelivered(e2, in.Topic)
	v := w.waitStatus(e2, old, port.StatusSucceeded)
	require.Equal(w.t, 1, v.Version)
	require.Equal(w.t, map[string]int{"v1-a": 1, "v1-b": 1}, w.effects(old), "the old run finished on v1 code")
	vf, err := e2.Get(bg, fresh)
	require.NoError(w.t, err)
	require.Equal(w.t, 2, vf.Version)
}

func getUnknown(w *world) {
	e := w.start(registry(w.t, w.pool, kinds(false)...), port.StartOptions{})
	for _, id := range []port.RunID{"0190a5c6-0000-7000-8000-000000000000", "not-a-run", ""} {
		_, err := e.Get(bg, id)
		require.ErrorIs(w.t, err, port.ErrNotFound, "Get(%q)", id)
		require.ErrorIs(w.t, e.Cancel(bg, id, "x"), port.ErrNotFound, "Cancel(%q)", id)
	}
}

// Every bad input is refused with an error naming the field, and nothing is
// written.
func badInput(w *world) {
	e := w.start(registry(w.t, w.pool, kinds(false)...), port.StartOptions{})
	cases := []struct {
		name  string
		kind  port.Kind
		input any
		opts  port.EnqueueOptions
		field string
	}{
		{"empty key", "ct.three", tagIn{}, port.EnqueueOptions{}, "idempotency_key"},
		{"unknown kind", "ct.nope", tagIn{}, port.EnqueueOptions{IdempotencyKey: "k"}, "unknown kind"},
		{"not JSON", "ct.three", make(chan int), port.EnqueueOptions{IdempotencyKey: "k"}, "input"},
		{"malformed", "ct.three", json.RawMessage(`{"tag": 7}`), port.EnqueueOptions{IdempotencyKey: "k"}, "input"},
		{"unknown field", "ct.three", json.RawMessage(`{"colour": "red"}`), port.EnqueueOptions{IdempotencyKey: "k"}, "input"},
		{"oversize", "ct.three", tagIn{Tag: strings.Repeat("x", port.MaxPayloadBytes)}, port.EnqueueOptions{IdempotencyKey: "k"}, "input"},
		{"priority", "ct.three", tagIn{}, port.EnqueueOptions{IdempotencyKey: "k", Priority: 1000}, "priority"},
	}
	for _, c := range cases {
		_, err := e.Enqueue(bg, c.kind, c.input, c.opts)
		require.ErrorIs(w.t, err, port.ErrInvalidInput, c.name)
		require.Contains(w.t, err.Error(), c.field, c.name)
	}
	_, err := e.Signal(bg, "bad topic", nil)
	require.ErrorIs(w.t, err, port.ErrInvalidInput)
	_, err = e.Signal(bg, "ct:x", strings.Repeat("x", port.MaxPayloadBytes))
	require.ErrorIs(w.t, err, port.ErrPayloadTooLarge)
	require.Zero(w.t, w.runRows(), "a refused enqueue writes nothing")

	// A negative timeout inside a handler fails that run with the field
	// named, and no side effect.
	id := w.enqueue(e, "ct.negative", waitIn{Topic: "ct:neg"}, "negative")
	v := w.waitStatus(e, id, port.StatusFailed)
	require.Contains(w.t, v.LastError, "timeout")
	require.Empty(w.t, w.effects(id))

	bad := w.factory(w.t, registry(w.t, w.pool, kinds(false)...))
	require.ErrorIs(w.t, bad.Start(bg, port.StartOptions{Concurrency: -1}), port.ErrInvalidInput)
}

// The lifecycle rules of port.TaskEngine, on one engine value: not serving
// before Start, Stop before Start and Stop twice do nothing, Start while
// serving is refused, Stop closes Done with no error, and the same value
// serves again after Stop: a run enqueued while it was stopped completes
// once it is started again, each step's side effect once.
func lifecycle(w *world) {
	e := w.factory(w.t, registry(w.t, w.pool, kinds(false)...))
	w.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(bg, time.Minute)
		defer cancel()
		_ = e.Stop(ctx) // a failed assertion may leave it serving
	})
	require.False(w.t, startstop.Serving(e), "not serving before Start")
	require.NoError(w.t, e.Stop(bg), "Stop before Start")

	first := w.enqueue(e, "ct.three", tagIn{}, "life-0")
	var second port.RunID
	for round := range 2 {
		require.NoError(w.t, e.Start(bg, port.StartOptions{Concurrency: 4}), "round %d", round)
		require.True(w.t, startstop.Serving(e), "round %d: serving", round)
		require.ErrorIs(w.t, e.Start(bg, port.StartOptions{}), port.ErrAlreadyStarted, "round %d", round)
		w.waitStatus(e, first, port.StatusSucceeded)
		if round == 1 {
			w.waitStatus(e, second, port.StatusSucceeded)
		}
		w.stop(e)
		require.False(w.t, startstop.Serving(e), "round %d: Stop closes Done", round)
		require.NoError(w.t, e.Err(), "round %d: a graceful stop is no error", round)
		require.NoError(w.t, e.Stop(bg), "round %d: Stop twice", round)
		if round == 0 {
			second = w.enqueue(e, "ct.three", tagIn{}, "life-1") // while stopped
		}
	}
	for _, id := range []port.RunID{first, second} {
		require.Equal(w.t, map[string]int{"s1": 1, "s2": 1, "s3": 1}, w.effects(id), "run %s: each step's side effect exactly once", id)
	}
}
