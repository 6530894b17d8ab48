package devserver_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/taskport/taskport/internal/testkit/devserver"
)

func greet(ctx workflow.Context, name string) (string, error) {
	return "hello " + name, nil
}

// The dev server accepts a trivial workflow and a worker completes it, with
// a search attribute registered at start-up.
func TestDevServerCompletesWorkflow(t *testing.T) {
	srv := devserver.Start(t, devserver.Options{SearchAttributes: map[string]string{"TestKey": "Keyword"}})
	w := worker.New(srv.Client, "devserver-test", worker.Options{})
	w.RegisterWorkflowWithOptions(greet, workflow.RegisterOptions{Name: "greet"})
	require.NoError(t, w.Start())
	defer w.Stop()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	run, err := srv.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: "devserver-test"}, "greet", "taskport")
	require.NoError(t, err)
	var out string
	require.NoError(t, run.Get(ctx, &out))
	require.Equal(t, "hello taskport", out)

	resp, err := srv.Client.OperatorService().ListSearchAttributes(ctx,
		&operatorservice.ListSearchAttributesRequest{Namespace: srv.Namespace})
	require.NoError(t, err)
	require.Contains(t, resp.GetCustomAttributes(), "TestKey")
}
