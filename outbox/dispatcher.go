package outbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskport/taskport/port"
)

// Config tunes a Dispatcher. New fills zero fields with the defaults named.
type Config struct {
	// Logger receives dispatch failures. Default: discard.
	Logger *slog.Logger
	// BatchSize is how many rows one claim takes. Default 32.
	BatchSize int
	// PollInterval is the fallback wake-up when no notification arrives
	// (LISTEN connection lost, row whose backoff expired). Default 1s.
	PollInterval time.Duration
	// ClaimLease hides claimed rows from other dispatchers; a dispatcher that
	// dies mid-batch delays its rows by at most this. Default 30s.
	ClaimLease time.Duration
	// Backoff paces retries of a failed Enqueue by the row's attempts.
	// Default port.NetworkRetry() intervals (1s doubling to 60s), with no
	// attempt limit: a row is only given up on when Enqueue refuses it as
	// invalid input.
	Backoff port.RetryPolicy
}

func (c Config) withDefaults() Config {
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.BatchSize == 0 {
		c.BatchSize = 32
	}
	if c.PollInterval == 0 {
		c.PollInterval = time.Second
	}
	if c.ClaimLease == 0 {
		c.ClaimLease = 30 * time.Second
	}
	if c.Backoff.MaxAttempts == 0 {
		c.Backoff = port.NetworkRetry()
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.BatchSize < 1:
		return &port.FieldError{Field: "batch_size", Reason: "must be at least 1"}
	case c.PollInterval < 0:
		return &port.FieldError{Field: "poll_interval", Reason: "must not be negative"}
	case c.ClaimLease < time.Second:
		return &port.FieldError{Field: "claim_lease", Reason: "must be at least 1s"}
	}
	return c.Backoff.Validate()
}

// Dispatcher moves outbox rows to the engine. Several dispatchers (in one
// process or many) can run at once: claims use SKIP LOCKED and a claim lease.
type Dispatcher struct {
	pool   *pgxpool.Pool
	engine port.TaskEngine
	cfg    Config

	mu     sync.Mutex
	cancel context.CancelCauseFunc
	done   chan struct{}
}

// NewDispatcher returns a stopped dispatcher.
func NewDispatcher(pool *pgxpool.Pool, engine port.TaskEngine, cfg Config) (*Dispatcher, error) {
	if pool == nil || engine == nil {
		return nil, errors.New("outbox dispatcher: pool and engine are required")
	}
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("outbox dispatcher config: %w", err)
	}
	return &Dispatcher{pool: pool, engine: engine, cfg: cfg}, nil
}

var errStopped = errors.New("outbox dispatcher stopped")

// Start runs the dispatcher in the background until Stop or until ctx ends.
func (d *Dispatcher) Start(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.done != nil {
		return port.ErrAlreadyStarted
	}
	ctx, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	d.cancel, d.done = cancel, done
	wake := make(chan struct{}, 1)
	var wg sync.WaitGroup
	wg.Go(func() { d.listen(ctx, wake) })
	wg.Go(func() { d.loop(ctx, wake) })
	go func() {
		wg.Wait()
		close(done)
	}()
	return nil
}

// Stop ends the background loops and waits for them. Rows claimed but not
// yet enqueued become due again after ClaimLease. Safe to call twice.
func (d *Dispatcher) Stop() {
	d.mu.Lock()
	cancel, done := d.cancel, d.done
	d.cancel, d.done = nil, nil
	d.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel(errStopped)
	<-done
}

func (d *Dispatcher) loop(ctx context.Context, wake <-chan struct{}) {
	ticker := time.NewTicker(d.cfg.PollInterval)
	defer ticker.Stop()
	for {
		for {
			n, err := d.DispatchOnce(ctx)
			if err != nil && ctx.Err() == nil {
				d.cfg.Logger.Warn("outbox dispatch", slog.String("error", err.Error()))
			}
			if err != nil || n < d.cfg.BatchSize {
				break
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-wake:
		case <-ticker.C:
		}
	}
}

// listen turns notifications from the insert trigger into wake-ups. When
// its connection fails it reconnects after PollInterval; polling covers the
// gap.
func (d *Dispatcher) listen(ctx context.Context, wake chan<- struct{}) {
	for ctx.Err() == nil {
		err := d.listenOnce(ctx, wake)
		if ctx.Err() != nil {
			return
		}
		d.cfg.Logger.Warn("outbox listen", slog.String("error", err.Error()))
		select {
		case <-ctx.Done():
			return
		case <-time.After(d.cfg.PollInterval):
		}
	}
}

func (d *Dispatcher) listenOnce(ctx context.Context, wake chan<- struct{}) error {
	conn, err := d.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("acquire listen connection: %w", err)
	}
	// The connection carries a LISTEN registration: never hand it back to
	// the pool.
	pc := conn.Hijack()
	defer pc.Close(context.WithoutCancel(ctx)) //nolint:errcheck // closing a dead connection
	if _, err := pc.Exec(ctx, listenSQL); err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	poke(wake) // rows written while we were not listening
	for {
		if _, err := pc.WaitForNotification(ctx); err != nil {
			return fmt.Errorf("wait for notification: %w", err)
		}
		poke(wake)
	}
}

func poke(wake chan<- struct{}) {
	select {
	case wake <- struct{}{}:
	default:
	}
}

type claimed struct {
	id          [16]byte
	kind        port.Kind
	key         string
	businessKey string
	payload     json.RawMessage
	availableAt *time.Time
	attempts    int
}

// DispatchOnce claims one batch of due rows and enqueues them. It returns how
// many rows it claimed.
func (d *Dispatcher) DispatchOnce(ctx context.Context) (int, error) {
	rows, err := d.pool.Query(ctx, claimSQL, d.cfg.BatchSize, d.cfg.ClaimLease.Seconds())
	if err != nil {
		return 0, fmt.Errorf("claim outbox rows: %w", err)
	}
	batch, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (claimed, error) {
		var c claimed
		err := row.Scan(&c.id, &c.kind, &c.key, &c.businessKey, &c.payload, &c.availableAt, &c.attempts)
		return c, err
	})
	if err != nil {
		return 0, fmt.Errorf("claim outbox rows: %w", err)
	}
	var errs []error
	for _, c := range batch {
		if err := d.dispatch(ctx, c); err != nil {
			errs = append(errs, err)
		}
	}
	return len(batch), errors.Join(errs...)
}

func (d *Dispatcher) dispatch(ctx context.Context, c claimed) error {
	opts := port.EnqueueOptions{IdempotencyKey: c.key, BusinessKey: c.businessKey}
	if c.availableAt != nil {
		opts.AvailableAt = *c.availableAt
	}
	runID, err := d.engine.Enqueue(ctx, c.kind, c.payload, opts)
	if err == nil {
		if _, err := d.pool.Exec(ctx, markDispatchedSQL, c.id, runID); err != nil {
			return fmt.Errorf("mark outbox %s/%s dispatched: %w", c.kind, c.key, err)
		}
		return nil
	}
	if ctx.Err() != nil {
		return nil // stopping: the claim lease hands the row back
	}
	if errors.Is(err, port.ErrInvalidInput) {
		d.cfg.Logger.Error("outbox row refused by the engine", slog.String("kind", string(c.kind)),
			slog.String("key", c.key), slog.String("error", err.Error()))
		if _, merr := d.pool.Exec(ctx, markFailedSQL, c.id, err.Error()); merr != nil {
			return fmt.Errorf("mark outbox %s/%s failed: %w", c.kind, c.key, merr)
		}
		return nil
	}
	wait := d.cfg.Backoff.Backoff(c.attempts)
	if _, merr := d.pool.Exec(ctx, markRetrySQL, c.id, wait.Seconds(), err.Error()); merr != nil {
		return fmt.Errorf("back off outbox %s/%s: %w", c.kind, c.key, merr)
	}
	return fmt.Errorf("enqueue %s/%s (attempt %d, next in %s): %w", c.kind, c.key, c.attempts, wait, err)
}
