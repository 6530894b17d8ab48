package enginekit_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/internal/enginekit"
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
		{"available after year 9999", "asset.import", ok, port.EnqueueOptions{IdempotencyKey: "k", AvailableAt: time.Date(300000, 1, 1, 0, 0, 0, 0, time.UTC)}, "available_at", port.ErrInvalidInput},
		{"available before year 1", "asset.import", ok, port.EnqueueOptions{IdempotencyKey: "k", AvailableAt: time.Date(-5000, 1, 1, 0, 0, 0, 0, time.UTC)}, "available_at", port.ErrInvalidInput},
		{"business key control char", "asset.import", ok, port.EnqueueOptions{IdempotencyKey: "k", BusinessKey: "\x00"}, "business_key", port.ErrInvalidInput},
		{"negative min version", "asset.import", ok, port.EnqueueOptions{IdempotencyKey: "k", MinVersion: -1}, "min_version", port.ErrInvalidInput},
		{"input for a newer version", "asset.import", ok, port.EnqueueOptions{IdempotencyKey: "k", MinVersion: 2}, "", port.ErrUnknownVersion},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := enginekit.PrepareEnqueue(reg, tt.kind, tt.input, tt.opts)
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
	p, err := enginekit.PrepareEnqueue(reg, "asset.import", importInput{PlanID: "p1", Bytes: 3}, port.EnqueueOptions{IdempotencyKey: "plan:p1:import", Priority: -5})
	require.NoError(t, err)
	require.Equal(t, 1, p.Definition.Version)
	require.JSONEq(t, `{"plan_id":"p1","bytes":3}`, string(p.Input))

	raw, err := enginekit.PrepareEnqueue(reg, "asset.import", json.RawMessage(`{"plan_id":"p2"}`), port.EnqueueOptions{IdempotencyKey: "k", MinVersion: 1})
	require.NoError(t, err)
	require.JSONEq(t, `{"plan_id":"p2"}`, string(raw.Input))
}

// A version this process does not have is an unknown kind at that version:
// a caller that retries elsewhere (the outbox) can tell it from bad input.
func TestUnknownVersionIsAnUnknownKind(t *testing.T) {
	_, err := enginekit.PrepareEnqueue(testRegistry(t), "asset.import", importInput{PlanID: "p1"}, port.EnqueueOptions{IdempotencyKey: "k", MinVersion: 3})
	require.ErrorIs(t, err, port.ErrUnknownVersion)
	require.ErrorIs(t, err, port.ErrUnknownKind)
	require.ErrorContains(t, err, "needs version 3, newest registered is 1")
}

func TestSignalAndTimeoutValidation(t *testing.T) {
	_, err := enginekit.PrepareSignal("", nil)
	require.ErrorIs(t, err, port.ErrInvalidInput)
	_, err = enginekit.PrepareSignal("approval:p 1", nil)
	require.ErrorIs(t, err, port.ErrInvalidInput)
	_, err = enginekit.PrepareSignal("approval:p1", strings.Repeat("x", port.MaxPayloadBytes))
	require.ErrorIs(t, err, port.ErrPayloadTooLarge)
	b, err := enginekit.PrepareSignal("approval:p1", nil)
	require.NoError(t, err)
	require.Equal(t, "null", string(b))

	require.ErrorIs(t, enginekit.ValidateTimeout("timeout", -time.Second), port.ErrInvalidInput)
	require.NoError(t, enginekit.ValidateTimeout("timeout", 0))

	defs := []port.Definition{{Kind: "k", Version: 1}, {Kind: "k", Version: 2}}
	_, err = enginekit.ValidateStartOptions(port.StartOptions{Concurrency: -1}, defs)
	require.ErrorIs(t, err, port.ErrInvalidInput)
	_, err = enginekit.ValidateStartOptions(port.StartOptions{Concurrency: port.MaxConcurrency + 1}, defs)
	require.ErrorIs(t, err, port.ErrInvalidInput)
	_, err = enginekit.ValidateStartOptions(port.StartOptions{Roles: []port.Role{"dispatcher"}}, defs)
	require.ErrorIs(t, err, port.ErrInvalidInput)
	opts, err := enginekit.ValidateStartOptions(port.StartOptions{}, defs)
	require.NoError(t, err)
	require.Equal(t, []port.Role{port.RoleWorker}, opts.Roles)
	_, err = enginekit.ValidateStartOptions(port.StartOptions{Versions: map[port.Kind][]int{"k": {2}}}, defs)
	require.NoError(t, err)

	// A worker that would serve less than asked, or nothing, is refused.
	for name, c := range map[string]struct {
		opts port.StartOptions
		defs []port.Definition
		want string
	}{
		"no definition":        {port.StartOptions{}, nil, "the worker serves no registered definition"},
		"empty versions":       {port.StartOptions{Versions: map[port.Kind][]int{}}, defs, "the worker serves no registered definition"},
		"unregistered kind":    {port.StartOptions{Versions: map[port.Kind][]int{"k": {1}, "kk": {1}}}, defs, "kk@v1 is not registered"},
		"unregistered version": {port.StartOptions{Versions: map[port.Kind][]int{"k": {3}}}, defs, "k@v3 is not registered"},
	} {
		_, err := enginekit.ValidateStartOptions(c.opts, c.defs)
		var fe *port.FieldError
		require.ErrorAs(t, err, &fe, name)
		require.Equal(t, "versions", fe.Field, name)
		require.ErrorContains(t, err, c.want, name)
		require.ErrorIs(t, err, port.ErrInvalidInput, name)
	}
}

func TestResolveStepOptions(t *testing.T) {
	def := port.Definition{Kind: "k", Version: 1, Retry: port.NetworkRetry(), StepTimeout: 30 * time.Second}
	o, err := enginekit.ResolveStepOptions(def)
	require.NoError(t, err)
	require.Equal(t, 30*time.Second, o.Timeout)
	require.Equal(t, 5, o.Retry.MaxAttempts)

	o, err = enginekit.ResolveStepOptions(port.Definition{Retry: port.FileRetry()}, port.WithHeartbeatTimeout(5*time.Second))
	require.NoError(t, err)
	require.Equal(t, port.DefaultStepTimeout, o.Timeout)
	require.Equal(t, 5*time.Second, o.HeartbeatTimeout)

	for name, opt := range map[string]port.StepOption{
		"timeout":            port.WithTimeout(-time.Second),
		"heartbeat_timeout":  port.WithHeartbeatTimeout(-time.Second),
		"retry.max_attempts": port.WithRetry(port.RetryPolicy{}),
	} {
		_, err := enginekit.ResolveStepOptions(def, opt)
		var fe *port.FieldError
		require.ErrorAs(t, err, &fe, name)
		require.Equal(t, name, fe.Field)
	}
}

func TestStepSequence(t *testing.T) {
	var s enginekit.StepSequence
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

	require.NoError(t, enginekit.CheckReplay(3, "a", "a"))
	err = enginekit.CheckReplay(3, "b", "a")
	require.ErrorIs(t, err, port.ErrNondeterminism)
	require.Contains(t, err.Error(), `step #3`)
}

// Storable keeps an error whose chain Postgres and protobuf can hold as it
// is; otherwise its message reads U+FFFD for the bytes they cannot, its
// chain carries none of them, and what it matched of the marks engines
// read (non-retryable, canceled, lease lost) it still matches.
func TestStorable(t *testing.T) {
	fine := fmt.Errorf("open %s: %w", "a.mkv", os.ErrNotExist)
	require.Same(t, fine, enginekit.Storable(fine))
	require.NoError(t, enginekit.Storable(nil))

	bad := fmt.Errorf("open %s: %w", "a\x00b\xff.mkv", port.ErrCanceled)
	for _, err := range []error{bad, port.NonRetryable(bad)} {
		got := enginekit.Storable(err)
		require.Equal(t, enginekit.StorableText(err.Error()), got.Error())
		require.Equal(t, port.IsNonRetryable(err), port.IsNonRetryable(got), "%v", err)
		require.ErrorIs(t, got, port.ErrCanceled)
		require.NotErrorIs(t, got, port.ErrLeaseLost)
		require.NotErrorIs(t, got, os.ErrNotExist)
		require.NoError(t, enginekit.ValidateText("message", got.Error()))
		for _, e := range got.(interface{ Unwrap() []error }).Unwrap() {
			for ; e != nil; e = errors.Unwrap(e) {
				require.NoError(t, enginekit.ValidateText("message", e.Error()))
			}
		}
	}
	require.Equal(t, "open a\ufffdb\ufffd.mkv: taskport: run canceled", enginekit.Storable(bad).Error())

	// A message longer than port.MaxErrorBytes keeps its first bytes, cut
	// between runes (here "é" straddles the bound), and "…"; the error keeps
	// its marks and drops the rest of its chain, which repeats the message.
	long := strings.Repeat("a", port.MaxErrorBytes-1) + "é" + strings.Repeat("b", 5<<20)
	require.Equal(t, strings.Repeat("a", port.MaxErrorBytes-1)+"…", enginekit.StorableText(long))
	require.Equal(t, "short", enginekit.StorableText("short"))
	wrapped := port.NonRetryable(fmt.Errorf("%s: %w", long, port.ErrLeaseLost))
	got := enginekit.Storable(wrapped)
	require.Equal(t, enginekit.StorableText(wrapped.Error()), got.Error())
	require.True(t, port.IsNonRetryable(got))
	require.ErrorIs(t, got, port.ErrLeaseLost)
	for _, e := range got.(interface{ Unwrap() []error }).Unwrap() {
		for ; e != nil; e = errors.Unwrap(e) {
			require.LessOrEqual(t, len(e.Error()), port.MaxErrorBytes+len("…"))
		}
	}
}
