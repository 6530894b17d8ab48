package test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
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

func leaseEngine() contract.Engine { return leaseEngineIn("") }

// leaseEngineIn is leaseEngine on tables migrated into schema.
func leaseEngineIn(schema string) contract.Engine {
	return contract.Engine{Name: "lease", Open: func(t *testing.T, pool *pgxpool.Pool) contract.Factory {
		return func(t *testing.T, reg *port.Registry) port.TaskEngine {
			e, err := leaseadapter.New(pool, reg, leaseadapter.Config{Schema: schema,
				LeaseDuration: 3 * time.Second, PollInterval: 200 * time.Millisecond, StopTimeout: 5 * time.Second, Logger: quiet()})
			require.NoError(t, err)
			return e
		}
	}, WorkerArgs: func(_ *testing.T, pool *pgxpool.Pool) []string {
		return []string{"-engine", "lease", "-db", pool.Config().ConnString()}
	}, Features: func(*testing.T) contract.Features { return contract.Features{} }} // promises every feature
}

// temporalTarget is a Temporal server the temporal engine runs against,
// launched by the first cell that connects.
type temporalTarget struct {
	// name is the engine's name in test names.
	name    string
	connect func(t *testing.T) temporalConn
}

// temporalConn is how a cell and its worker subprocesses reach a target.
type temporalConn struct {
	client              client.Client
	hostPort, namespace string
	// tlsArgs are the worker subprocess's flags to dial it (mTLS files).
	tlsArgs []string
}

// devTarget is the CLI's dev server (plaintext).
func devTarget() temporalTarget {
	return temporalTarget{name: "temporal", connect: func(t *testing.T) temporalConn {
		s := devServer.Get(t)
		return temporalConn{client: s.Client, hostPort: s.HostPort, namespace: s.Namespace}
	}}
}

// pgTarget is temporal-server with Postgres persistence and mTLS.
func pgTarget() temporalTarget {
	return temporalTarget{name: "temporal-pg", connect: func(t *testing.T) temporalConn {
		s := pgServer.Get(t)
		return temporalConn{client: s.Client, hostPort: s.HostPort, namespace: s.Namespace,
			tlsArgs: []string{"-tls-ca", s.CA.CertFile, "-tls-cert", s.ClientCert.CertFile, "-tls-key", s.ClientCert.KeyFile, "-tls-server-name", s.ServerName}}
	}}
}

// temporalEngine is the temporal adapter on tgt. Whether the engine may
// lose a task polled as a worker stops is asked of the server (the
// namespace capability and the task queue's partitions), not configured,
// once, by the first cell that reads the features.
func temporalEngine(tgt temporalTarget) contract.Engine { return temporalEngineIn(tgt, "") }

// temporalEngineIn is temporalEngine on tables migrated into schema.
func temporalEngineIn(tgt temporalTarget, schema string) contract.Engine {
	var (
		once    sync.Once
		handoff temporaladapter.StopHandoff
		err     error
	)
	return contract.Engine{Name: tgt.name, Open: func(t *testing.T, pool *pgxpool.Pool) contract.Factory {
		conn := tgt.connect(t)
		queue := scenarioQueue(pool)
		return func(t *testing.T, reg *port.Registry) port.TaskEngine {
			e, err := temporaladapter.New(conn.client, pool, reg, temporaladapter.Config{Schema: schema,
				TaskQueue: queue, WorkerStopTimeout: 5 * time.Second, Logger: quiet()})
			require.NoError(t, err)
			return e
		}
	}, WorkerArgs: func(t *testing.T, pool *pgxpool.Pool) []string {
		conn := tgt.connect(t)
		return append([]string{"-engine", "temporal", "-db", pool.Config().ConnString(),
			"-hostport", conn.hostPort, "-namespace", conn.namespace, "-task-queue", scenarioQueue(pool)}, conn.tlsArgs...)
	}, Features: func(t *testing.T) contract.Features {
		conn := tgt.connect(t)
		once.Do(func() {
			// Partitions are server configuration, the same for every
			// scenario's queue (all named contract-...).
			handoff, err = temporaladapter.DescribeStopHandoff(context.Background(), conn.client, conn.namespace, "contract-probe")
			t.Logf("%s: %+v: a graceful stop keeps polled tasks: %v", tgt.name, handoff, handoff.KeepsPolledTasks())
		})
		require.NoError(t, err)
		return contract.Features{LosesPolledTasksOnStop: !handoff.KeepsPolledTasks()}
	}}
}

// engines are the configurations every suite runs: the lease engine, and
// the temporal adapter on the dev server and on the production-shaped
// server.
func engines() []contract.Engine {
	return []contract.Engine{leaseEngine(), temporalEngine(devTarget()), temporalEngine(pgTarget())}
}

// scenarioQueue is the Temporal task queue of the scenario whose database
// pool is on: every scenario has a database of its own, so Open and a worker
// subprocess derive the same queue from it without sharing state.
func scenarioQueue(pool *pgxpool.Pool) string {
	c := pool.Config().ConnConfig
	return fmt.Sprintf("contract-%s-%d-%s", c.Host, c.Port, c.Database)
}

func TestContract(t *testing.T) {
	contract.Run(t, engines()...)
}
