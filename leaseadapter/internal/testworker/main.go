// Command testworker is a lease-engine worker running the test kinds, for
// the fault tests that kill, stop and continue a worker process. It prints
// "ready" once it serves, and one "event ..." line per metric event, so the
// tests can see what the worker went through. SIGTERM or SIGINT stops it
// gracefully.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskport/taskport/leaseadapter"
	"github.com/taskport/taskport/leaseadapter/internal/testkinds"
	"github.com/taskport/taskport/port"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "testworker:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	var (
		dbURL       = flag.String("db", "", "database URL (required)")
		lease       = flag.Duration("lease", time.Second, "lease duration")
		poll        = flag.Duration("poll", 100*time.Millisecond, "poll interval")
		concurrency = flag.Int("concurrency", 4, "runs at once")
		id          = flag.String("id", "", "worker id")
	)
	flag.Parse()
	if *dbURL == "" {
		return errors.New("-db is required")
	}
	pool, err := pgxpool.New(ctx, *dbURL)
	if err != nil {
		return fmt.Errorf("open pool: %w", err)
	}
	defer pool.Close()
	reg := port.NewRegistry()
	if err := testkinds.Register(reg, pool); err != nil {
		return err
	}
	out := &printer{}
	eng, err := leaseadapter.New(pool, reg, leaseadapter.Config{
		WorkerID: *id, LeaseDuration: *lease, PollInterval: *poll, Metrics: out,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, nil)),
	})
	if err != nil {
		return err
	}
	if err := eng.Start(ctx, port.StartOptions{Concurrency: *concurrency}); err != nil {
		return fmt.Errorf("start: %w", err)
	}
	out.line("ready")
	<-ctx.Done()
	return eng.Stop(context.Background())
}

// printer reports metric events on stdout, one line each.
type printer struct{ mu sync.Mutex }

func (p *printer) line(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Printf(format+"\n", args...)
}

func (p *printer) Claimed(n int) { p.line("event claimed n=%d", n) }
func (p *printer) Finished(kind port.Kind, status port.Status) {
	p.line("event finished kind=%s status=%s", kind, status)
}
func (p *printer) LeaseLost(kind port.Kind)    { p.line("event lease_lost kind=%s", kind) }
func (p *printer) FencedCommit(kind port.Kind) { p.line("event fenced_commit kind=%s", kind) }
func (p *printer) QueueDepth(int)              {}
