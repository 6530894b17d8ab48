package port_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/port"
)

// views is a TaskEngine whose Get answers from a script, one view per call,
// the last one for ever: what Wait polls, without an engine's timing. The
// conformance suite (port/porttest) runs Wait and Result on the engines.
type views struct {
	port.TaskEngine
	script []port.RunView
	gets   int
}

func (v *views) Get(context.Context, port.RunID) (port.RunView, error) {
	i := min(v.gets, len(v.script)-1)
	v.gets++
	return v.script[i], nil
}

func TestResultWaitsForTheEndAndDecodesTheOutput(t *testing.T) {
	ctx := context.Background()
	eng := &views{script: []port.RunView{
		{Status: port.StatusPending}, {Status: port.StatusRunning},
		{Status: port.StatusSucceeded, Output: json.RawMessage(`{"total":7}`)},
	}}
	type total struct{ Total int }
	got, err := port.Result[total](ctx, eng, "r1")
	require.NoError(t, err)
	require.Equal(t, total{Total: 7}, got)
	require.Equal(t, 3, eng.gets, "one Get per poll, until the run is terminal")

	_, err = port.Result[total](ctx, &views{script: []port.RunView{{Status: port.StatusFailed, LastError: "boom"}}}, "r2")
	var rf *port.RunFailedError
	require.ErrorAs(t, err, &rf)
	require.ErrorIs(t, err, port.ErrRunFailed)
	require.Equal(t, &port.RunFailedError{ID: "r2", Message: "boom"}, rf)

	_, err = port.Result[total](ctx, &views{script: []port.RunView{{Status: port.StatusCanceled}}}, "r3")
	require.ErrorIs(t, err, port.ErrCanceled)
	require.NotContains(t, err.Error(), "moved")

	_, err = port.Result[total](ctx, &views{script: []port.RunView{{Status: port.StatusCanceled, MovedTo: "r3b"}}}, "r3")
	require.ErrorIs(t, err, port.ErrCanceled, "the run an evacuation moved is canceled")
	require.ErrorContains(t, err, "run r3: taskport: run canceled: an evacuation moved it to run r3b", "and its error names the run the work goes on in")

	none, err := port.Result[*total](ctx, &views{script: []port.RunView{{Status: port.StatusSucceeded}}}, "r4")
	require.NoError(t, err)
	require.Nil(t, none, "a run without a result decodes as T's zero value")

	_, err = port.Result[total](ctx, &views{script: []port.RunView{{Status: port.StatusSucceeded, Output: json.RawMessage(`"seven"`)}}}, "r5")
	require.ErrorContains(t, err, "decode the result of run r5")

	canceled, cancel := context.WithCancel(ctx)
	cancel()
	_, err = port.Wait(canceled, &views{script: []port.RunView{{Status: port.StatusRunning}}}, "r6")
	require.ErrorIs(t, err, context.Canceled)
}
