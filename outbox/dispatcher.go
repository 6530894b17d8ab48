package outbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/taskport/taskport/internal/dbtx"
	"github.com/taskport/taskport/internal/startstop"
	"github.com/taskport/taskport/internal/tracing"
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
	// dies mid-batch delays its rows by at most this (one that stops hands
	// them back at once). It also bounds each write that claims rows or
	// records what became of them, which Stop waits for, and the engine
	// calls of a claim: one still running when the lease ends is cut short
	// and its rows back off, and the rows of the batch not begun are handed
	// back, since the next claim may have taken them. A call that returns
	// late all the same leaves that claim alone, only marking the row
	// dispatched if it succeeded (the engines' idempotency absorbs the
	// repeat). Default 30s.
	ClaimLease time.Duration
	// Backoff paces retries of a row whose action failed, by the row's
	// attempts. Its zero fields take port.NetworkRetry()'s intervals (1s
	// doubling to 60s); MaxAttempts is ignored, as there is no attempt
	// limit: a row is only given up on when the engine refuses it as
	// invalid input. A kind or version this process does not know is not
	// invalid input: another process (a newer worker in a rolling deploy)
	// may know it, so such a row backs off too.
	Backoff port.RetryPolicy
	// Metrics receives the dispatcher's counts; nil reports nothing.
	Metrics Metrics
	// TracerProvider makes the span of each dispatch, a child of the trace
	// context the row was written with (see Write), in whose context the
	// engine is called. Default: the global provider (otel.GetTracerProvider,
	// a no-op until the process installs one).
	TracerProvider trace.TracerProvider
}

// Metrics is the hook through which the dispatcher reports, so that it does
// not depend on a metrics library (cmd adapts it to Prometheus).
type Metrics interface {
	// FailedRows is called every PollInterval with the number of rows given
	// up as failed, which only an operator's retry brings back.
	FailedRows(n int)
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
		c.Backoff.MaxAttempts = math.MaxInt32 // unused; what Validate requires
	}
	c.Backoff = c.Backoff.WithDefaults()
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

// Dispatcher carries out outbox rows on the engine. Several dispatchers (in
// one process or many) can run at once: claims use SKIP LOCKED and a claim
// lease. Its lifecycle (Start, Stop, Done, Err) has the engines' rules
// (port.TaskEngine, through internal/startstop); it has no fatal error of its
// own: its loops log and retry until Stop.
type Dispatcher struct {
	startstop.Base

	pool   *pgxpool.Pool
	engine port.TaskEngine
	runs   port.Admin
	cfg    Config
	tracer trace.Tracer

	// Set by Start and used by Stop, which startstop serializes.
	cancel context.CancelCauseFunc // the loops' context
	done   chan struct{}           // closed when both loops returned
}

// NewDispatcher returns a stopped dispatcher over the engine, and its run
// listing (both engines implement port.Admin), which finds the open runs of
// a plan to cancel.
func NewDispatcher(pool *pgxpool.Pool, engine port.TaskEngine, runs port.Admin, cfg Config) (*Dispatcher, error) {
	if pool == nil || engine == nil || runs == nil {
		return nil, errors.New("outbox dispatcher: pool, engine and run listing are required")
	}
	if err := dbtx.CheckPool(pool); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("outbox dispatcher config: %w", err)
	}
	return &Dispatcher{pool: pool, engine: engine, runs: runs, cfg: cfg,
		tracer: tracing.Tracer(cfg.TracerProvider, "github.com/taskport/taskport/outbox")}, nil
}

// Start runs the dispatcher in the background until Stop (not until ctx
// ends: the rules are the engines', see port.TaskEngine). It returns
// port.ErrAlreadyStarted while running.
func (d *Dispatcher) Start(ctx context.Context) error {
	return startstop.Start(ctx, &d.Base, func(ctx context.Context) error {
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
	})
}

// Stop ends the background loops and waits for them, or until ctx ends
// (then it returns an error while the loops finish the row in hand). A claim
// in flight is waited for, and the rows it took that were not carried out
// are handed back uncharged, due at once; only a dispatcher that dies (or
// loses its database) mid-batch leaves its rows to the ClaimLease. Safe to
// call twice and before Start; Start runs the dispatcher again.
func (d *Dispatcher) Stop(ctx context.Context) error {
	return startstop.Stop(ctx, &d.Base, func(ctx context.Context) error {
		d.cancel(startstop.ErrStopped)
		select {
		case <-d.done:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("stop outbox dispatcher: still finishing a batch: %w", context.Cause(ctx))
		}
	})
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
			d.reportFailed(ctx)
		}
	}
}

func (d *Dispatcher) reportFailed(ctx context.Context) {
	if d.cfg.Metrics == nil {
		return
	}
	n, err := CountFailed(ctx, d.pool)
	if err != nil {
		if ctx.Err() == nil {
			d.cfg.Logger.Warn("outbox: count failed rows", slog.String("error", err.Error()))
		}
		return
	}
	d.cfg.Metrics.FailedRows(n)
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
	action      Action
	kind        port.Kind
	topic       port.Topic
	key         string
	businessKey string
	payload     json.RawMessage
	availableAt *time.Time
	minVersion  int
	attempts    int
	// until is the claim's lease end; with attempts it identifies the
	// claim (see claimSQL).
	until time.Time
	trace tracing.Stored
}

// DispatchOnce claims one batch of due rows and carries them out. It returns
// how many rows it claimed. When ctx ends (Stop) the engine calls in hand
// are cut short and the rows not carried out are handed back (see settle);
// so are the rows not begun when the claim lease ends.
func (d *Dispatcher) DispatchOnce(ctx context.Context) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	// The claim is not canceled with ctx: pgx gives up on a canceled
	// statement without telling the server, whose UPDATE can still commit,
	// leaving rows hidden by a claim nobody holds until the ClaimLease ends
	// (the lease engine's claim has the same rule). Its rows are then
	// handed back.
	wctx, cancel := d.writeContext(ctx)
	defer cancel()
	// Taken before the claim, so it never falls after the lease ends on
	// the server: a row not begun by then may be another claim's.
	leaseEnd := time.Now().Add(d.cfg.ClaimLease)
	rows, err := d.pool.Query(wctx, claimSQL, d.cfg.BatchSize, d.cfg.ClaimLease.Seconds())
	if err != nil {
		return 0, fmt.Errorf("claim outbox rows: %w", err)
	}
	claimedRows, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (claimed, error) {
		var c claimed
		err := row.Scan(&c.id, &c.action, &c.kind, &c.topic, &c.key, &c.businessKey, &c.payload, &c.availableAt,
			&c.minVersion, &c.attempts, &c.until, &c.trace.Parent, &c.trace.State)
		return c, err
	})
	if err != nil {
		return 0, fmt.Errorf("claim outbox rows: %w", err)
	}
	batch := claimedRows
	var errs []error
	for len(batch) > 0 && ctx.Err() == nil && time.Now().Before(leaseEnd) {
		// A run of consecutive enqueue rows written under one trace (one
		// business transaction, a bulk import) goes to the engine as one
		// EnqueueMany, in one span continuing that trace; other rows one by
		// one, in claim order.
		n := 1
		for n < len(batch) && batch[0].action == ActionEnqueue && batch[n].action == ActionEnqueue && batch[n].trace == batch[0].trace {
			n++
		}
		if batch[0].action == ActionEnqueue {
			errs = append(errs, d.enqueueAll(ctx, leaseEnd, batch[:n])...)
		} else if err := d.dispatch(ctx, leaseEnd, batch[0]); err != nil {
			errs = append(errs, err)
		}
		batch = batch[n:]
	}
	// Stopping, or the claim lease ended: not carried out. A row claimed
	// again since is left to that claim (release).
	for _, c := range batch {
		if err := d.release(ctx, c); err != nil {
			errs = append(errs, err)
		}
	}
	return len(claimedRows), errors.Join(errs...)
}

// writeContext is ctx without its cancellation, bounded by the ClaimLease:
// the context of the writes that record what became of a claim, which must
// land although Stop canceled ctx (a write cut short leaves the row to the
// lease), and after the lease are moot.
func (d *Dispatcher) writeContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), d.cfg.ClaimLease)
}

// release hands a claimed row back as if never claimed: due now, its
// attempt not charged. A row claimed again since (c's lease ended) is left
// to that claim.
func (d *Dispatcher) release(ctx context.Context, c claimed) error {
	ctx, cancel := d.writeContext(ctx)
	defer cancel()
	if _, err := d.pool.Exec(ctx, releaseSQL, c.id, c.attempts, c.until); err != nil {
		return fmt.Errorf("hand back outbox %s: %w", c.name(), err)
	}
	return nil
}

// enqueueAll hands enqueue rows to the engine in one EnqueueMany and
// settles each row with its result, in one span; the engine calls end at
// leaseEnd, as dispatch's do (see enqueueBatch).
func (d *Dispatcher) enqueueAll(ctx context.Context, leaseEnd time.Time, rows []claimed) (errs []error) {
	ctx, end := d.startSpan(ctx, rows[0], len(rows))
	defer func() { end(errors.Join(errs...)) }()
	callCtx, cancel := context.WithDeadline(ctx, leaseEnd)
	defer cancel()
	return d.enqueueBatch(ctx, callCtx, rows)
}

// enqueueBatch is enqueueAll's work, its engine calls made in callCtx. The
// engine refuses a batch as a whole for one bad item (a *port.ItemError
// naming it): that row is settled with its own error, exactly as a lone
// Enqueue's refusal would be (failed, or try later for a kind or version
// unknown here), and the others go again without it. A refusal of the
// whole batch that names no item but would settle a row for good (its key
// is another engine's run: dispatched; invalid input: failed) is no row's
// answer in particular: each row goes again alone, for its own. Any other
// error is every row's: each backs off.
func (d *Dispatcher) enqueueBatch(ctx, callCtx context.Context, rows []claimed) (errs []error) {
	for len(rows) > 0 {
		items := make([]port.EnqueueItem, len(rows))
		for i, c := range rows {
			items[i] = c.enqueueItem()
		}
		res, err := d.engine.EnqueueMany(callCtx, items)
		var ie *port.ItemError
		if errors.As(err, &ie) && ie.Index >= 0 && ie.Index < len(rows) {
			if err := d.settle(ctx, rows[ie.Index], "", ie.Err); err != nil {
				errs = append(errs, err)
			}
			rows = slices.Delete(slices.Clone(rows), ie.Index, ie.Index+1)
			continue
		}
		if len(rows) > 1 && (errors.Is(err, port.ErrOtherEngine) || errors.Is(err, port.ErrInvalidInput)) {
			for _, c := range rows {
				errs = append(errs, d.enqueueBatch(ctx, callCtx, []claimed{c})...)
			}
			return errs
		}
		for i, c := range rows {
			var id port.RunID
			if err == nil {
				id = res[i].ID
			}
			if err := d.settle(ctx, c, id, err); err != nil {
				errs = append(errs, err)
			}
		}
		return errs
	}
	return errs
}

// name identifies a row in logs and errors.
func (c claimed) name() string {
	switch c.action {
	case ActionEnqueue:
		return string(c.kind) + "/" + c.key
	case ActionSignal:
		return "signal " + string(c.topic) + "/" + c.key
	}
	return string(c.action) + " " + c.businessKey + "/" + c.key
}

// dispatch carries out a row other than an enqueue (those go through
// enqueueAll) and settles it, in a span continuing the row's trace. The
// engine calls end at leaseEnd: past it the row may be another claim's,
// and a call cut there fails the row's attempt, which backs off (settle
// tells that from a stop by ctx, which the lease does not end).
func (d *Dispatcher) dispatch(ctx context.Context, leaseEnd time.Time, c claimed) (err error) {
	ctx, end := d.startSpan(ctx, c, 1)
	defer func() { end(err) }()
	callCtx, cancel := context.WithDeadline(ctx, leaseEnd)
	defer cancel()
	return d.settle(ctx, c, "", d.carryOut(callCtx, c))
}

// startSpan starts the span of dispatching rows, which share first's trace,
// so that the engine call (and through it the runs) joins the trace of the
// business transaction that wrote them. end records err on it and ends it.
func (d *Dispatcher) startSpan(ctx context.Context, first claimed, rows int) (context.Context, func(err error)) {
	ctx, span := d.tracer.Start(first.trace.Into(ctx), SpanDispatch, trace.WithAttributes(
		attribute.String("taskport.outbox.action", string(first.action)),
		attribute.String("taskport.outbox.row", first.name()),
		attribute.Int("taskport.outbox.rows", rows),
		attribute.String("taskport.business_key", first.businessKey),
		attribute.Int("taskport.outbox.attempt", first.attempts)))
	return ctx, func(err error) {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}
}

// settle records how the row's action went: dispatched (with the run of an
// enqueue), failed for good, due again after a backoff, or, when ctx ended
// (Stop) before the action succeeded, handed back (release). The span in
// ctx notes the outcome. Its writes are made although ctx ended.
func (d *Dispatcher) settle(ctx context.Context, c claimed, runID port.RunID, err error) error {
	span := trace.SpanFromContext(ctx)
	wctx, cancel := d.writeContext(ctx)
	defer cancel()
	if c.action == ActionEnqueue && errors.Is(err, port.ErrOtherEngine) {
		// The key's run exists, owned by the other engine: this process
		// serves one engine while the database holds both (a switch of
		// engines, docs/operations.md). The enqueue the row asks for
		// happened; the run drains where it is, or an evacuation moves it.
		// Retrying would never succeed, and the run's id is that engine's
		// to tell, so the row is dispatched without it.
		d.cfg.Logger.WarnContext(ctx, "outbox row's run is owned by the other engine: dispatched without its run id",
			slog.String("row", c.name()), slog.String("error", err.Error()))
		err = nil
	}
	if err == nil {
		var run *string
		if runID != "" {
			run = (*string)(&runID)
			span.AddEvent("dispatched", trace.WithAttributes(attribute.String("taskport.outbox.row", c.name()),
				attribute.String("taskport.run_id", string(runID))))
		}
		if _, err := d.pool.Exec(wctx, markDispatchedSQL, c.id, run); err != nil {
			return fmt.Errorf("mark outbox %s dispatched: %w", c.name(), err)
		}
		return nil
	}
	if ctx.Err() != nil {
		// Stopping cut the action short; whether it failed on its own is
		// not known. An enqueue or a signal that did land is repeated on the
		// next claim, as after any failure (the engines' idempotency).
		return d.release(ctx, c)
	}
	// A kind or version unknown here may be known to another process: try
	// later. Other invalid input is invalid under every version: give up.
	if errors.Is(err, port.ErrInvalidInput) && !errors.Is(err, port.ErrUnknownKind) {
		span.RecordError(err, trace.WithAttributes(attribute.String("taskport.outbox.row", c.name())))
		span.SetStatus(codes.Error, "refused by the engine")
		d.cfg.Logger.ErrorContext(ctx, "outbox row refused by the engine", slog.String("row", c.name()), slog.String("error", err.Error()))
		if _, merr := d.pool.Exec(wctx, markFailedSQL, c.id, err.Error()); merr != nil {
			return fmt.Errorf("mark outbox %s failed: %w", c.name(), merr)
		}
		return nil
	}
	// A row claimed again since (c's lease ended) is left to that claim,
	// which settles it.
	wait := d.cfg.Backoff.Backoff(c.attempts)
	if _, merr := d.pool.Exec(wctx, markRetrySQL, c.id, wait.Seconds(), err.Error(), c.attempts, c.until); merr != nil {
		return fmt.Errorf("back off outbox %s: %w", c.name(), merr)
	}
	return fmt.Errorf("outbox %s (attempt %d, next in %s): %w", c.name(), c.attempts, wait, err)
}

// enqueueItem is the enqueue the row asks for.
func (c claimed) enqueueItem() port.EnqueueItem {
	opts := port.EnqueueOptions{IdempotencyKey: c.key, BusinessKey: c.businessKey, MinVersion: c.minVersion}
	if c.availableAt != nil {
		opts.AvailableAt = *c.availableAt
	}
	return port.EnqueueItem{Kind: c.kind, Input: c.payload, Options: opts}
}

// carryOut performs the action of a signal or cancel row.
func (d *Dispatcher) carryOut(ctx context.Context, c claimed) error {
	switch c.action {
	case ActionSignal:
		_, err := d.engine.Signal(ctx, c.topic, c.payload)
		return err
	case ActionCancelPlanRuns:
		var cr CancelRuns
		if err := json.Unmarshal(c.payload, &cr); err != nil {
			return &port.FieldError{Field: "payload", Reason: "not a cancel request: " + err.Error()}
		}
		return d.cancelRuns(ctx, c.businessKey, cr)
	}
	return &port.FieldError{Field: "action", Reason: fmt.Sprintf("unknown action %q", c.action)}
}

// SpanDispatch names the span of one row's dispatch.
const SpanDispatch = "outbox.dispatch"

// cancelLimit bounds the open runs one cancel row lists; a plan has a
// handful.
const cancelLimit = 1000

// cancelRuns cancels the open runs of businessKey that cr does not spare.
func (d *Dispatcher) cancelRuns(ctx context.Context, businessKey string, cr CancelRuns) error {
	runs, err := d.runs.ListRuns(ctx, port.RunFilter{
		BusinessKey: businessKey, Statuses: []port.Status{port.StatusPending, port.StatusRunning, port.StatusWaiting},
		Limit: cancelLimit,
	})
	if err != nil {
		return fmt.Errorf("list open runs of %s: %w", businessKey, err)
	}
	var errs []error
	for _, r := range runs {
		if slices.Contains(cr.Spare, r.Kind) {
			continue
		}
		if err := d.engine.Cancel(ctx, r.ID, cr.Reason); err != nil && !errors.Is(err, port.ErrNotFound) {
			errs = append(errs, fmt.Errorf("cancel run %s: %w", r.ID, err))
		}
	}
	return errors.Join(errs...)
}
