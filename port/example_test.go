package port_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/port/engineapi"
)

// The input and step types of importKind, the kind the examples below run.
type (
	ImportIn struct {
		PlanID, Target string
		Bytes          int64
	}
	CopyIn  struct{ PlanID, Target string }
	CopyOut struct{ Bytes int64 }
)

// Activities are declared where they are called (a kind's package) by name
// and types only; their bodies are bound where dependencies are wired.
var (
	checkReady = port.DeclareActivity[string, bool]("plan.check-ready")
	copyFile   = port.DeclareActivity[CopyIn, CopyOut]("asset.copy")
)

// importKind waits until the business database says the plan is ready (a
// signal only speeds the wait up, ADR 2.2), then copies the file.
var importKind = port.Definition{
	Kind: "asset.import", Version: 1, Retry: port.FileRetry(),
	Handler: port.Handle(func(f port.Flow, in ImportIn) error {
		for i := 0; ; i++ {
			ready, err := checkReady.Run(f, fmt.Sprintf("check-ready-%d", i), in.PlanID)
			if err != nil {
				return err
			}
			if ready {
				break
			}
			if _, err := f.WaitSignal(fmt.Sprintf("wait-ready-%d", i), port.Topic("ready:"+in.PlanID), 10*time.Minute, nil); err != nil {
				return err
			}
		}
		_, err := copyFile.Run(f, "copy", CopyIn{PlanID: in.PlanID, Target: in.Target})
		return err
	}),
}

// A kind is written once against port.Flow and registered with its
// activities' bodies; the registry is then handed to an engine
// (temporaladapter.New or leaseadapter.New) and the engine started. Here the
// handler runs on exampleFlow, a stand-in that runs each step at once, so
// the example needs no engine.
func Example() {
	checks := 0
	reg := port.NewRegistry()
	if err := reg.Register(importKind); err != nil {
		fmt.Println(err)
		return
	}
	err := reg.RegisterActivity(
		port.Bind(checkReady, func(_ context.Context, planID string) (bool, error) {
			checks++
			return checks > 1, nil // the plan is approved after the first check
		}),
		port.Bind(copyFile, func(_ context.Context, in CopyIn) (CopyOut, error) { // the compiler checks the types
			return CopyOut{Bytes: 1 << 20}, nil
		}),
	)
	if err != nil {
		fmt.Println(err)
		return
	}

	f := &exampleFlow{reg: reg}
	_, err = engineapi.Run(importKind.Handler, f, json.RawMessage(`{"PlanID":"p1","Target":"/library/a.mkv"}`))
	fmt.Println("handler returned:", err)
	// Output:
	// step check-ready-0
	// wait wait-ready-0 on ready:p1
	// step check-ready-1
	// step copy
	// handler returned: <nil>
}

// Bad definitions are refused when registered, with a *port.FieldError
// naming the field; nothing reaches an engine.
func ExampleRegistry_Register() {
	reg := port.NewRegistry()
	noop := port.Handle(func(port.Flow, struct{}) error { return nil })
	err := reg.Register(port.Definition{Kind: "asset.import", Version: 1, Handler: noop}) // no retry policy
	var fe *port.FieldError
	if errors.As(err, &fe) {
		fmt.Println(fe.Field, "refused:", errors.Is(err, port.ErrInvalidInput))
	}
	err = reg.Register(port.Definition{Kind: "asset import", Version: 1, Retry: port.FileRetry(), Handler: noop})
	fmt.Println(err)
	// Output:
	// retry.max_attempts refused: true
	// invalid kind: character ' ' not allowed in "asset import" (letters, digits and . _ - : / only)
}

// The presets follow ADR 2.6; both engines wait the same backoff between
// attempts.
func ExampleRetryPolicy_Backoff() {
	p := port.NetworkRetry()
	for attempt := 1; attempt < p.MaxAttempts; attempt++ {
		fmt.Printf("after attempt %d: %s\n", attempt, p.Backoff(attempt))
	}
	// Output:
	// after attempt 1: 1s
	// after attempt 2: 2s
	// after attempt 3: 4s
	// after attempt 4: 8s
}

// An activity marks an error that retrying cannot fix; the step then fails
// at once, and the handler sees a *port.StepError with NonRetryable set.
func ExampleNonRetryable() {
	err := fmt.Errorf("import: %w", port.NonRetryable(errors.New("target is a directory")))
	fmt.Println(port.IsNonRetryable(err))
	fmt.Println(err)
	// Output:
	// true
	// import: non-retryable: target is a directory
}

// Outside an activity there is no step: StepInfoFrom reports none, and
// Heartbeat only checks the context.
func ExampleHeartbeat() {
	ctx, cancel := context.WithCancelCause(context.Background())
	_, ok := port.StepInfoFrom(ctx)
	fmt.Println("in a step:", ok, "heartbeat:", port.Heartbeat(ctx, "50%"))
	cancel(port.ErrCanceled)
	fmt.Println("canceled:", port.Canceled(ctx), "heartbeat:", port.Heartbeat(ctx, "50%"))
	// Output:
	// in a step: false heartbeat: <nil>
	// canceled: true heartbeat: taskport: run canceled
}

// exampleFlow runs a handler in the example's goroutine: a step calls its
// registered activity at once, a wait receives a signal at once. It stands
// in for an engine only as far as the examples need: nothing is recorded,
// retried or replayed.
type exampleFlow struct{ reg *port.Registry }

func (f *exampleFlow) RunID() port.RunID      { return "run-1" }
func (f *exampleFlow) Kind() port.Kind        { return importKind.Kind }
func (f *exampleFlow) Version() int           { return importKind.Version }
func (f *exampleFlow) Now() time.Time         { return time.Time{} }
func (f *exampleFlow) Logger() *slog.Logger   { return slog.New(slog.DiscardHandler) }
func (f *exampleFlow) RestartSuggested() bool { return false }
func (f *exampleFlow) GetVersion(_ string, _, maxSupported int) int {
	return maxSupported
}
func (f *exampleFlow) Sleep(string, time.Duration) error { return nil }

func (f *exampleFlow) WaitSignal(name string, topic port.Topic, _ time.Duration, _ any) (bool, error) {
	fmt.Println("wait", name, "on", topic)
	return true, nil
}

func (f *exampleFlow) Step(name, activity string, in, out any, _ ...port.StepOption) error {
	fmt.Println("step", name)
	b, err := engineapi.Activity(f.reg, activity)
	if err != nil {
		return err
	}
	raw, err := json.Marshal(in)
	if err != nil {
		return err
	}
	res, err := engineapi.Invoke(context.Background(), b, raw)
	if err != nil {
		return err
	}
	enc, err := json.Marshal(res)
	if err != nil {
		return err
	}
	return json.Unmarshal(enc, out)
}

// An operator's pass over the dead letters: page by page, newest first (a
// page's last Cursor is the next page's After), each retried once its cause
// is fixed. A pass repeated after a crash starts nothing twice: Retry
// returns the run the first pass started. Here the Admin is exampleAdmin, a
// stand-in holding three dead letters; an engine's is leaseadapter.New or
// temporaladapter.New.
func ExampleAdmin() {
	var admin port.Admin = exampleAdmin{"run-3", "run-2", "run-1"}
	ctx := context.Background()
	f := port.RunFilter{Statuses: []port.Status{port.StatusFailed}, Limit: 2}
	for {
		page, err := admin.ListRuns(ctx, f)
		if err != nil {
			fmt.Println("list dead letters:", err)
			return
		}
		for _, run := range page {
			next, err := admin.Retry(ctx, run.ID)
			if err != nil {
				fmt.Println("retry:", err)
				continue
			}
			fmt.Println(run.ID, "retried as", next)
		}
		if len(page) < f.Limit {
			return
		}
		f.After = page[len(page)-1].Cursor
	}
	// Output:
	// run-3 retried as run-3-retry
	// run-2 retried as run-2-retry
	// run-1 retried as run-1-retry
}

// exampleAdmin lists its failed runs, newest first; a run's cursor is its id.
type exampleAdmin []port.RunID

func (a exampleAdmin) ListRuns(_ context.Context, f port.RunFilter) ([]port.RunView, error) {
	var page []port.RunView
	listing := f.After == ""
	for _, id := range a {
		if listing && len(page) < f.Limit {
			page = append(page, port.RunView{ID: id, Status: port.StatusFailed, Cursor: string(id)})
		}
		listing = listing || string(id) == f.After
	}
	return page, nil
}

func (a exampleAdmin) Retry(_ context.Context, id port.RunID) (port.RunID, error) {
	return id + "-retry", nil
}

// A backlog import in batches. A batch with a bad item is refused whole,
// nothing written, and the *ItemError names the item: the caller sets it
// aside and sends the rest again. Enqueueing the same batch twice (a crash
// before the import recorded its progress) starts nothing twice: the
// results say Created false. Here the engine is exampleEngine, a stand-in
// that only checks the idempotency key; an engine's is leaseadapter.New or
// temporaladapter.New.
func ExampleTaskEngine_EnqueueMany() {
	var engine port.TaskEngine = &exampleEngine{runs: map[string]port.RunID{}}
	ctx := context.Background()
	items := []port.EnqueueItem{
		{Kind: "asset.import", Input: ImportIn{PlanID: "p1"}, Options: port.EnqueueOptions{IdempotencyKey: "plan:p1:import"}},
		{Kind: "asset.import", Input: ImportIn{PlanID: "p2"}}, // no key
		{Kind: "asset.import", Input: ImportIn{PlanID: "p3"}, Options: port.EnqueueOptions{IdempotencyKey: "plan:p3:import"}},
	}
	_, err := engine.EnqueueMany(ctx, items)
	var refused *port.ItemError
	if errors.As(err, &refused) {
		fmt.Println("set aside:", err)
		items = append(items[:refused.Index], items[refused.Index+1:]...)
	}
	for range 2 {
		res, err := engine.EnqueueMany(ctx, items)
		if err != nil {
			fmt.Println("enqueue:", err)
			return
		}
		fmt.Println(res)
	}
	// Output:
	// set aside: enqueue batch item 1: invalid idempotency_key: must not be empty
	// [{run-1 true} {run-2 true}]
	// [{run-1 false} {run-2 false}]
}

// exampleEngine records a run per key. It implements EnqueueMany only: the
// embedded interface, nil, stands for the rest.
type exampleEngine struct {
	port.TaskEngine
	runs map[string]port.RunID
}

func (e *exampleEngine) EnqueueMany(_ context.Context, items []port.EnqueueItem) ([]port.EnqueueResult, error) {
	for i, it := range items {
		if it.Options.IdempotencyKey == "" {
			return nil, &port.ItemError{Index: i, Err: &port.FieldError{Field: "idempotency_key", Reason: "must not be empty"}}
		}
	}
	out := make([]port.EnqueueResult, len(items))
	for i, it := range items {
		id, found := e.runs[it.Options.IdempotencyKey]
		if !found {
			id = port.RunID(fmt.Sprintf("run-%d", len(e.runs)+1))
			e.runs[it.Options.IdempotencyKey] = id
		}
		out[i] = port.EnqueueResult{ID: id, Created: !found}
	}
	return out, nil
}
