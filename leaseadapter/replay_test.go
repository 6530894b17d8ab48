package leaseadapter_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/leaseadapter"
	"github.com/taskport/taskport/leaseadapter/internal/testkinds"
	"github.com/taskport/taskport/port"
)

func TestContinueAsNewKeepsRunID(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newDB(t)
	eng := newEngine(t, pool, fastConfig())
	startEngine(t, eng, port.StartOptions{Concurrency: 2})
	id := enqueue(t, eng, testkinds.Continue, testkinds.ContinueInput{Until: 3}, "can")
	waitTaskStatus(t, pool, id, "succeeded")
	eff := effects(t, pool, id)
	require.Equal(t, 4, eff["gen"].executions, "generations 0..3 each ran the step once, under one run id")
	require.Equal(t, "generation 3", eff["gen"].note)
	require.Equal(t, []string{"gen"}, stepResults(t, pool, id), "history restarts with each generation")
	var input string
	require.NoError(t, pool.QueryRow(ctx, `SELECT input::text FROM taskport_lease.task WHERE id = $1`, id).Scan(&input))
	require.JSONEq(t, `{"generation": 3, "until": 3}`, input)
}

var ndAct = port.DeclareActivity[string, string]("nd.echo")

// ndRegistry registers kind nd@v1 whose first step is named first.
func ndRegistry(t *testing.T, first string) *port.Registry {
	t.Helper()
	reg := port.NewRegistry()
	require.NoError(t, reg.RegisterActivity(port.Bind(ndAct, func(_ context.Context, s string) (string, error) { return s, nil })))
	require.NoError(t, reg.Register(port.Definition{Kind: "nd", Version: 1, Retry: testkinds.Retry,
		Handler: port.Handle(func(f port.Flow, _ struct{}) error {
			if _, err := ndAct.Run(f, first, first); err != nil {
				return err
			}
			_, err := f.WaitSignal("wait", "nd:go", time.Hour, nil)
			return err
		})}))
	return reg
}

// A handler changed within one version (a step renamed) fails the run
// loudly on replay instead of running different code.
func TestRenamedStepFailsReplay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newDB(t)
	before, err := leaseadapter.New(pool, ndRegistry(t, "fetch"), fastConfig())
	require.NoError(t, err)
	require.NoError(t, before.Start(ctx, port.StartOptions{Concurrency: 1}))
	id, err := before.Enqueue(ctx, "nd", struct{}{}, port.EnqueueOptions{IdempotencyKey: "nd"})
	require.NoError(t, err)
	waitTaskStatus(t, pool, id, "waiting")
	require.NoError(t, before.Stop(ctx))

	after, err := leaseadapter.New(pool, ndRegistry(t, "download"), fastConfig())
	require.NoError(t, err)
	startEngine(t, after, port.StartOptions{Concurrency: 1})
	n, err := after.Signal(ctx, "nd:go", nil)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	waitTaskStatus(t, pool, id, "failed")
	view, err := after.Get(ctx, id)
	require.NoError(t, err)
	require.Equal(t, port.StatusFailed, view.Status)
	require.Contains(t, view.LastError, `history has "fetch", handler asked for "download"`)
}
