// Command testworker is a temporaladapter worker for fault tests: the tests
// build it, run it as a child process, and kill or stop it mid-step. It
// prints "ready" once polling, and stops gracefully on SIGTERM.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/temporaladapter"
	"github.com/taskport/taskport/temporaladapter/internal/testkinds"
)

func main() {
	if err := run(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "testworker:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	hostPort := flag.String("hostport", "", "Temporal frontend")
	namespace := flag.String("namespace", "default", "Temporal namespace")
	dbURL := flag.String("db", "", "Postgres URL")
	taskQueue := flag.String("task-queue", temporaladapter.DefaultTaskQueue, "task queue")
	flag.Parse()

	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

	pool, err := pgxpool.New(ctx, *dbURL)
	if err != nil {
		return fmt.Errorf("open pool: %w", err)
	}
	defer pool.Close()
	reg := port.NewRegistry()
	if err := testkinds.Register(reg, pool, 1); err != nil {
		return err
	}
	c, err := temporaladapter.Dial(ctx, temporaladapter.ClientConfig{HostPort: *hostPort, Namespace: *namespace, Logger: logger})
	if err != nil {
		return err
	}
	defer c.Close()
	eng, err := temporaladapter.New(c, pool, reg, temporaladapter.Config{TaskQueue: *taskQueue, Logger: logger})
	if err != nil {
		return err
	}
	if err := eng.Start(ctx, port.StartOptions{}); err != nil {
		return err
	}
	fmt.Println("ready")
	select {
	case <-ctx.Done():
	case <-eng.Done(): // stopped serving without a Stop: a fatal error
		return errors.Join(fmt.Errorf("worker: %w", eng.Err()), eng.Stop(context.Background()))
	}
	return eng.Stop(context.Background())
}
