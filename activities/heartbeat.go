package activities

import (
	"context"
	"time"

	"github.com/taskport/taskport/port"
)

// keepBeating heartbeats the step of ctx every a.cfg.HeartbeatEvery until
// the returned stop is called (stop waits for the ticker to end, so no
// heartbeat follows the step's return). A step waiting on qBittorrent or a
// webhook has no progress to report, yet its heartbeat is how Temporal
// learns that its worker died or froze (the kind's heartbeat timeout,
// workflows.NetworkHeartbeatTimeout) long before the step's whole timeout
// runs out. A heartbeat that learns the run was canceled or the attempt
// lost ends ctx, which stops the step's requests: its error is not needed
// here.
func (a *Activities) keepBeating(ctx context.Context) (stop func()) {
	quit, ended := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(ended)
		t := time.NewTicker(a.cfg.HeartbeatEvery)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				_ = port.Heartbeat(ctx, nil)
			}
		}
	}()
	return func() { close(quit); <-ended }
}
