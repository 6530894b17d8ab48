package temporaladapter_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/temporaladapter"
	"github.com/taskport/taskport/temporaladapter/internal/testkinds"
)

// versionedEngine starts an engine that polls as build buildID of the
// worker deployment named after the harness's queue. Its steps record the
// build that ran them in the ledger ("value@build"), which is how the test
// knows where each step ran.
func (h *harness) versionedEngine(buildID string) *temporaladapter.Engine {
	h.t.Helper()
	reg := port.NewRegistry()
	require.NoError(h.t, reg.Register(testkinds.Definitions()...))
	ledger := testkinds.Ledger{Pool: h.pool}
	require.NoError(h.t, reg.RegisterActivity(port.Bind(testkinds.Effect, func(ctx context.Context, in testkinds.EffectIn) (string, error) {
		in.Value += "@" + buildID
		return ledger.Effect(ctx, in)
	})))
	eng, err := temporaladapter.New(h.c, h.pool, reg, temporaladapter.Config{
		TaskQueue: h.queue, WorkerStopTimeout: 5 * time.Second, Logger: testLogger(),
		Deployment: temporaladapter.Deployment{Name: h.queue, BuildID: buildID},
	})
	require.NoError(h.t, err)
	require.NoError(h.t, eng.Start(context.Background(), port.StartOptions{Concurrency: 4}))
	h.t.Cleanup(func() { _ = eng.Stop(context.Background()) })
	return eng
}

// setCurrent makes buildID the deployment's current version, as
// temporal-worker-controller does once the new build's pods poll. The
// version exists only after its first poll, so this retries until then.
func (h *harness) setCurrent(buildID string) {
	h.t.Helper()
	handle := h.c.WorkerDeploymentClient().GetHandle(h.queue)
	var err error
	require.Eventually(h.t, func() bool {
		_, err = handle.SetCurrentVersion(context.Background(), client.WorkerDeploymentSetCurrentVersionOptions{BuildID: buildID})
		return err == nil
	}, 60*time.Second, 200*time.Millisecond, "set current version %s: %v", buildID, err)
}

func (h *harness) versioning(id port.RunID) (enumspb.VersioningBehavior, string) {
	h.t.Helper()
	d, err := h.c.DescribeWorkflow(context.Background(), temporaladapter.WorkflowID(id), "")
	require.NoError(h.t, err)
	v := d.RawResponse.GetWorkflowExecutionInfo().GetVersioningInfo()
	return v.GetBehavior(), v.GetDeploymentVersion().GetBuildId()
}

// Worker Deployment Versioning on the dev server: a run started on build A
// is pinned to A and finishes there after B became current, while new runs
// start and finish on B. The ledger rows say which build ran each step.
func TestPinnedRunFinishesOnItsBuild(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := context.Background()

	a := h.versionedEngine("A")
	h.setCurrent("A")
	old, err := a.Enqueue(ctx, testkinds.KindWait, testkinds.WaitIn{Topic: "deploy:old"}, port.EnqueueOptions{IdempotencyKey: "old"})
	require.NoError(t, err)
	h.waitStatus(old, port.StatusWaiting)

	h.versionedEngine("B")
	h.setCurrent("B")
	fresh, err := a.Enqueue(ctx, testkinds.KindWait, testkinds.WaitIn{Topic: "deploy:new"}, port.EnqueueOptions{IdempotencyKey: "new"})
	require.NoError(t, err)
	h.waitStatus(fresh, port.StatusWaiting)

	for _, topic := range []port.Topic{"deploy:old", "deploy:new"} {
		n, err := a.Signal(ctx, topic, "go")
		require.NoError(t, err)
		require.Equal(t, 1, n)
	}
	h.waitStatus(old, port.StatusSucceeded)
	h.waitStatus(fresh, port.StatusSucceeded)

	for id, build := range map[port.RunID]string{old: "A", fresh: "B"} {
		for _, step := range []string{"before", "after"} {
			row, ok := h.ledger(id, step)
			require.True(t, ok, "run %s step %s", id, step)
			require.True(t, strings.HasSuffix(row.Result, "@"+build), "run %s step %s ran on %q, want build %s", id, step, row.Result, build)
		}
		behavior, got := h.versioning(id)
		require.Equal(t, enumspb.VERSIONING_BEHAVIOR_PINNED, behavior, "run %s", id)
		require.Equal(t, build, got, "run %s", id)
	}
}

// A deployment needs both its name and its build id.
func TestDeploymentConfigNeedsBothNames(t *testing.T) {
	h := newHarness(t)
	_, err := temporaladapter.New(h.c, h.pool, port.NewRegistry(), temporaladapter.Config{Deployment: temporaladapter.Deployment{Name: "taskport"}})
	require.ErrorContains(t, err, "deployment needs both a name and a build id")
}
