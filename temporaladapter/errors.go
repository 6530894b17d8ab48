package temporaladapter

import (
	"context"
	"errors"
	"fmt"

	"go.temporal.io/api/serviceerror"

	"github.com/taskport/taskport/port"
)

// errWorkflowExists: a start was refused because the run's workflow already
// exists. With USE_EXISTING a running one is returned instead, so this is a
// closed workflow that REJECT_DUPLICATE keeps from running twice: for
// Enqueue, the run is there.
var errWorkflowExists = errors.New("workflow already exists")

// interpretError is the adapter's one map from the Temporal service's errors
// onto what its callers match (River's interpretError is the model), so
// that no call site inspects an SDK error type:
//
//   - serviceerror.NotFound (no such workflow, or not in a state the call
//     accepts, e.g. already closed) wraps port.ErrNotFound, keeping
//     Temporal's message;
//   - serviceerror.WorkflowExecutionAlreadyStarted wraps errWorkflowExists;
//   - serviceerror.DeadlineExceeded wraps context.DeadlineExceeded and
//     serviceerror.Canceled context.Canceled. gRPC sends the caller's
//     deadline to the server, whose timer can fire first: the call then
//     fails with the server's status while the caller's ctx.Err() is still
//     nil, and a caller matching context.DeadlineExceeded (the port's
//     promise for a wait that outlives its context) must still see it.
//
// Everything else is returned as it is. In particular a missing namespace
// (serviceerror.NamespaceNotFound) is not a missing run: it is a
// configuration fault, and mapping it to port.ErrNotFound would let callers
// that skip missing runs (Signal, the outbox's cancels) hide it.
func interpretError(err error) error {
	var nf *serviceerror.NotFound
	var started *serviceerror.WorkflowExecutionAlreadyStarted
	var deadline *serviceerror.DeadlineExceeded
	var canceled *serviceerror.Canceled
	switch {
	case err == nil:
		return nil
	case errors.As(err, &nf):
		return fmt.Errorf("%w: %w", port.ErrNotFound, err)
	case errors.As(err, &started):
		return fmt.Errorf("%w: %w", errWorkflowExists, err)
	case errors.As(err, &deadline):
		return fmt.Errorf("%w: %w", context.DeadlineExceeded, err)
	case errors.As(err, &canceled):
		return fmt.Errorf("%w: %w", context.Canceled, err)
	}
	return err
}
