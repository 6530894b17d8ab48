package flowtest_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/workflows/flowtest"
)

var echo = port.DeclareActivity[string, string]("test.echo")

// A handler that asks for other steps on replay than the history holds fails
// with ErrNondeterminism, as on both engines; a flaky activity is retried up
// to the kind's policy, then fails as a *port.StepError.
func TestReplayAndRetry(t *testing.T) {
	t.Parallel()
	reg := port.NewRegistry()
	calls, rename := 0, false
	require.NoError(t, reg.RegisterActivity(port.Bind(echo, func(ctx context.Context, s string) (string, error) {
		calls++
		info, ok := port.StepInfoFrom(ctx)
		require.True(t, ok)
		require.Equal(t, int64(info.Attempt), info.Token.Epoch)
		if s == "flaky" {
			return "", errors.New("flaky")
		}
		return s, nil
	})))
	require.NoError(t, reg.Register(port.Definition{
		Kind: "test.kind", Version: 1, Retry: port.RetryPolicy{MaxAttempts: 3},
		Handler: port.Handle(func(f port.Flow, in string) error {
			name := "first"
			if rename {
				name = "renamed"
			}
			if _, err := echo.Run(f, name, "a"); err != nil {
				return err
			}
			_, err := echo.Run(f, "second", in)
			return err
		}),
	}))

	r, err := flowtest.New(reg, "test.kind", "r1", "b")
	require.NoError(t, err)
	require.NoError(t, r.Execute(context.Background()))
	require.NoError(t, r.Execute(context.Background()))
	require.Equal(t, 2, calls, "the replay ran no activity")
	rename = true
	require.ErrorIs(t, r.Execute(context.Background()), port.ErrNondeterminism)

	rename = false
	r, err = flowtest.New(reg, "test.kind", "r2", "flaky")
	require.NoError(t, err)
	var se *port.StepError
	require.ErrorAs(t, r.Execute(context.Background()), &se)
	require.Equal(t, 3, se.Attempts)
	require.Equal(t, []string{"first", "second", "second", "second"}, r.Executed)
}
