// Package startstop gives every background service of taskport (both
// engines and the outbox dispatcher) the same lifecycle, modelled on River's
// rivershared/startstop. A service embeds Base, whose Done and Err become
// part of its API, and runs its own start and stop code through Start and
// Stop, which enforce the rules:
//
//   - Start on a serving service returns port.ErrAlreadyStarted and does
//     nothing. A Start whose code fails leaves the service stopped.
//   - Stop before any Start, and Stop after Stop, return nil and do nothing.
//   - Stop always ends the Start it follows: its error reports what did not
//     stop cleanly (work not handed back, a drain still going on when ctx
//     ended), never a service still serving.
//   - Start after Stop serves again: every service is restartable.
//   - A service serves until Stop, not until the context given to Start
//     ends: that context bounds the start and lends its values. The context
//     the service's code gets is canceled with the cause ErrStopped once Stop
//     has run its stop code, or with the fatal error when Fail reports one,
//     so that whatever derives from it ends and says why.
//   - Done is closed while the service does not serve: before the first
//     Start, after Stop, and from a fatal error on (Fail). Err is nil, except
//     after a fatal error, which it returns until the next Start. A service
//     that failed still needs Stop to release what it holds; until then
//     Start refuses.
//
// Start and Stop never run at the same time (a second caller waits);
// Done, Err and Fail never wait for them.
//
// Start, Stop and Fail are functions rather than methods of Base so that
// embedding Base adds only Done and Err to a service's exported methods.
package startstop

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/taskport/taskport/port"
)

// ErrStopped is the cause of a service's context once Stop has run.
var ErrStopped = errors.New("service stopped")

// Base is embedded by a service; its zero value is a stopped service.
type Base struct {
	op sync.Mutex // held through a whole Start or Stop, so that they never overlap

	mu      sync.Mutex // guards the fields below; never held while a service's code runs
	running bool       // between a successful Start and its Stop
	cancel  context.CancelCauseFunc
	done    chan struct{} // nil: never started (Done is then a closed channel)
	err     error
}

// Done returns a channel that is closed while the service does not serve:
// before the first Start, after Stop, or after a fatal error. Each Start
// makes a new channel, so take it after Start returned.
func (b *Base) Done() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done == nil {
		b.done = make(chan struct{})
		close(b.done)
	}
	return b.done
}

// Err returns the fatal error that ended the service (see Fail), or nil:
// while serving, after a graceful Stop and before any Start.
func (b *Base) Err() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err
}

// Start runs the service's start code under the lifecycle's rules. start gets
// the service's context (see the package doc); it starts the service's
// background work and returns, and an error from it leaves the service
// stopped. A serving service is refused with port.ErrAlreadyStarted.
func Start(ctx context.Context, b *Base, start func(ctx context.Context) error) error {
	b.op.Lock()
	defer b.op.Unlock()
	b.mu.Lock()
	if b.running {
		b.mu.Unlock()
		return port.ErrAlreadyStarted
	}
	sctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	done := make(chan struct{})
	// Serving from here on, so that a fatal error reported while start runs
	// (Fail) is recorded.
	b.running, b.cancel, b.done, b.err = true, cancel, done, nil
	b.mu.Unlock()

	if err := start(sctx); err != nil {
		cancel(err)
		b.mu.Lock()
		b.running, b.err = false, nil
		closeOnce(done)
		b.mu.Unlock()
		return err
	}
	return nil
}

// Stop runs the service's stop code once per Start, and then cancels the
// service's context with ErrStopped and closes Done. stop gets Stop's ctx,
// which bounds how long it may wait; its error is Stop's, and the service is
// stopped either way. Without a Start to end, Stop does nothing.
func Stop(ctx context.Context, b *Base, stop func(ctx context.Context) error) error {
	b.op.Lock()
	defer b.op.Unlock()
	b.mu.Lock()
	running, cancel, done := b.running, b.cancel, b.done
	b.mu.Unlock()
	if !running {
		return nil
	}
	err := stop(ctx)
	cancel(ErrStopped)
	b.mu.Lock()
	b.running = false
	closeOnce(done)
	b.mu.Unlock()
	return err
}

// Fail reports a fatal error: the service stopped serving on its own. Done
// is closed, Err returns err until the next Start, and the service's context
// is canceled with err as its cause. Only the first fatal error of a Start
// counts; one reported while the service does not serve is ignored.
func Fail(b *Base, err error) {
	if err == nil {
		err = errors.New("service failed")
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.running || isClosed(b.done) {
		return
	}
	b.err = err
	closeOnce(b.done)
	b.cancel(err)
}

// Every calls fn once per interval, the first time one interval after the
// call, until ctx ends: the shape of a service's periodic loop (a heartbeat,
// a reaper, a reconciler). A loop that must also wake on demand keeps its
// own select.
func Every(ctx context.Context, interval time.Duration, fn func(ctx context.Context)) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			// A tick and the end can be ready together (fn ran past an
			// interval), and select picks either: no call after the end.
			if ctx.Err() != nil {
				return
			}
			fn(ctx)
		}
	}
}

// Serving reports whether s serves now: its Done channel is still open. It
// is a snapshot; to learn when s stops, wait on Done.
func Serving(s interface{ Done() <-chan struct{} }) bool { return !isClosed(s.Done()) }

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func closeOnce(ch chan struct{}) {
	if !isClosed(ch) {
		close(ch)
	}
}
