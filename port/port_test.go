package port_test

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/internal/enginekit"
	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/port/engineapi"
)

func TestRetryPolicy(t *testing.T) {
	p := port.NetworkRetry()
	require.NoError(t, p.Validate())
	require.Equal(t, time.Second, p.Backoff(1))
	require.Equal(t, 2*time.Second, p.Backoff(2))
	require.Equal(t, 16*time.Second, p.Backoff(5))
	require.Equal(t, time.Minute, p.Backoff(50), "capped at MaxInterval")
	require.Equal(t, 3, port.FileRetry().MaxAttempts)
	require.NoError(t, port.RetryPolicy{MaxAttempts: math.MaxInt32}.Validate())

	bad := []port.RetryPolicy{
		{MaxAttempts: 0},
		{MaxAttempts: 1, InitialInterval: -1},
		{MaxAttempts: 1, MaxInterval: -1},
		{MaxAttempts: 1, InitialInterval: time.Minute, MaxInterval: time.Second},
		{MaxAttempts: 1, BackoffCoefficient: 0.5},
		{MaxAttempts: 1, BackoffCoefficient: math.NaN()},
		{MaxAttempts: 1, BackoffCoefficient: math.Inf(1)},
		{MaxAttempts: math.MaxInt32 + 1},
	}
	for _, b := range bad {
		require.ErrorIs(t, b.Validate(), port.ErrInvalidInput, "%+v", b)
	}
}

func TestRegistry(t *testing.T) {
	reg := port.NewRegistry()
	h := port.Handle(func(port.Flow, struct{}) error { return nil })
	def := func(v int) port.Definition {
		return port.Definition{Kind: "asset.import", Version: v, Retry: port.FileRetry(), Handler: h}
	}
	require.NoError(t, reg.Register(def(1), def(2)))
	require.ErrorIs(t, reg.Register(def(2)), port.ErrInvalidInput, "duplicate version")
	require.ErrorIs(t, reg.Register(def(3)), port.ErrInvalidInput, "a third version")
	require.ErrorIs(t, reg.Register(port.Definition{Kind: "x", Version: 0, Retry: port.FileRetry(), Handler: h}), port.ErrInvalidInput)
	require.ErrorIs(t, reg.Register(port.Definition{Kind: "x", Version: 1, Retry: port.FileRetry()}), port.ErrInvalidInput)
	require.ErrorIs(t, reg.Register(port.Definition{Kind: "x", Version: 1, Handler: h}), port.ErrInvalidInput, "retry is required")
	// A nil function is refused where it is registered, not when a run
	// calls it.
	require.ErrorIs(t, reg.Register(port.Definition{Kind: "x", Version: 1, Retry: port.FileRetry(),
		Handler: port.Handle[struct{}](nil)}), port.ErrInvalidInput, "Handle(nil)")
	require.ErrorIs(t, reg.Register(port.Definition{Kind: "x", Version: 1, Retry: port.FileRetry(),
		Handler: port.HandleResult[struct{}, int](nil)}), port.ErrInvalidInput, "HandleResult(nil)")

	cur, err := reg.Current("asset.import")
	require.NoError(t, err)
	require.Equal(t, 2, cur.Version)
	_, err = engineapi.Lookup(reg, "asset.import", 1)
	require.NoError(t, err)
	_, err = engineapi.Lookup(reg, "asset.import", 7)
	require.ErrorIs(t, err, port.ErrUnknownKind)
	require.Len(t, reg.Definitions(), 2)

	act := port.DeclareActivity[int, int]("double")
	require.NoError(t, reg.RegisterActivity(port.Bind(act, func(_ context.Context, n int) (int, error) { return 2 * n, nil })))
	require.ErrorIs(t, reg.RegisterActivity(port.Bind(act, func(_ context.Context, n int) (int, error) { return n, nil })), port.ErrInvalidInput)
	require.ErrorIs(t, reg.RegisterActivity(port.Bind(port.DeclareActivity[int, int]("nil"), nil)), port.ErrInvalidInput, "Bind(ref, nil)")
	b, err := engineapi.Activity(reg, "double")
	require.NoError(t, err)
	require.Equal(t, "double", b.Name())
	out, err := engineapi.Invoke(context.Background(), b, json.RawMessage(`21`))
	require.NoError(t, err)
	require.Equal(t, 42, out)
	_, err = engineapi.Invoke(context.Background(), b, json.RawMessage(`"x"`))
	require.True(t, port.IsNonRetryable(err), "undecodable activity input is not worth retrying")
	_, err = engineapi.Activity(reg, "triple")
	require.ErrorIs(t, err, port.ErrUnknownActivity)
}

type fakeBeater struct {
	err error
	got []any
}

func (f *fakeBeater) Beat(_ context.Context, p any) error {
	f.got = append(f.got, p)
	return f.err
}

func TestActivityHelpers(t *testing.T) {
	ctx := context.Background()
	_, ok := port.StepInfoFrom(ctx)
	require.False(t, ok, "no step outside an activity")
	require.NoError(t, port.Heartbeat(ctx, 1))

	rt := &fakeBeater{}
	actx := enginekit.WithStep(ctx, port.StepInfo{RunID: "r", Step: "copy", Attempt: 2, Token: port.FencingToken{Scope: "r/copy", Epoch: 2, Nonce: "n"}}, rt)
	info, ok := port.StepInfoFrom(actx)
	require.True(t, ok)
	require.Equal(t, "r/copy#2#n", info.Token.String())
	require.True(t, info.Token.Valid())
	require.False(t, port.FencingToken{}.Valid())
	require.False(t, port.FencingToken{Scope: "r/copy", Epoch: 1, Generation: -1}.Valid(), "generations are never negative")
	require.Equal(t, "r/copy#2#n", port.FencingToken{Scope: "r/copy", Epoch: 2, Nonce: "n", Generation: 7}.String(),
		"the scope names the run, so the stored token needs no generation to be unique")
	require.NoError(t, port.Heartbeat(actx, "50%"))
	require.Equal(t, []any{"50%"}, rt.got)

	rt.err = port.ErrLeaseLost
	require.ErrorIs(t, port.Heartbeat(actx, nil), port.ErrLeaseLost)

	cctx, cancel := context.WithCancelCause(actx)
	rt.err = nil
	cancel(port.ErrCanceled)
	require.True(t, port.Canceled(cctx))
	require.ErrorIs(t, port.Heartbeat(cctx, nil), port.ErrCanceled)
	require.False(t, port.Canceled(actx))
}

func TestErrorsAndStatus(t *testing.T) {
	require.Nil(t, port.NonRetryable(nil))
	base := errors.New("disk full")
	err := port.NonRetryable(base)
	require.True(t, port.IsNonRetryable(err))
	require.ErrorIs(t, err, base)
	require.False(t, port.IsNonRetryable(base))

	se := &port.StepError{Step: "copy", Activity: "asset.copy", Attempts: 3, Message: "boom"}
	require.Contains(t, se.Error(), "retries exhausted")

	for _, s := range []port.Status{port.StatusSucceeded, port.StatusFailed, port.StatusCanceled} {
		require.True(t, s.Terminal())
		require.True(t, s.Valid())
	}
	require.False(t, port.StatusWaiting.Terminal())
	require.False(t, port.Status("dead").Valid())
}
