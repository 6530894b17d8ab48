package temporaladapter_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/taskport/taskport/internal/runstore"
	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/temporaladapter"
	"github.com/taskport/taskport/test/contract/kinds"
)

// On a namespace without the search attributes every run sets, Start
// refuses with what to create, and an Enqueue says the same; the run's row
// stays pending for the reconciler, to start once they exist.
func TestStartRefusesANamespaceWithoutTheSearchAttributes(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := context.Background()
	ns := fmt.Sprintf("tp-bare-%d", time.Now().UnixNano())
	nsc, err := client.NewNamespaceClient(client.Options{HostPort: server.HostPort})
	require.NoError(t, err)
	defer nsc.Close()
	require.NoError(t, nsc.Register(ctx, &workflowservice.RegisterNamespaceRequest{
		Namespace: ns, WorkflowExecutionRetentionPeriod: durationpb.New(24 * time.Hour)}))
	c, err := temporaladapter.Dial(ctx, temporaladapter.ClientConfig{HostPort: server.HostPort, Namespace: ns, Logger: testLogger()})
	require.NoError(t, err)
	defer c.Close()
	// A new namespace reaches the frontend's cache after a moment.
	require.Eventually(t, func() bool {
		_, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{PageSize: 1})
		return err == nil
	}, 60*time.Second, 100*time.Millisecond, "namespace %s never became usable", ns)

	reg := port.NewRegistry()
	require.NoError(t, kinds.Register(reg, h.pool, kinds.Definitions(false)...))
	eng, err := temporaladapter.New(c, h.pool, reg, temporaladapter.Config{TaskQueue: h.queue, WorkerStopTimeout: 5 * time.Second, Logger: testLogger()})
	require.NoError(t, err)
	err = eng.Start(ctx, port.StartOptions{})
	require.Error(t, err)
	for _, name := range []string{temporaladapter.AttrKind, temporaladapter.AttrVersion, temporaladapter.AttrBusinessKey, "search-attribute create"} {
		require.Contains(t, err.Error(), name)
	}
	require.NoError(t, eng.Stop(ctx), "Stop of an engine that never served")

	_, err = eng.Enqueue(ctx, kinds.Three, kinds.TagIn{}, port.EnqueueOptions{IdempotencyKey: "bare"})
	require.Error(t, err)
	require.Contains(t, err.Error(), "search-attribute create")
	runs, err := runstore.List(ctx, h.pool, runstore.EngineTemporal, port.RunFilter{})
	require.NoError(t, err)
	require.Len(t, runs, 1, "the run's row, left for the reconciler")
	require.Equal(t, port.StatusPending, runs[0].Status)
}
