package contract

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/internal/startstop"
	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/test/contract/kinds"
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
	{"signal_wakes_every_waiter", signalWakes},
	{"signal_during_step_kept_for_next_wait", signalDuringStep},
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
	{"stop_lets_in_flight_step_finish", stopFinishesStep},
	{"concurrency_bounds_steps_at_once", concurrencyBoundsSteps},
	{"unserved_version_stays_pending", unservedVersion},
	{"version_marker_replays", versionMarker},
	{"version_marker_added_in_flight", versionMarkerAddedInFlight},
	{"flow_answers_read_alike", flowAlike},
	{"continue_as_new_keeps_run_id", continueAsNew},
	{"heartbeat_timeout_fails_silent_attempts", heartbeatTimeout},
	{"admin_retry_dead_letter", adminRetry}, // admin.go
	{"admin_list_paging", adminPaging},
	{"enqueue_many", enqueueMany}, {"enqueue_many_bad_item_writes_nothing", enqueueManyBadItem}, // bulk.go
	{"cancel_finished_run_writes_nothing", cancelFinishedWritesNothing}, // ownership.go
	{"other_engine_run_refused", otherEngineRunRefused},
	{"nul_input_refused", nulInputRefused},
}

var bg = context.Background()

func (w *world) effects(id port.RunID) map[string]int {
	w.t.Helper()
	out, err := kinds.Effects(bg, w.pool, id)
	require.NoError(w.t, err)
	return out
}

// notes returns the note of the latest execution of each label of run id.
func (w *world) notes(id port.RunID) map[string]string {
	w.t.Helper()
	out, err := kinds.Notes(bg, w.pool, id)
	require.NoError(w.t, err)
	return out
}

// waiters counts the rows of taskport.waiter that name run id.
func (w *world) waiters(id port.RunID) int {
	w.t.Helper()
	var n int
	require.NoError(w.t, w.pool.QueryRow(bg, `SELECT count(*) FROM taskport.waiter WHERE run_id = $1`, string(id)).Scan(&n))
	return n
}

// requireCancelRecorded checks the business cancel flag of run id, written
// before the engine's cancel (ADR 2.4).
func (w *world) requireCancelRecorded(id port.RunID, reason string) {
	w.t.Helper()
	var got string
	var flagged bool
	require.NoError(w.t, w.pool.QueryRow(bg, `SELECT cancel_reason, cancel_requested_at IS NOT NULL FROM taskport.run WHERE id = $1`,
		string(id)).Scan(&got, &flagged))
	require.True(w.t, flagged, "run %s: cancel_requested_at is set", id)
	require.Equal(w.t, reason, got, "run %s: the cancel reason is recorded in Postgres", id)
}

func (w *world) waitEffect(id port.RunID, label string) {
	w.t.Helper()
	require.Eventuallyf(w.t, func() bool { return w.effects(id)[label] > 0 }, waitFor, pollEvery, "run %s never recorded %q", id, label)
}

func (w *world) openGate(key string) {
	w.t.Helper()
	require.NoError(w.t, kinds.OpenEffectGate(bg, w.pool, key))
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

func longWait(gate string) kinds.WaitIn {
	return kinds.WaitIn{Gate: gate, Topic: port.Topic("ct:" + gate), Timeout: kinds.Duration(10 * time.Minute)}
}

func idempotentEnqueue(w *world) {
	e := w.start(registry(w.t, w.pool, kinds.Definitions(false)...), port.StartOptions{})
	a, err := e.Enqueue(bg, "ct.three", kinds.TagIn{Tag: "first"}, port.EnqueueOptions{IdempotencyKey: "k1", BusinessKey: "plan-1"})
	require.NoError(w.t, err)
	again := w.enqueue(e, "ct.three", kinds.TagIn{Tag: "other input, same key"}, "k1")
	require.Equal(w.t, a, again, "same key, same run (input is not compared)")
	b := w.enqueue(e, "ct.three", kinds.TagIn{}, "k2")
	require.NotEqual(w.t, a, b, "a new key starts a new run")
	w.waitStatus(e, a, port.StatusSucceeded)
	w.waitStatus(e, b, port.StatusSucceeded)

	after := w.enqueue(e, "ct.three", kinds.TagIn{}, "k1")
	require.Equal(w.t, a, after, "a key reused after completion returns the old run")
	// Postgres is the authority, with no window (Temporal's own dedupe ends
	// with the namespace's retention): a run enqueued a year ago still
	// dedupes.
	_, err = w.pool.Exec(bg, `UPDATE taskport.run SET created_at = created_at - interval '1 year' WHERE id = $1`, string(a))
	require.NoError(w.t, err)
	require.Equal(w.t, a, w.enqueue(e, "ct.three", kinds.TagIn{}, "k1"), "a year-old key still names its run")
	// A run enqueued after the re-enqueue finishing proves the worker had
	// the chance to (wrongly) run k1 again.
	c := w.enqueue(e, "ct.three", kinds.TagIn{}, "k3")
	w.waitStatus(e, c, port.StatusSucceeded)
	for _, id := range []port.RunID{a, b, c} {
		require.Equal(w.t, map[string]int{"s1": 1, "s2": 1, "s3": 1}, w.effects(id), "run %s: each step's side effect exactly once", id)
	}
	require.Equal(w.t, 3, w.runRows())
	v, err := e.Get(bg, a)
	require.NoError(w.t, err)
	require.Equal(w.t, port.StatusSucceeded, v.Status)
	require.Equal(w.t, "plan-1", v.BusinessKey)
	require.Equal(w.t, "s3", v.CurrentStep, "the last step the run was in")
	require.Equal(w.t, 1, v.Attempts, "the last step's attempt")
	require.False(w.t, v.FinishedAt.IsZero(), "a terminal run has its end time")
}

func availableAt(w *world) {
	e := w.start(registry(w.t, w.pool, kinds.Definitions(false)...), port.StartOptions{})
	var dbNow time.Time
	require.NoError(w.t, w.pool.QueryRow(bg, `SELECT clock_timestamp()`).Scan(&dbNow))
	at := dbNow.Add(1500 * time.Millisecond)
	id, err := e.Enqueue(bg, "ct.three", kinds.TagIn{}, port.EnqueueOptions{IdempotencyKey: "later", AvailableAt: at})
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
	reg := registry(w.t, w.pool, kinds.Definitions(false)...)
	e := w.start(reg, port.StartOptions{})
	in := longWait("memo")
	id := w.enqueue(e, "ct.memo", in, "memo")
	w.waitStatus(e, id, port.StatusWaiting)
	w.stop(e)

	e2 := w.start(registry(w.t, w.pool, kinds.Definitions(false)...), port.StartOptions{})
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
	e := w.start(registry(w.t, w.pool, kinds.Definitions(false)...), port.StartOptions{})
	in := longWait("renamed")
	id := w.enqueue(e, "ct.renamed", in, "renamed")
	w.waitStatus(e, id, port.StatusWaiting)
	w.stop(e)

	// Same kind, same version, first step renamed: replay must refuse it.
	e2 := w.start(registry(w.t, w.pool, kinds.Definitions(true)...), port.StartOptions{})
	w.signalUntilDelivered(e2, in.Topic)
	v := w.waitStatus(e2, id, port.StatusFailed)
	require.NotEmpty(w.t, v.LastError)
	require.Equal(w.t, map[string]int{"first": 1}, w.effects(id), "neither the renamed step nor a later one may run")
}

func reusedStep(w *world) {
	e := w.start(registry(w.t, w.pool, kinds.Definitions(false)...), port.StartOptions{})
	id := w.enqueue(e, "ct.reused", kinds.TagIn{}, "reused")
	v := w.waitStatus(e, id, port.StatusFailed)
	require.Contains(w.t, v.LastError, "same")
	require.Equal(w.t, map[string]int{"same-1": 1}, w.effects(id), "the second use of the name never runs")
}

// The business truth is written and the hint sent before the run exists:
// the DB check finds it at once, no wait.
func earlySignal(w *world) {
	e := w.start(registry(w.t, w.pool, kinds.Definitions(false)...), port.StartOptions{})
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
	e := w.start(registry(w.t, w.pool, kinds.Definitions(false)...), port.StartOptions{})
	in := kinds.WaitIn{Gate: "lost", Topic: "ct:lost", Timeout: kinds.Duration(300 * time.Millisecond)}
	id := w.enqueue(e, "ct.wait", in, "lost")
	w.waitStatus(e, id, port.StatusWaiting)
	w.openGate(in.Gate) // the truth changes; the hint is lost
	w.waitStatus(e, id, port.StatusSucceeded)
	require.Equal(w.t, map[string]int{"after": 1}, w.effects(id))
	require.Equal(w.t, "timeout", w.notes(id)["after"], "the wait ended by its timeout")
}

// Two runs wait on one topic with one slot (a waiting run holds none), each
// after a durable sleep: one signal wakes both, and each receives its
// payload.
func signalWakes(w *world) {
	e := w.start(registry(w.t, w.pool, kinds.Definitions(false)...), port.StartOptions{Concurrency: 1})
	in := longWait("wake")
	in.Nap = kinds.Duration(300 * time.Millisecond)
	a := w.enqueue(e, "ct.wait", in, "wake-a")
	b := w.enqueue(e, "ct.wait", in, "wake-b")
	for _, id := range []port.RunID{a, b} {
		require.Eventually(w.t, func() bool { return w.waiters(id) == 1 }, waitFor, pollEvery, "run %s registered as a waiter", id)
		// Temporal registers the waiter before its projection says waiting.
		require.EventuallyWithT(w.t, func(c *assert.CollectT) {
			v, err := e.Get(bg, id)
			require.NoError(c, err)
			require.Equal(c, port.StatusWaiting, v.Status)
			require.Equal(c, "wait-0", v.CurrentStep, "run %s is in its wait", id)
		}, waitFor, pollEvery)
	}
	w.openGate(in.Gate)
	n, err := e.Signal(bg, in.Topic, json.RawMessage(`{"approved":true}`))
	require.NoError(w.t, err)
	require.Equal(w.t, 2, n)
	for _, id := range []port.RunID{a, b} {
		w.waitStatus(e, id, port.StatusSucceeded)
		require.Equal(w.t, map[string]int{"after": 1}, w.effects(id))
		require.JSONEq(w.t, `{"approved":true}`, strings.TrimPrefix(w.notes(id)["after"], "signal:"), "run %s received the payload", id)
		require.Zero(w.t, w.waiters(id), "a finished run is no waiter")
		var slept bool
		require.NoError(w.t, w.pool.QueryRow(bg, `
SELECT e.first_at - r.created_at >= $2::interval FROM contract_effect e JOIN taskport.run r ON r.id::text = e.run_id
WHERE e.run_id = $1 AND e.label = 'after'`, string(id), time.Duration(in.Nap).String()).Scan(&slept))
		require.True(w.t, slept, "run %s slept its nap before going on", id)
	}
}

// A signal sent while the run is in a step between two waits on the topic
// is kept for the second wait.
func signalDuringStep(w *world) {
	e := w.start(registry(w.t, w.pool, kinds.Definitions(false)...), port.StartOptions{})
	in := longWait("between")
	id := w.enqueue(e, kinds.Twice, in, "between")
	w.waitStatus(e, id, port.StatusWaiting)
	n, err := e.Signal(bg, in.Topic, "one")
	require.NoError(w.t, err)
	require.Equal(w.t, 1, n)
	w.waitEffect(id, "hold:started")
	n, err = e.Signal(bg, in.Topic, "two")
	require.NoError(w.t, err)
	require.Zero(w.t, n, "no run waits: the signal is kept for the topic's next wait")
	require.NotContains(w.t, w.effects(id), "hold:finished", "the signal was sent while the step ran")
	w.openGate(in.Gate)
	w.waitStatus(e, id, port.StatusSucceeded)
	require.Equal(w.t, `"one"+"two"`, w.notes(id)["after"], "the second wait received the signal sent during the step")
	require.Zero(w.t, w.waiters(id))
}

func signalNobody(w *world) {
	e := w.start(registry(w.t, w.pool, kinds.Definitions(false)...), port.StartOptions{})
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
	e := w.start(registry(w.t, w.pool, kinds.Definitions(false)...), port.StartOptions{})
	id, err := e.Enqueue(bg, "ct.three", kinds.TagIn{}, port.EnqueueOptions{IdempotencyKey: "never", AvailableAt: time.Now().Add(time.Hour)})
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
	e := w.start(registry(w.t, w.pool, kinds.Definitions(false)...), port.StartOptions{})
	id := w.enqueue(e, "ct.hold", kinds.WaitIn{Gate: "never-opens"}, "hold")
	w.waitEffect(id, "hold:started")
	// The lease engine records the step a run is in with its heartbeat.
	var v port.RunView
	require.Eventuallyf(w.t, func() bool {
		var err error
		v, err = e.Get(bg, id)
		return err == nil && v.CurrentStep == "hold"
	}, waitFor, pollEvery, "the view never named the running step: %+v", &v)
	require.Equal(w.t, port.StatusRunning, v.Status)
	require.Equal(w.t, 1, v.Attempts)
	admin := e.(port.Admin)
	listed, err := admin.ListRuns(bg, port.RunFilter{Kind: "ct.hold"})
	require.NoError(w.t, err)
	require.Len(w.t, listed, 1)
	require.Equal(w.t, port.StatusRunning, listed[0].Status)

	require.NoError(w.t, e.Cancel(bg, id, "stop the copy"))
	w.waitStatus(e, id, port.StatusCanceled)
	w.requireCancelRecorded(id, "stop the copy")
	got := w.effects(id)
	require.Equal(w.t, 1, got["hold:stopped"], "the running step saw the cancel and stopped itself")
	require.Contains(w.t, w.notes(id)["hold:stopped"], port.ErrCanceled.Error(), "its heartbeat told it the run was canceled")
	require.Zero(w.t, got["after"], "no step after the cancel runs")
	require.Equal(w.t, 1, got["hold:started"])
}

func cancelWhileWaiting(w *world) {
	e := w.start(registry(w.t, w.pool, kinds.Definitions(false)...), port.StartOptions{})
	in := longWait("cancel-wait")
	id := w.enqueue(e, "ct.wait", in, "cancel-wait")
	w.waitStatus(e, id, port.StatusWaiting)
	require.NoError(w.t, e.Cancel(bg, id, "no longer wanted"))
	w.waitStatus(e, id, port.StatusCanceled)
	w.requireCancelRecorded(id, "no longer wanted")
	require.Eventually(w.t, func() bool { return w.waiters(id) == 0 }, waitFor, pollEvery, "a canceled run leaves the waiter table")
	require.NoError(w.t, e.Cancel(bg, id, "again"), "canceling a canceled run is a no-op")
	w.openGate(in.Gate)
	n, err := e.Signal(bg, in.Topic, nil)
	require.NoError(w.t, err)
	require.Zero(w.t, n, "a canceled run is no longer a waiter")
	// A later run on the same engine finishing shows the canceled one had
	// every chance to (wrongly) go on.
	probe := w.enqueue(e, "ct.three", kinds.TagIn{}, "probe")
	w.waitStatus(e, probe, port.StatusSucceeded)
	require.Empty(w.t, w.effects(id))
}

func retryLimit(w *world) {
	e := w.start(registry(w.t, w.pool, kinds.Definitions(false)...), port.StartOptions{})
	id := w.enqueue(e, "ct.fail", kinds.TagIn{}, "fail")
	v := w.waitStatus(e, id, port.StatusFailed)
	last := fmt.Sprintf("attempt %d failed", kinds.FastRetry.MaxAttempts)
	require.Contains(w.t, v.LastError, last, "the run's error is its last attempt's")
	require.Equal(w.t, map[string]int{"fail:retryable": kinds.FastRetry.MaxAttempts}, w.effects(id), "exactly MaxAttempts attempts")
	var epochs []int64
	require.NoError(w.t, w.pool.QueryRow(bg, `SELECT epochs FROM contract_effect WHERE run_id = $1 AND label = 'fail:retryable'`, string(id)).Scan(&epochs))
	require.True(w.t, slices.IsSorted(epochs) && len(slices.Compact(slices.Clone(epochs))) == len(epochs),
		"each attempt ran under a newer fencing token: epochs %v", epochs)
	var reason string
	require.NoError(w.t, w.pool.QueryRow(bg, `SELECT reason FROM contract_decision WHERE run_id = $1`, string(id)).Scan(&reason))
	require.Contains(w.t, reason, "retries exhausted")
	require.Contains(w.t, reason, last, "the handler saw the last attempt's error in the *port.StepError")
	admin, ok := e.(port.Admin)
	require.True(w.t, ok, "engines implement port.Admin")
	dead, err := admin.ListRuns(bg, port.RunFilter{Statuses: []port.Status{port.StatusFailed}})
	require.NoError(w.t, err)
	require.Len(w.t, dead, 1)
	require.Equal(w.t, id, dead[0].ID)

}

func nonRetryable(w *world) {
	e := w.start(registry(w.t, w.pool, kinds.Definitions(false)...), port.StartOptions{})
	id := w.enqueue(e, "ct.nonretry", kinds.TagIn{}, "nonretry")
	v := w.waitStatus(e, id, port.StatusFailed)
	require.Contains(w.t, v.LastError, "input can never succeed")
	require.Equal(w.t, map[string]int{"fail:non-retryable": 1}, w.effects(id), "no retry after a non-retryable error")
	var reason string
	require.NoError(w.t, w.pool.QueryRow(bg, `SELECT reason FROM contract_decision WHERE run_id = $1`, string(id)).Scan(&reason))
	require.Contains(w.t, reason, "non-retryable")
}

func versionUpgrade(w *world) {
	e := w.start(registry(w.t, w.pool, kinds.Definitions(false)...), port.StartOptions{})
	in := longWait("upgrade")
	old := w.enqueue(e, "ct.versioned", in, "old")
	w.waitStatus(e, old, port.StatusWaiting)
	w.stop(e)

	// The worker restarts with v1 and v2 registered.
	e2 := w.start(registry(w.t, w.pool, append(kinds.Definitions(false), kinds.VersionTwo())...), port.StartOptions{})
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
	e := w.start(registry(w.t, w.pool, kinds.Definitions(false)...), port.StartOptions{})
	for _, id := range []port.RunID{"0190a5c6-0000-7000-8000-000000000000", "not-a-run", ""} {
		_, err := e.Get(bg, id)
		require.ErrorIs(w.t, err, port.ErrNotFound, "Get(%q)", id)
		require.ErrorIs(w.t, e.Cancel(bg, id, "x"), port.ErrNotFound, "Cancel(%q)", id)
	}
}

// Every bad input is refused with an error naming the field, and nothing is
// written.
func badInput(w *world) {
	e := w.start(registry(w.t, w.pool, kinds.Definitions(false)...), port.StartOptions{})
	cases := []struct {
		name  string
		kind  port.Kind
		input any
		opts  port.EnqueueOptions
		field string
	}{
		{"empty key", "ct.three", kinds.TagIn{}, port.EnqueueOptions{}, "idempotency_key"},
		{"unknown kind", "ct.nope", kinds.TagIn{}, port.EnqueueOptions{IdempotencyKey: "k"}, "unknown kind"},
		{"not JSON", "ct.three", make(chan int), port.EnqueueOptions{IdempotencyKey: "k"}, "input"},
		{"malformed", "ct.three", json.RawMessage(`{"tag": 7}`), port.EnqueueOptions{IdempotencyKey: "k"}, "input"},
		{"unknown field", "ct.three", json.RawMessage(`{"colour": "red"}`), port.EnqueueOptions{IdempotencyKey: "k"}, "input"},
		{"oversize", "ct.three", kinds.TagIn{Tag: strings.Repeat("x", port.MaxPayloadBytes)}, port.EnqueueOptions{IdempotencyKey: "k"}, "input"},
		{"priority", "ct.three", kinds.TagIn{}, port.EnqueueOptions{IdempotencyKey: "k", Priority: 1000}, "priority"},
	}
	for _, c := range cases {
		_, err := e.Enqueue(bg, c.kind, c.input, c.opts)
		require.ErrorIs(w.t, err, port.ErrInvalidInput, c.name)
		require.Contains(w.t, err.Error(), c.field, c.name)
	}
	_, err := e.Enqueue(bg, "ct.nope", kinds.TagIn{}, port.EnqueueOptions{IdempotencyKey: "k"})
	require.ErrorIs(w.t, err, port.ErrUnknownKind)
	_, err = e.Signal(bg, "bad topic", nil)
	require.ErrorIs(w.t, err, port.ErrInvalidInput)
	_, err = e.Signal(bg, "ct:x", strings.Repeat("x", port.MaxPayloadBytes))
	require.ErrorIs(w.t, err, port.ErrPayloadTooLarge)
	require.Zero(w.t, w.runRows(), "a refused enqueue writes nothing")

	// A negative timeout inside a handler fails that run with the field
	// named, and no side effect.
	id := w.enqueue(e, "ct.negative", kinds.WaitIn{Topic: "ct:neg"}, "negative")
	v := w.waitStatus(e, id, port.StatusFailed)
	require.Contains(w.t, v.LastError, "timeout")
	require.Empty(w.t, w.effects(id))

	bad := w.factory(w.t, registry(w.t, w.pool, kinds.Definitions(false)...))
	require.ErrorIs(w.t, bad.Start(bg, port.StartOptions{Concurrency: -1}), port.ErrInvalidInput)
}

// The lifecycle rules of port.TaskEngine, on one engine value: not serving
// before Start, Stop before Start and Stop twice do nothing, Start while
// serving is refused, Stop closes Done with no error, and the same value
// serves again after Stop: a run enqueued while it was stopped completes
// once it is started again, each step's side effect once.
func lifecycle(w *world) {
	e := w.factory(w.t, registry(w.t, w.pool, kinds.Definitions(false)...))
	w.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(bg, time.Minute)
		defer cancel()
		_ = e.Stop(ctx) // a failed assertion may leave it serving
	})
	require.False(w.t, startstop.Serving(e), "not serving before Start")
	require.NoError(w.t, e.Stop(bg), "Stop before Start")

	first := w.enqueue(e, "ct.three", kinds.TagIn{}, "life-0")
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
			second = w.enqueue(e, "ct.three", kinds.TagIn{}, "life-1") // while stopped
		}
	}
	for _, id := range []port.RunID{first, second} {
		require.Equal(w.t, map[string]int{"s1": 1, "s2": 1, "s3": 1}, w.effects(id), "run %s: each step's side effect exactly once", id)
	}
}

// StartOptions.Concurrency is the number of steps a worker runs at once:
// four runs whose step holds until its own gate opens, two slots. Gates are
// opened one at a time, each only on a run whose step has started, until
// all four succeeded; then the steps' recorded start and end times (the
// effects table) never overlap more than two deep. (The lease engine
// executes more runs than it has step slots; a run not bounded by the slots
// would start its step as soon as it was claimed.)
func concurrencyBoundsSteps(w *world) {
	e := w.start(registry(w.t, w.pool, kinds.Definitions(false)...), port.StartOptions{Concurrency: 2})
	runs := make([]port.RunID, 4)
	keys := make([]string, len(runs))
	for i := range runs {
		runs[i] = w.enqueue(e, "ct.hold", kinds.WaitIn{Gate: fmt.Sprintf("slot-%d", i)}, fmt.Sprintf("slot-%d", i))
		keys[i] = string(runs[i])
	}
	started := func() (open []int, finished int) {
		for i, id := range runs {
			got := w.effects(id)
			switch {
			case got["hold:finished"] > 0:
				finished++
			case got["hold:started"] > 0:
				open = append(open, i)
			}
		}
		return open, finished
	}
	require.Eventually(w.t, func() bool { open, _ := started(); return len(open) >= 2 }, waitFor, pollEvery, "two steps never ran at once")
	for {
		open, finished := started()
		if finished == len(runs) {
			break
		}
		if len(open) == 0 {
			require.Eventually(w.t, func() bool { open, _ := started(); return len(open) > 0 }, waitFor, pollEvery, "no step started after %d finished", finished)
			continue
		}
		w.openGate(fmt.Sprintf("slot-%d", open[0]))
		w.waitEffect(runs[open[0]], "hold:finished")
	}
	for _, id := range runs {
		w.waitStatus(e, id, port.StatusSucceeded)
	}
	var deepest int
	require.NoError(w.t, w.pool.QueryRow(bg, `
WITH span AS (
  SELECT s.run_id, s.first_at AS from_at, f.first_at AS to_at
  FROM contract_effect s JOIN contract_effect f ON f.run_id = s.run_id AND f.label = 'hold:finished'
  WHERE s.label = 'hold:started' AND s.run_id = ANY ($1)
)
SELECT max((SELECT count(*) FROM span o WHERE o.from_at <= x.from_at AND x.from_at < o.to_at)) FROM span x`,
		keys).Scan(&deepest))
	require.Equal(w.t, 2, deepest, "steps running at once with Concurrency 2")
	for _, id := range runs {
		require.Equal(w.t, 1, w.effects(id)["hold:started"], "run %s ran its step once", id)
	}
}
