package contract

import (
	"fmt"
	"math"
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

	_, freshID := resumeUnder(w, kinds.MarkerKind(1, 3), kept, keptID, "fresh")
	require.Equal(w.t, map[string]string{"before": "2", "after": "2"}, w.notes(keptID), "the replayed marker returned the recorded 2")
	require.Equal(w.t, map[string]string{"before": "3", "after": "3"}, w.notes(freshID))
	for _, id := range []port.RunID{keptID, freshID} {
		require.Equal(w.t, map[string]int{"before": 1, "after": 1}, w.effects(id))
	}
}

// resumeUnder starts the Marker code def, enqueues a new run of it under
// key, and lets that run and the parked run keptID (waiting as kept says)
// finish, with a signal each.
func resumeUnder(w *world, def port.Definition, kept kinds.WaitIn, keptID port.RunID, key string) (port.TaskEngine, port.RunID) {
	e := w.start(registry(w.t, w.pool, append(kinds.Definitions(false), def)...), port.StartOptions{})
	fresh := longWait("marker-" + key)
	freshID := w.enqueue(e, kinds.Marker, fresh, key)
	w.waitStatus(e, freshID, port.StatusWaiting)
	w.signalUntilDelivered(e, kept.Topic)
	w.signalUntilDelivered(e, fresh.Topic)
	w.waitStatus(e, keptID, port.StatusSucceeded)
	w.waitStatus(e, freshID, port.StatusSucceeded)
	return e, freshID
}

// A GetVersion added to code with runs in flight: a run that went past its
// place before it was added gets port.DefaultVersion (and code that
// supports it keeps the run on the old path), a new run gets the newest
// version, and code that no longer supports DefaultVersion fails the
// in-flight run before any further step, on every engine.
func versionMarkerAddedInFlight(w *world) {
	e := w.start(registry(w.t, w.pool, append(kinds.Definitions(false), kinds.UnmarkedKind())...), port.StartOptions{})
	kept, dropped := longWait("marker-added-kept"), longWait("marker-added-dropped")
	keptID := w.enqueue(e, kinds.Marker, kept, "added-kept")
	droppedID := w.enqueue(e, kinds.Marker, dropped, "added-dropped")
	w.waitStatus(e, keptID, port.StatusWaiting)
	w.waitStatus(e, droppedID, port.StatusWaiting)
	w.stop(e)

	e2, freshID := resumeUnder(w, kinds.MarkerKind(port.DefaultVersion, 1), kept, keptID, "added-fresh")
	require.Equal(w.t, map[string]string{"before": "unmarked", "after": "-1"}, w.notes(keptID), "the run in flight got DefaultVersion")
	require.Equal(w.t, map[string]string{"before": "1", "after": "1"}, w.notes(freshID))
	w.stop(e2)

	e3 := w.start(registry(w.t, w.pool, append(kinds.Definitions(false), kinds.MarkerKind(1, 1))...), port.StartOptions{})
	w.signalUntilDelivered(e3, dropped.Topic)
	v := w.waitStatus(e3, droppedID, port.StatusFailed)
	require.Contains(w.t, v.LastError, "new-step", "%+v", v)
	require.Equal(w.t, map[string]int{"before": 1}, w.effects(droppedID), "no step ran past the unsupported marker")
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

// A handler that misuses its Flow (a negative duration, an activity name
// no engine could schedule, a retry policy out of range) and returns the
// error fails its run with that error as LastError, worded the same on
// every engine, and the checks come in the same order: a step's options before its activity's binding,
// so such a step never starts (no current step, no attempt). So does a
// GetVersion that cannot be recorded, which has no error to return, and a
// handler that panics. A change id met twice in one run returns the version
// it got the first time, and a run that continued as new after a step and
// then ran none still names that step.
func flowAlike(w *world) {
	const misuse port.Kind = "ct.misuse"
	topic := port.Topic("ct:misuse-signal")
	def := port.Definition{Kind: misuse, Version: 1, Retry: port.FileRetry(), Handler: port.Handle(func(f port.Flow, m string) error {
		var s string
		switch m {
		case "sleep":
			return f.Sleep("nap", -time.Second)
		case "timeout":
			_, err := kinds.Effect.Run(f, "s", kinds.EffectIn{Label: "timeout"}, port.WithTimeout(-time.Second))
			return err
		case "unbound-timeout":
			return f.Step("s", "ct.never_bound", "x", nil, port.WithTimeout(-time.Second))
		case "activity-empty":
			return f.Step("s", "", "x", nil)
		case "activity-bad-name":
			return f.Step("s", "ct effect", "x", nil)
		case "max-attempts":
			return f.Step("s", kinds.Effect.Name(), kinds.EffectIn{Label: "max-attempts"}, nil, port.WithRetry(port.RetryPolicy{MaxAttempts: math.MaxInt32 + 1}))
		case "decode":
			return f.Step("s", kinds.Effect.Name(), kinds.EffectIn{Label: "decode"}, &s)
		case "signal":
			_, err := f.WaitSignal("w", topic, time.Minute, &s)
			return err
		case "marker-bad-id":
			f.GetVersion("bad id", 1, 2)
		case "marker-empty-range":
			f.GetVersion("c", 3, 1)
		case "marker-twice":
			if a, b := f.GetVersion("c", 1, 2), f.GetVersion("c", 1, 3); a != 2 || b != 2 {
				return fmt.Errorf("GetVersion returned %d, then %d", a, b)
			}
		case "panic":
			panic("boom")
		case "continue":
			if _, err := kinds.Effect.Run(f, "s", kinds.EffectIn{Label: "continue"}); err != nil {
				return err
			}
			return port.ContinueAsNew("continued")
		}
		return nil
	})}
	const notString = "json: cannot unmarshal number into Go value of type string"
	cases := []struct {
		misuse, lastError, step string
		attempts                int
	}{
		{"sleep", "invalid duration: must not be negative, got -1s", "", 0},
		{"timeout", "step s: invalid timeout: must not be negative, got -1s", "", 0},
		{"unbound-timeout", "step s: invalid timeout: must not be negative, got -1s", "", 0},
		{"activity-empty", "step s: invalid activity: must not be empty", "", 0},
		{"activity-bad-name", `step s: invalid activity: character ' ' not allowed in "ct effect" (letters, digits and . _ - : / only)`, "", 0},
		{"max-attempts", "step s: invalid retry.max_attempts: must be at most 2147483647, got 2147483648", "", 0},
		{"decode", "step s: decode result of ct.effect: " + notString, "s", 1},
		{"signal", "wait w: decode signal payload: " + notString, "w", 0},
		{"marker-bad-id", `version marker "bad id": invalid change_id: character ' ' not allowed in "version:bad id" (letters, digits and . _ - : / only)`, "", 0},
		{"marker-empty-range", `version marker "c": invalid max_supported: 1 is below min_supported 3`, "", 0},
		{"panic", "handler panicked: boom", "", 0},
	}
	e := w.start(registry(w.t, w.pool, append(kinds.Definitions(false), def)...), port.StartOptions{})
	// Kept for the wait, which receives it at once.
	_, err := e.Signal(bg, topic, 42)
	require.NoError(w.t, err)
	for _, c := range cases {
		id := w.enqueue(e, misuse, c.misuse, c.misuse)
		v := w.waitStatus(e, id, port.StatusFailed)
		require.Equal(w.t, c.lastError, v.LastError, c.misuse)
		require.Equal(w.t, c.step, v.CurrentStep, c.misuse)
		require.Equal(w.t, c.attempts, v.Attempts, c.misuse)
	}
	twice := w.enqueue(e, misuse, "marker-twice", "marker-twice")
	v := w.waitStatus(e, twice, port.StatusSucceeded, port.StatusFailed)
	require.Equal(w.t, port.StatusSucceeded, v.Status, "%+v", v)
	continued := w.enqueue(e, misuse, "continue", "continue")
	v = w.waitStatus(e, continued, port.StatusSucceeded, port.StatusFailed)
	require.Equal(w.t, port.StatusSucceeded, v.Status, "%+v", v)
	require.Equal(w.t, "s", v.CurrentStep, "the step the run last was in, before it continued as new")
	require.Equal(w.t, 1, v.Attempts)
}
