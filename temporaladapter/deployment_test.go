package temporaladapter_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/temporaladapter"
	"github.com/taskport/taskport/test/contract/kinds"
)

// versionedEngine starts an engine that polls as build buildID of the
// worker deployment named after the harness's queue. Its effect steps note
// the build that ran them ("@build"), which is how the test knows where
// each step ran.
func (h *harness) versionedEngine(buildID string) *temporaladapter.Engine {
	h.t.Helper()
	reg := port.NewRegistry()
	require.NoError(h.t, reg.Register(kinds.Definitions(false)...))
	b := kinds.Bodies{Pool: h.pool}
	require.NoError(h.t, reg.RegisterActivity(port.Bind(kinds.Effect, func(ctx context.Context, in kinds.EffectIn) (int, error) {
		in.Note += "@" + buildID
		return b.Effect(ctx, in)
	}), port.Bind(kinds.Gate, b.Gate)))
	return h.serve(temporaladapter.Config{Deployment: temporaladapter.Deployment{Name: h.queue, BuildID: buildID}}, reg)
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
// start and finish on B. The effect rows say which build ran each step.
func TestPinnedRunFinishesOnItsBuild(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := context.Background()

	a := h.versionedEngine("A")
	h.setCurrent("A")
	old := h.enqueue(a, kinds.Memo, wait("deploy:old"), port.EnqueueOptions{IdempotencyKey: "old"})
	h.waitStatus(old, port.StatusWaiting)

	h.versionedEngine("B")
	h.setCurrent("B")
	fresh := h.enqueue(a, kinds.Memo, wait("deploy:new"), port.EnqueueOptions{IdempotencyKey: "new"})
	h.waitStatus(fresh, port.StatusWaiting)

	for _, topic := range []port.Topic{"deploy:old", "deploy:new"} {
		n, err := a.Signal(ctx, topic, "go")
		require.NoError(t, err)
		require.Equal(t, 1, n)
	}
	h.waitStatus(old, port.StatusSucceeded)
	h.waitStatus(fresh, port.StatusSucceeded)

	for id, build := range map[port.RunID]string{old: "A", fresh: "B"} {
		notes, err := kinds.Notes(ctx, h.pool, id)
		require.NoError(t, err)
		require.Equal(t, map[string]string{"a": "@" + build, "b": "@" + build}, notes, "run %s: each step ran on build %s", id, build)
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
