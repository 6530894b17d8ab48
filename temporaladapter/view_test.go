package temporaladapter

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	failurepb "go.temporal.io/api/failure/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/taskport/taskport/port"
)

// When Get's overlay of the description changes a field of the projection,
// UpdatedAt advances (port/spec.go: "advanced whenever a field above
// changes"), to a time read from the description, so the same state reads
// the same on every Get; when it changes nothing, UpdatedAt stays.
func TestOverlayAdvancesUpdatedAt(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC)
	projected := port.RunView{Status: port.StatusRunning, CurrentStep: "s", Attempts: 1, LastError: "flaky",
		CreatedAt: t0.Add(-time.Second), UpdatedAt: t0}
	describe := func(state enumspb.PendingActivityState, attempt int32, started time.Time) *client.WorkflowExecutionDescription {
		return &client.WorkflowExecutionDescription{
			WorkflowExecutionMetadata: client.WorkflowExecutionMetadata{Status: enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING},
			RawResponse: &workflowservice.DescribeWorkflowExecutionResponse{
				WorkflowExecutionInfo: &workflowpb.WorkflowExecutionInfo{StartTime: timestamppb.New(t0.Add(-time.Second))},
				PendingActivities: []*workflowpb.PendingActivityInfo{{ActivityId: "s", State: state, Attempt: attempt,
					LastStartedTime: timestamppb.New(started), LastFailure: &failurepb.Failure{Message: "flaky"}}},
			},
		}
	}
	// The second attempt started after the projection: the view moves to
	// it, and UpdatedAt to its start, on every read of that state.
	t1 := t0.Add(2 * time.Second)
	v := viewFromDescription(projected, describe(enumspb.PENDING_ACTIVITY_STATE_STARTED, 2, t1))
	require.Equal(t, 2, v.Attempts)
	require.Equal(t, t1, v.UpdatedAt)
	require.Equal(t, v, viewFromDescription(projected, describe(enumspb.PENDING_ACTIVITY_STATE_STARTED, 2, t1)))

	// The first attempt, still running as projected: nothing changes.
	v = viewFromDescription(projected, describe(enumspb.PENDING_ACTIVITY_STATE_STARTED, 1, t0.Add(-time.Millisecond)))
	require.Equal(t, projected, v)

	// A change whose times Temporal gives are all before the projection's
	// (another clock): UpdatedAt still moves past it.
	v = viewFromDescription(projected, describe(enumspb.PENDING_ACTIVITY_STATE_STARTED, 3, t0.Add(-time.Millisecond)))
	require.Equal(t, 3, v.Attempts)
	require.Equal(t, t0.Add(time.Microsecond), v.UpdatedAt)
}
