package temporaladapter_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	taskqueuepb "go.temporal.io/api/taskqueue/v1"
	"go.temporal.io/api/workflowservice/v1"
	"google.golang.org/grpc"

	"github.com/taskport/taskport/temporaladapter"
)

// LongPollTimeout bounds the worker's long polls, and only them: the
// server stops handing a frozen worker tasks that long (less its 1 s
// budget) after it froze, whatever the server's long poll expiration
// (docs/engines.md, "Throughput and recovery time differ"). A caller's
// shorter deadline stands; every other call keeps the deadline it had.
func TestLongPollTimeoutBoundsOnlyThePolls(t *testing.T) {
	const bound = 4 * time.Second
	intercept := temporaladapter.LongPollTimeout(bound)
	deadline := func(ctx context.Context, method string) (time.Duration, bool) {
		var left time.Duration
		var set bool
		err := intercept(ctx, method, nil, nil, nil, func(ctx context.Context, _ string, _, _ any, _ *grpc.ClientConn, _ ...grpc.CallOption) error {
			var d time.Time
			d, set = ctx.Deadline()
			left = time.Until(d)
			return nil
		})
		require.NoError(t, err)
		return left, set
	}
	sdkPoll, cancel := context.WithTimeout(context.Background(), 70*time.Second) // the SDK's own bound
	defer cancel()
	for _, m := range []string{
		workflowservice.WorkflowService_PollWorkflowTaskQueue_FullMethodName,
		workflowservice.WorkflowService_PollActivityTaskQueue_FullMethodName,
		workflowservice.WorkflowService_PollNexusTaskQueue_FullMethodName,
	} {
		left, set := deadline(sdkPoll, m)
		require.True(t, set, m)
		require.LessOrEqual(t, left, bound, m)
		require.Greater(t, left, bound-time.Second, m)
	}
	short, cancelShort := context.WithTimeout(context.Background(), time.Second)
	defer cancelShort()
	left, _ := deadline(short, workflowservice.WorkflowService_PollActivityTaskQueue_FullMethodName)
	require.LessOrEqual(t, left, time.Second, "a caller's shorter deadline stands")

	// A history long poll (a client waiting on a result) and an ordinary
	// call are left alone.
	for _, m := range []string{
		workflowservice.WorkflowService_GetWorkflowExecutionHistory_FullMethodName,
		workflowservice.WorkflowService_RespondActivityTaskCompleted_FullMethodName,
	} {
		left, set := deadline(sdkPoll, m)
		require.True(t, set, m)
		require.Greater(t, left, time.Minute, m)
		_, set = deadline(context.Background(), m)
		require.False(t, set, m)
	}
}

// On a real server a bounded poll that finds no task ends as the SDK's own
// do at the server's expiry: an empty answer a second before the bound, not
// a DeadlineExceeded (which the SDK would log and back off from), and not
// after the server's default minute.
func TestBoundedPollEndsEmptyBeforeItsDeadline(t *testing.T) {
	t.Parallel()
	c, err := temporaladapter.Dial(context.Background(), temporaladapter.ClientConfig{HostPort: server.HostPort, Namespace: server.Namespace,
		Logger: testLogger(), PollTimeout: temporaladapter.MinPollTimeout})
	require.NoError(t, err)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	began := time.Now()
	resp, err := c.WorkflowService().PollActivityTaskQueue(ctx, &workflowservice.PollActivityTaskQueueRequest{
		Namespace: server.Namespace, TaskQueue: &taskqueuepb.TaskQueue{Name: "bounded-poll-" + t.Name()}, Identity: "bounded-poll-test"})
	took := time.Since(began)
	require.NoError(t, err)
	require.Empty(t, resp.GetTaskToken(), "no task on an empty queue")
	require.Less(t, took, temporaladapter.MinPollTimeout, "answered before the bound")
}

// Dial refuses a poll bound the server would refuse (under 2 s left when
// a poll arrives ends the worker) before it dials anything.
func TestDialRefusesAPollTimeoutUnderTheMinimum(t *testing.T) {
	_, err := temporaladapter.Dial(context.Background(), temporaladapter.ClientConfig{
		HostPort: "127.0.0.1:1", PollTimeout: temporaladapter.MinPollTimeout - time.Millisecond})
	require.ErrorContains(t, err, "poll timeout")
}
