// Package flowtest is a deterministic, in-memory port.Flow for unit tests of
// task kinds. It runs activities from a port.Registry directly, records step
// names, scripts signals and timeouts, replays completed steps and checks
// (sequence, name) on replay like both engines do. It is a test double, not
// an engine: nothing is persisted and nothing runs in the background.
package flowtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/taskport/taskport/internal/enginekit"
	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/port/engineapi"
)

// ErrCrashed is returned by Execute when a LoseResult step ran: the step's
// side effects happened but the engine never recorded its result, as after a
// worker crash. Execute again to resume; the step reruns with a newer attempt.
var ErrCrashed = errors.New("flowtest: simulated crash after a step ran")

// ErrParked is returned by Execute when ParkWaits is set and the run reached
// a wait with no signal queued: the run is waiting, as on a real engine.
// Signal (or Expire) and Execute again to resume it.
var ErrParked = errors.New("flowtest: run parked in a wait")

// Run is one run of a kind, executed in the test's goroutine.
type Run struct {
	reg   *port.Registry
	def   port.Definition
	id    port.RunID
	input json.RawMessage

	history  []record
	seq      enginekit.StepSequence
	attempts map[string]int // per step name, across executions
	signals  map[port.Topic][]json.RawMessage
	lose     map[string]bool
	canceled bool
	expire   bool
	now      time.Time

	// OnWait, when set, is called when the run is about to park in a wait
	// that has no queued signal: the test may change the business DB or call
	// Signal. Without a signal the wait then times out.
	OnWait func(name string, topic port.Topic)
	// ParkWaits makes a wait with no queued signal end the execution with
	// ErrParked instead of timing out at once (see Expire).
	ParkWaits bool
	// RestartAfter, when positive, makes RestartSuggested true once an
	// execution has numbered that many steps.
	RestartAfter int

	// Steps lists every step, wait and sleep name asked for, in order, over
	// all executions (replayed ones included).
	Steps []string
	// Executed lists the steps whose activity actually ran (each attempt).
	Executed []string
	// Waits lists each wait that parked: name, topic, timeout, received.
	Waits []Wait
	// Heartbeats lists what activities reported through port.Heartbeat
	// (read it after the run: a step may beat from a goroutine of its own).
	Heartbeats []any
	beatMu     sync.Mutex
	// Options records the resolved options of each step by name.
	Options map[string]port.StepOptions
	// ContinuedAsNew counts the restarts; Input is the latest input.
	ContinuedAsNew int
	// Output is the encoded result of the last Execute that succeeded (nil
	// for a kind without one, or after a failure).
	Output json.RawMessage
}

// Wait is one wait the run parked in.
type Wait struct {
	Name     string
	Topic    port.Topic
	Timeout  time.Duration
	Received bool
}

type record struct {
	name   string
	result json.RawMessage
}

// New prepares a run of the current version of kind with input. id names the
// run (it feeds fencing tokens: scope id/step, epoch the attempt).
func New(reg *port.Registry, kind port.Kind, id port.RunID, input any) (*Run, error) {
	def, err := reg.Current(kind)
	if err != nil {
		return nil, err
	}
	raw, err := enginekit.EncodePayload("input", input)
	if err != nil {
		return nil, err
	}
	return &Run{
		reg: reg, def: def, id: id, input: raw,
		attempts: map[string]int{}, signals: map[port.Topic][]json.RawMessage{}, lose: map[string]bool{},
		now:     time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
		Options: map[string]port.StepOptions{},
	}, nil
}

// Signal queues a signal; the next wait on topic receives it.
func (r *Run) Signal(topic port.Topic, payload any) error {
	raw, err := enginekit.PrepareSignal(topic, payload)
	if err != nil {
		return err
	}
	r.signals[topic] = append(r.signals[topic], raw)
	return nil
}

// Cancel marks the run canceled: later steps and waits return
// port.ErrCanceled, and activities see it through port.Heartbeat.
func (r *Run) Cancel() { r.canceled = true }

// Expire makes the next parked wait time out instead of parking.
func (r *Run) Expire() { r.expire = true }

// LoseResult makes the named step run its activity but lose the result, and
// Execute return ErrCrashed (once).
func (r *Run) LoseResult(step string) { r.lose[step] = true }

// Input returns the run's current input (changed by ContinueAsNew).
func (r *Run) Input() json.RawMessage { return r.input }

// Execute runs the handler from the start, replaying the recorded steps, and
// returns its error; the result of a handler that succeeded is in Output.
// A ContinueAsNew restarts it at once with the new input and an empty
// history.
func (r *Run) Execute(ctx context.Context) error {
	for {
		r.seq = enginekit.StepSequence{}
		next, output, err := enginekit.Outcome(engineapi.Run(r.def.Handler, &flow{run: r, ctx: ctx}, r.input))
		if next == nil {
			r.Output = output
			return err
		}
		r.input, r.history = next, nil
		r.ContinuedAsNew++
	}
}

type flow struct {
	run *Run
	ctx context.Context
}

var _ port.Flow = (*flow)(nil)

func (f *flow) RunID() port.RunID    { return f.run.id }
func (f *flow) Kind() port.Kind      { return f.run.def.Kind }
func (f *flow) Version() int         { return f.run.def.Version }
func (f *flow) Now() time.Time       { return f.run.now }
func (f *flow) Logger() *slog.Logger { return slog.New(slog.DiscardHandler) }
func (f *flow) RestartSuggested() bool {
	return f.run.RestartAfter > 0 && f.run.seq.Len() >= f.run.RestartAfter
}

// next numbers name and reports the recorded result when replaying.
func (f *flow) next(name string) (seq int, replayed json.RawMessage, isReplay bool, err error) {
	seq, err = f.run.seq.Next(name)
	if err != nil {
		return 0, nil, false, err
	}
	f.run.Steps = append(f.run.Steps, name)
	if seq < len(f.run.history) {
		rec := f.run.history[seq]
		if err := enginekit.CheckReplay(seq, name, rec.name); err != nil {
			return 0, nil, false, err
		}
		return seq, rec.result, true, nil
	}
	if f.run.canceled {
		return 0, nil, false, port.ErrCanceled
	}
	return seq, nil, false, nil
}

func (f *flow) Step(name, activity string, in, out any, opts ...port.StepOption) error {
	_, stored, replay, err := f.next(name)
	if err != nil {
		return err
	}
	if replay {
		return enginekit.DecodePayload(stored, out)
	}
	o, err := enginekit.ResolveStepOptions(f.run.def, opts...)
	if err != nil {
		return err
	}
	f.run.Options[name] = o
	b, err := engineapi.Activity(f.run.reg, activity)
	if err != nil {
		return err
	}
	raw, err := enginekit.EncodePayload("input", in)
	if err != nil {
		return err
	}
	var lastErr error
	for try := 1; try <= o.Retry.MaxAttempts; try++ {
		f.run.attempts[name]++
		result, err := f.invoke(b, name, raw)
		if err == nil {
			if f.run.lose[name] {
				delete(f.run.lose, name)
				return ErrCrashed
			}
			f.run.history = append(f.run.history, record{name: name, result: result})
			return enginekit.DecodePayload(result, out)
		}
		lastErr = err
		if errors.Is(err, port.ErrCanceled) && f.run.canceled {
			return port.ErrCanceled
		}
		if port.IsNonRetryable(err) {
			return enginekit.StepFailed(name, activity, try, err.Error(), true)
		}
	}
	return enginekit.StepFailed(name, activity, o.Retry.MaxAttempts, lastErr.Error(), false)
}

// invoke runs one attempt through the engines' activity runtime. Its
// fencing token has the lease engine's shape, each attempt counting as a
// claim.
func (f *flow) invoke(b port.ActivityBinding, step string, raw json.RawMessage) (json.RawMessage, error) {
	attempt := f.run.attempts[step]
	info := port.StepInfo{
		RunID: f.run.id, Kind: f.run.def.Kind, Version: f.run.def.Version, Step: step, Attempt: attempt,
		Token: enginekit.LeaseToken(f.run.id, step, int64(attempt), "", 0),
	}
	f.run.Executed = append(f.run.Executed, step)
	return enginekit.RunActivity(f.ctx, b, info, heartbeat{run: f.run}, raw)
}

func (f *flow) WaitSignal(name string, topic port.Topic, timeout time.Duration, payload any) (bool, error) {
	_, stored, replay, err := f.next(name)
	if err != nil {
		return false, err
	}
	if replay {
		var w waitResult
		if err := json.Unmarshal(stored, &w); err != nil {
			return false, fmt.Errorf("flowtest: decode wait %s: %w", name, err)
		}
		return w.Received, enginekit.DecodePayload(w.Payload, payload)
	}
	if err := enginekit.ValidateTopic(topic); err != nil {
		return false, err
	}
	if len(f.run.signals[topic]) == 0 && f.run.OnWait != nil {
		f.run.OnWait(name, topic)
	}
	if len(f.run.signals[topic]) == 0 && f.run.ParkWaits && !f.run.expire {
		return false, ErrParked
	}
	f.run.expire = false
	w := waitResult{}
	if q := f.run.signals[topic]; len(q) > 0 {
		w.Received, w.Payload = true, q[0]
		f.run.signals[topic] = q[1:]
	} else {
		f.run.now = f.run.now.Add(timeout)
	}
	f.run.Waits = append(f.run.Waits, Wait{Name: name, Topic: topic, Timeout: timeout, Received: w.Received})
	stored, err = json.Marshal(w)
	if err != nil {
		return false, fmt.Errorf("flowtest: encode wait %s: %w", name, err)
	}
	f.run.history = append(f.run.history, record{name: name, result: stored})
	return w.Received, enginekit.DecodePayload(w.Payload, payload)
}

type waitResult struct {
	Received bool            `json:"received"`
	Payload  json.RawMessage `json:"payload,omitempty"`
}

func (f *flow) Sleep(name string, d time.Duration) error {
	_, _, replay, err := f.next(name)
	if err != nil || replay {
		return err
	}
	f.run.now = f.run.now.Add(d)
	f.run.history = append(f.run.history, record{name: name, result: json.RawMessage("null")})
	return nil
}

func (f *flow) GetVersion(changeID string, _, maxSupported int) int {
	name := "version:" + changeID
	_, stored, replay, err := f.next(name)
	var v int
	switch {
	case err != nil:
		// A cancel (or a bad name) surfaces at the next step; a marker
		// records nothing then.
		return maxSupported
	case replay && json.Unmarshal(stored, &v) == nil:
		return v
	}
	raw, _ := json.Marshal(maxSupported) //nolint:errcheck // an int always encodes
	f.run.history = append(f.run.history, record{name: name, result: raw})
	return maxSupported
}

// heartbeat is the activity side's engine half (enginekit.Beater): it
// records progress and reports the run's cancel.
type heartbeat struct{ run *Run }

func (h heartbeat) Beat(_ context.Context, progress any) error {
	h.run.beatMu.Lock()
	h.run.Heartbeats = append(h.run.Heartbeats, progress)
	h.run.beatMu.Unlock()
	if h.run.canceled {
		return port.ErrCanceled
	}
	return nil
}
