// Command worker serves the ledger kinds (test/contract/kinds) on either engine,
// as a child process that the fault scenarios of test/contract kill, stop
// and continue. It prints "ready pid=<pid>" once it serves; SIGTERM or SIGINT
// stops it gracefully.
//
//	worker -engine lease -db URL [-lease 2s] [-versions 1,2]
//	worker -engine temporal -db URL -hostport H:P -namespace NS -task-queue Q [-versions 1]
//	       [-tls-ca FILE -tls-cert FILE -tls-key FILE -tls-server-name NAME]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskport/taskport/leaseadapter"
	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/temporaladapter"
	"github.com/taskport/taskport/test/contract/kinds"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
}

type options struct {
	engine, db, versions       string
	concurrency                int
	lease, poll                time.Duration
	hostPort, namespace, queue string
	// Temporal over (m)TLS: see temporaladapter.ClientConfig.
	tlsCA, tlsCert, tlsKey, tlsServerName string
}

func run(ctx context.Context, args []string) error {
	var o options
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	fs.StringVar(&o.engine, "engine", "", "lease or temporal (required)")
	fs.StringVar(&o.db, "db", "", "Postgres URL of the scenario database (required)")
	fs.StringVar(&o.versions, "versions", "", "versions of "+string(kinds.LedgerVersioned)+" registered and served, e.g. 1,2; empty: all")
	fs.IntVar(&o.concurrency, "concurrency", 8, "steps run at once")
	fs.DurationVar(&o.lease, "lease", 2*time.Second, "lease engine: lease duration")
	fs.DurationVar(&o.poll, "poll", 100*time.Millisecond, "lease engine: poll interval")
	fs.StringVar(&o.hostPort, "hostport", "", "temporal: frontend host:port")
	fs.StringVar(&o.namespace, "namespace", "default", "temporal: namespace")
	fs.StringVar(&o.queue, "task-queue", "", "temporal: task queue of the scenario")
	fs.StringVar(&o.tlsCA, "tls-ca", "", "temporal: CA file that verifies the server (turns TLS on)")
	fs.StringVar(&o.tlsCert, "tls-cert", "", "temporal: client certificate file (mTLS, with -tls-key)")
	fs.StringVar(&o.tlsKey, "tls-key", "", "temporal: client key file (mTLS, with -tls-cert)")
	fs.StringVar(&o.tlsServerName, "tls-server-name", "", "temporal: name checked in the server certificate")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if o.db == "" {
		return errors.New("-db is required")
	}
	versions, err := parseVersions(o.versions)
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

	pcfg, err := pgxpool.ParseConfig(o.db)
	if err != nil {
		return fmt.Errorf("parse -db: %w", err)
	}
	// A connection for each step at once and four for the engine (its
	// LISTEN connection, commits, renewals): pgxpool's default, four on two
	// cores, left the steps queueing for connections behind the engine's,
	// and a step body that waits past the ledger kinds' 2s heartbeat
	// timeout is timed out and runs again.
	pcfg.MaxConns = int32(o.concurrency + 4)
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return fmt.Errorf("open pool: %w", err)
	}
	defer pool.Close()
	reg := port.NewRegistry()
	if err := kinds.RegisterLedger(reg, pool, versions...); err != nil {
		return err
	}
	eng, closeEngine, err := open(ctx, o, pool, reg, logger)
	if err != nil {
		return err
	}
	defer closeEngine()
	if err := eng.Start(ctx, port.StartOptions{Concurrency: o.concurrency}); err != nil {
		return fmt.Errorf("start %s worker: %w", o.engine, err)
	}
	fmt.Printf("ready pid=%d\n", os.Getpid())
	select {
	case <-ctx.Done():
	case <-eng.Done(): // stopped serving without a Stop: a fatal error (Temporal's)
		return errors.Join(fmt.Errorf("worker: %w", eng.Err()), eng.Stop(context.Background()))
	}
	stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := eng.Stop(stopCtx); err != nil {
		return fmt.Errorf("stop %s worker: %w", o.engine, err)
	}
	return nil
}

// open builds the engine named by o.engine; closeEngine releases what open
// acquired besides the engine.
func open(ctx context.Context, o options, pool *pgxpool.Pool, reg *port.Registry, logger *slog.Logger) (eng port.TaskEngine, closeEngine func(), err error) {
	switch o.engine {
	case "lease":
		e, err := leaseadapter.New(pool, reg, leaseadapter.Config{
			LeaseDuration: o.lease, PollInterval: o.poll, StopTimeout: 5 * time.Second, Logger: logger})
		if err != nil {
			return nil, nil, fmt.Errorf("lease engine: %w", err)
		}
		return e, func() {}, nil
	case "temporal":
		if o.hostPort == "" || o.queue == "" {
			return nil, nil, errors.New("-hostport and -task-queue are required with -engine temporal")
		}
		c, err := temporaladapter.Dial(ctx, temporaladapter.ClientConfig{HostPort: o.hostPort, Namespace: o.namespace, Logger: logger,
			CAFile: o.tlsCA, CertFile: o.tlsCert, KeyFile: o.tlsKey, ServerName: o.tlsServerName})
		if err != nil {
			return nil, nil, err
		}
		e, err := temporaladapter.New(c, pool, reg, temporaladapter.Config{TaskQueue: o.queue, WorkerStopTimeout: 5 * time.Second, Logger: logger})
		if err != nil {
			c.Close()
			return nil, nil, fmt.Errorf("temporal engine: %w", err)
		}
		return e, c.Close, nil
	}
	return nil, nil, fmt.Errorf("-engine %q: want lease or temporal", o.engine)
}

func parseVersions(s string) ([]int, error) {
	if s == "" {
		return nil, nil
	}
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return nil, fmt.Errorf("-versions %q: %w", s, err)
		}
		out = append(out, v)
	}
	return out, nil
}
