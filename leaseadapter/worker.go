package leaseadapter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/taskport/taskport/internal/dbtx"
	"github.com/taskport/taskport/internal/enginekit"
	"github.com/taskport/taskport/internal/runstore"
	"github.com/taskport/taskport/internal/startstop"
	"github.com/taskport/taskport/port"
)

// Causes of a canceled background or run context. errStopping is a run's
// once Stop handed it back past the bound: it matches port.ErrLeaseLost, the
// attempt no longer owns the step, as the Temporal engine's body reads a
// worker shutdown (before, it matched no sentinel a body could test).
var (
	errStopping = fmt.Errorf("lease engine stopping, its claims handed back: %w", port.ErrLeaseLost)
	errStopped  = errors.New("lease engine stopped")
)

// worker is the running part of an Engine between Start and Stop: a claim
// loop, a heartbeater renewing every lease it holds, a reaper for expired
// leases, a LISTEN connection and the group committers. Each claimed run
// executes on one of activeRuns executors; its steps run in one of
// concurrency step slots. The worker claims for baseRuns executors, and for
// more, up to activeRuns, only while its runs leave step slots idle
// (runsWanted).
type worker struct {
	e           *Engine
	opts        port.StartOptions
	log         *slog.Logger
	served      servedPairs   // every definition this worker runs
	concurrency int           // steps at once (StartOptions.Concurrency)
	activeRuns  int           // executors: runs executing at once, at most (Config.ActiveRuns)
	baseRuns    int           // runs executing at once while steps wait for slots (runsWanted)
	prefetch    int           // runs claimed beyond the executing ones, queued for an executor
	queue       chan queued   // claimed runs in claim order
	steps       chan struct{} // step slots: a step runs while it holds one
	slotWaiters atomic.Int64  // runs waiting for a step slot (takeStepSlot)

	wake    chan struct{} // claim now (buffer 1: pokes coalesce)
	commits chan *commitReq

	saturated atomic.Bool // the last claim was full: a freed slot should claim again
	// backlog: ready runs may be waiting (a wake-up came, or the last claim
	// was full). Group commits add a claim only then, so that a worker whose
	// queue is drained does not probe in every transaction.
	backlog atomic.Bool
	// stopping is closed by stop: no new step starts, runs hand themselves
	// back, and runs waiting for a step slot wake.
	stopping chan struct{}

	mu       sync.Mutex
	running  map[dbtx.UUID]*execution
	reserved int             // places booked by the claim in flight (0: none in flight)
	missed   bool            // the claim loop was turned away by a claim in flight
	noClaims bool            // Stop began: no claim starts
	claims   sync.WaitGroup  // claims in flight, waited for before the queue closes
	runCtx   context.Context // parent of every run context; canceled at the stop bound
	dbCtx    context.Context // commits on behalf of runs; ends after the last run is forgotten

	cancelLoops     context.CancelCauseFunc // claim, listen, reap
	cancelRuns      context.CancelCauseFunc // every run context, at the stop bound
	cancelCommitter context.CancelCauseFunc // heartbeat, committers
	loops           sync.WaitGroup
	executors       sync.WaitGroup
	runs            sync.WaitGroup
	service         sync.WaitGroup
	committerDone   chan struct{}
}

func newWorker(e *Engine, opts port.StartOptions) *worker {
	w := &worker{
		e: e, opts: opts, log: e.cfg.Logger.With(slog.String("worker", e.cfg.WorkerID)),
		concurrency:   opts.Concurrency,
		steps:         make(chan struct{}, opts.Concurrency),
		stopping:      make(chan struct{}),
		wake:          make(chan struct{}, 1),
		commits:       make(chan *commitReq, 4*e.cfg.BatchSize),
		running:       map[dbtx.UUID]*execution{},
		committerDone: make(chan struct{}),
	}
	switch {
	case e.cfg.Prefetch < 0:
		w.prefetch = 0
	case e.cfg.Prefetch == 0:
		w.prefetch = opts.Concurrency
	default:
		w.prefetch = e.cfg.Prefetch
	}
	w.activeRuns = max(e.cfg.ActiveRuns, opts.Concurrency)
	w.baseRuns = w.activeRuns
	if e.cfg.ActiveRuns == 0 {
		w.activeRuns, w.baseRuns = 4*opts.Concurrency, 2*opts.Concurrency
	}
	w.queue = make(chan queued, w.activeRuns+w.prefetch)
	for _, d := range e.reg.Definitions() {
		if enginekit.Serves(opts, d.Kind, d.Version) {
			w.served.kinds = append(w.served.kinds, string(d.Kind))
			w.served.versions = append(w.served.versions, int32(d.Version))
		}
	}
	return w
}

// servedPairs are the (kind, version) pairs a worker serves, as the two
// arrays of claimSQL and queueDepthSQL: kinds[i] at versions[i].
type servedPairs struct {
	kinds    []string
	versions []int32
}

// has reports whether kind at version is one of the pairs.
func (s servedPairs) has(kind port.Kind, version int) bool {
	for i, k := range s.kinds {
		if k == string(kind) && s.versions[i] == int32(version) {
			return true
		}
	}
	return false
}

// start launches the loops. ctx is the engine's service context
// (startstop): it lives until Stop, not until Start's caller returns, and
// the loops' contexts derive from it.
func (w *worker) start(ctx context.Context) {
	serviceCtx, cancelService := context.WithCancelCause(ctx)
	loopCtx, cancelLoops := context.WithCancelCause(ctx)
	runCtx, cancelRuns := context.WithCancelCause(ctx)
	w.cancelLoops, w.cancelRuns, w.cancelCommitter = cancelLoops, cancelRuns, cancelService
	w.runCtx, w.dbCtx = runCtx, serviceCtx

	committers := w.e.cfg.Committers
	// Committers, the claim loop, the heartbeat and the reaper each hold a
	// pool connection while they work (LISTEN has its own). A smaller pool
	// still works, but every commit then queues for a connection.
	if need := int32(committers + 3); w.e.pool.Config().MaxConns < need {
		w.log.Warn("database pool smaller than the worker needs; commits will queue for connections",
			slog.Int("pool_max_conns", int(w.e.pool.Config().MaxConns)), slog.Int("needed", int(need)))
	}
	for range committers {
		w.service.Go(func() { w.committer(serviceCtx) })
	}
	w.service.Go(func() { w.heartbeater(serviceCtx) })
	w.loops.Go(func() { w.claimLoop(loopCtx) })
	for range w.activeRuns {
		w.executors.Go(func() { w.executor(serviceCtx) })
	}
	w.loops.Go(func() { w.listen(loopCtx) })
	w.loops.Go(func() { w.reaper(loopCtx) })
	w.poke()
}

// isStopping reports whether stop has begun.
func (w *worker) isStopping() bool {
	select {
	case <-w.stopping:
		return true
	default:
		return false
	}
}

func (w *worker) stop(ctx context.Context) error {
	close(w.stopping)
	w.mu.Lock()
	w.noClaims = true
	w.mu.Unlock()
	w.cancelLoops(errStopping)
	w.loops.Wait()
	w.claims.Wait()
	close(w.queue) // claims were its only senders
	// Prefetched runs go back at once instead of waiting for a busy
	// executor; executors and this loop share the queue.
	for q := range w.queue {
		if q.ex.take() {
			w.release(context.WithoutCancel(ctx), q.ex)
			w.forget(q.ex)
		}
	}

	bound := time.NewTimer(w.e.cfg.StopTimeout)
	defer bound.Stop()
	done := make(chan struct{})
	go func() { w.runs.Wait(); close(done) }()
	var err error
	select {
	case <-done:
		w.executors.Wait() // the queue is closed and empty: they return now
	case <-bound.C:
		err = w.handBackAll(context.WithoutCancel(ctx))
	case <-ctx.Done():
		err = w.handBackAll(context.WithoutCancel(ctx))
	}
	w.cancelCommitter(errStopped)
	w.service.Wait()
	close(w.committerDone)
	return err
}

// handBackAll releases the leases of the runs still in flight and cancels
// their contexts; whatever they try to commit afterwards is fenced.
func (w *worker) handBackAll(ctx context.Context) error {
	w.mu.Lock()
	exs := make([]*execution, 0, len(w.running))
	for _, ex := range w.running {
		exs = append(exs, ex)
	}
	w.mu.Unlock()
	var errs []error
	for _, ex := range exs {
		ex.handedBack.Store(true)
		if err := w.handBack(ctx, ex); err != nil {
			errs = append(errs, err)
		}
	}
	w.cancelRuns(errStopping)
	return errors.Join(errs...)
}

func (w *worker) handBack(ctx context.Context, ex *execution) error {
	var n int64
	var at time.Time
	if err := w.e.pool.QueryRow(ctx, handBackSQL, ex.id, ex.token).Scan(&n, &at); err != nil {
		return fmt.Errorf("hand back run %s: %w", ex.id, err)
	}
	w.log.Info("handed back run", slog.String("run_id", ex.id.String()), slog.Bool("released", n == 1))
	return nil
}

// poke asks the claim loop to look for work now.
func (w *worker) poke() {
	w.backlog.Store(true)
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// claimLoop claims when an executor would otherwise go idle: at start, on a
// notification, at the poll, when a slot frees after a full claim. While the
// executors are busy, the group committers top up the prefetch queue instead,
// each claim riding in a transaction that commits steps anyway (see
// commitGroup), so a claim costs no commit of its own.
func (w *worker) claimLoop(ctx context.Context) {
	tick := time.NewTicker(w.e.cfg.PollInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.wake:
		case <-tick.C:
			w.backlog.Store(true) // runs made ready by another process may have gone unheard
		}
		for ctx.Err() == nil {
			want := w.reserve(w.e.cfg.BatchSize, true)
			if want == 0 {
				// Every executor busy (or a claim in flight): the next freed
				// slot pokes again.
				w.saturated.Store(true)
				break
			}
			// The claim must not be canceled by Stop: the UPDATE can commit
			// on the server after the client gave up, leaving runs leased to
			// nobody until the lease expires (and charged an attempt by the
			// reaper). Runs it returns after Stop began are handed back by
			// stop's drain of the queue.
			claimCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.e.cfg.LeaseDuration)
			sent := time.Now()
			exs, err := w.claim(claimCtx, want)
			cancel()
			w.claimed(exs, want, sent)
			if err != nil {
				if ctx.Err() == nil {
					w.log.Warn("claim failed; retrying at the next poll", slog.Any("error", err))
				}
				break
			}
			w.saturated.Store(len(exs) == want)
			if len(exs) < want {
				break
			}
		}
	}
}

// reserve books up to limit free places (executor slots plus prefetch) for
// one claim and returns how many; 0 means no claim now. Only one claim is in
// flight at a time. idleOnly (the claim loop) books only when an executor has
// nothing queued, so that while runs flow the committers' claims refill the
// queue. Every reserve > 0 is followed by one claimed.
func (w *worker) reserve(limit int, idleOnly bool) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.noClaims {
		return 0
	}
	runs := w.runsWanted()
	if idleOnly && len(w.running) >= runs {
		return 0
	}
	if w.reserved > 0 {
		w.missed = w.missed || idleOnly
		return 0
	}
	n := min(runs+w.prefetch-len(w.running), limit)
	if n <= 0 {
		return 0
	}
	w.reserved = n
	w.claims.Add(1)
	return n
}

// runsWanted is how many runs the worker wants executing now (w.mu held):
// baseRuns, and more, up to activeRuns, once those are all claimed while no
// run waits for a step slot and some slots are idle. Runs then spend their
// time waiting on their commits (short steps), and more runs in flight
// keep the slots busy: each extension adds at most the idle slots. While a
// run waits for a slot (long steps), more runs would only wait too,
// holding leases that another worker could serve, so the worker holds no
// more than baseRuns executing, plus its prefetch.
func (w *worker) runsWanted() int {
	if w.activeRuns == w.baseRuns || len(w.running) < w.baseRuns+w.prefetch || w.slotWaiters.Load() > 0 {
		return w.baseRuns
	}
	return min(w.activeRuns, len(w.running)-w.prefetch+w.concurrency-len(w.steps))
}

// claimed launches the runs of a claim that booked n places (none if it
// failed), sent at sent, and frees the booking.
func (w *worker) claimed(exs []*execution, n int, sent time.Time) {
	if len(exs) > 0 {
		w.e.cfg.Metrics.Claimed(len(exs))
	}
	for _, ex := range exs {
		w.launch(ex, sent)
	}
	w.backlog.Store(len(exs) == n)
	w.mu.Lock()
	w.reserved = 0
	missed := w.missed
	w.missed = false
	w.mu.Unlock()
	w.claims.Done()
	if missed {
		w.poke()
	}
}

// claim takes up to n runs in a transaction of its own. One round trip: the
// claim with its plan pinned (claimPlanSQL), between BEGIN and COMMIT.
func (w *worker) claim(ctx context.Context, n int) ([]*execution, error) {
	var exs []*execution
	if err := dbtx.BatchTx(ctx, w.e.pool, func(b *pgx.Batch) { w.queueClaim(b, n, &exs) }); err != nil {
		return nil, fmt.Errorf("claim runs: %w", runstore.Unmigrated(err))
	}
	return exs, nil
}

// queueClaim adds a claim of up to n runs to b; when b's results are read
// (Close), the claimed runs are stored in *exs. Run it last in a
// transaction: claimPlanSQL holds until the transaction ends.
func (w *worker) queueClaim(b *pgx.Batch, n int, exs *[]*execution) {
	b.Queue(claimPlanSQL)
	b.Queue(claimSQL, w.served.kinds, n, w.e.cfg.WorkerID, w.e.cfg.LeaseDuration.Milliseconds(), w.served.versions).Query(func(rows pgx.Rows) error {
		got, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*execution, error) {
			ex := &execution{}
			var history []byte
			if err := row.Scan(&ex.id, &ex.kind, &ex.version, &ex.input, &ex.claims, &ex.token, &ex.stepAttempts,
				&ex.canceled, &ex.beganAt, &ex.generation, &ex.trace.Parent, &ex.trace.State, &ex.errorShown, &history); err != nil {
				return nil, err
			}
			if err := json.Unmarshal(history, &ex.history); err != nil {
				return nil, fmt.Errorf("decode history of run %s: %w", ex.id, err)
			}
			return ex, nil
		})
		*exs = got
		return err
	})
}

// launch registers a claimed run (its lease is renewed from now on) and
// queues it for the executors, in claim order. claimSent is when the claim
// was sent: the lease it granted is measured from then.
func (w *worker) launch(ex *execution, claimSent time.Time) {
	ctx, cancel := context.WithCancelCause(w.runCtx)
	ex.cancel = cancel
	ex.stepSeq = -1
	ex.leaseTimer = time.AfterFunc(time.Until(w.leaseDeadline(claimSent)), func() { w.leaseExpired(ex) })
	w.mu.Lock()
	w.running[ex.id] = ex
	w.mu.Unlock()
	w.runs.Add(1)
	if ex.canceled {
		// Canceled while its lease was lost (the reaper put it back):
		// nothing of it runs, and it does not queue behind other runs.
		w.cancelRun(ex)
		return
	}
	w.queue <- queued{ctx: ctx, ex: ex} // never blocks: reserve keeps at most cap(queue) runs
}

// cancelRun cancels a run's context with port.ErrCanceled. A run still in
// the prefetch queue ends canceled at once, instead of waiting (running,
// its lease renewed) until a busy executor frees, which then skipped it and
// left its lease to expire and be charged as an attempt by the reaper.
func (w *worker) cancelRun(ex *execution) {
	ex.cancel(port.ErrCanceled)
	if !ex.settle() {
		return // an executor has it: the run sees the cancel at its next Flow call
	}
	// Not on the caller's goroutine (the heartbeat or the LISTEN loop): the
	// commit waits for a group. Stop waits for it through w.runs.
	go func() {
		w.finish(w.dbCtx, ex, port.StatusCanceled, "", nil, nil)
		w.forget(ex)
	}()
}

// queued is a claimed run with its run context, waiting for an executor.
type queued struct {
	ctx context.Context
	ex  *execution
}

// executor runs queued runs one at a time until the queue is closed. A
// prefetched run waits in the queue, its lease renewed by the heartbeat; one
// canceled meanwhile was settled by cancelRun and is skipped.
func (w *worker) executor(serviceCtx context.Context) {
	for q := range w.queue {
		if !q.ex.take() {
			continue
		}
		switch {
		case q.ctx.Err() != nil:
			// Lease lost or handed back by Stop while queued.
		case w.isStopping():
			w.release(serviceCtx, q.ex)
		default:
			w.execute(q.ctx, serviceCtx, q.ex)
		}
		w.forget(q.ex)
	}
}

// leaseDeadline is when a lease granted by a statement sent at sent may have
// expired on the server, on this process's monotonic clock: the server set
// lease_until = now() + LeaseDuration when it ran the statement, after it
// was sent, minus a margin that keeps the worker's own deadline ahead of the
// server's (a heartbeat that gets no answer, clock rates) and still leaves
// room for one renewal skipped behind a commit's row lock
// (heartbeatSQL): half the time a renewal has left, at most half an interval.
func (w *worker) leaseDeadline(sent time.Time) time.Time {
	margin := min(w.e.cfg.HeartbeatInterval, w.e.cfg.LeaseDuration-w.e.cfg.HeartbeatInterval) / 2
	return sent.Add(w.e.cfg.LeaseDuration - margin)
}

// leaseExpired cancels a run whose lease no renewal kept: the renewals
// failed (the database unreachable, the statement erroring or hanging) past
// the lease's deadline, so the run may have a new owner. The step stops at
// once and nothing of the attempt commits (the ADR appendix: a lost lease
// stops the run and never commits).
func (w *worker) leaseExpired(ex *execution) {
	if ex.released.Load() {
		return
	}
	w.e.cfg.Metrics.LeaseLost(port.Kind(ex.kind))
	w.log.Warn("lease lost: no renewal before its deadline", slog.String("run_id", ex.id.String()))
	ex.cancel(port.ErrLeaseLost)
}

// forget ends a run's stay on this worker.
func (w *worker) forget(ex *execution) {
	ex.leaseTimer.Stop()
	ex.cancel(errStopped)
	w.mu.Lock()
	delete(w.running, ex.id)
	w.mu.Unlock()
	w.runs.Done()
	if w.saturated.Load() {
		w.poke()
	}
}

// heartbeater renews the leases of every run in flight in one statement per
// interval, and cancels the context of a run that was canceled
// (port.ErrCanceled) or whose lease is gone (port.ErrLeaseLost).
func (w *worker) heartbeater(ctx context.Context) {
	startstop.Every(ctx, w.e.cfg.HeartbeatInterval, func(ctx context.Context) {
		// Bounded, so that a renewal that hangs does not hold back the next
		// ones; the runs' lease timers cancel them meanwhile.
		ctx, cancel := context.WithTimeout(ctx, w.e.cfg.HeartbeatInterval)
		defer cancel()
		if err := w.heartbeat(ctx); err != nil && ctx.Err() == nil {
			// Unknown outcome: keep going; a lease that did expire shows up
			// as missing at the next successful heartbeat, or its lease timer
			// cancels the run first.
			w.log.Warn("heartbeat failed", slog.Any("error", err))
		}
	})
}

func (w *worker) heartbeat(ctx context.Context) error {
	w.mu.Lock()
	exs := make([]*execution, 0, len(w.running))
	for _, ex := range w.running {
		exs = append(exs, ex)
	}
	w.mu.Unlock()
	if len(exs) == 0 {
		return nil
	}
	ids := make(dbtx.UUIDArray, len(exs))
	tokens := make(dbtx.UUIDArray, len(exs))
	steps := make([]string, len(exs))
	started := make([]int32, len(exs))
	progress := make([]*string, len(exs))
	for i, ex := range exs {
		ids[i], tokens[i] = ex.id, ex.token
		steps[i], started[i], progress[i] = ex.beat()
	}
	sent := time.Now()
	rows, err := w.e.pool.Query(ctx, heartbeatSQL, ids, tokens, steps, progress, w.e.cfg.LeaseDuration.Milliseconds(), started)
	if err != nil {
		return fmt.Errorf("renew %d leases: %w", len(exs), err)
	}
	live := map[dbtx.UUID]bool{}
	renewed := map[dbtx.UUID]bool{}
	var id dbtx.UUID
	var canceled, ok bool
	_, err = pgx.ForEachRow(rows, []any{&id, &canceled, &ok}, func() error {
		live[id], renewed[id] = canceled, ok
		return nil
	})
	if err != nil {
		return fmt.Errorf("renew %d leases: %w", len(exs), err)
	}
	until := time.Until(w.leaseDeadline(sent))
	for _, ex := range exs {
		canceled, ok := live[ex.id]
		if renewed[ex.id] {
			ex.leaseTimer.Reset(until)
		}
		switch {
		case !ok && !ex.released.Load():
			w.e.cfg.Metrics.LeaseLost(port.Kind(ex.kind))
			w.log.Warn("lease lost", slog.String("run_id", ex.id.String()))
			ex.cancel(port.ErrLeaseLost)
		case canceled:
			w.cancelRun(ex)
		}
	}
	return nil
}

// reaper settles expired leases every poll interval (see reapSQL) and
// samples the queue depth.
func (w *worker) reaper(ctx context.Context) {
	_, sampleDepth := w.e.cfg.Metrics.(noMetrics)
	sampleDepth = !sampleDepth
	startstop.Every(ctx, w.e.cfg.PollInterval, func(ctx context.Context) {
		var requeued, failed, canceled int
		if err := dbtx.QueryRowPinned(ctx, w.e.pool, claimPlanSQL, reapSQL, []any{w.e.cfg.BatchSize * 16, unstartedLossesCharged},
			&requeued, &failed, &canceled); err != nil {
			if ctx.Err() == nil {
				w.log.Warn("reap expired leases failed", slog.Any("error", err))
			}
			return
		}
		if requeued+failed+canceled > 0 {
			// failed: dead letters, out of attempts (dead_letter_at set).
			w.log.Info("reaped expired leases", slog.Int("requeued", requeued), slog.Int("failed", failed), slog.Int("canceled", canceled))
		}
		if requeued > 0 {
			w.poke()
		}
		if sampleDepth {
			var depth int
			if err := dbtx.QueryRowPinned(ctx, w.e.pool, claimPlanSQL, queueDepthSQL, []any{w.served.kinds, w.served.versions}, &depth); err == nil {
				w.e.cfg.Metrics.QueueDepth(depth)
			}
		}
	})
}

// listen holds a dedicated connection on LISTEN. Any loss of it only delays
// work to the next poll: nothing relies on a notification arriving.
func (w *worker) listen(ctx context.Context) {
	for ctx.Err() == nil {
		if err := w.listenOnce(ctx); err != nil && ctx.Err() == nil {
			w.log.Warn("listen connection lost; polling until it is back", slog.Any("error", err))
		}
		select {
		case <-ctx.Done():
		case <-time.After(w.e.cfg.PollInterval):
		}
	}
}

func (w *worker) listenOnce(ctx context.Context) error {
	conn, err := pgx.ConnectConfig(ctx, w.e.pool.Config().ConnConfig.Copy())
	if err != nil {
		return fmt.Errorf("listen connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{w.e.channel()}.Sanitize()); err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	w.poke() // whatever was notified while we were not listening
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return fmt.Errorf("wait for notification: %w", err)
		}
		if len(n.Payload) > 2 && n.Payload[:2] == "c:" {
			if id, err := uuid.Parse(n.Payload[2:]); err == nil {
				w.mu.Lock()
				ex := w.running[dbtx.UUID(id)]
				w.mu.Unlock()
				if ex != nil {
					w.cancelRun(ex)
				}
			}
			continue
		}
		if n.Payload != w.e.enqueueHint() {
			w.poke()
		}
	}
}

// wakeAt pokes the claim loop when a run parked by this worker becomes due,
// so short sleeps and backoffs do not wait for the poll.
func (w *worker) wakeAt(at time.Time, dbNow time.Time) {
	d := at.Sub(dbNow)
	if d > time.Minute {
		return
	}
	time.AfterFunc(max(d, 0), w.poke)
}
