package test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/taskport/taskport/internal/testkit/pgtest"
	"github.com/taskport/taskport/ledger"
	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/temporaladapter"
	"github.com/taskport/taskport/test/contract/kinds"
)

// An operator resets a Temporal workflow (ResetWorkflowExecution) while its
// step holds a ledger operation: the reset's new run is the same taskport run
// (same generation) under a new Temporal run ID, so its attempt takes the
// operation over; the old run's scope is retired, a later Begin from it is
// refused, and the old attempt's commit is fenced. The new run then commits
// each step once.
func TestTemporalResetTakesOperationOverOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := devServer.Get(t)
	pool := pgtest.NewPool(t)
	_, err := pool.Exec(ctx, kinds.LedgerSchema)
	require.NoError(t, err)
	reg := port.NewRegistry()
	require.NoError(t, kinds.RegisterLedger(reg, pool))
	eng, err := temporaladapter.New(srv.Client, pool, reg, temporaladapter.Config{
		TaskQueue: scenarioQueue(pool), WorkerStopTimeout: 5 * time.Second, Logger: quiet()})
	require.NoError(t, err)
	require.NoError(t, eng.Start(ctx, port.StartOptions{Concurrency: 4}))
	t.Cleanup(func() { _ = eng.Stop(context.Background()) })

	plan, err := uuid.NewV7()
	require.NoError(t, err)
	require.NoError(t, kinds.NewPlan(ctx, pool, plan))
	// Stubborn: the old attempt goes on after the reset ends its run, as a
	// body that cannot see its heartbeat would.
	id, err := eng.Enqueue(ctx, kinds.Steps, kinds.StepsIn{Plan: plan, HoldAt: "s1", Gate: "reset", Stubborn: true},
		port.EnqueueOptions{IdempotencyKey: "reset"})
	require.NoError(t, err)
	old := waitOperation(t, pool, plan, "", "the first run never began s1")

	wid := temporaladapter.WorkflowID(id)
	desc, err := srv.Client.DescribeWorkflow(ctx, wid, "")
	require.NoError(t, err)
	oldRunID := desc.WorkflowExecution.RunID
	resp, err := srv.Client.ResetWorkflowExecution(ctx, &workflowservice.ResetWorkflowExecutionRequest{
		Namespace:                 srv.Namespace,
		WorkflowExecution:         &commonpb.WorkflowExecution{WorkflowId: wid, RunId: oldRunID},
		Reason:                    "test: operator reset",
		WorkflowTaskFinishEventId: firstWorkflowTaskCompleted(t, srv.Client, wid, oldRunID),
	})
	require.NoError(t, err)
	t.Logf("injected: reset workflow %s from run %s to run %s while run %s's attempt %s held s1",
		wid, oldRunID, resp.GetRunId(), id, old.Token)

	live := waitOperation(t, pool, plan, old.Token, "the reset's run never took s1 over")
	require.Equal(t, old.Generation, live.Generation, "the reset's run is the same taskport run: the same generation")
	require.True(t, strings.Contains(live.Scope, resp.GetRunId()), "scope %s is the new Temporal run's", live.Scope)
	require.Equal(t, []string{old.Scope}, live.RetiredScopes, "the replaced scope is retired")

	// The superseded execution begins again: refused, nothing written.
	_, err = ledger.Begin(ctx, pool, plan, "s1", port.FencingToken{Scope: old.Scope, Epoch: old.Epoch + 1, Generation: old.Generation})
	require.ErrorIs(t, err, port.ErrFenced)
	require.ErrorContains(t, err, "was superseded by "+live.Scope)
	again, _, err := ledger.Read(ctx, pool, plan, "s1")
	require.NoError(t, err)
	require.Equal(t, live.Token, again.Token)

	require.NoError(t, kinds.OpenGate(ctx, pool, "reset"))
	require.Eventually(t, func() bool {
		run, err := eng.Get(ctx, id)
		return err == nil && run.Status == port.StatusSucceeded
	}, time.Minute, 50*time.Millisecond, "the reset run never succeeded")
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM fault_fenced WHERE token = $1`, old.Token).Scan(&n))
		return n == 1
	}, time.Minute, 20*time.Millisecond, "the old attempt's commit was never fenced")
	var commits, byOld int
	require.NoError(t, pool.QueryRow(ctx, `
SELECT count(*) FILTER (WHERE commits = 1), count(*) FILTER (WHERE token = $2) FROM fault_commit WHERE run_id = $1`,
		string(id), old.Token).Scan(&commits, &byOld))
	require.Equal(t, len(kinds.StepNames), commits, "each step committed once")
	require.Zero(t, byOld, "nothing committed by the superseded run")
	done, _, err := ledger.Read(ctx, pool, plan, "s1")
	require.NoError(t, err)
	require.True(t, done.Done())
	require.Equal(t, live.Token, done.Token)
	t.Logf("checked: old scope %s retired and refused; its commit fenced; s1..s3 committed once by run %s", old.Scope, resp.GetRunId())
}

// waitOperation waits until the ledger row of s1 of plan records an attempt
// other than not (empty: any attempt) and returns it.
func waitOperation(t *testing.T, db ledger.DBTX, plan uuid.UUID, not, msg string) ledger.Operation {
	t.Helper()
	var o ledger.Operation
	require.Eventually(t, func() bool {
		var found bool
		var err error
		o, found, err = ledger.Read(context.Background(), db, plan, "s1")
		require.NoError(t, err)
		return found && o.Token != not
	}, time.Minute, 20*time.Millisecond, msg)
	return o
}

// firstWorkflowTaskCompleted is the reset point: the end of the workflow
// task that scheduled the first step.
func firstWorkflowTaskCompleted(t *testing.T, c client.Client, wid, runID string) int64 {
	t.Helper()
	it := c.GetWorkflowHistory(context.Background(), wid, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		require.NoError(t, err)
		if ev.GetEventType() == enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED {
			return ev.GetEventId()
		}
	}
	t.Fatalf("workflow %s run %s has no completed workflow task", wid, runID)
	return 0
}
