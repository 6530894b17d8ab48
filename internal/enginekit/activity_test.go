package enginekit_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/internal/enginekit"
	"github.com/taskport/taskport/port"
)

type recordingBeater struct {
	progress []any
	stop     error
}

func (b *recordingBeater) Beat(_ context.Context, p any) error {
	b.progress = append(b.progress, p)
	return b.stop
}

type copyIn struct{ Bytes int }
type copyOut struct{ Copied int }

// The one activity runtime: the body sees its step identity and fencing
// token, its heartbeats reach the engine's Beater, and its result comes
// back encoded.
func TestRunActivityInstallsTheStepAndEncodesTheResult(t *testing.T) {
	beat := &recordingBeater{}
	var seen port.StepInfo
	b := port.Bind(port.DeclareActivity[copyIn, copyOut]("asset.copy"), func(ctx context.Context, in copyIn) (copyOut, error) {
		info, ok := port.StepInfoFrom(ctx)
		require.True(t, ok)
		seen = info
		if err := port.Heartbeat(ctx, "half"); err != nil {
			return copyOut{}, err
		}
		return copyOut{Copied: in.Bytes}, nil
	})
	info := port.StepInfo{RunID: "r1", Kind: "asset.import", Version: 2, Step: "copy", Attempt: 3,
		Token: enginekit.LeaseToken("r1", "copy", 4, "lt", 9)}
	out, err := enginekit.RunActivity(context.Background(), b, info, beat, json.RawMessage(`{"Bytes":7}`))
	require.NoError(t, err)
	require.JSONEq(t, `{"Copied":7}`, string(out))
	info.Activity = "asset.copy"
	require.Equal(t, info, seen, "the body sees its step, with the activity's registered name")
	require.Equal(t, []any{"half"}, beat.progress)

	beat.stop = port.ErrLeaseLost
	_, err = enginekit.RunActivity(context.Background(), b, info, beat, json.RawMessage(`{"Bytes":7}`))
	require.ErrorIs(t, err, port.ErrLeaseLost, "a heartbeat that learns the attempt is lost stops the body")
}

// An attempt fails the same way on both engines: a panic is a retryable
// failure, a result too large to store and an input that does not decode
// are non-retryable.
func TestRunActivityFailures(t *testing.T) {
	ref := port.DeclareActivity[int, string]("k.act")
	tests := []struct {
		name         string
		body         func(context.Context, int) (string, error)
		input        string
		is           error
		nonRetryable bool
		contains     string
	}{
		{"panic", func(context.Context, int) (string, error) { panic("boom") }, `1`, nil, false, "activity k.act panicked: boom"},
		{"oversize result", func(context.Context, int) (string, error) { return strings.Repeat("x", port.MaxPayloadBytes), nil },
			`1`, port.ErrPayloadTooLarge, true, "activity k.act"},
		{"undecodable input", func(context.Context, int) (string, error) { return "", nil }, `"x"`, nil, true, "decode input of activity k.act"},
		{"body error", func(context.Context, int) (string, error) { return "", errors.New("disk full") }, `1`, nil, false, "disk full"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := enginekit.RunActivity(context.Background(), port.Bind(ref, tt.body), port.StepInfo{}, nil, json.RawMessage(tt.input))
			require.ErrorContains(t, err, tt.contains)
			require.Equal(t, tt.nonRetryable, port.IsNonRetryable(err))
			if tt.is != nil {
				require.ErrorIs(t, err, tt.is)
			}
		})
	}
}

// Both token shapes order as port.FencingToken documents: the scope names
// the run (and the Temporal run), the epoch counts attempts or claims.
func TestTokens(t *testing.T) {
	tt := enginekit.TemporalToken("taskport/r1", "wr1", "copy", 3, 5)
	require.Equal(t, port.FencingToken{Scope: "taskport/r1/wr1/copy", Epoch: 3, Generation: 5}, tt)
	require.Equal(t, "taskport/r1/wr1/copy#3", tt.String())
	lt := enginekit.LeaseToken("r1", "copy", 2, "0f3c", 5)
	require.Equal(t, port.FencingToken{Scope: "r1/copy", Epoch: 2, Nonce: "0f3c", Generation: 5}, lt)
	require.Equal(t, "r1/copy#2#0f3c", lt.String())
	require.True(t, tt.Valid())
	require.True(t, lt.Valid())
}

func TestStepFailed(t *testing.T) {
	se := enginekit.StepFailed("copy", "asset.copy", 3, "disk full", false)
	require.Equal(t, &port.StepError{Step: "copy", Activity: "asset.copy", Attempts: 3, Message: "disk full"}, se)
	require.Contains(t, se.Error(), "retries exhausted")
	require.Contains(t, enginekit.StepFailed("copy", "asset.copy", 1, "bad", true).Error(), "non-retryable")
}

func TestOutcome(t *testing.T) {
	next, out, err := enginekit.Outcome(nil, port.ContinueAsNew(map[string]int{"i": 3}))
	require.NoError(t, err)
	require.Nil(t, out)
	require.JSONEq(t, `{"i":3}`, string(next))

	next, _, err = enginekit.Outcome(nil, fmtWrap(port.ContinueAsNew(nil)))
	require.NoError(t, err)
	require.Equal(t, "null", string(next), "a wrapped request is still a request")

	next, _, err = enginekit.Outcome(nil, port.ContinueAsNew(make(chan int)))
	require.Nil(t, next)
	var fe *port.FieldError
	require.ErrorAs(t, err, &fe, "an input that does not encode fails the run with a field error")
	require.Equal(t, "input", fe.Field)

	boom := errors.New("boom")
	next, out, err = enginekit.Outcome(map[string]int{"ignored": 1}, boom)
	require.Nil(t, next)
	require.Nil(t, out, "a failed run records no result")
	require.Equal(t, boom, err)

	next, out, err = enginekit.Outcome(nil, nil)
	require.Nil(t, next)
	require.Nil(t, out, "a kind without a result (port.Handle) records none")
	require.NoError(t, err)

	_, out, err = enginekit.Outcome(map[string]int{"total": 7}, nil)
	require.NoError(t, err)
	require.JSONEq(t, `{"total":7}`, string(out))

	_, out, err = enginekit.Outcome("a\x00b", nil)
	require.Nil(t, out)
	require.ErrorAs(t, err, &fe, "a result Postgres cannot store fails the run with a field error")
	require.Equal(t, "output", fe.Field)
}

func fmtWrap(err error) error { return errors.Join(errors.New("context"), err) }
