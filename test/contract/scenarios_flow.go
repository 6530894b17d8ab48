package contract

import (
	"strings"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/test/contract/kinds"
)

// A graceful Stop while a step runs, within the engine's stop bound (5 s in
// both harnesses), lets the step finish; the next engine goes on from the
// step after it, without running it again.
func stopFinishesStep(w *world) {
	e := w.start(registry(w.t, w.pool, kinds.Definitions(false)...), port.StartOptions{})
	id := w.enqueue(e, kinds.Hold, kinds.WaitIn{Gate: "never-opens", Timeout: kinds.Duration(time.Second)}, "graceful")
	w.waitEffect(id, "hold:started")
	w.stop(e)
	require.Equal(w.t, map[string]int{"hold:started": 1, "hold:finished": 1}, w.effects(id), "the in-flight step finished during Stop")

	e2 := w.start(registry(w.t, w.pool, kinds.Definitions(false)...), port.StartOptions{})
	w.waitStatus(e2, id, port.StatusSucceeded)
	require.Equal(w.t, map[string]int{"hold:started": 1, "hold:finished": 1, "after": 1}, w.effects(id))
}

// A run on a version no worker serves (StartOptions.Versions) stays pending
// and visible, not failed; a worker that serves that version runs it on
// that version's code once the worker that does not has gone.
func unservedVersion(w *world) {
	in := longWait("unserved")
	v1 := w.factory(w.t, registry(w.t, w.pool, kinds.Definitions(false)...)) // never started: enqueues v1
	old := w.enqueue(v1, kinds.Versioned, in, "old")
	both := append(kinds.Definitions(false), kinds.VersionTwo())
	e := w.start(registry(w.t, w.pool, both...), port.StartOptions{Versions: map[port.Kind][]int{kinds.Versioned: {2}}})
	fresh := w.enqueue(e, kinds.Versioned, in, "new")
	w.waitStatus(e, fresh, port.StatusSucceeded)
	require.Equal(w.t, map[string]int{"v2-a": 1, "v2-b": 1}, w.effects(fresh))

	// The worker that ran the v2 run had every chance to take the v1 run.
	v, err := e.Get(bg, old)
	require.NoError(w.t, err)
	require.Equal(w.t, port.StatusPending, v.Status, "an unserved version waits for its worker")
	require.Empty(w.t, w.effects(old))
	open, err := e.(port.Admin).ListRuns(bg, port.RunFilter{Kind: kinds.Versioned, BelowVersion: 2})
	require.NoError(w.t, err)
	require.Len(w.t, open, 1)
	require.Equal(w.t, old, open[0].ID)
	require.Equal(w.t, port.StatusPending, open[0].Status)

	// The v2-only worker goes before the v1 worker comes: on Temporal both
	// poll one task queue, and while both do, each workflow task of the v1
	// run lands on either, the v2 worker holding its try until the task
	// times out (docs/engines.md, "Known differences between the engines").
	w.stop(e)
	e1 := w.start(registry(w.t, w.pool, kinds.Definitions(false)...), port.StartOptions{})
	w.waitStatus(e1, old, port.StatusWaiting)
	w.signalUntilDelivered(e1, in.Topic)
	v = w.waitStatus(e1, old, port.StatusSucceeded)
	require.Equal(w.t, 1, v.Version)
	require.Equal(w.t, map[string]int{"v1-a": 1, "v1-b": 1}, w.effects(old), "the v1 run ran on v1 code")
}

// A GetVersion marker is recorded the first time and replayed after the
// code changes: a run parked under code that supported [1, 2] keeps 2 on
// code that supports [1, 3], and a new run takes 3.
func versionMarker(w *world) {
	e := w.start(registry(w.t, w.pool, append(kinds.Definitions(false), kinds.MarkerKind(1, 2))...), port.StartOptions{})
	kept := longWait("marker-kept")
	keptID := w.enqueue(e, kinds.Marker, kept, "kept")
	w.waitStatus(e, keptID, port.StatusWaiting)
	w.stop(e)

	e2 := w.start(registry(w.t, w.pool, append(kinds.Definitions(false), kinds.MarkerKind(1, 3))...), port.StartOptions{})
	fresh := longWait("marker-fresh")
	freshID := w.enqueue(e2, kinds.Marker, fresh, "fresh")
	w.waitStatus(e2, freshID, port.StatusWaiting)
	w.signalUntilDelivered(e2, kept.Topic)
	w.signalUntilDelivered(e2, fresh.Topic)
	w.waitStatus(e2, keptID, port.StatusSucceeded)
	w.waitStatus(e2, freshID, port.StatusSucceeded)
	require.Equal(w.t, map[string]string{"before": "2", "after": "2"}, w.notes(keptID), "the replayed marker returned the recorded 2")
	require.Equal(w.t, map[string]string{"before": "3", "after": "3"}, w.notes(freshID))
	for _, id := range []port.RunID{keptID, freshID} {
		require.Equal(w.t, map[string]int{"before": 1, "after": 1}, w.effects(id))
	}
}

// A run that continues as new stays one run: the same id, one row, the
// same idempotency key; each generation ran its step once.
func continueAsNew(w *world) {
	e := w.start(registry(w.t, w.pool, kinds.Definitions(false)...), port.StartOptions{})
	id := w.enqueue(e, kinds.Continue, kinds.ContinueIn{Until: 3}, "continue")
	v := w.waitStatus(e, id, port.StatusSucceeded)
	require.Equal(w.t, id, v.ID)
	require.Equal(w.t, map[string]int{"gen": 4}, w.effects(id), "generations 0..3 each ran the step once")
	require.Equal(w.t, "generation 3", w.notes(id)["gen"])
	require.Equal(w.t, 1, w.runRows())
	require.Equal(w.t, id, w.enqueue(e, kinds.Continue, kinds.ContinueIn{Until: 3}, "continue"))
}

// A step under a heartbeat timeout whose body never heartbeats loses each
// attempt when the timeout fires, is retried per the policy, and fails the
// run once its attempts run out.
func heartbeatTimeout(w *world) {
	e := w.start(registry(w.t, w.pool, kinds.Definitions(false)...), port.StartOptions{})
	id := w.enqueue(e, kinds.Silent, kinds.TagIn{}, "silent")
	v := w.waitStatus(e, id, port.StatusFailed)
	require.Equal(w.t, map[string]int{"silent": kinds.FastRetry.MaxAttempts}, w.effects(id))
	require.Contains(w.t, strings.ToLower(v.LastError), "heartbeat", "the run says why its step failed")
	require.Equal(w.t, kinds.FastRetry.MaxAttempts, v.Attempts)
}
