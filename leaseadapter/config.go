package leaseadapter

import (
	"crypto/rand"
	"fmt"
	"log/slog"
	"os"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/taskport/taskport/port"
)

// Config tunes an Engine. The zero value of every field means its documented
// default; New applies the defaults, then validates.
type Config struct {
	// Schema is the Postgres schema the engine's tables were migrated into
	// (migrations.UpEngine). Default "taskport", where the lease tables are
	// in taskport_lease, as databases migrated by earlier releases have them.
	Schema string
	// WorkerID is written as lease_owner. Default: "<hostname>-<pid>-<random>".
	WorkerID string
	// LeaseDuration is how long a claim lives without renewal. Default 10s.
	// A killed worker's run is claimable again at most LeaseDuration +
	// PollInterval after its last renewal.
	LeaseDuration time.Duration
	// HeartbeatInterval is how often the worker renews the leases of all its
	// running runs in one statement, and learns of cancels and lost leases.
	// Default LeaseDuration/3; it must be below LeaseDuration.
	HeartbeatInterval time.Duration
	// PollInterval is the fallback when a notification is lost: the worker
	// looks for ready runs and the reaper for expired leases at least this
	// often. Default 1s.
	PollInterval time.Duration
	// BatchSize caps how many runs one claim statement takes, and how many
	// commits one group-commit transaction carries. Default 64. A claim
	// takes no more runs than the worker has room for (ActiveRuns,
	// Prefetch); a worker run at hundreds of steps at once to drain a
	// backlog spends less Postgres CPU per run with a larger cap
	// (docs/benchmarks.md, "Configured for a drain").
	BatchSize int
	// ActiveRuns is how many claimed runs a worker executes at once:
	// replaying their handlers, waiting on their commits, or running a
	// step. Steps themselves are bounded by StartOptions.Concurrency, the
	// port's meaning of concurrency (steps at once, as the Temporal engine's
	// activity slots): a run waiting for its step's commit holds no step
	// slot, so that short steps keep the slots busy while their commits are
	// in flight. A run that finds every step slot taken waits for one,
	// holding its lease. A value below the concurrency is raised to it.
	//
	// Zero (the default) adapts: twice the worker's concurrency, and up to
	// four times while the runs leave step slots idle, i.e. while no run
	// waits for a slot and some are free (short steps, whose runs spend
	// their time waiting on commits); each claim then adds at most the idle
	// slots. With long steps the worker so holds, as with twice the
	// concurrency, no runs that would only wait for a slot (docs/benchmarks.md: the
	// DBOS comparison at concurrency 8).
	ActiveRuns int
	// Prefetch is how many runs a worker claims beyond its active runs, so
	// that a run that ends hands its place to the next without waiting for
	// a claim. Prefetched runs hold their lease (renewed by the heartbeat)
	// until a place frees; Stop hands them back first. Zero means the
	// worker's concurrency; negative disables prefetching.
	Prefetch int
	// Committers is the number of group-commit goroutines, i.e. how many
	// group transactions can be in flight at once. Default 2: one group
	// commits while the next gathers. On a 2-core machine 2 beat 1, 3, 4
	// and 8 at every concurrency measured (1, 8, 32; bench/cmd/compare;
	// measured with one active run per step slot, before ActiveRuns):
	// past two, parallel transactions only contend for the same CPUs and
	// the groups shrink. A Postgres with many cores may want more.
	Committers int
	// StopTimeout bounds Stop: in-flight runs that have not reached a commit
	// point by then are handed back (lease released, status pending) and
	// their step contexts are canceled. Default 10s. A context passed to Stop
	// with an earlier deadline wins.
	StopTimeout time.Duration
	// DefaultConcurrency is used when StartOptions.Concurrency is zero.
	// Default 8.
	DefaultConcurrency int
	// RestartAfterSteps is the history length past which
	// Flow.RestartSuggested reports true. Default 500.
	RestartAfterSteps int
	// Logger receives the engine's logs. Default: slog.Default().
	Logger *slog.Logger
	// Metrics receives counters; nil means none.
	Metrics Metrics
	// TracerProvider makes a span per step attempt, in the trace of the
	// Enqueue that created the run (its context's span, stored in the run's
	// row), or of the last signal a wait received. Default: the global
	// provider (otel.GetTracerProvider, a no-op until the process installs
	// one).
	TracerProvider trace.TracerProvider
}

// Metrics is the hook the engine reports through; wire it to Prometheus (or
// anything) in cmd. Methods are called from the engine's goroutines and must
// not block.
type Metrics interface {
	// Claimed: n runs were claimed by one statement.
	Claimed(n int)
	// Finished: a run reached a terminal status (succeeded, failed, canceled).
	Finished(kind port.Kind, status port.Status)
	// LeaseLost: a worker learned that one of its claims was gone.
	LeaseLost(kind port.Kind)
	// FencedCommit: a commit was refused because its lease_token was stale;
	// nothing of that attempt was written.
	FencedCommit(kind port.Kind)
	// QueueDepth: runs ready to be claimed now of the (kind, version) pairs
	// this worker serves, sampled every PollInterval. Ready runs of a pair
	// it does not serve (a retired version) are not counted: the gauge is
	// what this worker could take, so a deployment scales on it.
	QueueDepth(n int)
}

type noMetrics struct{}

func (noMetrics) Claimed(int)                     {}
func (noMetrics) Finished(port.Kind, port.Status) {}
func (noMetrics) LeaseLost(port.Kind)             {}
func (noMetrics) FencedCommit(port.Kind)          {}
func (noMetrics) QueueDepth(int)                  {}

func (c Config) withDefaults() Config {
	if c.WorkerID == "" {
		host, _ := os.Hostname()
		c.WorkerID = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), rand.Text()[:6])
	}
	if c.LeaseDuration == 0 {
		c.LeaseDuration = 10 * time.Second
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = c.LeaseDuration / 3
	}
	if c.PollInterval == 0 {
		c.PollInterval = time.Second
	}
	if c.BatchSize == 0 {
		c.BatchSize = 64
	}
	if c.Committers == 0 {
		c.Committers = 2
	}
	if c.StopTimeout == 0 {
		c.StopTimeout = 10 * time.Second
	}
	if c.DefaultConcurrency == 0 {
		c.DefaultConcurrency = 8
	}
	if c.RestartAfterSteps == 0 {
		c.RestartAfterSteps = 500
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Metrics == nil {
		c.Metrics = noMetrics{}
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.LeaseDuration < 100*time.Millisecond:
		return &port.FieldError{Field: "lease_duration", Reason: fmt.Sprintf("must be at least 100ms, got %s", c.LeaseDuration)}
	case c.HeartbeatInterval <= 0 || c.HeartbeatInterval >= c.LeaseDuration:
		return &port.FieldError{Field: "heartbeat_interval", Reason: fmt.Sprintf("must lie in (0, lease %s), got %s", c.LeaseDuration, c.HeartbeatInterval)}
	case c.PollInterval <= 0:
		return &port.FieldError{Field: "poll_interval", Reason: fmt.Sprintf("must be positive, got %s", c.PollInterval)}
	case c.BatchSize < 1:
		return &port.FieldError{Field: "batch_size", Reason: fmt.Sprintf("must be at least 1, got %d", c.BatchSize)}
	case c.ActiveRuns < 0:
		return &port.FieldError{Field: "active_runs", Reason: fmt.Sprintf("must not be negative, got %d", c.ActiveRuns)}
	case c.Committers < 0:
		return &port.FieldError{Field: "committers", Reason: fmt.Sprintf("must not be negative, got %d", c.Committers)}
	case c.StopTimeout < 0:
		return &port.FieldError{Field: "stop_timeout", Reason: fmt.Sprintf("must not be negative, got %s", c.StopTimeout)}
	case c.DefaultConcurrency < 1:
		return &port.FieldError{Field: "default_concurrency", Reason: fmt.Sprintf("must be at least 1, got %d", c.DefaultConcurrency)}
	case c.RestartAfterSteps < 1:
		return &port.FieldError{Field: "restart_after_steps", Reason: fmt.Sprintf("must be at least 1, got %d", c.RestartAfterSteps)}
	}
	return nil
}
