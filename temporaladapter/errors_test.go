package temporaladapter

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"go.temporal.io/api/serviceerror"

	"github.com/taskport/taskport/port"
)

func TestInterpretError(t *testing.T) {
	notFound := serviceerror.NewNotFound("workflow execution already completed")
	started := serviceerror.NewWorkflowExecutionAlreadyStarted("workflow execution already started", "req", "run")
	tests := []struct {
		name   string
		err    error
		is     error // nil: err comes back unchanged
		isNot  error
		detail string
	}{
		{"nil", nil, nil, nil, ""},
		{"not found", notFound, port.ErrNotFound, errWorkflowExists, "already completed"},
		{"wrapped not found", fmt.Errorf("signal run r1: %w", notFound), port.ErrNotFound, nil, "signal run r1"},
		{"already started", started, errWorkflowExists, port.ErrNotFound, "already started"},
		{"namespace not found is not a missing run", serviceerror.NewNamespaceNotFound("gone"), nil, port.ErrNotFound, ""},
		{"invalid argument is not the caller's input", serviceerror.NewInvalidArgument("search attribute TaskportKind is not defined"), nil, port.ErrInvalidInput, ""},
		{"unavailable", serviceerror.NewUnavailable("frontend down"), nil, port.ErrNotFound, ""},
		{"context", context.Canceled, nil, port.ErrNotFound, ""},
		// The server's timer for the caller's deadline fired before the
		// caller's own: the status is all the caller gets.
		{"server deadline", serviceerror.NewDeadlineExceeded("context deadline exceeded"), context.DeadlineExceeded, port.ErrNotFound, "deadline"},
		{"server canceled", fmt.Errorf("describe workflow of run r1: %w", serviceerror.NewCanceled("context canceled")), context.Canceled, nil, "run r1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := interpretError(tt.err)
			if tt.is == nil {
				require.Equal(t, tt.err, got, "passed through unchanged")
			} else {
				require.ErrorIs(t, got, tt.is)
				require.ErrorIs(t, got, tt.err, "Temporal's error stays in the chain")
				require.Contains(t, got.Error(), tt.detail)
			}
			if tt.isNot != nil {
				require.False(t, errors.Is(got, tt.isNot))
			}
		})
	}
}
