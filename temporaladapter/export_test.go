package temporaladapter

import (
	"context"

	"github.com/taskport/taskport/internal/runstore"
)

// StartWorkflow starts run's workflow as Enqueue does, for the tests that
// stand for an Enqueue whose start was in flight when something happened.
func StartWorkflow(ctx context.Context, e *Engine, run runstore.Run) error {
	return e.start(ctx, run, runInput{})
}
