package contract

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/internal/testkit/pgtest"
	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/test/contract/kinds"
)

// Engine is what an engine's harness plugs into the suite.
type Engine struct {
	// Name is the subtest name: "lease", "temporal" (the adapter on the
	// CLI's dev server) or "temporal-pg" (the adapter on temporal-server with
	// Postgres persistence and mTLS).
	Name string
	// Open prepares the engine's side of one scenario over pool (its own
	// database) and returns a factory. Every engine the factory makes for
	// that scenario shares the engine state (task queue, lease tables), so
	// a scenario can stop an engine and start a new one with another
	// registry, as a worker restarted with new code would.
	Open func(t *testing.T, pool *pgxpool.Pool) Factory
	// WorkerArgs returns the flags with which test/contract/worker serves
	// this engine for the scenario whose database pool is on (-engine, -db,
	// and the engine's own: Temporal host:port, namespace and the task queue
	// Open uses). The process-fault scenarios need it; Run does not.
	WorkerArgs func(t *testing.T, pool *pgxpool.Pool) []string
	// Features records what this engine cannot promise, so a scenario
	// asserts exactly what each engine guarantees and the difference stays
	// visible in one place. A function, because an engine may have to ask
	// its server, which only a cell of that engine launches.
	Features func(t *testing.T) Features
}

// Features are the documented differences between engines.
type Features struct {
	// LosesPolledTasksOnStop: a step handed to a worker just as it stops
	// gracefully can be dropped, and is charged as a failed attempt once its
	// start-to-close timeout passes. Temporal's Go SDK cancels in-flight
	// polls on Stop; servers without the worker_poll_complete_on_shutdown
	// capability (the 1.29 dev server) can lose a task in transit
	// (temporalio/sdk-go#1197). Nothing runs twice; a retry is spent.
	// Detected, not configured: the temporal harness asks the server
	// (temporaladapter.DescribeStopHandoff: the capability, on a
	// single-partition task queue).
	LosesPolledTasksOnStop bool
}

// newScenarioDB is a fresh migrated database with the effect kinds' side
// tables.
func newScenarioDB(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool := pgtest.NewPool(t)
	_, err := pool.Exec(context.Background(), kinds.Schema)
	require.NoError(t, err)
	return pool
}

// registry builds a registry with the effect kinds' activities and defs.
func registry(t *testing.T, pool *pgxpool.Pool, defs ...port.Definition) *port.Registry {
	t.Helper()
	reg := port.NewRegistry()
	require.NoError(t, kinds.Register(reg, pool, defs...))
	return reg
}

// Factory makes an engine over reg; the suite starts and stops it.
type Factory func(t *testing.T, reg *port.Registry) port.TaskEngine

// world is one scenario's environment.
type world struct {
	t       *testing.T
	pool    *pgxpool.Pool
	factory Factory
	engine  Engine
	// anomalies are the business-truth checks that failed (see expect).
	anomalies []string
	// durations are what the scenario measured (see measure), by name.
	durations map[string]time.Duration
}

// start builds and starts an engine for reg; it is stopped at cleanup
// unless the scenario stops it first.
func (w *world) start(reg *port.Registry, opts port.StartOptions) port.TaskEngine {
	w.t.Helper()
	e := w.factory(w.t, reg)
	if opts.Concurrency == 0 {
		opts.Concurrency = 4
	}
	require.NoError(w.t, e.Start(context.Background(), opts))
	w.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = e.Stop(ctx) // stop is idempotent; a scenario may have stopped it already
	})
	return e
}

// stop stops e gracefully.
func (w *world) stop(e port.TaskEngine) {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(w.t, e.Stop(ctx))
}

// waitStatus polls Get until the run reaches one of want.
func (w *world) waitStatus(e port.TaskEngine, id port.RunID, want ...port.Status) port.RunView {
	w.t.Helper()
	var last port.RunView
	require.Eventuallyf(w.t, func() bool {
		v, err := e.Get(context.Background(), id)
		if err != nil {
			return false
		}
		last = v
		for _, s := range want {
			if v.Status == s {
				return true
			}
		}
		return false
	}, waitFor, pollEvery, "run %s never reached %v; last view %+v", id, want, &last)
	return last
}

// waitFor bounds every wait of the suite; generous because CI machines are
// slow and a wait that succeeds returns as soon as it can.
const (
	waitFor   = 90 * time.Second
	pollEvery = 25 * time.Millisecond
)

// Run runs every scenario against every engine, as
// TestX/<engine>/<scenario>.
func Run(t *testing.T, engines ...Engine) {
	eachCell(t, engines, scenarios, func(t *testing.T, eng Engine, sc scenario) {
		pool := newScenarioDB(t)
		sc.run(&world{t: t, pool: pool, factory: eng.Open(t, pool), engine: eng})
	})
}

// eachCell runs cell for every engine and scenario as parallel subtests
// TestX/<engine>/<scenario>.
func eachCell(t *testing.T, engines []Engine, scs []scenario, cell func(t *testing.T, eng Engine, sc scenario)) {
	for _, eng := range engines {
		t.Run(eng.Name, func(t *testing.T) {
			t.Parallel()
			for _, sc := range scs {
				t.Run(sc.name, func(t *testing.T) {
					t.Parallel()
					cell(t, eng, sc)
				})
			}
		})
	}
}
