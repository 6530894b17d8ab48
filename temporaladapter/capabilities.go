package temporaladapter

import (
	"context"
	"fmt"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
)

// PollCompletesOnShutdown reports whether the namespace has the
// worker_poll_complete_on_shutdown capability (DescribeNamespace
// capabilities; servers from 1.31 on, with the dynamic config
// frontend.enableCancelWorkerPollsOnShutdown). The SDK reads it when a
// worker starts and nothing needs configuring: a stopping worker asks the
// server to cancel its outstanding polls, lets the polls in flight complete
// and runs the tasks they bring. Without it (the CLI's 1.29 dev server) the
// SDK cancels its polls locally on Stop, and a task the server handed to a
// poll that was just canceled is lost until its start-to-close timeout,
// which is charged as a failed attempt (temporalio/sdk-go#1197).
func PollCompletesOnShutdown(ctx context.Context, c client.Client, namespace string) (bool, error) {
	resp, err := c.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: namespace})
	if err != nil {
		return false, fmt.Errorf("describe namespace %s: %w", namespace, err)
	}
	return resp.GetNamespaceInfo().GetCapabilities().GetWorkerPollCompleteOnShutdown(), nil
}
