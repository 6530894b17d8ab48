package temporaladapter_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"

	"github.com/taskport/taskport/internal/runstore"
	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/temporaladapter"
	"github.com/taskport/taskport/test/contract/kinds"
)

// reconcileFast checks every 100 ms the runs whose projection is older than
// 100 ms, so a stale projection is corrected within a second.
var reconcileFast = temporaladapter.Config{ReconcileInterval: 100 * time.Millisecond, ReconcileAfter: 100 * time.Millisecond}

// The tests below wait on the Postgres projection (h.waitStatus reads
// runstore) and never call Get, which would correct the row itself.

// An operator terminates a workflow: the projection becomes failed, with the
// reason, and the run is a dead letter, without anybody reading the run. Two
// workers reconcile the same database, as a deployment's replicas do.
func TestReconcilerRecordsATerminatedWorkflow(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := context.Background()
	eng := h.engine(reconcileFast)
	h.engine(reconcileFast)
	id := h.enqueue(eng, kinds.Memo, wait("reconcile:terminated"), port.EnqueueOptions{IdempotencyKey: "terminated"})
	h.waitStatus(id, port.StatusWaiting)
	require.NoError(t, h.c.TerminateWorkflow(ctx, temporaladapter.WorkflowID(id), "", "operator gave up"))
	t.Logf("injected: terminated the workflow of run %s", id)

	run := h.waitStatus(id, port.StatusFailed)
	require.Equal(t, "workflow terminated: operator gave up", run.LastError)
	require.False(t, run.FinishedAt.IsZero())
	dead, err := eng.ListRuns(ctx, port.RunFilter{Statuses: []port.Status{port.StatusFailed}})
	require.NoError(t, err)
	require.Len(t, dead, 1)
	require.Equal(t, id, dead[0].ID)
}

// The workflow's own terminal projection write fails (Postgres refuses it
// until the fault is lifted) and the workflow completes anyway: the
// reconciler records the end, and the run's result, once Postgres accepts
// the write.
func TestReconcilerRecordsAnEndWhoseProjectionWriteFailed(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := context.Background()
	_, err := h.pool.Exec(ctx, `
CREATE FUNCTION test_refuse_end() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.status IN ('succeeded', 'failed', 'canceled') THEN
        RAISE EXCEPTION 'test: terminal projection refused';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER test_refuse_end BEFORE UPDATE ON taskport.run FOR EACH ROW EXECUTE FUNCTION test_refuse_end();`)
	require.NoError(t, err)
	// A short local-activity bound: the workflow gives up its projection
	// write after a second and completes.
	cfg := reconcileFast
	cfg.LocalActivityTimeout = time.Second
	eng := h.engine(cfg)
	id := h.enqueue(eng, kinds.Three, kinds.TagIn{}, port.EnqueueOptions{IdempotencyKey: "lost-end"})
	require.Eventually(t, func() bool {
		desc, err := h.c.DescribeWorkflow(ctx, temporaladapter.WorkflowID(id), "")
		return err == nil && desc.Status == enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED
	}, time.Minute, 50*time.Millisecond, "the workflow never completed")
	run, err := runstore.Get(ctx, h.pool, id)
	require.NoError(t, err)
	require.False(t, run.Status.Terminal(), "the fault refused every terminal write, the reconciler's too: %s", run.Status)
	t.Logf("injected: the terminal projection of run %s refused; workflow completed, projection says %s", id, run.Status)

	_, err = h.pool.Exec(ctx, `DROP TRIGGER test_refuse_end ON taskport.run`)
	require.NoError(t, err)
	run = h.waitStatus(id, port.StatusSucceeded)
	require.Empty(t, run.LastError)
	require.JSONEq(t, `["s1","s2","s3"]`, string(run.Output), "the result is read back from the workflow's")
	require.Equal(t, map[string]int{"s1": 1, "s2": 1, "s3": 1}, h.effects(id))
}

// A handler changed within one version (its first step renamed) fails the
// run on replay with the SDK's nondeterminism error; the SDK fails the
// workflow without the run's own terminal projection, and the reconciler
// records it, without anybody reading the run. (That the run fails and runs
// nothing more is the contract suite's
// step_renamed_in_same_version_fails_loudly.)
func TestReconcilerRecordsANondeterminismFailure(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := context.Background()
	before := h.engine(temporaladapter.Config{})
	in := wait("nondet:1")
	id := h.enqueue(before, kinds.Renamed, in, port.EnqueueOptions{IdempotencyKey: "nondet"})
	h.waitStatus(id, port.StatusWaiting)
	require.NoError(t, before.Stop(ctx))

	changed := h.engine(reconcileFast, kinds.Definitions(true)...)
	_, err := changed.Signal(ctx, in.Topic, nil)
	require.NoError(t, err)
	run := h.waitStatus(id, port.StatusFailed) // the projection, without a Get
	require.Contains(t, run.LastError, "TMPRL1100", "the SDK's nondeterminism error, from the close event")
	dead, err := changed.ListRuns(ctx, port.RunFilter{Statuses: []port.Status{port.StatusFailed}})
	require.NoError(t, err)
	require.Len(t, dead, 1)
	require.Equal(t, map[string]int{"first": 1}, h.effects(id))
}

// Get of a run whose workflow was terminated records its end, and answers
// with the row it wrote: the first Get's FinishedAt and UpdatedAt are those
// every later Get reads (Postgres's clock), not the workflow's close time.
func TestGetOfATerminatedWorkflowReadsOneFinishedAt(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := context.Background()
	eng := h.engine(temporaladapter.Config{ReconcileInterval: -1})
	id := h.enqueue(eng, kinds.Memo, wait("get:terminated"), port.EnqueueOptions{IdempotencyKey: "get-terminated"})
	h.waitStatus(id, port.StatusWaiting)
	require.NoError(t, h.c.TerminateWorkflow(ctx, temporaladapter.WorkflowID(id), "", "operator gave up"))
	var first port.RunView
	require.Eventually(t, func() bool {
		v, err := eng.Get(ctx, id)
		require.NoError(t, err)
		first = v
		return v.Status == port.StatusFailed
	}, time.Minute, 50*time.Millisecond, "the run never read failed")
	again, err := eng.Get(ctx, id)
	require.NoError(t, err)
	require.Equal(t, first, again, "a second Get of the ended run reads otherwise")
	row, err := runstore.Get(ctx, h.pool, id)
	require.NoError(t, err)
	require.Equal(t, row.FinishedAt, first.FinishedAt)
}

// unreachable is a client whose server does not answer DescribeWorkflow
// or ExecuteWorkflow, as during a Temporal outage; everything else is the
// real client's.
type unreachable struct{ client.Client }

func (unreachable) DescribeWorkflow(context.Context, string, string) (*client.WorkflowExecutionDescription, error) {
	return nil, serviceerror.NewUnavailable("temporal is down")
}

func (unreachable) ExecuteWorkflow(context.Context, client.StartWorkflowOptions, any, ...any) (client.WorkflowRun, error) {
	return nil, serviceerror.NewUnavailable("temporal is down")
}

// A finished run reads from Postgres alone: Get, Wait and Result answer
// while Temporal does not, as on the lease engine. An open run still needs
// Temporal's view of its step, and says so. Enqueue of the key of a run
// that has its workflow answers too.
func TestGetOfAFinishedRunNeedsNoTemporal(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := context.Background()
	eng := h.engine(temporaladapter.Config{ReconcileInterval: -1})
	done := h.enqueue(eng, kinds.Three, kinds.TagIn{Tag: "outage"}, port.EnqueueOptions{IdempotencyKey: "outage:done"})
	h.waitStatus(done, port.StatusSucceeded)
	open := h.enqueue(eng, kinds.Memo, wait("outage:open"), port.EnqueueOptions{IdempotencyKey: "outage:open"})
	h.waitStatus(open, port.StatusWaiting)
	want, err := eng.Get(ctx, done)
	require.NoError(t, err)

	reg := port.NewRegistry()
	require.NoError(t, kinds.Register(reg, h.pool, kinds.Definitions(false)...))
	down, err := temporaladapter.New(unreachable{h.c}, h.pool, reg, temporaladapter.Config{TaskQueue: h.queue, Logger: testLogger()})
	require.NoError(t, err)
	got, err := down.Get(ctx, done)
	require.NoError(t, err)
	require.Equal(t, want, got)
	waited, err := port.Wait(ctx, down, done)
	require.NoError(t, err)
	require.Equal(t, port.StatusSucceeded, waited.Status)
	_, err = port.Result[json.RawMessage](ctx, down, done)
	require.NoError(t, err)

	_, err = down.Get(ctx, open)
	require.ErrorContains(t, err, "temporal is down")

	// Enqueue of a key whose run has its workflow (past pending: finished,
	// or parked) answers from Postgres too, as the lease engine's does.
	for _, run := range []struct {
		id   port.RunID
		kind port.Kind
		in   any
		key  string
	}{
		{done, kinds.Three, kinds.TagIn{Tag: "outage"}, "outage:done"},
		{open, kinds.Memo, wait("outage:open"), "outage:open"},
	} {
		again, err := down.Enqueue(ctx, run.kind, run.in, port.EnqueueOptions{IdempotencyKey: run.key})
		require.NoError(t, err, run.key)
		require.Equal(t, run.id, again, run.key)
		many, err := down.EnqueueMany(ctx, []port.EnqueueItem{{Kind: run.kind, Input: run.in, Options: port.EnqueueOptions{IdempotencyKey: run.key}}})
		require.NoError(t, err, run.key)
		require.Equal(t, []port.EnqueueResult{{ID: run.id}}, many, run.key)
	}
}

// An Enqueue whose workflow start fails after the run was recorded returns
// the error; its caller gives up, and nobody enqueues the key again. A
// worker's reconciler starts the run, which then runs each step once:
// before, it read pending for ever.
func TestReconcilerStartsARunWhoseStartFailed(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	c, err := client.NewClientFromExisting(temporalClient, client.Options{
		Namespace: server.Namespace, Interceptors: []interceptor.ClientInterceptor{&failFirstStart{}},
	})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	h.c = c
	eng := h.engine(reconcileFast)
	ctx := context.Background()

	_, err = eng.Enqueue(ctx, kinds.Three, kinds.TagIn{Tag: "lost"}, port.EnqueueOptions{IdempotencyKey: "start-failed"})
	require.ErrorContains(t, err, "frontend unreachable")
	runs, err := eng.ListRuns(ctx, port.RunFilter{Kind: kinds.Three})
	require.NoError(t, err)
	require.Len(t, runs, 1, "the run was recorded before the start failed")
	t.Logf("injected: the start of run %s failed after its insert", runs[0].ID)

	h.waitStatus(runs[0].ID, port.StatusSucceeded)
	require.Equal(t, map[string]int{"s1": 1, "s2": 1, "s3": 1}, h.effects(runs[0].ID))
}

// failFirstStart fails the client's first ExecuteWorkflow as an
// unreachable frontend does, before the request leaves.
type failFirstStart struct {
	interceptor.ClientInterceptorBase
	failed atomic.Bool
}

func (f *failFirstStart) InterceptClient(next interceptor.ClientOutboundInterceptor) interceptor.ClientOutboundInterceptor {
	return &failFirstStartOut{ClientOutboundInterceptorBase: interceptor.ClientOutboundInterceptorBase{Next: next}, f: f}
}

type failFirstStartOut struct {
	interceptor.ClientOutboundInterceptorBase
	f *failFirstStart
}

func (o *failFirstStartOut) ExecuteWorkflow(ctx context.Context, in *interceptor.ClientExecuteWorkflowInput) (client.WorkflowRun, error) {
	if o.f.failed.CompareAndSwap(false, true) {
		return nil, serviceerror.NewUnavailable("frontend unreachable")
	}
	return o.Next.ExecuteWorkflow(ctx, in)
}
