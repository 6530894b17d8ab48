package temporaladapter

import (
	"context"
	"fmt"

	enumspb "go.temporal.io/api/enums/v1"
	taskqueuepb "go.temporal.io/api/taskqueue/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
)

// StopHandoff is what a server promises about a task in transit to a
// worker that stops gracefully: whether the worker still receives and runs
// it, or the task is lost until its start-to-close timeout and charged as
// a failed attempt (temporalio/sdk-go#1197). Nothing runs twice either way.
type StopHandoff struct {
	// PollCompletesOnShutdown: the namespace has the capability
	// worker_poll_complete_on_shutdown (servers from 1.31 on, with the
	// dynamic config frontend.enableCancelWorkerPollsOnShutdown). The SDK
	// reads it when a worker starts, with nothing to configure: a stopping
	// worker asks the server to cancel its outstanding polls, lets the
	// polls in flight complete and runs what they bring. Without it the SDK
	// cancels its polls locally, and a task handed to a poll just canceled
	// is lost.
	PollCompletesOnShutdown bool
	// Partitions of the task queue (the larger of its workflow and
	// activity partition counts; the server's default is 4). With more
	// than one, polls are forwarded between partitions, and server 1.32
	// still loses a task handed to a forwarded poll that the shutdown
	// cancels (see internal/testkit/temporalserver for the measurement).
	Partitions int
}

// KeepsPolledTasks reports whether a graceful stop hands every polled task
// to the stopping worker: the capability, on a single-partition queue.
func (h StopHandoff) KeepsPolledTasks() bool {
	return h.PollCompletesOnShutdown && h.Partitions == 1
}

// DescribeStopHandoff asks the server what StopHandoff it offers for
// taskQueue in namespace (DescribeNamespace and ListTaskQueuePartitions).
func DescribeStopHandoff(ctx context.Context, c client.Client, namespace, taskQueue string) (StopHandoff, error) {
	ns, err := c.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: namespace})
	if err != nil {
		return StopHandoff{}, fmt.Errorf("describe namespace %s: %w", namespace, err)
	}
	parts, err := c.WorkflowService().ListTaskQueuePartitions(ctx, &workflowservice.ListTaskQueuePartitionsRequest{
		Namespace: namespace, TaskQueue: &taskqueuepb.TaskQueue{Name: taskQueue, Kind: enumspb.TASK_QUEUE_KIND_NORMAL}})
	if err != nil {
		return StopHandoff{}, fmt.Errorf("list partitions of task queue %s: %w", taskQueue, err)
	}
	return StopHandoff{
		PollCompletesOnShutdown: ns.GetNamespaceInfo().GetCapabilities().GetWorkerPollCompleteOnShutdown(),
		Partitions:              max(len(parts.GetWorkflowTaskQueuePartitions()), len(parts.GetActivityTaskQueuePartitions())),
	}, nil
}
