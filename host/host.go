// Package host runs a worker process for any registry: the engine's worker,
// the services beside it (a retention cleaner, an outbox dispatcher), the
// probes a Kubernetes deployment asks and the metrics it scrapes, and the
// graceful stop on SIGTERM. cmd/taskport's worker is one user of it; a
// team's own binary is another (the package's Example, which compiles):
//
//	eng, err := leaseadapter.New(pool, reg, leaseadapter.Config{Schema: "acme"})
//	// check err, as after each call
//	h, err := host.New(host.Config{Pool: pool, Schema: "acme", Engine: eng, Addr: ":9090", Retention: &retention.Policy{}})
//	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
//	defer stop()
//	err = h.Run(ctx)
//
// The probes:
//
//   - /healthz (liveness) fails once the engine has stopped for good (a
//     fatal error, port.TaskEngine.Err), so the kubelet restarts a process
//     that cannot recover;
//   - /readyz (readiness) fails while stopping (from the moment Run's ctx
//     ends, before anything begins to stop), while the engine does not
//     serve (port.TaskEngine.Done closed), when Postgres does not answer,
//     when the engine's tables in Config.Schema are not at the version this
//     binary needs (migrations.CheckEngineSchema: a worker on an unmigrated
//     database is not ready), when a Config.Checks check fails and when a
//     service reports itself unready. Probes that arrive while a round of
//     these dependency checks runs share its answer, so that a flood of
//     requests does not take the pool's connections.
//
// A failed probe's body names what failed; the dependency's own error,
// which can carry host names, users and SQL, goes to the log only.
package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"reflect"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sync/singleflight"

	"github.com/taskport/taskport/internal/dbtx"
	"github.com/taskport/taskport/internal/httpserve"
	"github.com/taskport/taskport/internal/startstop"
	"github.com/taskport/taskport/migrations"
	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/retention"
	"github.com/taskport/taskport/router"
)

// Check is a readiness check of a dependency, e.g. the Temporal frontend.
// Name (the probe body says "<Name> check failed") and Func are required.
type Check struct {
	Name string
	Func func(context.Context) error
}

// Service runs beside the engine: started after it, stopped before it.
// Name is required, and at least one of Start, Stop and Ready; a nil Start
// or Stop has nothing to do (a service Run does not start itself can
// still take part in /readyz).
type Service struct {
	Name  string
	Start func(ctx context.Context) error
	Stop  func(ctx context.Context) error
	// Ready, when set, is part of /readyz: an error makes the worker
	// unready. A plain error's text is the probe's body, which anyone who
	// reaches the port reads: an error carrying a dependency's own (host
	// names, users, SQL) belongs in a *ProbeError, whose What is the body
	// and whose Err goes to the log only.
	Ready func() error
}

// Config is a Host's setup. Pool and Engine are required.
type Config struct {
	// Pool is the engine's database: /readyz pings it and checks the engine
	// set's version (migrations.CheckEngineSchema) in Schema, and the
	// retention cleaner takes its leader lock there.
	Pool *pgxpool.Pool
	// Schema is the engine's schema, as in its Config. Default "taskport".
	Schema string
	// Engine serves the registry; Run starts it with Start.
	Engine port.TaskEngine
	Start  port.StartOptions
	// Addr is where /healthz, /readyz and /metrics are served. Default
	// DefaultAddr.
	Addr string
	// Gatherer is what /metrics serves; nil serves prometheus's default
	// registry. The host registers nothing in it: taskport's own metrics
	// come from the engines' hooks (leaseadapter.Config.Metrics, and the
	// SDK's through temporaladapter.ClientConfig.MetricsHandler), which
	// the caller wires to the registry.
	Gatherer prometheus.Gatherer
	// Checks are more readiness checks, run after the Postgres and schema
	// checks within the same CheckTimeout. The host knows no Temporal
	// client: on the Temporal engine, add the frontend's health check
	// here, as cmd/taskport's worker does (Func: the client's
	// CheckHealth); otherwise nothing in /readyz asks the frontend.
	Checks []Check
	// Services run beside the engine, in this order.
	Services []Service
	// Retention, when set, runs a retention cleaner of the engine's run
	// tables (zero fields take package retention's defaults). The run
	// tables grow until a cleaner runs: a finished run's row stays until
	// it prunes it. This cleaner reports no metrics; for them, run
	// retention.New with a retention.Config.Metrics over EnginePruners as
	// a Service instead.
	Retention *retention.Policy
	// StopTimeout bounds the graceful stop: the services and then the
	// engine get StopTimeout plus 5 s, together, to stop. The engine hands
	// its in-flight steps back at its own bound
	// (leaseadapter.Config.StopTimeout, default 10 s;
	// temporaladapter.Config.WorkerStopTimeout, default 30 s) or when that
	// time is up, whichever comes first: give the engine the same bound,
	// as cmd/taskport does. Default DefaultStopTimeout.
	StopTimeout time.Duration
	// Logger receives the host's own lines (start, stop, failed probes)
	// and its retention cleaner's; the engine logs through its own
	// Config.Logger (slog.Default() unless set). Default: discarding.
	Logger *slog.Logger
}

// Defaults of Config.
const (
	DefaultAddr        = ":9090"
	DefaultStopTimeout = 30 * time.Second
	// CheckTimeout bounds a round of /readyz's dependency checks (Postgres,
	// the schema and Config.Checks, one after another), well under the
	// probes' default 1s timeout.
	CheckTimeout = 800 * time.Millisecond
)

// Host is one worker process's run loop; see the package doc.
type Host struct {
	cfg Config

	mu       sync.Mutex
	running  bool   // a Run has not returned
	stopping bool   // the running Run's ctx ended, or it is failing
	addr     string // bound, once Run listens
	// rounds shares a round of Ready's dependency checks among the calls
	// that arrive while it runs.
	rounds singleflight.Group
}

// New checks cfg and returns a Host that Run runs. An invalid cfg is a
// *port.FieldError.
func New(cfg Config) (*Host, error) {
	if cfg.Pool == nil || cfg.Engine == nil {
		return nil, &port.FieldError{Field: "host", Reason: "a pool and an engine are required"}
	}
	// An engine whose New failed, its error dropped, is a nil pointer.
	if e := reflect.ValueOf(cfg.Engine); e.Kind() == reflect.Pointer && e.IsNil() {
		return nil, &port.FieldError{Field: "host", Reason: fmt.Sprintf("the engine is a nil %T", cfg.Engine)}
	}
	if cfg.StopTimeout < 0 {
		return nil, &port.FieldError{Field: "stop_timeout", Reason: "must not be negative"}
	}
	schema, err := dbtx.ParseSchema(cfg.Schema)
	if err != nil {
		return nil, &port.FieldError{Field: "schema", Reason: err.Error()}
	}
	cfg.Schema = schema.Name()
	for i, s := range cfg.Services {
		if s.Name == "" || (s.Start == nil && s.Stop == nil && s.Ready == nil) {
			return nil, &port.FieldError{Field: "services", Reason: fmt.Sprintf("service %d (%q) needs a Name and one of Start, Stop and Ready", i, s.Name)}
		}
	}
	for i, c := range cfg.Checks {
		if c.Name == "" || c.Func == nil {
			return nil, &port.FieldError{Field: "checks", Reason: fmt.Sprintf("check %d (%q) needs a Name and a Func", i, c.Name)}
		}
	}
	if cfg.Addr == "" {
		cfg.Addr = DefaultAddr
	}
	if cfg.StopTimeout == 0 {
		cfg.StopTimeout = DefaultStopTimeout
	}
	if cfg.Gatherer == nil {
		cfg.Gatherer = prometheus.DefaultGatherer
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Retention != nil {
		pruners, err := EnginePruners(cfg.Engine)
		if err != nil {
			return nil, err
		}
		cleaner, err := retention.New(cfg.Pool, pruners, retention.Config{Policy: *cfg.Retention, Logger: cfg.Logger})
		if err != nil {
			return nil, err
		}
		cfg.Services = append(cfg.Services, Service{Name: "retention cleaner", Start: cleaner.Start, Stop: cleaner.Stop})
	}
	return &Host{cfg: cfg}, nil
}

// EnginePruners are the retention pruners of the engine, or of each engine
// behind a router.
func EnginePruners(e port.TaskEngine) ([]retention.Pruner, error) {
	es := []port.TaskEngine{e}
	if r, ok := e.(*router.Router); ok {
		es = es[:0]
		for _, x := range r.Engines() {
			es = append(es, x)
		}
	}
	var out []retention.Pruner
	for _, x := range es {
		p, ok := x.(interface{ Pruner() retention.Pruner })
		if !ok {
			return nil, fmt.Errorf("engine %T offers no retention pruner (a method Pruner() retention.Pruner, as both engines have: a wrapper of an engine must forward it)", x)
		}
		out = append(out, p.Pruner())
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no engine to prune")
	}
	return out, nil
}

// Addr is the address Run serves on while it listens ("" before, and
// once Run returned).
func (h *Host) Addr() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.addr
}

// Handler serves /healthz, /readyz and /metrics.
func (h *Host) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(h.cfg.Gatherer, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { h.answer(w, r, h.Live()) })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) { h.answer(w, r, h.Ready(r.Context())) })
	return mux
}

// Run starts the engine's worker and the services, serves the probes and
// metrics, and stops gracefully when ctx ends: readiness turns off first,
// then the services and the engine stop (within StopTimeout), the probe
// server closes its listener, and Run returns nil. When the engine stops
// for good on its own, or the probe server fails, it stops the rest and
// returns an error (the process exits non-zero and is restarted). Once Run
// returned, Run runs the host again (engines and services start again
// after a stop); a Run while another runs returns port.ErrAlreadyStarted.
// A Run whose ctx has already ended starts nothing and returns nil.
func (h *Host) Run(ctx context.Context) error {
	h.mu.Lock()
	if h.running {
		h.mu.Unlock()
		return fmt.Errorf("run the host: %w", port.ErrAlreadyStarted)
	}
	if ctx.Err() != nil {
		h.stopping = true
		h.mu.Unlock()
		h.cfg.Logger.Info("stop requested before the worker started: starting nothing")
		return nil
	}
	h.running, h.stopping = true, false
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		h.running = false
		h.mu.Unlock()
	}()
	// The engine and the services stop when told to (stop), not when ctx
	// ends, so readiness is off before either begins to stop.
	run := context.WithoutCancel(ctx)
	// The probes listen first: an address that cannot be bound fails the
	// process before its engine has claimed any work it would then hand
	// back. Until the engine serves, /readyz says so. The probes outlive
	// ctx: while the stop drains, /readyz answers 503 instead of refusing
	// connections, and /metrics can still be scraped.
	serving, stopServing := context.WithCancel(run)
	served, err := h.serve(serving)
	if err != nil {
		stopServing()
		return err
	}
	// Run returns once the probe server has closed its listener: the
	// address is free again and the server's goroutines are ending.
	defer func() {
		stopServing()
		for range served {
		}
		h.mu.Lock()
		h.addr = ""
		h.mu.Unlock()
	}()
	if err := h.cfg.Engine.Start(run, h.cfg.Start); err != nil {
		return fmt.Errorf("start the engine's worker: %w", err)
	}
	for i, s := range h.cfg.Services {
		if s.Start == nil {
			continue
		}
		if err := s.Start(run); err != nil {
			return errors.Join(fmt.Errorf("start %s: %w", s.Name, err), h.stop(h.cfg.Services[:i]))
		}
	}
	h.cfg.Logger.Info("worker running", slog.String("probes", "http://"+h.Addr()+"/readyz"))
	select {
	case <-ctx.Done():
		h.beginStop()
		h.cfg.Logger.Info("stop requested: not ready from now on")
		return h.stop(h.cfg.Services)
	case err := <-served:
		h.beginStop()
		return errors.Join(fmt.Errorf("probe server: %w", err), h.stop(h.cfg.Services))
	case <-h.cfg.Engine.Done(): // stopped serving without a Stop: a fatal error
		err := h.cfg.Engine.Err()
		if err == nil {
			err = errors.New("stopped serving without a Stop")
		}
		h.cfg.Logger.Error("engine stopped for good: exiting", slog.Any("err", err))
		return errors.Join(fmt.Errorf("engine stopped: %w", err), h.stop(h.cfg.Services))
	}
}

// stop stops services (in reverse order) and then the engine.
func (h *Host) stop(services []Service) error {
	bound := h.cfg.StopTimeout
	h.cfg.Logger.Info("stopping: in-flight steps finish or are handed back", slog.Duration("bound", bound))
	ctx, cancel := context.WithTimeout(context.Background(), bound+5*time.Second)
	defer cancel()
	var errs []error
	for i := len(services) - 1; i >= 0; i-- {
		if services[i].Stop == nil {
			continue
		}
		if err := services[i].Stop(ctx); err != nil {
			errs = append(errs, fmt.Errorf("stop %s: %w", services[i].Name, err))
		}
	}
	if err := h.cfg.Engine.Stop(ctx); err != nil {
		errs = append(errs, fmt.Errorf("stop the engine: %w", err))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	h.cfg.Logger.Info("stopped")
	return nil
}

// serve serves Handler on Config.Addr until ctx ends; the channel reports
// why serving stopped.
func (h *Host) serve(ctx context.Context) (<-chan error, error) {
	addr, done, err := httpserve.ListenAndServe(ctx, h.cfg.Addr, h.Handler())
	if err != nil {
		return nil, fmt.Errorf("probe and metrics server: %w", err)
	}
	h.mu.Lock()
	h.addr = addr
	h.mu.Unlock()
	return done, nil
}

// beginStop turns readiness off for good.
func (h *Host) beginStop() {
	h.mu.Lock()
	h.stopping = true
	h.mu.Unlock()
}

// Live is /healthz: nil unless the engine stopped for good.
func (h *Host) Live() error {
	if err := h.cfg.Engine.Err(); err != nil {
		return &ProbeError{What: "engine stopped for good", Err: err}
	}
	return nil
}

// Ready is /readyz; see the package doc.
func (h *Host) Ready(ctx context.Context) error {
	h.mu.Lock()
	stopping := h.stopping
	h.mu.Unlock()
	if stopping {
		return errors.New("stopping")
	}
	if err := h.Live(); err != nil {
		return err
	}
	if !startstop.Serving(h.cfg.Engine) {
		return errors.New("engine not serving")
	}
	for _, s := range h.cfg.Services {
		if s.Ready == nil {
			continue
		}
		if err := s.Ready(); err != nil {
			return err
		}
	}
	return h.dependencies(ctx)
}

// dependencies runs the dependency checks, or waits for the round in
// progress: /readyz answers anyone who reaches the probe port, and each
// round takes connections of the pool the engine commits through, so
// requests arriving together cost one round, not one each. The round runs
// without the cancellation of the call that started it, since other calls
// wait for its answer; CheckTimeout bounds it.
func (h *Host) dependencies(ctx context.Context) error {
	_, err, _ := h.rounds.Do("dependencies", func() (any, error) {
		return nil, h.checkDependencies(context.WithoutCancel(ctx))
	})
	return err
}

// checkDependencies is one round of the dependency checks.
func (h *Host) checkDependencies(ctx context.Context) error {
	// schema: a rollback of the database under a running worker (restored
	// backup, migrate down) takes it out of service.
	checks := append([]Check{
		{"postgres", h.cfg.Pool.Ping},
		{"schema", h.checkSchema},
	}, h.cfg.Checks...)
	// One deadline for the round: the kubelet's timeout is the round's.
	ctx, cancel := context.WithTimeout(ctx, CheckTimeout)
	defer cancel()
	for _, c := range checks {
		if err := c.Func(ctx); err != nil {
			return &ProbeError{What: c.Name + " check failed", Err: err}
		}
	}
	return nil
}

// checkSchema is /readyz's schema check. Its error names the schema, since
// a host whose Config.Schema is not its engine's reads as unmigrated.
func (h *Host) checkSchema(ctx context.Context) error {
	if err := migrations.CheckEngineSchema(ctx, h.cfg.Pool, h.cfg.Schema); err != nil {
		return fmt.Errorf("engine tables in schema %q (host.Config.Schema, which must be the engine's Config.Schema): %w", h.cfg.Schema, err)
	}
	return nil
}

// ProbeError is a failed probe: What is the body, Err goes to the log only.
type ProbeError struct {
	What string
	Err  error
}

func (f *ProbeError) Error() string { return f.What + ": " + f.Err.Error() }
func (f *ProbeError) Unwrap() error { return f.Err }

func (h *Host) answer(w http.ResponseWriter, r *http.Request, err error) {
	if err == nil {
		_, _ = w.Write([]byte("ok\n"))
		return
	}
	body := err.Error()
	if f := (*ProbeError)(nil); errors.As(err, &f) {
		body = f.What
		h.cfg.Logger.Warn("probe failed", slog.String("path", r.URL.Path), slog.String("failed", f.What), slog.Any("err", f.Err))
	}
	http.Error(w, body, http.StatusServiceUnavailable)
}
