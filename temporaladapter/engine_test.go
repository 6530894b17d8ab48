package temporaladapter_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"

	"github.com/taskport/taskport/internal/testkit/pgtest"
	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/temporaladapter"
	"github.com/taskport/taskport/test/contract/kinds"
)

// A run is findable in the Temporal UI by kind, version and business key
// (search attributes), under the workflow type kind@vN, and its memo holds
// the idempotency key and the input. What a run does is the contract
// suite's; this is how Temporal shows it.
func TestRunIsFindableInTheTemporalUI(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	eng := h.engine(temporaladapter.Config{})
	ctx := context.Background()
	id := h.enqueue(eng, kinds.Three, kinds.TagIn{Tag: "ui"}, port.EnqueueOptions{IdempotencyKey: "plan:1:three", BusinessKey: "plan-1"})
	h.waitStatus(id, port.StatusSucceeded)

	desc, err := h.c.DescribeWorkflow(ctx, temporaladapter.WorkflowID(id), "")
	require.NoError(t, err)
	require.Equal(t, "ct.three@v1", desc.WorkflowType.Name)
	sa := desc.TypedSearchAttributes
	kind, _ := sa.GetKeyword(temporal.NewSearchAttributeKeyKeyword(temporaladapter.AttrKind))
	version, _ := sa.GetInt64(temporal.NewSearchAttributeKeyInt64(temporaladapter.AttrVersion))
	plan, _ := sa.GetKeyword(temporal.NewSearchAttributeKeyKeyword(temporaladapter.AttrBusinessKey))
	require.Equal(t, []any{"ct.three", int64(1), "plan-1"}, []any{kind, version, plan})
	require.Contains(t, desc.Memo.GetFields(), "taskport")
	var memo struct {
		IdempotencyKey string `json:"idempotency_key"`
		Input          string `json:"input"`
	}
	require.NoError(t, json.Unmarshal(desc.Memo.GetFields()["taskport"].GetData(), &memo))
	require.Equal(t, "plan:1:three", memo.IdempotencyKey)
	require.Empty(t, memo.Input, "the input is shown only for kinds that opt in (ShowInput)")
}

// Runs start with the engine's workflow task timeout (Temporal's own default
// is 10s): a task handed to a frozen worker's long poll is retried elsewhere
// only when it runs out.
func TestRunsStartWithTheWorkflowTaskTimeout(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := context.Background()
	for _, c := range []struct {
		cfg  temporaladapter.Config
		want time.Duration
	}{
		{temporaladapter.Config{}, temporaladapter.DefaultWorkflowTaskTimeout},
		{temporaladapter.Config{WorkflowTaskTimeout: 7 * time.Second}, 7 * time.Second},
	} {
		eng := h.engine(c.cfg)
		id := h.enqueue(eng, kinds.Three, kinds.TagIn{Tag: "wft"}, port.EnqueueOptions{IdempotencyKey: "wft:" + c.want.String()})
		h.waitStatus(id, port.StatusSucceeded)
		desc, err := h.c.DescribeWorkflow(ctx, temporaladapter.WorkflowID(id), "")
		require.NoError(t, err)
		require.Equal(t, c.want, desc.RawResponse.GetExecutionConfig().GetDefaultWorkflowTaskTimeout().AsDuration())
	}
}

// A retried attempt sends the run's next workflow task to the task queue
// every worker polls, not to the sticky queue of the worker that ran the
// last one: after a worker dies, its sticky queue would hold that task until
// the sticky schedule-to-start timeout (the recovery soak measures the
// second it saves). The step of FailKind fails on each of its 3 attempts;
// the workflow task its final failure schedules is read from the history.
func TestRetriedAttemptUnsticksTheRun(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	eng := h.engine(temporaladapter.Config{})
	id := h.enqueue(eng, kinds.FailKind, kinds.TagIn{Tag: "unstick"}, port.EnqueueOptions{IdempotencyKey: "unstick"})
	h.waitStatus(id, port.StatusFailed)
	require.Equal(t, kinds.FastRetry.MaxAttempts, h.effects(id)["fail:retryable"])

	var queues []enumspb.TaskQueueKind // of each workflow task scheduled, in order
	failedAt := -1
	for _, ev := range h.history(id) {
		switch ev.GetEventType() {
		case enumspb.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED:
			queues = append(queues, ev.GetWorkflowTaskScheduledEventAttributes().GetTaskQueue().GetKind())
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_FAILED:
			if failedAt < 0 {
				failedAt = len(queues)
			}
		}
	}
	require.GreaterOrEqual(t, failedAt, 1, "the step failed after a workflow task")
	require.Greater(t, len(queues), failedAt+1, "workflow tasks followed the failure")
	require.Equal(t, enumspb.TASK_QUEUE_KIND_NORMAL, queues[failedAt],
		"the workflow task after the retried step went to the shared queue (all: %v)", queues)
	// The history does record sticky queues: the worker that took that task
	// made the run sticky again.
	require.Contains(t, queues[failedAt+1:], enumspb.TASK_QUEUE_KIND_STICKY, "all: %v", queues)
}

// An activity bound under the name of one of the engine's own activities
// is refused by Start with a field error, where the SDK's registry used to
// panic and take the worker's process down.
func TestStartRefusesAnActivityNamedAsTheEnginesOwn(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	for _, name := range []string{"project", "addWaiter", "removeWaiters", "takeKept", "waitReturned"} {
		reg := port.NewRegistry()
		require.NoError(t, kinds.Register(reg, h.pool, kinds.Definitions(false)...))
		require.NoError(t, reg.RegisterActivity(port.Bind(port.DeclareActivity[string, string](name),
			func(_ context.Context, s string) (string, error) { return s, nil })))
		eng, err := temporaladapter.New(h.c, h.pool, reg, temporaladapter.Config{TaskQueue: h.queue, Logger: testLogger()})
		require.NoError(t, err)
		var fe *port.FieldError
		require.ErrorAs(t, eng.Start(context.Background(), port.StartOptions{}), &fe, name)
		require.Equal(t, "activity", fe.Field)
		require.ErrorIs(t, fe, port.ErrInvalidInput)
		require.Contains(t, fe.Error(), name)
		require.NoError(t, eng.Stop(context.Background()), "nothing started: Stop is a no-op")
	}
}

// A worker whose schema is not the default, on the default task queue,
// is warned at Start: another schema's worker on that queue would take its
// runs and fail them. With a queue of its own it is not.
func TestANamedSchemaOnTheDefaultQueueIsWarned(t *testing.T) {
	pool := pgtest.NewEnginePool(t, "shop")
	for _, tc := range []struct {
		queue string
		warns bool
	}{{"", true}, {"shop-" + fmt.Sprint(time.Now().UnixNano()), false}} {
		reg := port.NewRegistry()
		require.NoError(t, reg.Register(port.Definition{Kind: "shop.noop", Version: 1, Retry: port.NetworkRetry(),
			Handler: port.Handle(func(port.Flow, struct{}) error { return nil })}))
		var logs bytes.Buffer
		eng, err := temporaladapter.New(temporalClient, pool, reg, temporaladapter.Config{Schema: "shop", TaskQueue: tc.queue,
			WorkerStopTimeout: 5 * time.Second, Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))})
		require.NoError(t, err)
		require.NoError(t, eng.Start(context.Background(), port.StartOptions{}))
		require.NoError(t, eng.Stop(context.Background()))
		require.Equal(t, tc.warns, strings.Contains(logs.String(), "give each schema its own Config.TaskQueue"), "queue %q: %s", tc.queue, logs.String())
	}
}
