package test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

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

// temporalTarget is a Temporal server the temporal engine runs against.
type temporalTarget struct {
	// name is the engine's name in test names.
	name                string
	client              client.Client
	hostPort, namespace string
	// tlsArgs are the worker subprocess's flags to dial it (mTLS files).
	tlsArgs []string
}

// devTarget is the CLI's dev server (plaintext).
func devTarget() temporalTarget {
	return temporalTarget{name: "temporal", client: devServer.Client, hostPort: devServer.HostPort, namespace: devServer.Namespace}
}

// pgTarget is temporal-server with Postgres persistence and mTLS.
func pgTarget() temporalTarget {
	s := pgServer
	return temporalTarget{name: "temporal-pg", client: s.Client, hostPort: s.HostPort, namespace: s.Namespace,
		tlsArgs: []string{"-tls-ca", s.CA.CertFile, "-tls-cert", s.ClientCert.CertFile, "-tls-key", s.ClientCert.KeyFile, "-tls-server-name", s.ServerName}}
}

// temporalEngine is the temporal adapter on tgt. Whether the engine may
// lose a task polled as a worker stops is asked of the server (the
// namespace capability and the task queue's partitions), not configured.
func temporalEngine(t *testing.T, tgt temporalTarget) contract.Engine {
	// Partitions are server configuration, the same for every scenario's
	// queue (all named contract-...).
	handoff, err := temporaladapter.DescribeStopHandoff(context.Background(), tgt.client, tgt.namespace, "contract-probe")
	require.NoError(t, err)
	t.Logf("%s: %+v: a graceful stop keeps polled tasks: %v", tgt.name, handoff, handoff.KeepsPolledTasks())
	return contract.Engine{Name: tgt.name, Open: func(t *testing.T, pool *pgxpool.Pool) contract.Factory {
		queue := scenarioQueue(pool)
		return func(t *testing.T, reg *port.Registry) port.TaskEngine {
			e, err := temporaladapter.New(tgt.client, pool, reg, temporaladapter.Config{
				TaskQueue: queue, WorkerStopTimeout: 5 * time.Second, Logger: quiet()})
			require.NoError(t, err)
			return e
		}
	}, WorkerArgs: func(pool *pgxpool.Pool) []string {
		return append([]string{"-engine", "temporal", "-db", pool.Config().ConnString(),
			"-hostport", tgt.hostPort, "-namespace", tgt.namespace, "-task-queue", scenarioQueue(pool)}, tgt.tlsArgs...)
	}, Features: contract.Features{LosesPolledTasksOnStop: !handoff.KeepsPolledTasks()}}
}

// engines are the configurations every suite runs: the lease engine, and
// the temporal adapter on the dev server and on the production-shaped
// server.
func engines(t *testing.T) []contract.Engine {
	return []contract.Engine{leaseEngine(), temporalEngine(t, devTarget()), temporalEngine(t, pgTarget())}
}

// scenarioQueue is the Temporal task queue of the scenario whose database
// pool is on: every scenario has a database of its own, so Open and a worker
// subprocess derive the same queue from it without sharing state.
func scenarioQueue(pool *pgxpool.Pool) string {
	c := pool.Config().ConnConfig
	return fmt.Sprintf("contract-%s-%d-%s", c.Host, c.Port, c.Database)
}

func TestContract(t *testing.T) {
	contract.Run(t, engines(t)...)
}
