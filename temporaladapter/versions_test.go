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
	"github.com/taskport/taskport/temporaladapter/internal/testkinds"
)

var updateFixtures = flag.Bool("update-fixtures", false, "rewrite the replay fixtures in testdata/ from live runs")

// fixture names the committed history of one kind@vN.
func fixture(kind port.Kind, version int) string {
	return filepath.Join("testdata", temporaladapter.WorkflowType(kind, version)+".history.json")
}

// recordHistory writes the run's history to a temporary file (or, with
// -update-fixtures, to its fixture) and replays it on the v1+v2 registry.
func (h *harness) recordHistory(id port.RunID, kind port.Kind, version int) {
	h.t.Helper()
	path := filepath.Join(h.t.TempDir(), "history.json")
	if *updateFixtures {
		path = fixture(kind, version)
	}
	require.NoError(h.t, temporaladapter.WriteHistoryFile(context.Background(), h.c, id, path))
	require.NoError(h.t, temporaladapter.ReplayHistoryFile(replayRegistry(h.t), path))
}

func replayRegistry(t *testing.T) *port.Registry {
	reg := port.NewRegistry()
	require.NoError(t, testkinds.Register(reg, nil, 1, 2))
	return reg
}

func TestV1RunFinishesOnV1CodeAfterRestartWithV1AndV2(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := context.Background()
	v1 := h.engine(true, 1)
	old, err := v1.Enqueue(ctx, testkinds.KindVersioned, testkinds.WaitIn{Topic: "versions:1"}, port.EnqueueOptions{IdempotencyKey: "old", BusinessKey: "plan-v"})
	require.NoError(t, err)
	h.waitStatus(old, port.StatusWaiting)
	require.NoError(t, v1.Stop(ctx))

	both := h.engine(true, 1, 2)
	require.Eventually(t, func() bool {
		open, err := both.OpenRunsOnVersion(ctx, testkinds.KindVersioned, 1)
		return err == nil && slices.Contains(open, old)
	}, 30*time.Second, 100*time.Millisecond, "visibility lists the open v1 run")
	stale, err := both.ListRuns(ctx, port.RunFilter{Kind: testkinds.KindVersioned, BelowVersion: 2})
	require.NoError(t, err)
	require.Len(t, stale, 1)
	require.Equal(t, old, stale[0].ID)

	n, err := both.Signal(ctx, "versions:1", nil)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	h.waitStatus(old, port.StatusSucceeded)
	second, ok := h.ledger(old, "v1.second")
	require.True(t, ok, "the v1 run finished on v1 code")
	require.Equal(t, 1, second.Commits)
	_, ok = h.ledger(old, "v2.only")
	require.False(t, ok)

	fresh, err := both.Enqueue(ctx, testkinds.KindVersioned, testkinds.WaitIn{Topic: "versions:2"}, port.EnqueueOptions{IdempotencyKey: "new"})
	require.NoError(t, err)
	h.waitStatus(fresh, port.StatusSucceeded)
	_, ok = h.ledger(fresh, "v2.only")
	require.True(t, ok, "a new run uses v2")
	view, err := both.Get(ctx, fresh)
	require.NoError(t, err)
	require.Equal(t, 2, view.Version)

	h.recordHistory(old, testkinds.KindVersioned, 1)
	h.recordHistory(fresh, testkinds.KindVersioned, 2)
}

// TestRecordStepsAndWaitHistories records live histories of the other kinds
// and replays them (with -update-fixtures, into testdata/).
func TestRecordStepsAndWaitHistories(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := context.Background()
	eng := h.engine(true)
	steps, err := eng.Enqueue(ctx, testkinds.KindSteps, testkinds.StepsIn{Steps: 3}, port.EnqueueOptions{IdempotencyKey: "replay-steps"})
	require.NoError(t, err)
	wait, err := eng.Enqueue(ctx, testkinds.KindWait, testkinds.WaitIn{Topic: "replay:1"}, port.EnqueueOptions{IdempotencyKey: "replay-wait"})
	require.NoError(t, err)
	h.waitStatus(wait, port.StatusWaiting)
	_, err = eng.Signal(ctx, "replay:1", "go")
	require.NoError(t, err)
	h.waitStatus(steps, port.StatusSucceeded)
	h.waitStatus(wait, port.StatusSucceeded)
	h.recordHistory(steps, testkinds.KindSteps, 1)
	h.recordHistory(wait, testkinds.KindWait, 1)
}

// TestReplayCommittedHistories replays the committed history of every
// registered kind@vN on the v1+v2 worker, and shows that a step renamed
// within a version fails the replay.
//
// Not parallel: it runs before the recording tests, so -update-fixtures
// never replays a file while it is being rewritten.
func TestReplayCommittedHistories(t *testing.T) {
	reg := replayRegistry(t)
	for _, def := range reg.Definitions() {
		path := fixture(def.Kind, def.Version)
		_, err := os.Stat(path)
		require.NoError(t, err, "no replay fixture for %s@v%d: run the tests with -update-fixtures", def.Kind, def.Version)
		require.NoError(t, temporaladapter.ReplayHistoryFile(reg, path))
	}

	changed := port.NewRegistry()
	require.NoError(t, changed.Register(renamedV1()))
	err := temporaladapter.ReplayHistoryFile(changed, fixture(testkinds.KindVersioned, 1))
	require.Error(t, err, "a renamed step must fail the replay")
	t.Logf("replay of a renamed step: %v", err)
}

// renamedV1 is test.versioned@v1 with its first step renamed: an
// incompatible change made without bumping the version.
func renamedV1() port.Definition {
	return port.Definition{
		Kind: testkinds.KindVersioned, Version: 1, Retry: testkinds.Retry,
		Handler: port.Handle(func(f port.Flow, in testkinds.WaitIn) error {
			_, err := testkinds.Effect.Run(f, "v1.renamed", testkinds.EffectIn{Value: "v1"})
			return err
		}),
	}
}
