package test

import (
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/leaseadapter"
	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/temporaladapter"
	"github.com/taskport/taskport/test/contract"
)

// quiet keeps engine logs out of test output unless a test fails and
// prints them itself.
func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

func leaseEngine() contract.Engine {
	return contract.Engine{Name: "lease", Open: func(t *testing.T, pool *pgxpool.Pool) contract.Factory {
		return func(t *testing.T, reg *port.Registry) port.TaskEngine {
			e, err := leaseadapter.New(pool, reg, leaseadapter.Config{
				LeaseDuration: 3 * time.Second, PollInterval: 200 * time.Millisecond, StopTimeout: 5 * time.Second, Logger: quiet()})
			require.NoError(t, err)
			return e
		}
	}, WorkerArgs: func(pool *pgxpool.Pool) []string {
		return []string{"-engine", "lease", "-db", pool.Config().ConnString()}
	}}
}

func temporalEngine() contract.Engine {
	return contract.Engine{Name: "temporal", Open: func(t *testing.T, pool *pgxpool.Pool) contract.Factory {
		queue := scenarioQueue(pool)
		return func(t *testing.T, reg *port.Registry) port.TaskEngine {
			e, err := temporaladapter.New(temporalServer.Client, pool, reg, temporaladapter.Config{
				TaskQueue: queue, WorkerStopTimeout: 5 * time.Second, Logger: quiet()})
			require.NoError(t, err)
			return e
		}
	}, WorkerArgs: func(pool *pgxpool.Pool) []string {
		return []string{"-engine", "temporal", "-db", pool.Config().ConnString(),
			"-hostport", temporalServer.HostPort, "-namespace", temporalServer.Namespace, "-task-queue", scenarioQueue(pool)}
	}, Features: contract.Features{LosesPolledTasksOnStop: true}}
}

// scenarioQueue is the Temporal task queue of the scenario whose database
// pool is on: every scenario has a database of its own, so Open and a worker
// subprocess derive the same queue from it without sharing state.
func scenarioQueue(pool *pgxpool.Pool) string {
	c := pool.Config().ConnConfig
	return fmt.Sprintf("contract-%s-%d-%s", c.Host, c.Port, c.Database)
}

func TestContract(t *testing.T) {
	contract.Run(t, leaseEngine(), temporalEngine())
}
