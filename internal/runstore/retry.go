package runstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/taskport/taskport/port"
)

// Retry is port.Admin.Retry for an engine: both engines call it with
// themselves. The status comes from the engine's Get, which knows more than
// the stored projection (a lease engine's claimed run, a Temporal workflow
// that ended without writing its projection); the kind, input, priority and
// business key come from the stored run, the new run from the engine's
// Enqueue under port.RetryKey, which is what makes a repeated retry return
// the same run. A failed run never moves back to an open status, so once
// checked it stays retryable.
func Retry(ctx context.Context, q DBTX, eng port.TaskEngine, id port.RunID) (port.RunID, error) {
	return RetryStored(ctx, q, eng, nil, id)
}

// RetryStored is Retry for a process whose registry may lack the failed
// run's kind (a client that only administers runs: `runs retry` in a
// binary that does not run the kind). Its Enqueue refuses with
// port.ErrUnknownKind, having no definition to check the input against;
// the new run is then stored, not enqueued: the failed run as it was (kind,
// version, input, business key, priority) under the same key, through the
// engine's stored, which needs no definition. A nil stored leaves the
// refusal as it is.
func RetryStored(ctx context.Context, q DBTX, eng port.TaskEngine, stored func(ctx context.Context, failed Run, key string) (port.RunID, error),
	id port.RunID) (port.RunID, error) {
	view, err := eng.Get(ctx, id)
	if err != nil {
		return "", fmt.Errorf("retry run %s: %w", id, err)
	}
	if view.Status != port.StatusFailed {
		return "", fmt.Errorf("retry run %s: %w", id, &port.FieldError{
			Field: "run", Reason: fmt.Sprintf("is %s, and only a failed run can be retried", view.Status)})
	}
	run, err := Get(ctx, q, id)
	if err != nil {
		return "", fmt.Errorf("retry run %s: %w", id, err)
	}
	next, err := eng.Enqueue(ctx, run.Kind, run.Input, port.EnqueueOptions{
		IdempotencyKey: port.RetryKey(id),
		BusinessKey:    run.BusinessKey,
		Priority:       run.Priority,
		// The input was written for the failed run's version: a process
		// with only older code must not start it.
		MinVersion: run.Version,
	})
	// Only a kind this process does not register at all: one registered at
	// older versions only (ErrUnknownVersion, which also matches
	// ErrUnknownKind) is a process that cannot run the input, and refuses.
	if errors.Is(err, port.ErrUnknownKind) && !errors.Is(err, port.ErrUnknownVersion) && stored != nil {
		next, err = stored(ctx, run, port.RetryKey(id))
	}
	if err != nil {
		return "", fmt.Errorf("retry run %s: %w", id, err)
	}
	return next, nil
}
