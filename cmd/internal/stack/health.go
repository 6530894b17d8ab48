package stack

import (
	"context"
	"errors"
	"sync"

	"github.com/taskport/taskport/host"
	"github.com/taskport/taskport/port"
)

// dispatchWatch sits between the outbox dispatcher and the engine and
// remembers whether the dispatcher is running and how its last hand-over
// (EnqueueMany) went: a dispatcher that cannot reach the engine moves no rows,
// and that worker should not report ready. Input the engine refuses is the
// row's fault, not the dispatcher's, and a canceled context is a stop.
type dispatchWatch struct {
	port.TaskEngine

	mu      sync.Mutex
	running bool
	lastErr error
}

func (d *dispatchWatch) EnqueueMany(ctx context.Context, items []port.EnqueueItem) ([]port.EnqueueResult, error) {
	res, err := d.TaskEngine.EnqueueMany(ctx, items)
	if ctx.Err() == nil && !errors.Is(err, port.ErrInvalidInput) {
		d.mu.Lock()
		d.lastErr = err
		d.mu.Unlock()
	}
	return res, err
}

func (d *dispatchWatch) setRunning(running bool) {
	d.mu.Lock()
	d.running = running
	d.mu.Unlock()
}

func (d *dispatchWatch) healthy() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case !d.running:
		return errors.New("outbox dispatcher not running")
	case d.lastErr != nil:
		return &host.ProbeError{What: "outbox dispatcher: last enqueue failed", Err: d.lastErr}
	}
	return nil
}
