package leaseadapter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace"

	"github.com/taskport/taskport/internal/dbtx"
	"github.com/taskport/taskport/internal/enginekit"
	"github.com/taskport/taskport/internal/runstore"
	"github.com/taskport/taskport/internal/startstop"
	"github.com/taskport/taskport/internal/tracing"
	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/port/porttx"
)

// Engine is the Postgres lease-table engine. Enqueue, Signal, Cancel, Get
// and ListRuns work without Start; Start makes the process a worker. Its
// lifecycle (Start, Stop, Done, Err) follows the port's rules through
// internal/startstop: a stopped engine starts again with a new worker. It
// has no fatal error of its own: its loops log and retry until Stop.
type Engine struct {
	startstop.Base

	pool   *dbtx.Pool // statements name cfg.Schema
	reg    *port.Registry
	cfg    Config
	tracer trace.Tracer

	mu     sync.Mutex
	worker *worker // between Start and the beginning of Stop

	notifyMu   sync.Mutex
	lastNotify time.Time
	trailing   bool // a trailing NOTIFY is scheduled
}

// Engine serves callers (port.TaskEngine) and operators (port.Admin).
var (
	_ port.TaskEngine = (*Engine)(nil)
	_ port.Admin      = (*Engine)(nil)
)

// New returns an engine over pool (the schema must be migrated; the engine
// never migrates) running the definitions and activities of reg.
func New(pool *pgxpool.Pool, reg *port.Registry, cfg Config) (*Engine, error) {
	if pool == nil || reg == nil {
		return nil, &port.FieldError{Field: "engine", Reason: "pool and registry are required"}
	}
	if err := dbtx.CheckPool(pool); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("lease engine config: %w", err)
	}
	schema, err := dbtx.ParseSchema(cfg.Schema)
	if err != nil {
		return nil, &port.FieldError{Field: "schema", Reason: err.Error()}
	}
	return &Engine{pool: dbtx.NewPool(pool, schema), reg: reg, cfg: cfg, tracer: tracing.Tracer(cfg.TracerProvider, "github.com/taskport/taskport/leaseadapter")}, nil
}

// Enqueue starts a run, or returns the run already recorded for
// (kind, opts.IdempotencyKey), with no time window.
func (e *Engine) Enqueue(ctx context.Context, kind port.Kind, input any, opts port.EnqueueOptions) (port.RunID, error) {
	p, err := enginekit.PrepareEnqueue(e.reg, kind, input, opts)
	if err != nil {
		return "", err
	}
	notify := e.notifyNow()
	args, err := e.enqueueArgs(ctx, kind, p, opts, e.enqueueHint(), notify)
	if err != nil {
		return "", err
	}
	var got *uuid.UUID
	var ready, notified int
	var owner *string
	scan := func(row pgx.Row) error { return row.Scan(&got, &ready, &notified, &owner) }
	w := e.serving()
	var drained bool // this worker's claim took the run, and left no other
	if w != nil {
		// Concurrent enqueues of a worker process share group commits with
		// its runs, and one that this worker serves claims in its group.
		req := &commitReq{sql: enqueueSQL, args: args, scan: scan, done: make(chan error, 1),
			claims: w.served.has(kind, p.Definition.Version) && !opts.AvailableAt.After(time.Now())}
		err = w.submitReq(ctx, req)
		drained = err == nil && req.drained
	}
	if w == nil || errors.Is(err, errStopped) {
		err = scan(e.pool.QueryRow(ctx, enqueueSQL, args...))
	}
	if err != nil {
		return "", fmt.Errorf("enqueue %s: %w", kind, runstore.Unmigrated(err))
	}
	if drained {
		ready = 0 // claimed already: nobody needs to hear of it
	}
	if ready > 0 && !notify {
		e.notifyLater()
	}
	if err := foreignKey(kind, opts.IdempotencyKey, got, owner); err != nil {
		return "", err
	}
	if got == nil {
		// Lost a race with a concurrent enqueue of the same key: read it
		// back in a fresh snapshot.
		err := pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
			rid, err := e.EnqueueTx(ctx, tx, kind, input, opts)
			if err != nil {
				return err
			}
			u, err := uuid.Parse(string(rid))
			got = &u
			return err
		})
		if err != nil {
			return "", fmt.Errorf("enqueue %s: %w", kind, err)
		}
	}
	if ready > 0 {
		e.pokeLocal()
	}
	return port.RunID(got.String()), nil
}

// notifyWindow bounds how often one process's enqueues NOTIFY. A NOTIFY
// takes a database-wide lock at commit, which serializes the commits of
// concurrent enqueues; within the window an enqueue skips it and a single
// trailing NOTIFY goes out when the window ends, so a remote worker hears of
// every run at most notifyWindow late.
const notifyWindow = 5 * time.Millisecond

// notifyNow reports whether this enqueue should notify inline.
func (e *Engine) notifyNow() bool {
	e.notifyMu.Lock()
	defer e.notifyMu.Unlock()
	if time.Since(e.lastNotify) < notifyWindow {
		return false
	}
	e.lastNotify = time.Now()
	return true
}

// notifyLater schedules the trailing NOTIFY of the current window.
func (e *Engine) notifyLater() {
	e.notifyMu.Lock()
	defer e.notifyMu.Unlock()
	if e.trailing {
		return
	}
	e.trailing = true
	time.AfterFunc(notifyWindow-time.Since(e.lastNotify), func() {
		e.notifyMu.Lock()
		e.trailing = false
		e.lastNotify = time.Now()
		e.notifyMu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), e.cfg.PollInterval)
		defer cancel()
		if _, err := e.pool.Exec(ctx, notifySQL, e.channel(), e.enqueueHint()); err != nil {
			// Workers find the runs at their next poll.
			e.cfg.Logger.Warn("trailing notify failed", slog.Any("error", err))
		}
	})
}

// enqueueHint is the notification payload of this process's enqueues: its
// own worker, woken directly, ignores it.
func (e *Engine) enqueueHint() string { return "e:" + e.cfg.WorkerID }

var _ porttx.Enqueuer = (*Engine)(nil)

// EnqueueTx is Enqueue inside the caller's transaction (porttx.Enqueuer):
// the run exists (and workers hear of it) only if tx commits.
func (e *Engine) EnqueueTx(ctx context.Context, tx pgx.Tx, kind port.Kind, input any, opts port.EnqueueOptions) (port.RunID, error) {
	p, err := enginekit.PrepareEnqueue(e.reg, kind, input, opts)
	if err != nil {
		return "", err
	}
	args, err := e.enqueueArgs(ctx, kind, p, opts, "", true)
	if err != nil {
		return "", err
	}
	var got *uuid.UUID
	var ready, notified int
	var owner *string
	tx = e.pool.Schema().Tx(tx)
	if err := tx.QueryRow(ctx, enqueueSQL, args...).Scan(&got, &ready, &notified, &owner); err != nil {
		return "", fmt.Errorf("enqueue %s: %w", kind, err)
	}
	if err := foreignKey(kind, opts.IdempotencyKey, got, owner); err != nil {
		return "", err
	}
	if got != nil {
		return port.RunID(got.String()), nil
	}
	// The key was taken by a run committed after this statement's
	// snapshot: runstore.Insert's read, a statement of its own, sees it.
	run, _, err := runstore.Insert(ctx, tx, runstore.NewRun{
		Engine: runstore.EngineLease, Kind: kind, Version: p.Definition.Version, Key: opts.IdempotencyKey,
		BusinessKey: opts.BusinessKey, Priority: opts.Priority, Input: p.Input, AvailableAt: opts.AvailableAt,
	})
	if err != nil {
		return "", err
	}
	return run.ID, nil
}

// foreignKey refuses an enqueue whose key enqueueSQL found held by a run
// of another engine (owner).
func foreignKey(kind port.Kind, key string, got *uuid.UUID, owner *string) error {
	if got == nil || owner == nil || runstore.Engine(*owner) == runstore.EngineLease {
		return nil
	}
	return runstore.OtherEngineKey(kind, key, port.RunID(got.String()), runstore.Engine(*owner), runstore.EngineLease)
}

// enqueueArgs are enqueueSQL's parameters, with a new run id: a
// notification with payload hint, sent when notify is set and the run is
// due now.
func (e *Engine) enqueueArgs(ctx context.Context, kind port.Kind, p enginekit.PreparedEnqueue,
	opts port.EnqueueOptions, hint string, notify bool) ([]any, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return nil, fmt.Errorf("enqueue %s: new run id: %w", kind, err)
	}
	var avail *time.Time
	if !opts.AvailableAt.IsZero() {
		avail = &opts.AvailableAt
	}
	retry := p.Definition.Retry.WithDefaults()
	tc := tracing.FromContext(ctx)
	return []any{dbtx.UUID(id), kind, p.Definition.Version, opts.IdempotencyKey, opts.BusinessKey,
		opts.Priority, p.Input, avail, retry.MaxAttempts, retry.InitialInterval.Milliseconds(),
		retry.MaxInterval.Milliseconds(), retry.BackoffCoefficient, e.channel(), hint, notify, tc.Parent, tc.State}, nil
}

// EnqueueMany enqueues a batch (port.TaskEngine) in one statement, which
// is its one commit: the runs (runstore.InsertManyWith), each with its
// kind's retry policy, and one notification for the batch. One statement
// per batch, not per run, is what makes a backlog import fast; see the
// bench module's `compare enqueue`.
func (e *Engine) EnqueueMany(ctx context.Context, items []port.EnqueueItem) ([]port.EnqueueResult, error) {
	prep, err := enginekit.PrepareBatch(e.reg, items)
	if err != nil || len(prep) == 0 {
		return nil, err
	}
	// The retry policy of each (kind, version) in the batch, which the run
	// rows copy (the reaper backs off without knowing the kind).
	var p policies
	for _, pe := range prep {
		p.add(pe.Definition)
	}
	tc := tracing.FromContext(ctx)
	ids, created, err := runstore.InsertManyWith(ctx, e.pool, runstore.NewRuns(runstore.EngineLease, prep), enqueueManySQL,
		p.kinds, p.versions, p.maxAttempts, p.initial, p.max, p.coeff, e.channel(), e.enqueueHint(), tc.Parent, tc.State)
	if err != nil {
		return nil, fmt.Errorf("enqueue %d runs: %w", len(items), err)
	}
	out := make([]port.EnqueueResult, len(ids))
	ready := false
	now := time.Now()
	for i, id := range ids {
		out[i] = port.EnqueueResult{ID: id, Created: created[i]}
		// A run created now is due at the time it asked for, or now.
		ready = ready || (created[i] && !prep[i].Options.AvailableAt.After(now))
	}
	if ready {
		e.pokeLocal()
	}
	return out, nil
}

// policies are the retry policies of enqueueManySQL ($10-$15), one element
// per (kind, version).
type policies struct {
	kinds        []port.Kind
	versions     []int
	maxAttempts  []int
	initial, max []int64
	coeff        []float64
}

func (p *policies) add(def port.Definition) {
	for i := range p.kinds {
		if p.kinds[i] == def.Kind && p.versions[i] == def.Version {
			return
		}
	}
	r := def.Retry.WithDefaults()
	p.kinds = append(p.kinds, def.Kind)
	p.versions = append(p.versions, def.Version)
	p.maxAttempts = append(p.maxAttempts, r.MaxAttempts)
	p.initial = append(p.initial, r.InitialInterval.Milliseconds())
	p.max = append(p.max, r.MaxInterval.Milliseconds())
	p.coeff = append(p.coeff, r.BackoffCoefficient)
}

// Signal stores the signal and wakes the runs waiting on topic.
//
// One signal reaches every run registered as waiting on the topic when it is
// sent (each gets its own copy, consumed when it resumes); delivered counts
// them. With no waiter the signal is kept, untargeted, and the first run that
// later waits on the topic consumes it: an early signal is not lost. A waiter
// consumes one signal per wait, oldest first.
func (e *Engine) Signal(ctx context.Context, topic port.Topic, payload any) (int, error) {
	raw, err := enginekit.PrepareSignal(topic, payload)
	if err != nil {
		return 0, err
	}
	var delivered int
	err = pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, topicLockSQL, string(topic)); err != nil {
			return err
		}
		tc := tracing.FromContext(ctx)
		if err := tx.QueryRow(ctx, signalSQL, string(topic), raw, tc.Parent, tc.State).Scan(&delivered); err != nil {
			return err
		}
		if delivered == 0 {
			return nil
		}
		_, err := tx.Exec(ctx, notifySQL, e.channel(), "")
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("signal %s: %w", topic, err)
	}
	return delivered, nil
}

// Cancel writes the cancel flag of taskport.run first (ADR 2.4), as the
// Temporal engine does, then settles it (settleCancelSQL). A pending or
// waiting run is canceled at once; a running one has its step context
// canceled with port.ErrCanceled (at once through a notification, at the
// latest at its worker's next heartbeat), and no later step starts.
// Canceling a finished run writes nothing and returns nil; a run of the
// Temporal engine is refused with port.ErrOtherEngine, nothing written.
func (e *Engine) Cancel(ctx context.Context, id port.RunID, reason string) error {
	u, err := runstore.ParseID(id)
	if err != nil {
		return err
	}
	flagged, err := runstore.RequestCancel(ctx, e.pool, runstore.EngineLease, id, reason)
	if err != nil || !flagged {
		return err
	}
	err = pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
		var old string
		if err := runstore.InterpretError(tx.QueryRow(ctx, settleCancelSQL, u).Scan(&old)); err != nil {
			return fmt.Errorf("settle cancel of run %s: %w", id, err)
		}
		if old != "running" {
			return nil
		}
		_, err = tx.Exec(ctx, notifySQL, e.channel(), "c:"+uuid.UUID(u).String())
		return err
	})
	if err != nil {
		return fmt.Errorf("cancel run %s: %w", id, err)
	}
	return nil
}

// serving returns the worker while it runs and is not stopping.
func (e *Engine) serving() *worker {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.worker
}

// pokeLocal wakes this process's own worker, if any, without waiting for
// the notification to come back from the server.
func (e *Engine) pokeLocal() {
	if w := e.serving(); w != nil {
		w.poke()
	}
}

// Get returns the run's view, which is its row: a claimed run reads as
// running, a run whose leases were all lost as failed.
func (e *Engine) Get(ctx context.Context, id port.RunID) (port.RunView, error) {
	run, err := runstore.GetOwned(ctx, e.pool, runstore.EngineLease, id)
	if err != nil {
		return port.RunView{}, err
	}
	return run.RunView, nil
}

// ListRuns lists this engine's runs for the admin views: dead letters
// (Statuses: failed) and runs still open on an old version (BelowVersion),
// including those no worker serves.
func (e *Engine) ListRuns(ctx context.Context, filter port.RunFilter) ([]port.RunView, error) {
	return runstore.List(ctx, e.pool, runstore.EngineLease, filter)
}

// Retry starts a new run for a failed one (port.Admin): the shared
// runstore.RetryStored over this engine's Get and Enqueue, or enqueueStored when
// this process does not register the kind.
func (e *Engine) Retry(ctx context.Context, id port.RunID) (port.RunID, error) {
	return runstore.RetryStored(ctx, e.pool, e, e.enqueueStored, id)
}

// enqueueStored is a retry's new run when this process does not register
// the failed run's kind (a client that only administers runs): a copy of
// the failed run's row, at its version, with its input, business key,
// priority and retry policy, due now, under key.
func (e *Engine) enqueueStored(ctx context.Context, failed runstore.Run, key string) (port.RunID, error) {
	tc := tracing.FromContext(ctx)
	// A concurrent retry of the same run may insert the key between this
	// statement's snapshot and its insert: the next statement sees it.
	for range 2 {
		id, err := uuid.NewV7()
		if err != nil {
			return "", fmt.Errorf("enqueue %s: new run id: %w", failed.Kind, err)
		}
		var got *uuid.UUID
		var notified int
		var owner *string
		err = e.pool.QueryRow(ctx, enqueueStoredSQL, dbtx.UUID(id), string(failed.ID), key, tc.Parent, tc.State, e.channel(), e.enqueueHint()).
			Scan(&got, &notified, &owner)
		if err != nil {
			return "", fmt.Errorf("enqueue %s: %w", failed.Kind, err)
		}
		if err := foreignKey(failed.Kind, key, got, owner); err != nil {
			return "", err
		}
		if got != nil {
			e.pokeLocal()
			return port.RunID(got.String()), nil
		}
	}
	return "", fmt.Errorf("enqueue %s: the run of key %s was neither inserted nor found", failed.Kind, key)
}

// Start makes this process a worker: it claims runs of the (kind, version)
// pairs it serves (opts.Versions; nil: every registered definition),
// running at most opts.Concurrency steps at once (0:
// Config.DefaultConcurrency) among up to Config.ActiveRuns runs. Waiting
// runs hold neither. The lifecycle rules are the port's (port.TaskEngine).
func (e *Engine) Start(ctx context.Context, opts port.StartOptions) error {
	opts, err := enginekit.ValidateStartOptions(opts, e.reg.Definitions())
	if err != nil {
		return err
	}
	if opts.Concurrency == 0 {
		opts.Concurrency = e.cfg.DefaultConcurrency
	}
	return startstop.Start(ctx, &e.Base, func(ctx context.Context) error {
		w := newWorker(e, opts)
		w.start(ctx)
		e.mu.Lock()
		e.worker = w
		e.mu.Unlock()
		return nil
	})
}

// Stop stops claiming and lets in-flight runs reach their next commit point
// (the end of the running step). Runs still in flight after
// Config.StopTimeout (or ctx's deadline, if earlier) are handed back: their
// lease is released, their status is pending, their step context is canceled
// and nothing more of their attempt is committed. Stop returns within that
// bound plus one round trip per handed-back run. The lifecycle rules are the
// port's (port.TaskEngine): safe to call twice and before Start, and Start
// serves again afterwards.
func (e *Engine) Stop(ctx context.Context) error {
	return startstop.Stop(ctx, &e.Base, func(ctx context.Context) error {
		// From here on enqueues commit on the pool and pokes go nowhere: the
		// worker is stopping.
		e.mu.Lock()
		w := e.worker
		e.worker = nil
		e.mu.Unlock()
		return w.stop(ctx)
	})
}

// channel is notifyChannel in the engine's schema.
func (e *Engine) channel() string { return e.pool.Schema().Channel(notifyChannel) }
