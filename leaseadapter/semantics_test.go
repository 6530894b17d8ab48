package leaseadapter_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/leaseadapter"
	"github.com/taskport/taskport/port"
)

// The RunView rows of the port's semantics (issue 24) that the lease engine
// used to read differently from the Temporal engine: Attempts of a wait,
// LastError after a step that succeeded on a later attempt, LastError of a
// canceled run, and the view of a run in its retry backoff.

const semKind port.Kind = "test.sem"

// semEngine is a started engine over one definition of semKind with handler
// h, and the activities it binds.
func semEngine(t *testing.T, pool *pgxpool.Pool, retry port.RetryPolicy, h port.Handler, binds ...port.ActivityBinding) *leaseadapter.Engine {
	t.Helper()
	reg := port.NewRegistry()
	for _, b := range binds {
		require.NoError(t, reg.RegisterActivity(b))
	}
	require.NoError(t, reg.Register(port.Definition{Kind: semKind, Version: 1, Retry: retry, Handler: h}))
	eng, err := leaseadapter.New(pool, reg, fastConfig())
	require.NoError(t, err)
	startEngine(t, eng, port.StartOptions{Concurrency: 2})
	return eng
}

func waitView(t *testing.T, eng *leaseadapter.Engine, id port.RunID, ok func(port.RunView) bool) port.RunView {
	t.Helper()
	var v port.RunView
	require.Eventually(t, func() bool {
		var err error
		v, err = eng.Get(context.Background(), id)
		require.NoError(t, err)
		return ok(v)
	}, 20*time.Second, 10*time.Millisecond, "last view: %+v", &v) // a pointer: the message is formatted at failure, after the last poll
	return v
}

var semStep = port.DeclareActivity[struct{}, int]("test.sem.step")

// A wait is no attempt: after a step (Attempts 1), a wait that timed out
// reads Attempts 0, CurrentStep the wait, to the end of the run.
func TestTimedOutWaitReadsNoAttempt(t *testing.T) {
	t.Parallel()
	eng := semEngine(t, newDB(t), port.RetryPolicy{MaxAttempts: 3}, port.Handle(func(f port.Flow, _ struct{}) error {
		if _, err := semStep.Run(f, "s", struct{}{}); err != nil {
			return err
		}
		_, err := f.WaitSignal("w", "test.sem.never", 10*time.Millisecond, nil)
		return err
	}), port.Bind(semStep, func(context.Context, struct{}) (int, error) { return 1, nil }))
	id := enqueue(t, eng, semKind, struct{}{}, "wait")
	v := waitView(t, eng, id, func(v port.RunView) bool { return v.Status == port.StatusSucceeded })
	require.Equal(t, "w", v.CurrentStep)
	require.Zero(t, v.Attempts, "a wait is not an attempt")
	require.Empty(t, v.LastError)
}

// A step that succeeded on its third attempt leaves no LastError, while the
// next step runs and after the run succeeded; during its backoff the run
// was pending with the attempts started so far and the latest failure.
func TestStepSucceededOnARetryClearsLastError(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	release := make(chan struct{})
	hold := port.DeclareActivity[struct{}, int]("test.sem.hold")
	eng := semEngine(t, newDB(t), port.RetryPolicy{MaxAttempts: 3, InitialInterval: 300 * time.Millisecond},
		port.Handle(func(f port.Flow, _ struct{}) error {
			if _, err := semStep.Run(f, "flaky", struct{}{}); err != nil {
				return err
			}
			_, err := hold.Run(f, "hold", struct{}{})
			return err
		}),
		port.Bind(semStep, func(context.Context, struct{}) (int, error) {
			if n := calls.Add(1); n < 3 {
				return 0, errors.New("flaky attempt failed")
			}
			return 1, nil
		}),
		port.Bind(hold, func(ctx context.Context, _ struct{}) (int, error) {
			select {
			case <-release:
				return 1, nil
			case <-ctx.Done():
				return 0, context.Cause(ctx)
			}
		}))
	id := enqueue(t, eng, semKind, struct{}{}, "flaky")
	v := waitView(t, eng, id, func(v port.RunView) bool { return v.Status == port.StatusPending && v.Attempts >= 1 })
	require.Equal(t, "flaky", v.CurrentStep)
	require.Contains(t, v.LastError, "flaky attempt failed", "in backoff the latest failure shows")
	v = waitView(t, eng, id, func(v port.RunView) bool { return v.CurrentStep == "hold" })
	require.Equal(t, port.StatusRunning, v.Status)
	require.Equal(t, 1, v.Attempts)
	require.Empty(t, v.LastError, "the step succeeded, and a new one began")
	close(release)
	v = waitView(t, eng, id, func(v port.RunView) bool { return v.Status == port.StatusSucceeded })
	require.Empty(t, v.LastError)
	require.EqualValues(t, 3, calls.Load())
}

// Between a step that failed for good and the run's end, the run reads
// that step's last attempt: its message as LastError, not the *StepError's
// summary, which is the run's LastError only once its handler returns it.
// So the Temporal engine reads it, from the attempt's own projection.
func TestStepFailedForGoodReadsItsLastAttempt(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var handed atomic.Pointer[port.StepError]
	eng := semEngine(t, newDB(t), port.RetryPolicy{MaxAttempts: 3},
		port.Handle(func(f port.Flow, _ struct{}) error {
			_, err := semStep.Run(f, "import", struct{}{})
			var se *port.StepError
			if errors.As(err, &se) {
				handed.Store(se)
				<-release // the handler deciding what to do with it
			}
			return err
		}),
		port.Bind(semStep, func(context.Context, struct{}) (int, error) {
			return 0, port.NonRetryable(errors.New("disk full"))
		}))
	id := enqueue(t, eng, semKind, struct{}{}, "failed")
	require.Eventually(t, func() bool { return handed.Load() != nil }, 20*time.Second, 10*time.Millisecond)
	v, err := eng.Get(context.Background(), id)
	require.NoError(t, err)
	require.Equal(t, port.StatusRunning, v.Status)
	require.Equal(t, "import", v.CurrentStep)
	require.Equal(t, 1, v.Attempts)
	require.Equal(t, "non-retryable: disk full", v.LastError, "the latest failed attempt's message (its error's text)")
	close(release)
	v = waitView(t, eng, id, func(v port.RunView) bool { return v.Status == port.StatusFailed })
	require.Equal(t, handed.Load().Error(), v.LastError, "the handler's error once the run ended")
}

// A run canceled in its retry backoff (pending, Attempts 1, the failure
// shown) ends canceled with no LastError: a cancel is not an error.
func TestCanceledInBackoffHasNoLastError(t *testing.T) {
	t.Parallel()
	eng := semEngine(t, newDB(t), port.RetryPolicy{MaxAttempts: 3, InitialInterval: time.Hour},
		port.Handle(func(f port.Flow, _ struct{}) error {
			_, err := semStep.Run(f, "fails", struct{}{})
			return err
		}),
		port.Bind(semStep, func(context.Context, struct{}) (int, error) { return 0, errors.New("boom") }))
	id := enqueue(t, eng, semKind, struct{}{}, "backoff")
	v := waitView(t, eng, id, func(v port.RunView) bool { return v.Status == port.StatusPending && v.Attempts == 1 })
	require.Equal(t, "fails", v.CurrentStep)
	require.Contains(t, v.LastError, "boom")
	require.NoError(t, eng.Cancel(context.Background(), id, "no longer wanted"))
	v = waitView(t, eng, id, func(v port.RunView) bool { return v.Status == port.StatusCanceled })
	require.Empty(t, v.LastError)
	require.Equal(t, 1, v.Attempts, "the attempts started so far")
}
