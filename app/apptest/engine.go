package apptest

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskport/taskport/internal/enginekit"
	"github.com/taskport/taskport/internal/runstore"
	"github.com/taskport/taskport/internal/startstop"
	"github.com/taskport/taskport/port"
)

// Enqueued is one Enqueue call the RecordingEngine accepted.
type Enqueued struct {
	RunID   port.RunID
	Kind    port.Kind
	Key     string
	Input   json.RawMessage
	Created bool // false when the key was already recorded
	At      time.Time
}

// RecordingEngine is a port.TaskEngine that records what business code asks
// of it and runs nothing. It is honest where business code relies on it:
// Enqueue is idempotent on (kind, key) through the shared run store
// (taskport.run), validates like a real engine when given a registry, and
// Cancel records the cancel there. Tests drive the recorded runs themselves
// (World.Drive). Its Start and Stop run nothing but follow the port's
// lifecycle rules (internal/startstop), as a real engine's do.
type RecordingEngine struct {
	startstop.Base

	pool *pgxpool.Pool
	reg  *port.Registry // nil: accept any kind at version 1

	mu       sync.Mutex
	enqueued []Enqueued
	signals  []port.Topic
	canceled []port.RunID
	notify   chan struct{}
}

var (
	_ port.TaskEngine = (*RecordingEngine)(nil)
	_ port.Admin      = (*RecordingEngine)(nil)
)

// NewRecordingEngine records into pool's run store; reg may be nil.
func NewRecordingEngine(pool *pgxpool.Pool, reg *port.Registry) *RecordingEngine {
	return &RecordingEngine{pool: pool, reg: reg, notify: make(chan struct{}, 1)}
}

// Enqueue implements port.TaskEngine.
func (e *RecordingEngine) Enqueue(ctx context.Context, kind port.Kind, input any, opts port.EnqueueOptions) (port.RunID, error) {
	version, raw, err := e.prepare(kind, input, opts)
	if err != nil {
		return "", err
	}
	run, created, err := runstore.Insert(ctx, e.pool, runstore.NewRun{
		Engine: runstore.EngineLease, Kind: kind, Version: version, Key: opts.IdempotencyKey,
		BusinessKey: opts.BusinessKey, Input: raw, AvailableAt: opts.AvailableAt,
	})
	if err != nil {
		return "", fmt.Errorf("recording engine enqueue: %w", err)
	}
	e.record(Enqueued{RunID: run.ID, Kind: kind, Key: opts.IdempotencyKey, Input: run.Input, Created: created, At: time.Now()})
	return run.ID, nil
}

// EnqueueMany implements port.TaskEngine as the engines do: every item
// validated first (a *port.ItemError refuses the batch), then one
// runstore.InsertMany. Each item is recorded like an Enqueue call.
func (e *RecordingEngine) EnqueueMany(ctx context.Context, items []port.EnqueueItem) ([]port.EnqueueResult, error) {
	if len(items) == 0 {
		return nil, nil
	}
	news := make([]runstore.NewRun, len(items))
	for i, it := range items {
		version, raw, err := e.prepare(it.Kind, it.Input, it.Options)
		if err != nil {
			return nil, &port.ItemError{Index: i, Err: err}
		}
		news[i] = runstore.NewRun{Engine: runstore.EngineLease, Kind: it.Kind, Version: version, Key: it.Options.IdempotencyKey,
			BusinessKey: it.Options.BusinessKey, Input: raw, AvailableAt: it.Options.AvailableAt}
	}
	runs, created, err := runstore.InsertMany(ctx, e.pool, news)
	if err != nil {
		return nil, fmt.Errorf("recording engine enqueue many: %w", err)
	}
	out := make([]port.EnqueueResult, len(runs))
	for i, run := range runs {
		out[i] = port.EnqueueResult{ID: run.ID, Created: created[i]}
		e.record(Enqueued{RunID: run.ID, Kind: run.Kind, Key: run.IdempotencyKey, Input: run.Input, Created: created[i], At: time.Now()})
	}
	return out, nil
}

// prepare validates an enqueue like a real engine when the engine has a
// registry, and otherwise only requires a key; it returns the version and
// the encoded input.
func (e *RecordingEngine) prepare(kind port.Kind, input any, opts port.EnqueueOptions) (int, json.RawMessage, error) {
	if e.reg != nil {
		prep, err := enginekit.PrepareEnqueue(e.reg, kind, input, opts)
		if err != nil {
			return 0, nil, err
		}
		return prep.Definition.Version, prep.Input, nil
	}
	raw, err := enginekit.EncodePayload("input", input)
	if err != nil {
		return 0, nil, err
	}
	if opts.IdempotencyKey == "" {
		return 0, nil, &port.FieldError{Field: "idempotency_key", Reason: "must not be empty"}
	}
	return 1, raw, nil
}

// record appends an accepted enqueue and wakes whoever waits for one.
func (e *RecordingEngine) record(en Enqueued) {
	e.mu.Lock()
	e.enqueued = append(e.enqueued, en)
	e.mu.Unlock()
	select {
	case e.notify <- struct{}{}:
	default:
	}
}

// Signal implements port.TaskEngine: it records the topic; nobody waits.
func (e *RecordingEngine) Signal(_ context.Context, topic port.Topic, payload any) (int, error) {
	if _, err := enginekit.PrepareSignal(topic, payload); err != nil {
		return 0, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.signals = append(e.signals, topic)
	return 0, nil
}

// Cancel implements port.TaskEngine: the cancel is recorded in the run store
// and the run projected canceled (nothing runs it).
func (e *RecordingEngine) Cancel(ctx context.Context, id port.RunID, reason string) error {
	flagged, err := runstore.RequestCancel(ctx, e.pool, runstore.EngineLease, id, reason)
	if err != nil {
		return err
	}
	if flagged {
		if err := runstore.Project(ctx, e.pool, id, runstore.Projection{Status: port.StatusCanceled}); err != nil {
			return err
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.canceled = append(e.canceled, id)
	return nil
}

// Get implements port.TaskEngine.
func (e *RecordingEngine) Get(ctx context.Context, id port.RunID) (port.RunView, error) {
	run, err := runstore.GetOwned(ctx, e.pool, runstore.EngineLease, id)
	if err != nil {
		return port.RunView{}, err
	}
	return run.RunView, nil
}

// ListRuns implements port.Admin from the run store, as both engines do.
func (e *RecordingEngine) ListRuns(ctx context.Context, f port.RunFilter) ([]port.RunView, error) {
	return runstore.List(ctx, e.pool, runstore.EngineLease, f)
}

// Retry implements port.Admin as both engines do; the new run is recorded
// like any Enqueue.
func (e *RecordingEngine) Retry(ctx context.Context, id port.RunID) (port.RunID, error) {
	return runstore.Retry(ctx, e.pool, e, id)
}

// Start implements port.TaskEngine; the engine runs nothing.
func (e *RecordingEngine) Start(ctx context.Context, _ port.StartOptions) error {
	return startstop.Start(ctx, &e.Base, func(context.Context) error { return nil })
}

// Stop implements port.TaskEngine.
func (e *RecordingEngine) Stop(ctx context.Context) error {
	return startstop.Stop(ctx, &e.Base, func(context.Context) error { return nil })
}

// Enqueued returns the accepted Enqueue calls in order.
func (e *RecordingEngine) Enqueued() []Enqueued {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]Enqueued(nil), e.enqueued...)
}

// Signals returns the topics signalled, in order.
func (e *RecordingEngine) Signals() []port.Topic {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]port.Topic(nil), e.signals...)
}

// Canceled returns the runs canceled, in order.
func (e *RecordingEngine) Canceled() []port.RunID {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]port.RunID(nil), e.canceled...)
}

// Notify receives a value after each Enqueue (coalesced).
func (e *RecordingEngine) Notify() <-chan struct{} { return e.notify }
