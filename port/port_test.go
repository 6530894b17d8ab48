package port_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/port"
)

type importInput struct {
	PlanID string `json:"plan_id"`
	Bytes  int64  `json:"bytes"`
}

func (in importInput) Validate() error {
	if in.PlanID == "" {
		return errors.New("plan_id is required")
	}
	if in.Bytes < 0 {
		return errors.New("bytes must not be negative")
	}
	return nil
}

func testRegistry(t *testing.T) *port.Registry {
	t.Helper()
	reg := port.NewRegistry()
	require.NoError(t, reg.Register(port.Definition{
		Kind: "asset.import", Version: 1, Retry: port.FileRetry(),
		Handler: port.Handle(func(port.Flow, importInput) error { return nil }),
	}))
	return reg
}

func TestPrepareEnqueueRejectsBadInput(t *testing.T) {
	reg := testRegistry(t)
	ok := importInput{PlanID: "p1"}
	tests := []struct {
		name  string
		kind  port.Kind
		input any
		opts  port.EnqueueOptions
		field string
		is    error
	}{
		{"empty idempotency key", "asset.import", ok, port.EnqueueOptions{}, "idempotency_key", port.ErrInvalidInput},
		{"control char in key", "asset.import", ok, port.EnqueueOptions{IdempotencyKey: "a\nb"}, "idempotency_key", port.ErrInvalidInput},
		{"oversize key", "asset.import", ok, port.EnqueueOptions{IdempotencyKey: strings.Repeat("k", port.MaxNameLen+1)}, "idempotency_key", port.ErrInvalidInput},
		{"unknown kind", "asset.nope", ok, port.EnqueueOptions{IdempotencyKey: "k"}, "", port.ErrUnknownKind},
		{"empty kind", "", ok, port.EnqueueOptions{IdempotencyKey: "k"}, "kind", port.ErrInvalidInput},
		{"kind with space", "asset import", ok, port.EnqueueOptions{IdempotencyKey: "k"}, "kind", port.ErrInvalidInput},
		{"input does not encode", "asset.import", make(chan int), port.EnqueueOptions{IdempotencyKey: "k"}, "input", port.ErrInvalidInput},
		{"raw input not JSON", "asset.import", json.RawMessage(`{"plan_id":`), port.EnqueueOptions{IdempotencyKey: "k"}, "input", port.ErrInvalidInput},
		{"unknown input field", "asset.import", map[string]any{"plan_id": "p", "colour": 1}, port.EnqueueOptions{IdempotencyKey: "k"}, "input", port.ErrInvalidInput},
		{"input fails Validate", "asset.import", importInput{}, port.EnqueueOptions{IdempotencyKey: "k"}, "input", port.ErrInvalidInput},
		{"wrong input type", "asset.import", "a string", port.EnqueueOptions{IdempotencyKey: "k"}, "input", port.ErrInvalidInput},
		{"oversize payload", "asset.import", map[string]string{"plan_id": strings.Repeat("x", port.MaxPayloadBytes)}, port.EnqueueOptions{IdempotencyKey: "k"}, "input", port.ErrPayloadTooLarge},
		{"priority too high", "asset.import", ok, port.EnqueueOptions{IdempotencyKey: "k", Priority: port.MaxPriority + 1}, "priority", port.ErrInvalidInput},
		{"business key control char", "asset.import", ok, port.EnqueueOptions{IdempotencyKey: "k", BusinessKey: "\x00"}, "business_key", port.ErrInvalidInput},
		{"negative min version", "asset.import", ok, port.EnqueueOptions{IdempotencyKey: "k", MinVersion: -1}, "min_version", port.ErrInvalidInput},
		{"input for a newer version", "asset.import", ok, port.EnqueueOptions{IdempotencyKey: "k", MinVersion: 2}, "", port.ErrUnknownVersion},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := reg.PrepareEnqueue(tt.kind, tt.input, tt.opts)
			require.Error(t, err)
			require.ErrorIs(t, err, tt.is)
			require.ErrorIs(t, err, port.ErrInvalidInput, "every bad input is an ErrInvalidInput")
			if tt.field != "" {
				var fe *port.FieldError
				require.ErrorAs(t, err, &fe)
				require.Equal(t, tt.field, fe.Field)
				require.Contains(t, err.Error(), tt.field)
			}
		})
	}
}

func TestPrepareEnqueueAcceptsGoodInput(t *testing.T) {
	reg := testRegistry(t)
	p, err := reg.PrepareEnqueue("asset.import", importInput{PlanID: "p1", Bytes: 3}, port.EnqueueOptions{IdempotencyKey: "plan:p1:import", Priority: -5})
	require.NoError(t, err)
	require.Equal(t, 1, p.Definition.Version)
	require.JSONEq(t, `{"plan_id":"p1","bytes":3}`, string(p.Input))

	raw, err := reg.PrepareEnqueue("asset.import", json.RawMessage(`{"plan_id":"p2"}`), port.EnqueueOptions{IdempotencyKey: "k", MinVersion: 1})
	require.NoError(t, err)
	require.JSONEq(t, `{"plan_id":"p2"}`, string(raw.Input))
}

// A version this process does not have is an unknown kind at that version:
// a caller that retries elsewhere (the outbox) can tell it from bad input.
func TestUnknownVersionIsAnUnknownKind(t *testing.T) {
	_, err := testRegistry(t).PrepareEnqueue("asset.import", importInput{PlanID: "p1"}, port.EnqueueOptions{IdempotencyKey: "k", MinVersion: 3})
	require.ErrorIs(t, err, port.ErrUnknownVersion)
	require.ErrorIs(t, err, port.ErrUnknownKind)
	require.ErrorContains(t, err, "needs version 3, newest registered is 1")
}

func TestSignalAndTimeoutValidation(t *testing.T) {
	_, err := port.PrepareSignal("", nil)
	require.ErrorIs(t, err, port.ErrInvalidInput)
	_, err = port.PrepareSignal("approval:p 1", nil)
	require.ErrorIs(t, err, port.ErrInvalidInput)
	_, err = port.PrepareSignal("approval:p1", strings.Repeat("x", port.MaxPayloadBytes))
	require.ErrorIs(t, err, port.ErrPayloadTooLarge)
	b, err := port.PrepareSignal("approval:p1", nil)
	require.NoError(t, err)
	require.Equal(t, "null", string(b))

	require.ErrorIs(t, port.ValidateTimeout("timeout", -time.Second), port.ErrInvalidInput)
	require.NoError(t, port.ValidateTimeout("timeout", 0))

	_, err = port.ValidateStartOptions(port.StartOptions{Concurrency: -1})
	require.ErrorIs(t, err, port.ErrInvalidInput)
	_, err = port.ValidateStartOptions(port.StartOptions{Roles: []port.Role{"dispatcher"}})
	require.ErrorIs(t, err, port.ErrInvalidInput)
	opts, err := port.ValidateStartOptions(port.StartOptions{})
	require.NoError(t, err)
	require.Equal(t, []port.Role{port.RoleWorker}, opts.Roles)
}

func TestResolveStepOptions(t *testing.T) {
	def := port.Definition{Kind: "k", Version: 1, Retry: port.NetworkRetry(), StepTimeout: 30 * time.Second}
	o, err := port.ResolveStepOptions(def)
	require.NoError(t, err)
	require.Equal(t, 30*time.Second, o.Timeout)
	require.Equal(t, 5, o.Retry.MaxAttempts)

	o, err = port.ResolveStepOptions(port.Definition{Retry: port.FileRetry()}, port.WithHeartbeatTimeout(5*time.Second))
	require.NoError(t, err)
	require.Equal(t, port.DefaultStepTimeout, o.Timeout)
	require.Equal(t, 5*time.Second, o.HeartbeatTimeout)

	for name, opt := range map[string]port.StepOption{
		"timeout":            port.WithTimeout(-time.Second),
		"heartbeat_timeout":  port.WithHeartbeatTimeout(-time.Second),
		"retry.max_attempts": port.WithRetry(port.RetryPolicy{}),
	} {
		_, err := port.ResolveStepOptions(def, opt)
		var fe *port.FieldError
		require.ErrorAs(t, err, &fe, name)
		require.Equal(t, name, fe.Field)
	}
}

func TestRetryPolicy(t *testing.T) {
	p := port.NetworkRetry()
	require.NoError(t, p.Validate())
	require.Equal(t, time.Second, p.Backoff(1))
	require.Equal(t, 2*time.Second, p.Backoff(2))
	require.Equal(t, 16*time.Second, p.Backoff(5))
	require.Equal(t, time.Minute, p.Backoff(50), "capped at MaxInterval")
	require.Equal(t, 3, port.FileRetry().MaxAttempts)

	bad := []port.RetryPolicy{
		{MaxAttempts: 0},
		{MaxAttempts: 1, InitialInterval: -1},
		{MaxAttempts: 1, MaxInterval: -1},
		{MaxAttempts: 1, InitialInterval: time.Minute, MaxInterval: time.Second},
		{MaxAttempts: 1, BackoffCoefficient: 0.5},
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

	cur, err := reg.Current("asset.import")
	require.NoError(t, err)
	require.Equal(t, 2, cur.Version)
	_, err = reg.Lookup("asset.import", 1)
	require.NoError(t, err)
	_, err = reg.Lookup("asset.import", 7)
	require.ErrorIs(t, err, port.ErrUnknownKind)
	require.Len(t, reg.Definitions(), 2)

	act := port.DeclareActivity[int, int]("double")
	require.NoError(t, reg.RegisterActivity(port.Bind(act, func(_ context.Context, n int) (int, error) { return 2 * n, nil })))
	require.ErrorIs(t, reg.RegisterActivity(port.Bind(act, func(_ context.Context, n int) (int, error) { return n, nil })), port.ErrInvalidInput)
	b, err := reg.Activity("double")
	require.NoError(t, err)
	out, err := b.Invoke(context.Background(), json.RawMessage(`21`))
	require.NoError(t, err)
	require.Equal(t, "42", string(out))
	_, err = b.Invoke(context.Background(), json.RawMessage(`"x"`))
	require.True(t, port.IsNonRetryable(err), "undecodable activity input is not worth retrying")
	_, err = reg.Activity("triple")
	require.ErrorIs(t, err, port.ErrUnknownActivity)
}

func TestStepSequence(t *testing.T) {
	var s port.StepSequence
	seq, err := s.Next("check-approval-0")
	require.NoError(t, err)
	require.Equal(t, 0, seq)
	seq, err = s.Next("wait-approval-0")
	require.NoError(t, err)
	require.Equal(t, 1, seq)
	_, err = s.Next("check-approval-0")
	var fe *port.FieldError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "step", fe.Field)
	require.Contains(t, err.Error(), "reused")
	_, err = s.Next("")
	require.ErrorIs(t, err, port.ErrInvalidInput)
	require.Equal(t, 2, s.Len())

	require.NoError(t, port.CheckReplay(3, "a", "a"))
	err = port.CheckReplay(3, "b", "a")
	require.ErrorIs(t, err, port.ErrNondeterminism)
	require.Contains(t, err.Error(), `step #3`)
}

type fakeRuntime struct {
	info port.StepInfo
	err  error
	got  []any
}

func (f *fakeRuntime) Info() port.StepInfo { return f.info }
func (f *fakeRuntime) Heartbeat(_ context.Context, p any) error {
	f.got = append(f.got, p)
	return f.err
}

func TestActivityHelpers(t *testing.T) {
	ctx := context.Background()
	_, ok := port.StepInfoFrom(ctx)
	require.False(t, ok, "no step outside an activity")
	require.NoError(t, port.Heartbeat(ctx, 1))

	rt := &fakeRuntime{info: port.StepInfo{RunID: "r", Step: "copy", Attempt: 2, Token: port.FencingToken{Scope: "r/copy", Epoch: 2, Nonce: "n"}}}
	actx := port.WithActivityRuntime(ctx, rt)
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

	var can *port.ContinueAsNewError
	require.ErrorAs(t, port.ContinueAsNew(map[string]int{"i": 3}), &can)
	require.JSONEq(t, `{"i":3}`, string(can.Input))
	require.ErrorIs(t, port.ContinueAsNew(make(chan int)), port.ErrInvalidInput)

	for _, s := range []port.Status{port.StatusSucceeded, port.StatusFailed, port.StatusCanceled} {
		require.True(t, s.Terminal())
		require.True(t, s.Valid())
	}
	require.False(t, port.StatusWaiting.Terminal())
	require.False(t, port.Status("dead").Valid())
}
