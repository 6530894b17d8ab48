package portdiff

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/taskport/taskport/port"
)

type moveKind int

const (
	moveStep    moveKind = iota // a step failing Fail times, then succeeding (never, when Fail >= Attempts)
	moveHold                    // a moveStep whose first attempt blocks until the test releases it
	moveWait                    // WaitSignal, see waitMode
	moveSleep                   // Sleep: short (passes on its own) or long (only a cancel ends it)
	moveMarker                  // GetVersion(Name, 1, Max)
	moveUnbound                 // a step on an activity no registry binds
)

type waitMode int

const (
	waitSignalAfter  waitMode = iota // long timeout; the test signals once the run is parked
	waitSignalBefore                 // long timeout; signaled while the run is held in the step before
	waitPollSignaled                 // timeout 0; signaled while the run is held in the step before
	waitTimeout                      // short timeout, no signal: times out
)

// Move is one instruction of a program.
type Move struct {
	Kind         moveKind
	Name         string
	Fail         int  // failed attempts before the body succeeds
	Attempts     int  // the step's MaxAttempts
	NonRetryable bool // the failures are non-retryable
	Wait         waitMode
	Long         bool // a long sleep
	Max          int  // a marker's maxSupported
}

// parks reports whether the run stops at this move until the test acts:
// the observation points inside a program.
func (m Move) parks() bool {
	switch m.Kind {
	case moveHold:
		return true
	case moveWait:
		return m.Wait == waitSignalAfter
	case moveSleep:
		return m.Long
	}
	return false
}

// ends reports whether the run fails at this move.
func (m Move) ends() bool {
	switch m.Kind {
	case moveStep, moveHold:
		return m.Fail >= m.Attempts || (m.NonRetryable && m.Fail > 0)
	case moveUnbound:
		return true
	}
	return false
}

// positional reports whether the move sets CurrentStep.
func (m Move) positional() bool { return m.Kind != moveMarker }

// attemptsAtEnd is the move's Attempts once it finished (SEMANTICS.md:
// the started attempts of a step; 0 for a wait or a sleep).
func (m Move) attemptsAtEnd() int {
	switch m.Kind {
	case moveStep, moveHold:
		if m.NonRetryable && m.Fail > 0 {
			return 1
		}
		return min(m.Fail+1, m.Attempts)
	case moveUnbound:
		return 1
	}
	return 0
}

func (m Move) String() string {
	switch m.Kind {
	case moveStep, moveHold:
		verb := "step"
		if m.Kind == moveHold {
			verb = "held-step"
		}
		nr := ""
		if m.NonRetryable {
			nr = " non-retryable"
		}
		return fmt.Sprintf("%s %s fail=%d/%d%s", verb, m.Name, m.Fail, m.Attempts, nr)
	case moveWait:
		return fmt.Sprintf("wait %s %s", m.Name, [...]string{"signal-after", "signal-before", "poll-signaled", "timeout"}[m.Wait])
	case moveSleep:
		if m.Long {
			return "sleep " + m.Name + " long"
		}
		return "sleep " + m.Name + " short"
	case moveMarker:
		return fmt.Sprintf("marker %s max=%d", m.Name, m.Max)
	default:
		return "unbound-step " + m.Name
	}
}

// Program is one kind: its version and moves.
type Program struct {
	Kind    port.Kind
	Version int
	Moves   []Move
}

func (p Program) String() string {
	moves := make([]string, len(p.Moves))
	for i, m := range p.Moves {
		moves[i] = m.String()
	}
	return fmt.Sprintf("%s@v%d [%s]", p.Kind, p.Version, strings.Join(moves, "; "))
}

// The timing of the moves: long ones only end by the test's hand, short
// ones on their own within a fraction of a second.
const (
	longTimeout  = 10 * time.Minute
	shortTimeout = 150 * time.Millisecond
	shortSleep   = 100 * time.Millisecond
	// stepTimeout outlasts any hold: a held body must not time out while
	// the plan works on other runs.
	stepTimeout = 5 * time.Minute
)

func policy(attempts int) port.RetryPolicy {
	return port.RetryPolicy{MaxAttempts: attempts, InitialInterval: 20 * time.Millisecond, MaxInterval: 100 * time.Millisecond, BackoffCoefficient: 2}
}

// runInput is every program's input: the run's own key, so that steps and
// topics are named per run.
type runInput struct {
	Key string `json:"key"`
}

// stepInput tells the generic activity what to do.
type stepInput struct {
	Key          string `json:"key"`
	Step         string `json:"step"`
	Fail         int    `json:"fail"`
	NonRetryable bool   `json:"non_retryable,omitempty"`
	Hold         bool   `json:"hold,omitempty"`
}

// signalPayload is what the test sends to a wait; the handler checks it.
type signalPayload struct {
	Key  string `json:"key"`
	Wait string `json:"wait"`
}

func topic(key, wait string) port.Topic { return port.Topic("pd:" + key + ":" + wait) }

var (
	stepActivity    = port.DeclareActivity[stepInput, int]("pd.step")
	unboundActivity = port.DeclareActivity[stepInput, int]("pd.unbound")
)

// handler interprets p. It is deterministic: everything it decides comes
// from the program and from what the Flow returns.
func handler(p Program) port.Handler {
	return port.Handle(func(f port.Flow, in runInput) error {
		for _, m := range p.Moves {
			switch m.Kind {
			case moveStep, moveHold:
				si := stepInput{Key: in.Key, Step: m.Name, Fail: m.Fail, NonRetryable: m.NonRetryable, Hold: m.Kind == moveHold}
				if _, err := stepActivity.Run(f, m.Name, si, port.WithRetry(policy(m.Attempts))); err != nil {
					return err
				}
			case moveUnbound:
				if _, err := unboundActivity.Run(f, m.Name, stepInput{Key: in.Key, Step: m.Name}); err != nil {
					return err
				}
			case moveWait:
				timeout := longTimeout
				switch m.Wait {
				case waitPollSignaled:
					timeout = 0
				case waitTimeout:
					timeout = shortTimeout
				}
				var got signalPayload
				received, err := f.WaitSignal(m.Name, topic(in.Key, m.Name), timeout, &got)
				if err != nil {
					return err
				}
				if want := m.Wait != waitTimeout; received != want {
					return fmt.Errorf("wait %s: received=%v, the program expects %v", m.Name, received, want)
				}
				if want := (signalPayload{Key: in.Key, Wait: m.Name}); received && got != want {
					return fmt.Errorf("wait %s: payload %+v, the program sent %+v", m.Name, got, want)
				}
			case moveSleep:
				d := shortSleep
				if m.Long {
					d = longTimeout
				}
				if err := f.Sleep(m.Name, d); err != nil {
					return err
				}
			case moveMarker:
				if v := f.GetVersion(m.Name, 1, m.Max); v != m.Max {
					return fmt.Errorf("marker %s: GetVersion returned %d on a first execution, want %d", m.Name, v, m.Max)
				}
			}
		}
		return nil
	})
}

// register adds the programs and the step activity, whose bodies report to
// w, to a new registry. pd.unbound is declared, never bound.
func register(programs []Program, w *world) (*port.Registry, error) {
	reg := port.NewRegistry()
	for _, p := range programs {
		if err := reg.Register(port.Definition{Kind: p.Kind, Version: p.Version, Retry: policy(3), StepTimeout: stepTimeout, Handler: handler(p)}); err != nil {
			return nil, err
		}
	}
	return reg, reg.RegisterActivity(port.Bind(stepActivity, w.step))
}

// world is the test's side of one engine's execution: what the step bodies
// did, and the holds the test keeps them in.
type world struct {
	mu       sync.Mutex
	execs    map[string]map[string]int // run key -> step -> bodies started
	holds    map[string]*hold          // run key + "/" + step
	canceled map[string]bool           // runs whose holds no longer block
}

type hold struct {
	started, release chan struct{}
	startOnce        sync.Once
	releaseOnce      sync.Once
}

func newWorld() *world {
	return &world{execs: map[string]map[string]int{}, holds: map[string]*hold{}, canceled: map[string]bool{}}
}

func (w *world) hold(key, step string) *hold {
	w.mu.Lock()
	defer w.mu.Unlock()
	id := key + "/" + step
	h := w.holds[id]
	if h == nil {
		h = &hold{started: make(chan struct{}), release: make(chan struct{})}
		w.holds[id] = h
	}
	return h
}

// started reports whether the held body of key's step has begun.
func (w *world) started(key, step string) bool {
	select {
	case <-w.hold(key, step).started:
		return true
	default:
		return false
	}
}

// releaseAll lets every held body of key go, and those that start later
// pass through: key was canceled (or the execution ends).
func (w *world) releaseAll(key string) {
	w.mu.Lock()
	w.canceled[key] = true
	var hs []*hold
	for id, h := range w.holds {
		if strings.HasPrefix(id, key+"/") {
			hs = append(hs, h)
		}
	}
	w.mu.Unlock()
	for _, h := range hs {
		h.releaseOnce.Do(func() { close(h.release) })
	}
}

func (w *world) release(key, step string) {
	h := w.hold(key, step)
	h.releaseOnce.Do(func() { close(h.release) })
}

func (w *world) executions(key string) map[string]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string]int{}
	for s, n := range w.execs[key] {
		out[s] = n
	}
	return out
}

// step is the body of pd.step: it counts its start, holds its first
// attempt when asked, and fails its first Fail attempts.
func (w *world) step(ctx context.Context, in stepInput) (int, error) {
	w.mu.Lock()
	if w.execs[in.Key] == nil {
		w.execs[in.Key] = map[string]int{}
	}
	w.execs[in.Key][in.Step]++
	attempt := w.execs[in.Key][in.Step]
	passThrough := w.canceled[in.Key]
	w.mu.Unlock()
	if in.Hold && attempt == 1 {
		h := w.hold(in.Key, in.Step)
		h.startOnce.Do(func() { close(h.started) })
		if !passThrough {
			select {
			case <-h.release:
			case <-ctx.Done():
				return 0, port.StopReason(ctx)
			}
		}
	}
	if attempt <= in.Fail {
		err := fmt.Errorf("%s attempt %d failed", in.Step, attempt)
		if in.NonRetryable {
			return 0, port.NonRetryable(err)
		}
		return 0, err
	}
	return attempt, nil
}

// errClass names the port sentinel an error matches, for traces.
func errClass(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, port.ErrNotFound):
		return "not found"
	case errors.Is(err, port.ErrInvalidInput):
		return "invalid input"
	}
	return "error: " + err.Error()
}
