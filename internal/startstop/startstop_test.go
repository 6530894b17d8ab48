package startstop_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/internal/startstop"
	"github.com/taskport/taskport/port"
)

// service is the smallest service: it counts its starts and stops and keeps
// the context its start code got.
type service struct {
	startstop.Base
	starts, stops int
	ctx           context.Context
	startErr      error
	stopErr       error
	stopping      func(ctx context.Context) // called inside the stop code
}

func (s *service) Start(ctx context.Context) error {
	return startstop.Start(ctx, &s.Base, func(ctx context.Context) error {
		s.starts++
		s.ctx = ctx
		return s.startErr
	})
}

func (s *service) Stop(ctx context.Context) error {
	return startstop.Stop(ctx, &s.Base, func(ctx context.Context) error {
		s.stops++
		if s.stopping != nil {
			s.stopping(ctx)
		}
		return s.stopErr
	})
}

func TestRules(t *testing.T) {
	ctx := context.Background()
	s := &service{}
	require.False(t, startstop.Serving(s), "not serving before the first Start")
	require.NoError(t, s.Err())
	require.NoError(t, s.Stop(ctx), "Stop before Start")
	require.Zero(t, s.stops, "Stop before Start runs no stop code")

	require.NoError(t, s.Start(ctx))
	done := s.Done()
	require.True(t, startstop.Serving(s))
	require.ErrorIs(t, s.Start(ctx), port.ErrAlreadyStarted)
	require.Equal(t, 1, s.starts, "a refused Start runs no start code")

	s.stopping = func(context.Context) {
		require.NoError(t, s.ctx.Err(), "the service's context lives while its stop code runs")
		require.True(t, startstop.Serving(s), "still serving while stopping")
	}
	require.NoError(t, s.Stop(ctx))
	require.False(t, startstop.Serving(s))
	require.ErrorIs(t, context.Cause(s.ctx), startstop.ErrStopped, "canceled with the stop cause after the stop code")
	require.NoError(t, s.Err(), "a graceful stop is no error")
	require.NoError(t, s.Stop(ctx), "Stop twice")
	require.Equal(t, 1, s.stops)
	s.stopping = nil

	require.NoError(t, s.Start(ctx), "restartable")
	require.True(t, startstop.Serving(s))
	select {
	case <-done:
	default:
		t.Fatal("the Done of the first Start stays closed: a new Start has a new Done")
	}
	require.NoError(t, s.Stop(ctx))
	require.Equal(t, 2, s.starts)
	require.Equal(t, 2, s.stops)
}

// The service serves until Stop, not until the context of Start ends.
func TestStartContextOnlyBoundsTheStart(t *testing.T) {
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), key{}, "v"))
	s := &service{}
	require.NoError(t, s.Start(ctx))
	cancel()
	require.NoError(t, s.ctx.Err())
	require.Equal(t, "v", s.ctx.Value(key{}), "the start context lends its values")
	require.True(t, startstop.Serving(s))
	require.NoError(t, s.Stop(context.Background()))
}

type key struct{}

func TestFailedStartLeavesTheServiceStopped(t *testing.T) {
	ctx := context.Background()
	boom := errors.New("boom")
	s := &service{startErr: boom}
	require.ErrorIs(t, s.Start(ctx), boom)
	require.False(t, startstop.Serving(s))
	require.NoError(t, s.Err(), "a refused start is the caller's error, not a fatal one")
	require.ErrorIs(t, context.Cause(s.ctx), boom)
	require.NoError(t, s.Stop(ctx))
	require.Zero(t, s.stops, "nothing to stop")
	s.startErr = nil
	require.NoError(t, s.Start(ctx))
	require.NoError(t, s.Stop(ctx))
}

func TestStopErrorStillStops(t *testing.T) {
	ctx := context.Background()
	drain := errors.New("still draining")
	s := &service{stopErr: drain}
	require.NoError(t, s.Start(ctx))
	require.ErrorIs(t, s.Stop(ctx), drain)
	require.False(t, startstop.Serving(s))
	require.NoError(t, s.Err())
	require.NoError(t, s.Start(ctx), "stopped, so it starts again")
	s.stopErr = nil
	require.NoError(t, s.Stop(ctx))
}

func TestFail(t *testing.T) {
	ctx := context.Background()
	s := &service{}
	startstop.Fail(&s.Base, errors.New("before start"))
	require.NoError(t, s.Err(), "a fatal error while not serving is ignored")

	require.NoError(t, s.Start(ctx))
	fatal := errors.New("namespace deleted")
	startstop.Fail(&s.Base, fatal)
	startstop.Fail(&s.Base, errors.New("later"))
	require.False(t, startstop.Serving(s), "a fatal error ends serving")
	require.Equal(t, fatal, s.Err(), "the first fatal error counts")
	require.ErrorIs(t, context.Cause(s.ctx), fatal, "the service's context says why")
	require.ErrorIs(t, s.Start(ctx), port.ErrAlreadyStarted, "Stop releases a failed service first")

	require.NoError(t, s.Stop(ctx))
	require.Equal(t, 1, s.stops, "the stop code runs after a fatal error")
	require.Equal(t, fatal, s.Err(), "Err keeps the fatal error after Stop")

	require.NoError(t, s.Start(ctx))
	require.NoError(t, s.Err(), "until the next Start")
	require.NoError(t, s.Stop(ctx))
}

// A fatal error reported while the start code still runs (a worker that
// dies at once) is not lost.
func TestFailDuringStart(t *testing.T) {
	var b startstop.Base
	fatal := errors.New("died at once")
	require.NoError(t, startstop.Start(context.Background(), &b, func(context.Context) error {
		startstop.Fail(&b, fatal)
		return nil
	}))
	require.False(t, startstop.Serving(&b))
	require.Equal(t, fatal, b.Err())
	require.NoError(t, startstop.Stop(context.Background(), &b, func(context.Context) error { return nil }))
}

// Done and Err answer while a long Stop runs; a Start issued meanwhile waits
// for the Stop and then starts.
func TestDoneAndErrDoNotWaitForStop(t *testing.T) {
	ctx := context.Background()
	s := &service{}
	require.NoError(t, s.Start(ctx))
	inStop, release := make(chan struct{}), make(chan struct{})
	s.stopping = func(context.Context) {
		close(inStop)
		<-release
	}
	stopped := make(chan error, 1)
	go func() { stopped <- s.Stop(ctx) }()
	<-inStop
	require.True(t, startstop.Serving(s))
	require.NoError(t, s.Err())
	started := make(chan error, 1)
	go func() { started <- s.Start(ctx) }()
	close(release)
	require.NoError(t, <-stopped)
	require.NoError(t, <-started, "the Start waited for the Stop, then served")
	require.True(t, startstop.Serving(s))
	s.stopping = nil
	require.NoError(t, s.Stop(ctx))
}

// Concurrent Starts and Stops leave the service consistent: every served
// Start is ended by exactly one Stop.
func TestConcurrentStartStop(t *testing.T) {
	ctx := context.Background()
	s := &service{}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 50 {
				err := s.Start(ctx)
				if err != nil {
					require.ErrorIs(t, err, port.ErrAlreadyStarted)
				}
				require.NoError(t, s.Stop(ctx))
				_ = s.Done()
				_ = s.Err()
			}
		})
	}
	wg.Wait()
	require.Equal(t, s.starts, s.stops)
	require.False(t, startstop.Serving(s))
}

// Every calls fn once per interval until its context ends, with that
// context.
func TestEvery(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	startstop.Every(ctx, time.Millisecond, func(fctx context.Context) {
		require.Equal(t, ctx, fctx)
		calls++
		if calls == 3 {
			cancel()
		}
	})
	require.Equal(t, 3, calls, "returns once the context ended")
}
