// Package router is the port.TaskEngine over both engines that makes
// switching engines an operation instead of an outage (issue 27; ADR-002
// keeps the lease engine as the fallback and allows the way back).
//
// Every run has one owner, the engine column of its taskport.run row,
// written when it was enqueued and never changed. The router sends what
// concerns one run to its owner (Get, Cancel), new work to the active
// engine (Enqueue, EnqueueMany, and the new run of Admin.Retry, read from
// the owner), and what concerns every run to
// both (Signal, ListRuns); Start serves both engines, so that the runs of
// the engine switched away from drain where they are while new ones start
// on the active one.
//
// The active engine is the newest row of taskport.engine_switch (Switch
// records one, with who made it and why); with none, temporal, the primary.
// Each router re-reads it at most Config.Refresh after its last read, so
// every process follows a switch within that bound, without a restart.
//
// Evacuate is for an engine that is gone or will not come back: each of its
// open runs is canceled there where it can be reached, ended canceled in
// its row (its lease taken away, so a worker still running one of its steps
// is fenced), and enqueued again on the active engine with the same kind,
// input, priority, business key and AvailableAt, under an idempotency key
// derived from the old run's id (runstore.EvacuationKey), which is what
// moves a run at most once. The old run then reads canceled, its
// RunView.MovedTo naming the new one. The new run starts from its first
// step: a step whose side effect the operation ledger holds as committed
// returns the recorded result without doing it again, and the ledger
// fences the old run's late commits, since the new run has a larger
// generation (port.FencingToken).
//
// Each is the router's one decision: it holds no state of its own besides
// the active engine's cache, so any number of routers (one per process)
// agree.
package router

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskport/taskport/internal/dbtx"
	"github.com/taskport/taskport/internal/enginekit"
	"github.com/taskport/taskport/internal/runstore"
	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/port/porttx"
)

// Engine is what the router routes to: an engine that also serves
// operators.
type Engine interface {
	porttx.Enqueuer
	port.Admin
}

// DefaultRefresh bounds how long a switch takes to reach a process.
const DefaultRefresh = 2 * time.Second

// Config tunes a Router.
type Config struct {
	// Refresh is the longest the router answers from the active engine it
	// read last; zero means DefaultRefresh.
	Refresh time.Duration
	// CancelTimeout bounds Evacuate's cancel of one run on the engine it
	// evacuates, which may be gone; zero means 5s.
	CancelTimeout time.Duration
	Logger        *slog.Logger
	// Schema is the engines' schema (their Config.Schema; all of them share
	// one run store). Default "taskport".
	Schema string
}

// Router is a port.TaskEngine and port.Admin over the engines it was given.
type Router struct {
	pool    *dbtx.Pool // statements name cfg.Schema
	engines map[runstore.Engine]Engine
	cfg     Config
	log     *slog.Logger

	mu       sync.Mutex
	active   runstore.Engine
	switched bool // a switch was ever recorded
	readAt   time.Time

	serve   sync.Mutex
	serving []Engine // the engines Start started, until Stop
	done    chan struct{}
	err     error
}

// New returns a router over engines, keyed by engine name ("lease",
// "temporal"); pool is the database of their runs.
func New(pool *pgxpool.Pool, engines map[string]Engine, cfg Config) (*Router, error) {
	if len(engines) == 0 {
		return nil, errors.New("router: no engine")
	}
	schema, err := dbtx.ParseSchema(cfg.Schema)
	if err != nil {
		return nil, fmt.Errorf("router: %w", err)
	}
	r := &Router{pool: dbtx.NewPool(pool, schema), engines: map[runstore.Engine]Engine{}, cfg: cfg, log: cfg.Logger, done: closed()}
	for name, e := range engines {
		if err := runstore.ValidEngine("engine", runstore.Engine(name)); err != nil {
			return nil, fmt.Errorf("router: %w", err)
		}
		r.engines[runstore.Engine(name)] = e
	}
	if r.cfg.Refresh <= 0 {
		r.cfg.Refresh = DefaultRefresh
	}
	if r.cfg.CancelTimeout <= 0 {
		r.cfg.CancelTimeout = 5 * time.Second
	}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	return r, nil
}

func closed() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

// activeEngine is the active engine as this process last read it, read
// again when that is older than Refresh; switched tells whether a switch
// was ever recorded.
func (r *Router) activeEngine(ctx context.Context) (runstore.Engine, Engine, bool, error) {
	r.mu.Lock()
	name, switched := r.active, r.switched
	fresh := time.Since(r.readAt) < r.cfg.Refresh && name != ""
	r.mu.Unlock()
	if !fresh {
		s, err := runstore.ActiveEngine(ctx, r.pool)
		if err != nil {
			return "", nil, false, err
		}
		name, switched = s.Engine, !s.At.IsZero()
		r.remember(name, switched)
	}
	e, err := r.engine(name)
	return name, e, switched, err
}

func (r *Router) remember(name runstore.Engine, switched bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.active != "" && r.active != name {
		r.log.Info("active engine switched", slog.String("from", string(r.active)), slog.String("to", string(name)))
	}
	r.active, r.switched, r.readAt = name, switched, time.Now()
}

// engine is the configured engine name, or an error saying this process
// lacks it.
func (r *Router) engine(name runstore.Engine) (Engine, error) {
	e, ok := r.engines[name]
	if !ok {
		return nil, fmt.Errorf("the %s engine is not configured in this process, or could not be reached when it started (it has %v)", name, r.names())
	}
	return e, nil
}

func (r *Router) names() []runstore.Engine { return slices.Sorted(maps.Keys(r.engines)) }

// owner is the engine that owns run id.
func (r *Router) owner(ctx context.Context, id port.RunID) (Engine, error) {
	run, err := runstore.Get(ctx, r.pool, id)
	if err != nil {
		return nil, err
	}
	return r.engine(run.Engine)
}

// Enqueue starts the run on the active engine. A key already held by a run
// of another engine (enqueued before a switch) returns that run, as a key
// held on the same engine does.
func (r *Router) Enqueue(ctx context.Context, kind port.Kind, input any, opts port.EnqueueOptions) (port.RunID, error) {
	_, e, _, err := r.activeEngine(ctx)
	if err != nil {
		return "", err
	}
	id, err := e.Enqueue(ctx, kind, input, opts)
	if !errors.Is(err, port.ErrOtherEngine) {
		return id, err
	}
	run, ferr := runstore.FindByKey(ctx, r.pool, kind, opts.IdempotencyKey)
	if ferr != nil {
		return "", errors.Join(err, ferr)
	}
	return run.ID, nil
}

// EnqueueTx is Enqueue in the caller's transaction (porttx.Enqueuer), on
// the active engine as tx reads it, not as this process last read it: the
// run a step hands over in its commit must not land on the engine an
// operator switched away from a moment ago (and evacuated, its server gone),
// where nobody would start it. The read holds the switch lock's shared side
// until tx ends (runstore.ActiveEngineLocked). A key another engine's run
// holds returns that run, as Enqueue does, read in tx.
func (r *Router) EnqueueTx(ctx context.Context, tx pgx.Tx, kind port.Kind, input any, opts port.EnqueueOptions) (port.RunID, error) {
	s, err := runstore.ActiveEngineLocked(ctx, r.pool.Schema().Tx(tx))
	if err != nil {
		return "", err
	}
	r.remember(s.Engine, !s.At.IsZero())
	e, err := r.engine(s.Engine)
	if err != nil {
		return "", err
	}
	id, err := e.EnqueueTx(ctx, tx, kind, input, opts)
	if !errors.Is(err, port.ErrOtherEngine) {
		return id, err
	}
	run, ferr := runstore.FindByKey(ctx, r.pool.Schema().Tx(tx), kind, opts.IdempotencyKey)
	if ferr != nil {
		return "", errors.Join(err, ferr)
	}
	return run.ID, nil
}

// EnqueueMany is Enqueue for a batch, in one transaction of the active
// engine. Items whose key a run of another engine holds report that run
// (Created false) and are not sent, unless their input is one no engine
// stores, which refuses the batch as the engine would. Looking the batch's
// keys up costs one index read per item, paid only once a switch was ever
// recorded: before that, every run is the primary's. A key another engine
// takes between the lookup and the insert (a process that has not yet
// followed the switch) is found as well, but the batch's other items, which
// the engine then recorded (port's specification of EnqueueMany), report
// Created false.
func (r *Router) EnqueueMany(ctx context.Context, items []port.EnqueueItem) ([]port.EnqueueResult, error) {
	name, e, switched, err := r.activeEngine(ctx)
	if err != nil {
		return nil, err
	}
	if !switched {
		res, err := e.EnqueueMany(ctx, items)
		if !errors.Is(err, port.ErrOtherEngine) {
			return res, err
		}
	}
	for range 2 {
		res, err := r.enqueueManyHeld(ctx, name, e, items)
		if !errors.Is(err, port.ErrOtherEngine) {
			return res, err
		}
	}
	return nil, fmt.Errorf("enqueue batch: keys kept being taken by another engine: %w", port.ErrOtherEngine)
}

// enqueueManyHeld answers the items whose keys other engines hold from the
// run store and sends the others to e.
func (r *Router) enqueueManyHeld(ctx context.Context, name runstore.Engine, e Engine, items []port.EnqueueItem) ([]port.EnqueueResult, error) {
	if err := enginekit.CheckBatchOptions(items); err != nil {
		return nil, err
	}
	keys := make([]runstore.RunKey, len(items))
	for i, it := range items {
		keys[i] = runstore.RunKey{Kind: it.Kind, Key: it.Options.IdempotencyKey}
	}
	held, err := runstore.KeysOfOthers(ctx, r.pool, name, keys)
	if err != nil {
		return nil, err
	}
	if len(held) == 0 {
		return e.EnqueueMany(ctx, items)
	}
	out := make([]port.EnqueueResult, len(items))
	var rest []port.EnqueueItem
	var at []int
	for i, it := range items {
		if id, ok := held[keys[i]]; ok {
			// The engine that would have refused an input it cannot store
			// (port's specification: nothing of the batch written) never
			// sees this item, so it is refused here. Checking it against
			// its kind's handler needs a registry, which the router lacks.
			if _, err := enginekit.EncodePayload("input", it.Input); err != nil {
				return nil, &port.ItemError{Index: i, Err: err}
			}
			out[i] = port.EnqueueResult{ID: id}
			continue
		}
		rest, at = append(rest, it), append(at, i)
	}
	if len(rest) == 0 {
		return out, nil
	}
	more, err := e.EnqueueMany(ctx, rest)
	if err != nil {
		var ie *port.ItemError
		if errors.As(err, &ie) && ie.Index >= 0 && ie.Index < len(at) {
			return nil, &port.ItemError{Index: at[ie.Index], Err: ie.Err}
		}
		return nil, err
	}
	for j, m := range more {
		out[at[j]] = m
	}
	return out, nil
}

// Signal wakes the topic's waiters on every engine, and returns how many
// accepted it in all. An engine that fails is reported after the others
// were signaled (a signal is a hint: sending it again is harmless).
func (r *Router) Signal(ctx context.Context, topic port.Topic, payload any) (int, error) {
	total := 0
	var errs []error
	for _, name := range r.names() {
		n, err := r.engines[name].Signal(ctx, topic, payload)
		total += n
		if err != nil {
			errs = append(errs, fmt.Errorf("%s engine: %w", name, err))
		}
	}
	return total, errors.Join(errs...)
}

// Cancel cancels the run on the engine that owns it.
func (r *Router) Cancel(ctx context.Context, id port.RunID, reason string) error {
	e, err := r.owner(ctx, id)
	if err != nil {
		return err
	}
	return e.Cancel(ctx, id, reason)
}

// Get reads the run from the engine that owns it.
func (r *Router) Get(ctx context.Context, id port.RunID) (port.RunView, error) {
	e, err := r.owner(ctx, id)
	if err != nil {
		return port.RunView{}, err
	}
	return e.Get(ctx, id)
}

// ListRuns lists the runs of every engine, newest first: each engine's page
// after the same cursor, merged in the listing's order (both engines' cursors
// are positions in that one order), cut to the page size.
func (r *Router) ListRuns(ctx context.Context, filter port.RunFilter) ([]port.RunView, error) {
	var all []port.RunView
	for _, name := range r.names() {
		page, err := r.engines[name].ListRuns(ctx, filter)
		if err != nil {
			return nil, err
		}
		all = append(all, page...)
	}
	slices.SortFunc(all, func(a, b port.RunView) int {
		if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 {
			return c
		}
		return cmp.Compare(b.ID, a.ID)
	})
	limit := filter.Limit
	if limit == 0 {
		limit = port.DefaultRunsPerPage
	}
	return all[:min(limit, len(all))], nil
}

// Retry retries the failed run. The retry is a new run, so it starts on
// the active engine, as a decision's retry (through the outbox) does: by
// the owner's Retry when the owner is the active engine, else by
// runstore.Retry over the router, whose Get reads the owner and whose
// Enqueue the active engine, under the run's port.RetryKey. A retry the
// owner started before a switch holds that key, so every Retry returns it.
func (r *Router) Retry(ctx context.Context, id port.RunID) (port.RunID, error) {
	run, err := runstore.Get(ctx, r.pool, id)
	if err != nil {
		return "", err
	}
	active, _, _, err := r.activeEngine(ctx)
	if err != nil {
		return "", err
	}
	if run.Engine != active {
		return runstore.Retry(ctx, r.pool, r, id)
	}
	e, err := r.engine(run.Engine)
	if err != nil {
		return "", err
	}
	return e.Retry(ctx, id)
}

// Start serves every engine, so that each one's runs go on where they are.
// A Start that fails stops the engines it started.
func (r *Router) Start(ctx context.Context, opts port.StartOptions) error {
	r.serve.Lock()
	defer r.serve.Unlock()
	if r.serving != nil {
		return port.ErrAlreadyStarted
	}
	var started []Engine
	for _, name := range r.names() {
		e := r.engines[name]
		if err := e.Start(ctx, opts); err != nil {
			stopErr := stopAll(context.WithoutCancel(ctx), started)
			return errors.Join(fmt.Errorf("start the %s engine: %w", name, err), stopErr)
		}
		started = append(started, e)
	}
	r.serving, r.done, r.err = started, make(chan struct{}), nil
	go r.watch(started, r.done)
	return nil
}

// watch closes done once any engine of a serving set stops: by Stop, or on
// a fatal error, which Err then reports (the process exits on it, as it
// would with that engine alone).
func (r *Router) watch(es []Engine, done chan struct{}) {
	cases := make(chan Engine, len(es))
	for _, e := range es {
		go func() { <-e.Done(); cases <- e }()
	}
	e := <-cases
	r.serve.Lock()
	defer r.serve.Unlock()
	if r.done != done {
		return // a later Start's
	}
	select {
	case <-done: // Stop closed it first: its engines stopping is what woke us
	default:
		r.err = e.Err()
		close(done)
	}
}

// Stop stops every engine Start started.
func (r *Router) Stop(ctx context.Context) error {
	r.serve.Lock()
	es := r.serving
	r.serving = nil
	r.serve.Unlock()
	if es == nil {
		return nil
	}
	err := stopAll(ctx, es)
	r.serve.Lock()
	defer r.serve.Unlock()
	select {
	case <-r.done:
	default:
		r.err = nil
		close(r.done)
	}
	return err
}

func stopAll(ctx context.Context, es []Engine) error {
	var errs []error
	for _, e := range es {
		errs = append(errs, e.Stop(ctx))
	}
	return errors.Join(errs...)
}

// Done is closed while the router does not serve.
func (r *Router) Done() <-chan struct{} {
	r.serve.Lock()
	defer r.serve.Unlock()
	return r.done
}

// Err is the fatal error of the engine whose stop ended the serving.
func (r *Router) Err() error {
	r.serve.Lock()
	defer r.serve.Unlock()
	return r.err
}

// Engines returns the router's engines by name, for what is per engine
// (retention's pruners, metrics).
func (r *Router) Engines() map[string]Engine {
	out := make(map[string]Engine, len(r.engines))
	for n, e := range r.engines {
		out[string(n)] = e
	}
	return out
}

// Switch is one recorded switch of the active engine.
type Switch struct {
	Engine string
	By     string
	Reason string
	// At is when it was recorded; zero for the primary while no switch was
	// ever recorded.
	At time.Time
}

// ErrAlreadyActive: a switch to the active engine, or an evacuation of it.
// It wraps port.ErrInvalidInput; nothing was written.
var ErrAlreadyActive = runstore.ErrAlreadyActive

// MaxSwitchReason bounds a switch's reason, in characters (a plan's note's
// bound, plans.MaxNote); MaxSwitchBy bounds who switched.
const (
	MaxSwitchReason = runstore.MaxSwitchReason
	MaxSwitchBy     = runstore.MaxSwitchBy
)

// CheckSwitch refuses, with a *port.FieldError naming "by" or "reason",
// what SwitchTo refuses of who switches and why, so that a command line
// can refuse it before it connects.
func CheckSwitch(by, reason string) error { return runstore.CheckSwitch(by, reason) }

// SwitchTo makes to the active engine: new runs go to it from then on (in
// every process within its Refresh), and open runs stay where they are.
// An engine this router lacks, the active one, an empty by, or a by or
// reason that is not valid text (invalid UTF-8, U+0000, a control
// character other than a reason's line feeds and tabs) or over its bound is
// refused, writing nothing; bad input is a *port.FieldError. An empty
// reason is accepted.
func (r *Router) SwitchTo(ctx context.Context, to, by, reason string) (Switch, error) {
	if err := runstore.ValidEngine("engine", runstore.Engine(to)); err != nil {
		return Switch{}, err
	}
	// Checked before anything is read or dialed; RecordSwitch checks again.
	if err := CheckSwitch(by, reason); err != nil {
		return Switch{}, err
	}
	cur, err := runstore.ActiveEngine(ctx, r.pool)
	if err != nil {
		return Switch{}, err
	}
	if string(cur.Engine) == to {
		return Switch{}, fmt.Errorf("switch to %s: %w", to, ErrAlreadyActive)
	}
	if _, err := r.engine(runstore.Engine(to)); err != nil {
		return Switch{}, fmt.Errorf("switch to %s: %w", to, err)
	}
	s, err := runstore.RecordSwitch(ctx, r.pool, runstore.Engine(to), by, reason)
	if err != nil {
		return Switch{}, err
	}
	r.remember(s.Engine, true)
	return Switch{Engine: string(s.Engine), By: s.By, Reason: s.Reason, At: s.At}, nil
}

// Status is what an operator watches during a switch: the active engine,
// the open runs of each engine per kind, and the runs of each engine an
// interrupted evacuation left to move. Those are canceled, not open, so an
// engine that has them is not done even when it has no open run.
type Status struct {
	Active  Switch
	Open    []OpenRuns
	Unmoved []Unmoved
}

// Unmoved counts one engine's runs that an interrupted evacuation left to
// move: canceled on it (by the evacuation's cancel, or by the evacuation
// itself before it could enqueue the replacement) and not replaced. The
// next Evacuate of the engine moves them; until then retention keeps them.
type Unmoved struct {
	Engine string `json:"engine"`
	Count  int    `json:"count"`
}

// OpenRuns counts one engine's open runs of one kind.
type OpenRuns struct {
	Engine string    `json:"engine"`
	Kind   port.Kind `json:"kind"`
	Count  int       `json:"count"`
	Oldest time.Time `json:"oldest"`
}

// statusJSON is the shape `taskport engine status --json` prints and the
// admin's overview carries: the active engine's switch flattened, its time
// left out while no switch was ever recorded, times in UTC.
type statusJSON struct {
	Active     string     `json:"active"`
	SwitchedBy string     `json:"switched_by,omitempty"`
	SwitchedAt *time.Time `json:"switched_at,omitempty"`
	Reason     string     `json:"reason,omitempty"`
	Open       []OpenRuns `json:"open"`
	Unmoved    []Unmoved  `json:"unmoved"`
}

// MarshalJSON writes statusJSON.
func (s Status) MarshalJSON() ([]byte, error) {
	out := statusJSON{Active: s.Active.Engine, SwitchedBy: s.Active.By, Reason: s.Active.Reason,
		Open: []OpenRuns{}, Unmoved: append([]Unmoved{}, s.Unmoved...)}
	if !s.Active.At.IsZero() {
		at := s.Active.At.UTC()
		out.SwitchedAt = &at
	}
	for _, o := range s.Open {
		o.Oldest = o.Oldest.UTC()
		out.Open = append(out.Open, o)
	}
	return json.Marshal(out)
}

// UnmarshalJSON reads what MarshalJSON writes.
func (s *Status) UnmarshalJSON(b []byte) error {
	var in statusJSON
	if err := json.Unmarshal(b, &in); err != nil {
		return err
	}
	*s = Status{Active: Switch{Engine: in.Active, By: in.SwitchedBy, Reason: in.Reason}, Open: in.Open, Unmoved: in.Unmoved}
	if in.SwitchedAt != nil {
		s.Active.At = *in.SwitchedAt
	}
	return nil
}

// Status reads the active engine (from the database, not the cache), the
// open runs and the runs left to move.
func (r *Router) Status(ctx context.Context) (Status, error) {
	return readStatus(ctx, r.pool)
}

// ReadStatus is Status for a process that routes nothing (the admin, which
// shows it): what it reads is all in the database, in the default schema.
func ReadStatus(ctx context.Context, pool *pgxpool.Pool) (Status, error) {
	return readStatus(ctx, pool)
}

func readStatus(ctx context.Context, pool runstore.DBTX) (Status, error) {
	s, err := runstore.ActiveEngine(ctx, pool)
	if err != nil {
		return Status{}, err
	}
	open, err := runstore.OpenRunsByKind(ctx, pool)
	if err != nil {
		return Status{}, err
	}
	unmoved, err := runstore.UnmovedRuns(ctx, pool)
	if err != nil {
		return Status{}, err
	}
	out := Status{Active: Switch{Engine: string(s.Engine), By: s.By, Reason: s.Reason, At: s.At}}
	for _, o := range open {
		out.Open = append(out.Open, OpenRuns{Engine: string(o.Engine), Kind: o.Kind, Count: o.Count, Oldest: o.Oldest})
	}
	for _, u := range unmoved {
		out.Unmoved = append(out.Unmoved, Unmoved{Engine: string(u.Engine), Count: u.Count})
	}
	return out, nil
}

// Report is what Evacuate did, run by run.
type Report struct {
	From, To string
	Moved    []Moved
	Skipped  []Skipped
	Failed   []Failed
}

// Moved is a run ended on the evacuated engine and its replacement.
type Moved struct {
	ID, To port.RunID
	Kind   port.Kind
	// Reached tells whether the evacuated engine took the cancel.
	Reached bool
}

// Skipped is an open run that was not moved, and why.
type Skipped struct {
	ID     port.RunID
	Kind   port.Kind
	Reason string
}

// Failed is a run whose move failed; the next Evacuate tries it again.
type Failed struct {
	ID    port.RunID
	Kind  port.Kind
	Error string
}

// evacuationPage is how many runs Evacuate reads at a time.
const evacuationPage = 100

// Evacuate moves every open run of engine from to the active engine (see
// the package doc). A run the evacuated engine finished meanwhile is
// skipped; so is one whose cancel someone else requested before, which is
// ended canceled and not moved. Running it again moves nothing twice: a
// run already moved is no longer open, and one whose move was interrupted
// (after the engine took its cancel, or after its row was ended) is
// finished under the same key. An engine that is not one, or the active
// one, is refused, writing nothing.
func (r *Router) Evacuate(ctx context.Context, from, by string) (Report, error) {
	src := runstore.Engine(from)
	if err := runstore.ValidEngine("from", src); err != nil {
		return Report{}, err
	}
	if by == "" {
		return Report{}, &port.FieldError{Field: "by", Reason: "must name who evacuates"}
	}
	s, err := runstore.ActiveEngine(ctx, r.pool)
	if err != nil {
		return Report{}, err
	}
	if s.Engine == src {
		return Report{}, fmt.Errorf("evacuate %s: switch to another engine first: %w", from, ErrAlreadyActive)
	}
	dst, err := r.engine(s.Engine)
	if err != nil {
		return Report{}, err
	}
	old := r.engines[src] // nil when this process lacks it: nothing to cancel there
	rep := Report{From: from, To: string(s.Engine)}
	reason := runstore.EvacuationReason(src, s.Engine, by)
	reachable := old != nil
	var after runstore.EvacuationCursor
	for {
		page, err := runstore.Evacuees(ctx, r.pool, src, after, evacuationPage)
		if err != nil {
			return rep, err
		}
		for _, ev := range page {
			after = after.Next(ev.Run)
			reachable = r.evacuate(ctx, ev, old, dst, reason, reachable, &rep)
		}
		if len(page) < evacuationPage {
			return rep, nil
		}
	}
}

// evacuate moves one run into rep, and reports whether the evacuated
// engine is still worth a cancel: after one that timed out or could not
// reach it, the others are ended without trying.
func (r *Router) evacuate(ctx context.Context, ev runstore.Evacuee, old, dst Engine, reason string, reachable bool, rep *Report) bool {
	fail := func(err error) {
		rep.Failed = append(rep.Failed, Failed{ID: ev.ID, Kind: ev.Kind, Error: err.Error()})
	}
	reached := false
	if !ev.Ended {
		// An evacuation's own cancel (an interrupted one's) is no reason to
		// keep the run: it is moved as if this evacuation had sent it. The
		// mark goes on the row before the cancel goes to the engine, so
		// that an evacuation interrupted after the engine took it knows the
		// cancel for its own; someone else's cancel requested since the
		// page was read leaves the run unmarked, and it is not moved.
		marked := ev.ByEvacuation
		if !marked && ev.CancelRequestedAt.IsZero() {
			var err error
			if marked, err = runstore.MarkEvacuating(ctx, r.pool, runstore.Engine(rep.From), ev.ID); err != nil {
				fail(err)
				return reachable
			}
		}
		if !marked {
			// The row keeps the requester's reason, even an empty one: this
			// evacuation's would read as its own cancel, and the next
			// evacuation would move the run (and status report it unmoved).
			ended, err := runstore.EndAbandoned(ctx, r.pool, runstore.Engine(rep.From), ev.ID, "", false)
			switch {
			case err != nil:
				fail(err)
			case ended:
				rep.Skipped = append(rep.Skipped, Skipped{ID: ev.ID, Kind: ev.Kind, Reason: "its cancel was requested before: ended canceled, not moved"})
			default:
				rep.Skipped = append(rep.Skipped, Skipped{ID: ev.ID, Kind: ev.Kind, Reason: "finished meanwhile"})
			}
			return reachable
		}
		if reachable {
			cctx, cancel := context.WithTimeout(ctx, r.cfg.CancelTimeout)
			err := old.Cancel(cctx, ev.ID, reason)
			cancel()
			reached = err == nil
			if err != nil && ctx.Err() == nil {
				r.log.Warn("evacuate: the engine did not take the cancel; ending the runs left without it",
					slog.String("engine", rep.From), slog.String("run", string(ev.ID)), slog.String("error", err.Error()))
				reachable = false
			}
		}
		ended, err := runstore.EndAbandoned(ctx, r.pool, runstore.Engine(rep.From), ev.ID, reason, true)
		if err != nil {
			fail(err)
			return reachable
		}
		if !ended {
			rep.Skipped = append(rep.Skipped, Skipped{ID: ev.ID, Kind: ev.Kind, Reason: "finished meanwhile"})
			return reachable
		}
	}
	to, err := dst.Enqueue(ctx, ev.Kind, json.RawMessage(ev.Input), port.EnqueueOptions{
		IdempotencyKey: runstore.EvacuationKey(ev.ID),
		BusinessKey:    ev.BusinessKey,
		Priority:       ev.Priority,
		// A delayed run stays delayed: its enqueuer asked that nothing of it
		// start before then. A time passed starts the new run at once.
		AvailableAt: ev.AvailableAt,
		// The input was written for the old run's version.
		MinVersion: ev.Version,
	})
	if err == nil {
		err = runstore.EvacuatedTo(ctx, r.pool, ev.ID, to)
	}
	if err != nil {
		fail(err)
		return reachable
	}
	rep.Moved = append(rep.Moved, Moved{ID: ev.ID, To: to, Kind: ev.Kind, Reached: reached})
	return reachable
}
