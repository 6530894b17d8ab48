package temporaladapter_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"

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
