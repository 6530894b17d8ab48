package temporaladapter_test

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/temporaladapter"
	"github.com/taskport/taskport/test/contract/kinds"
)

var updateFixtures = flag.Bool("update-fixtures", false, "rewrite the replay fixtures in testdata/ from live runs")

// fixture names the committed history of one kind@vN.
func fixture(kind port.Kind, version int) string {
	return filepath.Join("testdata", temporaladapter.WorkflowType(kind, version)+".history.json")
}

// recordHistory writes the run's history to a temporary file (or, with
// -update-fixtures, to its fixture) and replays it on the replay registry.
func (h *harness) recordHistory(id port.RunID, kind port.Kind, version int) {
	h.t.Helper()
	path := filepath.Join(h.t.TempDir(), "history.json")
	if *updateFixtures {
		path = fixture(kind, version)
	}
	require.NoError(h.t, temporaladapter.WriteHistoryFile(context.Background(), h.c, id, path))
	require.NoError(h.t, temporaladapter.ReplayHistoryFile(replayRegistry(h.t, false), path))
}

// replayed are the kinds with a committed history: a straight one, a wait,
// one that a renamed step breaks, and both versions of a versioned kind.
var replayed = []port.Kind{kinds.Three, kinds.Wait, kinds.Renamed, kinds.Versioned}

// replayRegistry registers the replayed kinds (Renamed with its first step
// renamed when renamed is set) and Versioned@v2.
func replayRegistry(t *testing.T, renamed bool) *port.Registry {
	t.Helper()
	var defs []port.Definition
	for _, d := range kinds.Definitions(renamed) {
		if slices.Contains(replayed, d.Kind) {
			defs = append(defs, d)
		}
	}
	reg := port.NewRegistry()
	require.NoError(t, kinds.Register(reg, nil, append(defs, kinds.VersionTwo())...))
	return reg
}

// Runs of every replayed kind@vN, recorded and replayed (with
// -update-fixtures, into testdata/). The v1 run is parked in its wait while
// the worker restarts with v1 and v2: Temporal's visibility lists it as an
// open run on v1 (OpenRunsOnVersion) before it finishes.
func TestRecordHistories(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := context.Background()
	v1 := h.engine(temporaladapter.Config{})
	old := h.enqueue(v1, kinds.Versioned, wait("versions:1"), port.EnqueueOptions{IdempotencyKey: "old"})
	renamed := h.enqueue(v1, kinds.Renamed, wait("versions:renamed"), port.EnqueueOptions{IdempotencyKey: "renamed"})
	three := h.enqueue(v1, kinds.Three, kinds.TagIn{}, port.EnqueueOptions{IdempotencyKey: "three"})
	waited := h.enqueue(v1, kinds.Wait, wait("versions:wait"), port.EnqueueOptions{IdempotencyKey: "wait"})
	for _, id := range []port.RunID{old, renamed, waited} {
		h.waitStatus(id, port.StatusWaiting)
	}
	// Nothing in flight when v1 stops: the dev server can lose a task
	// handed to a stopping worker (Features.LosesPolledTasksOnStop), and
	// its retry would wait out the step's timeout.
	h.waitStatus(three, port.StatusSucceeded)
	require.NoError(t, v1.Stop(ctx))

	both := h.engine(temporaladapter.Config{}, append(kinds.Definitions(false), kinds.VersionTwo())...)
	require.Eventually(t, func() bool {
		open, err := both.OpenRunsOnVersion(ctx, kinds.Versioned, 1)
		return err == nil && slices.Contains(open, old)
	}, 30*time.Second, 100*time.Millisecond, "visibility lists the open v1 run")
	fresh := h.enqueue(both, kinds.Versioned, wait("versions:2"), port.EnqueueOptions{IdempotencyKey: "new"})
	require.NoError(t, kinds.OpenEffectGate(ctx, h.pool, "versions:wait")) // ct.wait goes on once its gate is open
	for _, topic := range []port.Topic{"versions:1", "versions:renamed", "versions:wait"} {
		n, err := both.Signal(ctx, topic, "go")
		require.NoError(t, err)
		require.Equal(t, 1, n)
	}
	for _, id := range []port.RunID{old, renamed, three, waited, fresh} {
		h.waitStatus(id, port.StatusSucceeded)
	}
	h.recordHistory(old, kinds.Versioned, 1)
	h.recordHistory(fresh, kinds.Versioned, 2)
	h.recordHistory(renamed, kinds.Renamed, 1)
	h.recordHistory(three, kinds.Three, 1)
	h.recordHistory(waited, kinds.Wait, 1)
}

// TestReplayCommittedHistories replays the committed history of every
// replayed kind@vN, and shows that a step renamed within a version fails
// the replay.
//
// Not parallel: it runs before the recording test, so -update-fixtures
// never replays a file while it is being rewritten.
func TestReplayCommittedHistories(t *testing.T) {
	reg := replayRegistry(t, false)
	for _, def := range reg.Definitions() {
		path := fixture(def.Kind, def.Version)
		_, err := os.Stat(path)
		require.NoError(t, err, "no replay fixture for %s@v%d: run the tests with -update-fixtures", def.Kind, def.Version)
		require.NoError(t, temporaladapter.ReplayHistoryFile(reg, path))
	}
	err := temporaladapter.ReplayHistoryFile(replayRegistry(t, true), fixture(kinds.Renamed, 1))
	require.Error(t, err, "a renamed step must fail the replay")
	t.Logf("replay of a renamed step: %v", err)
}
