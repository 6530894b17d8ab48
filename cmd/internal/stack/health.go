package stack

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/taskport/taskport/internal/startstop"
	"github.com/taskport/taskport/port"
)

// engineState is what the probes read of the engine: the port's Done and
// Err (port.TaskEngine). Done is closed while the engine does not serve; Err
// is the fatal error that stopped it on its own (on Temporal, the SDK worker
// gave up: namespace deleted, unrecoverable poll error), nil after a
// graceful Stop. The lease engine has no fatal path (its loops log and retry
// until Stop).
type engineState interface {
	Done() <-chan struct{}
	Err() error
}

// healthCheckTimeout bounds each dependency check of /readyz, well under
// the probes' default 1s timeout.
const healthCheckTimeout = 800 * time.Millisecond

// workerHealth answers the worker's probes:
//
//   - /healthz (liveness) fails once the engine has stopped for good (a
//     fatal error, port.TaskEngine.Err), so the kubelet restarts a process
//     that cannot recover;
//   - /readyz (readiness) fails while stopping (from SIGTERM on, before the
//     stop begins), while the engine does not serve (port.TaskEngine.Done
//     closed: not started, stopped, or stopped for good), when a dependency
//     check fails (Postgres; the Temporal frontend on that engine), and
//     when the outbox dispatcher is not running or its last hand-over to
//     the engine failed.
type workerHealth struct {
	engine   engineState
	checks   []namedCheck
	dispatch *dispatchWatch // nil when this worker runs no dispatcher

	mu       sync.Mutex
	stopping bool
}

type namedCheck struct {
	name  string
	check func(context.Context) error
}

func newWorkerHealth(engine engineState, dispatch *dispatchWatch, checks ...namedCheck) *workerHealth {
	return &workerHealth{engine: engine, checks: checks, dispatch: dispatch}
}

// beginStop turns readiness off for good: called on SIGTERM, before the
// engine and the dispatcher are asked to stop.
func (h *workerHealth) beginStop() {
	h.mu.Lock()
	h.stopping = true
	h.mu.Unlock()
}

func (h *workerHealth) live() error {
	if err := h.engine.Err(); err != nil {
		return &probeFailure{"engine stopped for good", err}
	}
	return nil
}

func (h *workerHealth) ready(ctx context.Context) error {
	h.mu.Lock()
	stopping := h.stopping
	h.mu.Unlock()
	if stopping {
		return errors.New("stopping")
	}
	if err := h.live(); err != nil {
		return err
	}
	if !startstop.Serving(h.engine) {
		return errors.New("engine not serving")
	}
	if h.dispatch != nil {
		if err := h.dispatch.healthy(); err != nil {
			return err
		}
	}
	for _, c := range h.checks {
		cctx, cancel := context.WithTimeout(ctx, healthCheckTimeout)
		err := c.check(cctx)
		cancel()
		if err != nil {
			return &probeFailure{c.name + " check failed", err}
		}
	}
	return nil
}

func (h *workerHealth) register(mux *http.ServeMux, log *slog.Logger) {
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { answer(w, r, log, h.live()) })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) { answer(w, r, log, h.ready(r.Context())) })
}

// probeFailure is a failed probe: the body names what failed, and the
// dependency's own error goes to the log only. The probe port answers
// anyone who reaches the pod, and a driver's error can carry host names,
// users and SQL.
type probeFailure struct {
	what string
	err  error
}

func (f *probeFailure) Error() string { return f.what + ": " + f.err.Error() }
func (f *probeFailure) Unwrap() error { return f.err }

func answer(w http.ResponseWriter, r *http.Request, log *slog.Logger, err error) {
	if err == nil {
		_, _ = w.Write([]byte("ok\n"))
		return
	}
	body := err.Error()
	if f := (*probeFailure)(nil); errors.As(err, &f) {
		body = f.what
		log.Warn("probe failed", slog.String("path", r.URL.Path), slog.String("failed", f.what), slog.Any("err", f.err))
	}
	http.Error(w, body, http.StatusServiceUnavailable)
}

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
		return &probeFailure{"outbox dispatcher: last enqueue failed", d.lastErr}
	}
	return nil
}
