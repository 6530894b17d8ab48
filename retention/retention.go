// Package retention keeps the tables that every run writes bounded: the
// equivalent of River's JobCleaner. A Cleaner runs in the worker and, once
// per Interval, deletes what is older than the Policy's ages:
//
//   - finished runs (taskport.run in a terminal status), with the lease
//     engine's rows of those runs (task, step_result) and their waiters;
//     separate ages for succeeded, canceled and failed runs, failed kept
//     longest since they are the dead letters;
//   - the lease engine's consumed signals, and signals nobody consumed (no
//     run waited on the topic, or the run they were sent to ended);
//   - the Temporal engine's early signals a wait took, and those no wait
//     took (they expire);
//   - waiters whose run ended (a Temporal run terminated or reset while it
//     waited leaves one);
//   - dispatched outbox rows.
//
// Business tables (plan, approval, download_task, decision, asset_operation)
// and failed outbox rows are never pruned. A run that is not terminal is
// never selected: every statement repeats the terminal-status predicate of
// the index it reads.
//
// # What pruning means for idempotency
//
// taskport.run is the idempotency authority: Enqueue with a (kind, key)
// whose run is recorded returns that run. Once the cleaner deleted the run,
// the key is free again and Enqueue starts a new run, with a new id (and a
// newer fencing generation). So a key is deduplicated while its run is open
// and for the age of the run's terminal status after it finished
// (Policy.Completed, Canceled or Failed). A caller that may repeat a request
// later than that relies on the business tables (a plan's status), which
// are never pruned.
//
// # Cost
//
// Each statement deletes at most BatchSize rows, chosen through an index in
// the order of their age (migrations 00007 and 00013) with FOR UPDATE SKIP
// LOCKED, and commits on its own: no lock is held longer than one batch,
// and a row some other transaction holds is left for the next pass. A pass
// repeats batches until a table has nothing older than its age, so a
// backlog drains at the rate of the deletes and the lag metric says how far
// behind it is.
//
// # One leader
//
// Every worker may run a Cleaner. Each pass first takes a session advisory
// lock (pg_try_advisory_lock) on a connection of its own and skips the pass
// when another process holds it, so one process prunes at a time; the lock
// ends with the pass (or with the connection, if the process dies). Two
// cleaners at once would still be correct (SKIP LOCKED), only wasteful.
package retention

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskport/taskport/internal/startstop"
)

// The defaults of Policy. Completed and canceled runs are kept a week, so a
// repeated request within a week finds its run; failed runs (dead letters)
// a month, time for an operator to see them.
const (
	DefaultCompleted = 7 * 24 * time.Hour
	DefaultCanceled  = 7 * 24 * time.Hour
	DefaultFailed    = 30 * 24 * time.Hour
	DefaultInterval  = time.Minute
	DefaultBatchSize = 1000
)

// Policy is how long each kind of row is kept. A zero field takes its
// default; a negative age keeps those rows forever.
type Policy struct {
	// Completed is the age of succeeded runs (measured from finished_at),
	// and of the bookkeeping rows that only serve open runs: consumed and
	// unconsumed signals, waiters of ended runs and dispatched outbox rows.
	// Default DefaultCompleted.
	Completed time.Duration
	// Canceled is the age of canceled runs. Default DefaultCanceled.
	Canceled time.Duration
	// Failed is the age of failed runs, the dead letters. Default
	// DefaultFailed.
	Failed time.Duration
	// Interval is the time between passes. Default DefaultInterval.
	Interval time.Duration
	// BatchSize bounds the rows one statement deletes. Default
	// DefaultBatchSize.
	BatchSize int
}

// WithDefaults fills the zero fields with their defaults.
func (p Policy) WithDefaults() Policy {
	fill := func(d *time.Duration, def time.Duration) {
		if *d == 0 {
			*d = def
		}
	}
	fill(&p.Completed, DefaultCompleted)
	fill(&p.Canceled, DefaultCanceled)
	fill(&p.Failed, DefaultFailed)
	fill(&p.Interval, DefaultInterval)
	if p.BatchSize == 0 {
		p.BatchSize = DefaultBatchSize
	}
	return p
}

// Validate reports a policy that cannot run: an interval that is not
// positive, or a batch size below 1.
func (p Policy) Validate() error {
	if p.Interval <= 0 {
		return fmt.Errorf("retention interval must be positive, got %s", p.Interval)
	}
	if p.BatchSize < 1 {
		return fmt.Errorf("retention batch size must be at least 1, got %d", p.BatchSize)
	}
	return nil
}

// String is the setting as operators read it, e.g. in the worker's log.
func (p Policy) String() string {
	age := func(d time.Duration) string {
		if d < 0 {
			return "forever"
		}
		return d.String()
	}
	every := "every " + p.Interval.String()
	if p.Interval < 0 {
		every = "not run by this process"
	}
	return fmt.Sprintf("completed %s, canceled %s, failed %s, %s",
		age(p.Completed), age(p.Canceled), age(p.Failed), every)
}

// Deleted counts the rows one batch deleted, per table.
type Deleted map[string]int64

// Pruner deletes the prunable rows of the tables one package owns (the
// statements live with the owner of each table). Each engine and the outbox
// provide one.
type Pruner interface {
	// Prune deletes one batch: at most limit rows of each statement it runs,
	// each older than its age under p. It reports the rows deleted per
	// table; a statement that deleted fewer than limit rows has nothing
	// left.
	Prune(ctx context.Context, p Policy, limit int) (Deleted, error)
	// Lag reports, per table, how long ago the oldest row still there became
	// prunable (zero when none is).
	Lag(ctx context.Context, p Policy) (map[string]time.Duration, error)
}

// Metrics receives what the cleaner did. cmd adapts it to Prometheus.
type Metrics interface {
	// Deleted: n rows of table were deleted by one batch.
	Deleted(table string, n int64)
	// Lag: after a pass, the oldest prunable row of table became prunable
	// this long ago (zero: none left).
	Lag(table string, d time.Duration)
}

// Config configures a Cleaner.
type Config struct {
	Policy Policy
	// Logger defaults to discarding.
	Logger *slog.Logger
	// Metrics is optional.
	Metrics Metrics
}

// LeaderLock is the key of the session advisory lock a pass holds, per
// database (pg_locks shows it as classid 0x7461736b, objid 0x72657465).
const LeaderLock int64 = 0x7461736b_72657465 // "taskrete"

// Cleaner prunes on a timer; see the package doc.
type Cleaner struct {
	startstop.Base
	pool    *pgxpool.Pool
	pruners []Pruner
	cfg     Config
	stop    context.CancelFunc // ends the loop of the current Start
	done    chan struct{}      // closed when that loop returned
}

// New returns a stopped Cleaner over the pruners; pool is where it takes
// the leader lock (any pool of the database the pruners work on).
func New(pool *pgxpool.Pool, pruners []Pruner, cfg Config) (*Cleaner, error) {
	if pool == nil || len(pruners) == 0 {
		return nil, errors.New("retention: a pool and at least one pruner are required")
	}
	cfg.Policy = cfg.Policy.WithDefaults()
	if err := cfg.Policy.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Cleaner{pool: pool, pruners: pruners, cfg: cfg}, nil
}

// Policy is the policy in force, defaults filled in.
func (c *Cleaner) Policy() Policy { return c.cfg.Policy }

// Start runs a pass every Interval, the first one at once, until Stop.
func (c *Cleaner) Start(ctx context.Context) error {
	return startstop.Start(ctx, &c.Base, func(ctx context.Context) error {
		ctx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		c.stop, c.done = stop, done
		go func() {
			defer close(done)
			c.pass(ctx)
			startstop.Every(ctx, c.cfg.Policy.Interval, c.pass)
		}()
		return nil
	})
}

// Stop ends the loop and waits for it (or for ctx); a batch in flight is
// canceled, and its transaction rolled back.
func (c *Cleaner) Stop(ctx context.Context) error {
	return startstop.Stop(ctx, &c.Base, func(ctx context.Context) error {
		c.stop()
		select {
		case <-c.done:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("retention: stop: %w", context.Cause(ctx))
		}
	})
}

func (c *Cleaner) pass(ctx context.Context) {
	if _, err := c.RunOnce(ctx); err != nil && ctx.Err() == nil {
		c.cfg.Logger.Warn("retention pass", slog.Any("err", err))
	}
}

// RunOnce runs one pass now, if no other process runs one: it deletes in
// batches until nothing is older than its age, then reports the lag. It
// returns the rows deleted per table, or nil when another process held the
// leader lock.
func (c *Cleaner) RunOnce(ctx context.Context) (total Deleted, err error) {
	conn, err := c.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("retention: acquire: %w", err)
	}
	defer conn.Release()
	var led bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, LeaderLock).Scan(&led); err != nil {
		return nil, fmt.Errorf("retention: leader lock: %w", err)
	}
	if !led {
		return nil, nil
	}
	defer func() {
		// A canceled ctx must not leave the session lock on a pooled
		// connection; if the unlock fails the connection goes.
		unlock, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if _, uerr := conn.Exec(unlock, `SELECT pg_advisory_unlock($1)`, LeaderLock); uerr != nil {
			_ = conn.Conn().Close(unlock)
			err = errors.Join(err, fmt.Errorf("retention: leader unlock: %w", uerr))
		}
	}()
	total = Deleted{}
	for _, p := range c.pruners {
		if err := c.drain(ctx, p, total); err != nil {
			return total, err
		}
		lag, err := p.Lag(ctx, c.cfg.Policy)
		if err != nil {
			return total, fmt.Errorf("retention lag: %w", err)
		}
		if c.cfg.Metrics != nil {
			for table, d := range lag {
				c.cfg.Metrics.Lag(table, d)
			}
		}
	}
	c.cfg.Logger.Debug("retention pass", slog.Any("deleted", total))
	return total, nil
}

// drain runs p's batches until one deletes fewer than BatchSize rows from
// every table.
func (c *Cleaner) drain(ctx context.Context, p Pruner, total Deleted) error {
	limit := c.cfg.Policy.BatchSize
	for {
		got, err := p.Prune(ctx, c.cfg.Policy, limit)
		if err != nil {
			return fmt.Errorf("retention prune: %w", err)
		}
		more := false
		for table, n := range got {
			total[table] += n
			if c.cfg.Metrics != nil && n > 0 {
				c.cfg.Metrics.Deleted(table, n)
			}
			more = more || n >= int64(limit)
		}
		if !more {
			return nil
		}
	}
}
