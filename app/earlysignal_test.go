package app_test

import (
	"context"
	"crypto/rand"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/internal/testkit/pgtest"
	"github.com/taskport/taskport/port"
)

var (
	checkThenSignal = port.DeclareActivity[string, int]("model.check-then-signal")
	errNoSignal     = errors.New("the wait timed out: the signal sent before it was lost")
)

// The wake-up of a wait that lands after the run checked the business DB
// but before it waits (ADR 2.2) must not be lost: the model found it lost
// on Temporal (test/model, seed 3), where the run then slept its whole timeout (5 or 10
// minutes) with the answer already in the business DB. Here the check step
// itself sends the signal, so it always lands in that window; the wait must
// take it at once on both engines.
func TestSignalBetweenCheckAndWait(t *testing.T) {
	for _, e := range engines {
		t.Run(e.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			pool := pgtest.NewPool(t)
			reg := port.NewRegistry()
			var eng port.TaskEngine
			delivered := make(chan int, 1)
			require.NoError(t, reg.RegisterActivity(port.Bind(checkThenSignal, func(ctx context.Context, topic string) (int, error) {
				n, err := eng.Signal(ctx, port.Topic(topic), nil)
				delivered <- n
				return n, err
			})))
			require.NoError(t, reg.Register(port.Definition{
				Kind: "model.check-then-wait", Version: 1, Retry: port.NetworkRetry(),
				Handler: port.Handle(func(f port.Flow, topic string) error {
					if _, err := checkThenSignal.Run(f, "check", topic); err != nil {
						return err
					}
					received, err := f.WaitSignal("wait", port.Topic(topic), 10*time.Minute, nil)
					if err == nil && !received {
						err = port.NonRetryable(errNoSignal)
					}
					return err
				}),
			}))
			eng = e.new(t, reg, pool, slog.New(slog.DiscardHandler))
			require.NoError(t, eng.Start(ctx, port.StartOptions{}))
			t.Cleanup(func() { require.NoError(t, eng.Stop(context.Background())) })

			id, err := eng.Enqueue(ctx, "model.check-then-wait", "wake:"+rand.Text()[:8], port.EnqueueOptions{IdempotencyKey: "early"})
			require.NoError(t, err)
			require.Equal(t, 0, <-delivered, "the check step signals before the run waits: nobody waits yet")
			var last port.RunView
			require.Eventuallyf(t, func() bool {
				last, err = eng.Get(ctx, id)
				return err == nil && last.Status.Terminal()
			}, time.Minute, 20*time.Millisecond, "the run still waits: the signal sent before the wait was lost; last view %+v", &last)
			require.Equal(t, port.StatusSucceeded, last.Status, "last error: %s", last.LastError)
		})
	}
}
