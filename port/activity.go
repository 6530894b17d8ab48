package port

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/taskport/taskport/internal/stepctx"
)

// Kind authors: ActivityRef declares an activity by name and types, without
// its body. The package that calls it (workflows/) declares it; the body is
// attached with Bind where dependencies are wired, so handlers never import
// I/O code.
type ActivityRef[In, Out any] struct{ name string }

// Kind authors: DeclareActivity names an activity. Names are stable
// identifiers, like kinds.
func DeclareActivity[In, Out any](name string) ActivityRef[In, Out] {
	return ActivityRef[In, Out]{name: name}
}

// Kind authors: Name returns the registered name.
func (r ActivityRef[In, Out]) Name() string { return r.name }

// Kind authors: Run executes the activity as the step named step of f.
func (r ActivityRef[In, Out]) Run(f Flow, step string, in In, opts ...StepOption) (Out, error) {
	var out Out
	err := f.Step(step, r.name, in, &out, opts...)
	return out, err
}

// Kind authors: ActivityBinding is an activity body ready for registration,
// built with Bind. It is opaque; engines reach it through Name and Invoke.
type ActivityBinding struct {
	name   string
	invoke func(ctx context.Context, input json.RawMessage) (any, error)
}

// Kind authors and engines: Name is the activity's registered name.
func (b ActivityBinding) Name() string { return b.name }

// Kind authors: Bind attaches a body to a declared activity. The compiler
// checks that fn has the declared input and output types. A nil fn gives a
// binding without a body, which RegisterActivity refuses.
func Bind[In, Out any](ref ActivityRef[In, Out], fn func(context.Context, In) (Out, error)) ActivityBinding {
	if fn == nil {
		return ActivityBinding{name: ref.name}
	}
	return ActivityBinding{
		name: ref.name,
		invoke: func(ctx context.Context, raw json.RawMessage) (any, error) {
			var in In
			if err := json.Unmarshal(raw, &in); err != nil {
				return nil, NonRetryable(fmt.Errorf("decode input of activity %s: %w", ref.name, err))
			}
			out, err := fn(ctx, in)
			if err != nil {
				return nil, err
			}
			return out, nil
		},
	}
}

// Kind authors: FencingToken identifies one attempt of one step and orders
// it against the other attempts of the same operation. An activity passes
// StepInfoFrom(ctx).Token to the ledger, which records it when a step begins
// an operation, refuses a Begin from an older attempt, and commits only while
// the recorded token is still exactly this one. Older means, in order:
//   - a lower Generation: an attempt of a run created before the run that
//     holds the operation (e.g. the run a decision retry superseded);
//   - within one Generation and one Scope, a lower Epoch: an earlier attempt
//     of the same step.
//
// Within one Generation, a different Scope is the same run re-executed under
// another scope (Temporal: a reset starts a new run ID); the ledger lets it
// take the operation over once and refuses the scope it replaced afterwards.
//
// Generation is the run's creation sequence (taskport.run.seq), the same on
// both engines. Temporal: Scope is workflow ID/run ID/activity ID, Epoch the
// activity attempt. Lease engine: Scope is run ID/step name, Epoch the run's
// claim count, Nonce the claim's lease_token. Engines build both shapes in
// one place (internal/enginekit).
type FencingToken struct {
	Scope string
	Epoch int64
	Nonce string // distinguishes two claims that share an epoch; may be empty
	// Generation orders runs: a run created later has a larger one. Zero is
	// a run started before generations were recorded, older than any other.
	Generation int64
}

// Kind authors and the ledger: String renders the token as stored in
// attempt_token columns.
func (t FencingToken) String() string {
	s := t.Scope + "#" + strconv.FormatInt(t.Epoch, 10)
	if t.Nonce != "" {
		s += "#" + t.Nonce
	}
	return s
}

// Kind authors and the ledger: Valid reports whether the token can fence
// anything.
func (t FencingToken) Valid() bool { return t.Scope != "" && t.Epoch > 0 && t.Generation >= 0 }

// Kind authors: StepInfo is the identity of the step an activity runs as.
type StepInfo struct {
	RunID    RunID
	Kind     Kind
	Version  int
	Step     string
	Activity string
	Attempt  int // 1-based
	Token    FencingToken
}

// activityRuntime is what an engine installs in an activity's context
// (through internal/stepctx; internal/enginekit builds it for both engines).
type activityRuntime interface {
	Info() StepInfo
	// Heartbeat records progress (shown in the Temporal UI; stored with the
	// run by the lease engine) and reports ErrCanceled or ErrLeaseLost when
	// the step should stop.
	Heartbeat(ctx context.Context, progress any) error
}

func runtimeFrom(ctx context.Context) (activityRuntime, bool) {
	rt, ok := stepctx.From(ctx).(activityRuntime)
	return rt, ok
}

// Kind authors: StepInfoFrom returns the identity of the running step, if
// ctx is an activity context.
func StepInfoFrom(ctx context.Context) (StepInfo, bool) {
	rt, ok := runtimeFrom(ctx)
	if !ok {
		return StepInfo{}, false
	}
	return rt.Info(), true
}

// Kind authors: Heartbeat reports progress from inside an activity and tells
// it whether to go on: it returns ErrCanceled once the run is canceled and
// an error matching ErrLeaseLost once the attempt no longer owns the step
// (the worker's claim is gone, or the attempt timed out); the step must then
// stop and commit nothing. Progress is kept as JSON (the Temporal UI shows
// it): progress that does not encode, or encodes above MaxPayloadBytes, is
// dropped, and the heartbeat still counts. Outside an activity context it
// only checks ctx.
func Heartbeat(ctx context.Context, progress any) error {
	if rt, ok := runtimeFrom(ctx); ok {
		if err := rt.Heartbeat(ctx, progress); err != nil {
			return err
		}
	}
	return StopReason(ctx)
}

// Kind authors: StopReason returns nil while ctx is live, else why it ended:
// ErrCanceled, an error matching ErrLeaseLost (test with errors.Is), or the
// context's own error.
func StopReason(ctx context.Context) error {
	if ctx.Err() == nil {
		return nil
	}
	return context.Cause(ctx)
}

// Kind authors: Canceled reports whether the step's run was canceled.
func Canceled(ctx context.Context) bool {
	return ctx.Err() != nil && context.Cause(ctx) == ErrCanceled
}
