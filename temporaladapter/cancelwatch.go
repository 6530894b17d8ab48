package temporaladapter

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/taskport/taskport/internal/runstore"
	"github.com/taskport/taskport/port"
)

// cancelChannel is the NOTIFY channel of Cancel: a serving worker's
// listener wakes its cancelWatch on it.
const cancelChannel = "taskport_temporal_cancel"

// cancelWatch hands a run's cancel to the bodies of its steps running in
// this worker, through their context (cause port.ErrCanceled), as the lease
// engine's lease renewal does. Temporal tells an activity of a cancel only
// in the answer to a heartbeat the SDK sends, and the SDK sends at most one
// per 0.8 x heartbeat timeout (30 s without one): a body that heartbeats
// learned of it up to that late, and one that never heartbeats did not
// learn of it at all. The watch reads the cancel flags of the runs whose
// steps run here (runstore.CanceledAmong, one statement) when Cancel's
// NOTIFY arrives, and every Config.CancelPollInterval for a notification
// it did not hear; it reads nothing while no step runs.
type cancelWatch struct {
	e      *Engine
	wake   wakeup
	cancel context.CancelFunc
	done   sync.WaitGroup

	mu      sync.Mutex
	running map[*runningStep]port.RunID // each registered body, and its run
}

// runningStep is one attempt's body, stopped through its context.
type runningStep struct{ stop context.CancelCauseFunc }

func newCancelWatch(e *Engine) *cancelWatch {
	return &cancelWatch{e: e, wake: newWakeup(), running: map[*runningStep]port.RunID{}}
}

// add registers a body of run id about to start, before its cancel-flag
// read, so that a cancel committed after that read reaches it; the returned
// func unregisters it.
func (w *cancelWatch) add(id port.RunID, stop context.CancelCauseFunc) func() {
	s := &runningStep{stop: stop}
	w.mu.Lock()
	w.running[s] = id
	w.mu.Unlock()
	return func() {
		w.mu.Lock()
		delete(w.running, s)
		w.mu.Unlock()
	}
}

// start starts the watch and the worker's listener, which also wakes the
// starter (startWake): both live until the worker's last step returned,
// past the starter, which Stop ends first.
func (w *cancelWatch) start(ctx context.Context, startWake func()) {
	ctx, w.cancel = context.WithCancel(ctx)
	w.done.Add(2)
	go func() {
		defer w.done.Done()
		w.e.listen(ctx, map[string]func(){startChannel: startWake, cancelChannel: w.wake.poke})
	}()
	go func() { defer w.done.Done(); w.loop(ctx) }()
}

func (w *cancelWatch) stop() {
	w.cancel()
	w.done.Wait()
}

func (w *cancelWatch) loop(ctx context.Context) {
	tick := time.NewTicker(w.e.cfg.CancelPollInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.wake:
		case <-tick.C:
		}
		if err := w.check(ctx); err != nil && ctx.Err() == nil {
			w.e.logger.WarnContext(ctx, "read the cancel flags of running steps", slog.String("error", err.Error()))
		}
	}
}

// check stops the bodies of the runs whose cancel was requested.
func (w *cancelWatch) check(ctx context.Context) error {
	w.mu.Lock()
	seen := make(map[port.RunID]bool, len(w.running))
	ids := make([]port.RunID, 0, len(w.running))
	for _, id := range w.running {
		if !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	w.mu.Unlock()
	if len(ids) == 0 {
		return nil
	}
	canceled, err := runstore.CanceledAmong(ctx, w.e.pool, ids)
	if err != nil || len(canceled) == 0 {
		return err
	}
	flagged := make(map[port.RunID]bool, len(canceled))
	for _, id := range canceled {
		flagged[id] = true
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for s, id := range w.running {
		if flagged[id] {
			s.stop(port.ErrCanceled)
		}
	}
	return nil
}
