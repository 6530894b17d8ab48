package router_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/internal/testkit/pgtest"
	"github.com/taskport/taskport/leaseadapter"
	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/router"
)

// Stop closes Done after stopping the engines, whose stopping also wakes
// the router's watch of them: whichever comes second must leave Done as it
// is (it used to close it again and panic). Repeated, since the two race.
func TestStartStopRepeatedly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	reg := port.NewRegistry()
	require.NoError(t, reg.Register(port.Definition{Kind: "router.noop", Version: 1, Retry: port.FileRetry(),
		Handler: port.Handle(func(port.Flow, struct{}) error { return nil })}))
	eng, err := leaseadapter.New(pool, reg, leaseadapter.Config{})
	require.NoError(t, err)
	r, err := router.New(pool, map[string]router.Engine{"lease": eng}, router.Config{})
	require.NoError(t, err)
	for range 200 {
		require.NoError(t, r.Start(ctx, port.StartOptions{}))
		require.NoError(t, r.Stop(ctx))
		select {
		case <-r.Done():
		default:
			t.Fatal("Done is open after Stop")
		}
		require.NoError(t, r.Err())
	}
}
