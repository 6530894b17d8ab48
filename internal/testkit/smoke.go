package testkit

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

func greet(_ workflow.Context, name string) (string, error) {
	return "hello " + name, nil
}

// RequireServes proves a harness's Temporal server end to end: a worker on
// c completes a workflow started through c, and the namespace lists the
// search attributes attrs.
func RequireServes(t *testing.T, c client.Client, namespace string, attrs ...string) {
	t.Helper()
	const queue = "testkit-smoke"
	w := worker.New(c, queue, worker.Options{})
	w.RegisterWorkflowWithOptions(greet, workflow.RegisterOptions{Name: "greet"})
	require.NoError(t, w.Start())
	defer w.Stop()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: queue}, "greet", "taskport")
	require.NoError(t, err)
	var out string
	require.NoError(t, run.Get(ctx, &out))
	require.Equal(t, "hello taskport", out)

	resp, err := c.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: namespace})
	require.NoError(t, err)
	for _, a := range attrs {
		require.Contains(t, resp.GetCustomAttributes(), a)
	}
}
