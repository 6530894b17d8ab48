package porttest

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"

	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskport/taskport/port"
)

// schema is the suite's own table: one row per step body that started.
const schema = `
CREATE SCHEMA IF NOT EXISTS porttest;
CREATE TABLE IF NOT EXISTS porttest.execution (
    id       bigserial PRIMARY KEY,
    run_id   text    NOT NULL,
    step     text    NOT NULL,
    attempt  int     NOT NULL,
    payload  text    NOT NULL DEFAULT '',
    finished boolean NOT NULL DEFAULT false
);`

// kind is the suite's one kind; its input says what the run does.
const kind port.Kind = "porttest.program"

// program is the input of kind: step "work", then optionally the wait
// "wait", step "mid" and the wait "wait2" (or step "mid" alone), the sleep
// "nap", and step "done"
// (which records the payload the first wait received).
type program struct {
	Block       bool   `json:"block,omitempty"`        // "work" blocks until the test releases the run
	Fail        int    `json:"fail,omitempty"`         // "work" fails this many times, then succeeds
	MaxAttempts int    `json:"max_attempts,omitempty"` // of "work"; 0 means 3
	BackoffMs   int    `json:"backoff_ms,omitempty"`   // before the second attempt of "work"; 0 means 50
	Topic       string `json:"topic,omitempty"`        // when set, WaitSignal("wait", Topic, Timeout)
	TimeoutMs   int    `json:"timeout_ms,omitempty"`   // of the waits; 0 means one hour
	SecondWait  bool   `json:"second_wait,omitempty"`  // then step "mid" (blocking) and WaitSignal("wait2", Topic)
	MidOnly     bool   `json:"mid_only,omitempty"`     // then step "mid" (blocking), and no second wait
	SleepMs     int    `json:"sleep_ms,omitempty"`     // then Sleep("nap")
	Unbound     bool   `json:"unbound,omitempty"`      // the only step names an activity never bound
	Note        string `json:"note,omitempty"`         // free text, for inputs that must differ
	// GiveUp: after "work", the handler returns an error wrapping
	// port.ErrCanceled of its own accord (no Cancel was called).
	GiveUp bool `json:"give_up,omitempty"`
	// Unstorable ends the message of each failure of "work" with bytes
	// Postgres text cannot store (unstorable); HandlerUnstorable makes the
	// handler fail after "work" with "handler failed" and them. (An input
	// cannot carry them: JSON has no such string.)
	Unstorable        bool `json:"unstorable,omitempty"`
	HandlerUnstorable bool `json:"handler_unstorable,omitempty"`
	// BadProgress: "work" heartbeats progress that does not encode as JSON.
	BadProgress bool `json:"bad_progress,omitempty"`
	// ContinueOnce: after "done", ContinueAsNew into an execution whose
	// input has Continued, which ends at once, running no step.
	ContinueOnce bool `json:"continue_once,omitempty"`
	Continued    bool `json:"continued,omitempty"`
	// WaitAgain: the execution ContinueOnce continues into waits once more
	// on Topic ("again", no work) and returns the payload it received.
	WaitAgain bool `json:"wait_again,omitempty"`
	// NotBeforeMs, when set, fails the run at once (before any step) if
	// Flow.Now reads earlier than it (Unix milliseconds). A run continued
	// by ContinueOnce gets its execution's Now after "done".
	NotBeforeMs int64 `json:"not_before_ms,omitempty"`
	// StepTimeoutMs and HeartbeatTimeoutMs, when set, are those of "work".
	StepTimeoutMs      int `json:"step_timeout_ms,omitempty"`
	HeartbeatTimeoutMs int `json:"heartbeat_timeout_ms,omitempty"`
	// GoesOn: a *StepError of "work" (failed for good) does not end the
	// run; the handler goes on as if "work" had succeeded.
	GoesOn bool `json:"goes_on,omitempty"`
	// LastNapMs, when set, is a Sleep("last-nap") of that many
	// milliseconds (zero or negative too) after "done", the run's last move.
	LastNapMs *int `json:"last_nap_ms,omitempty"`
	// DoneFail: "done" fails this many times, then succeeds.
	DoneFail int `json:"done_fail,omitempty"`
	// ErrorPad lengthens the message of each failure of "work", and of
	// HandlerFails, by that many bytes ("x").
	ErrorPad int `json:"error_pad,omitempty"`
	// HandlerFails: after "work", the handler fails with "handler failed"
	// (and ErrorPad's bytes); FailsAfterWait: after the wait (or the sleep),
	// with "handler failed after its wait".
	HandlerFails   bool `json:"handler_fails,omitempty"`
	FailsAfterWait bool `json:"fails_after_wait,omitempty"`
	// NowInputs: the payload "work" and "done" record is Flow.Now as read
	// just before each (RFC 3339), instead of the wait's payload.
	NowInputs bool `json:"now_inputs,omitempty"`
}

// unstorable is text Postgres cannot store (a NUL, bytes that are not
// UTF-8), as an os error's file name may hold; storedAs is how a run's
// LastError reads it.
const unstorable, storedAs = " a\x00b \xff\xfe", " a\ufffdb \ufffd"

// workIn is the input of the work activity.
type workIn struct {
	Block       bool   `json:"block,omitempty"`
	Fail        int    `json:"fail,omitempty"`
	Unstorable  bool   `json:"unstorable,omitempty"`   // each failure's message ends with unstorable
	Pad         int    `json:"pad,omitempty"`          // each failure's message is that many bytes longer
	BadProgress bool   `json:"bad_progress,omitempty"` // heartbeats NaN, which JSON cannot encode
	Payload     string `json:"payload,omitempty"`
}

var (
	work    = port.DeclareActivity[workIn, struct{}]("porttest.work")
	unbound = "porttest.never_bound"
)

func (p program) timeout() time.Duration {
	if p.TimeoutMs == 0 {
		return time.Hour
	}
	return time.Duration(p.TimeoutMs) * time.Millisecond
}

func (p program) retry() port.RetryPolicy {
	r := port.RetryPolicy{MaxAttempts: p.MaxAttempts, InitialInterval: time.Duration(p.BackoffMs) * time.Millisecond,
		MaxInterval: time.Hour, BackoffCoefficient: 1}
	if r.MaxAttempts == 0 {
		r.MaxAttempts = 3
	}
	if r.InitialInterval == 0 {
		r.InitialInterval = 50 * time.Millisecond
	}
	return r
}

// programResult is what a run of kind returns when it succeeds: its own id
// (so a result read back is this run's) and the payload its wait received.
type programResult struct {
	Run     port.RunID `json:"run"`
	Payload string     `json:"payload"`
}

func handle(f port.Flow, p program) (programResult, error) {
	if p.Unbound {
		return programResult{}, f.Step("unbound", unbound, p, nil)
	}
	if now := f.Now(); p.NotBeforeMs > 0 && now.UnixMilli() < p.NotBeforeMs {
		return programResult{}, fmt.Errorf("Flow.Now read %s before the execution's first step, before %s",
			now.UTC().Format(time.RFC3339Nano), time.UnixMilli(p.NotBeforeMs).UTC().Format(time.RFC3339Nano))
	}
	if p.Continued {
		var again string
		if p.WaitAgain {
			if _, err := f.WaitSignal("again", port.Topic(p.Topic), p.timeout(), &again); err != nil {
				return programResult{}, err
			}
		}
		return programResult{Run: f.RunID(), Payload: again}, nil
	}
	// No heartbeat timeout, and the blocked body never heartbeats: an
	// engine hands it a cancel or a stop through its context all the same
	// (the spec's Cancel), as a body blocked in a call that takes a
	// context would need.
	opts := []port.StepOption{port.WithRetry(p.retry())}
	workOpts := slices.Clip(opts)
	if p.StepTimeoutMs > 0 {
		workOpts = append(workOpts, port.WithTimeout(time.Duration(p.StepTimeoutMs)*time.Millisecond))
	}
	if p.HeartbeatTimeoutMs > 0 {
		workOpts = append(workOpts, port.WithHeartbeatTimeout(time.Duration(p.HeartbeatTimeoutMs)*time.Millisecond))
	}
	now := func() string {
		if !p.NowInputs {
			return ""
		}
		return f.Now().UTC().Format(time.RFC3339Nano)
	}
	if _, err := work.Run(f, "work", workIn{Block: p.Block, Fail: p.Fail, Unstorable: p.Unstorable, BadProgress: p.BadProgress, Payload: now(), Pad: p.ErrorPad}, workOpts...); err != nil {
		var se *port.StepError
		if !p.GoesOn || !errors.As(err, &se) {
			return programResult{}, err
		}
	}
	if p.GiveUp {
		return programResult{}, fmt.Errorf("gave up: %w", port.ErrCanceled)
	}
	if p.HandlerFails {
		return programResult{}, errors.New("handler failed" + strings.Repeat("x", p.ErrorPad))
	}
	if p.HandlerUnstorable {
		return programResult{}, errors.New("handler failed" + unstorable)
	}
	var payload string
	if p.Topic != "" {
		if _, err := f.WaitSignal("wait", port.Topic(p.Topic), p.timeout(), &payload); err != nil {
			return programResult{}, err
		}
		if p.SecondWait || p.MidOnly {
			if _, err := work.Run(f, "mid", workIn{Block: true}, opts...); err != nil {
				return programResult{}, err
			}
		}
		if p.SecondWait {
			if _, err := f.WaitSignal("wait2", port.Topic(p.Topic), p.timeout(), nil); err != nil {
				return programResult{}, err
			}
		}
	}
	if p.SleepMs > 0 {
		if err := f.Sleep("nap", time.Duration(p.SleepMs)*time.Millisecond); err != nil {
			return programResult{}, err
		}
	}
	if p.FailsAfterWait {
		return programResult{}, errors.New("handler failed after its wait")
	}
	done := workIn{Payload: payload, Fail: p.DoneFail}
	if p.NowInputs {
		done.Payload = now()
	}
	if _, err := work.Run(f, "done", done, opts...); err != nil {
		return programResult{}, err
	}
	if p.LastNapMs != nil {
		if err := f.Sleep("last-nap", time.Duration(*p.LastNapMs)*time.Millisecond); err != nil {
			return programResult{}, err
		}
	}
	if p.ContinueOnce {
		next := program{Continued: true, NotBeforeMs: f.Now().UnixMilli()}
		if p.WaitAgain {
			next.WaitAgain, next.Topic, next.TimeoutMs = true, p.Topic, p.TimeoutMs
		}
		return programResult{}, port.ContinueAsNew(next)
	}
	return programResult{Run: f.RunID(), Payload: payload}, nil
}

// bodies is the in-memory side of the work activity: the gates the test
// releases and the cause each blocked body saw when its context ended.
type bodies struct {
	pool   *pgxpool.Pool
	mu     sync.Mutex
	gates  map[port.RunID]chan struct{}
	causes map[port.RunID]error
}

func (b *bodies) gate(id port.RunID) chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	g, ok := b.gates[id]
	if !ok {
		g = make(chan struct{})
		b.gates[id] = g
	}
	return g
}

// release lets every body of run id that blocks (or will) go on.
func (b *bodies) release(id port.RunID) {
	g := b.gate(id)
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case <-g:
	default:
		close(g)
	}
}

func (b *bodies) releaseAll() {
	b.mu.Lock()
	ids := make([]port.RunID, 0, len(b.gates))
	for id := range b.gates {
		ids = append(ids, id)
	}
	b.mu.Unlock()
	for _, id := range ids {
		b.release(id)
	}
}

func (b *bodies) cause(id port.RunID) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.causes[id]
}

// run is the work activity's body: it records its start, then blocks or
// fails as asked, and records that it finished.
func (b *bodies) run(ctx context.Context, in workIn) (struct{}, error) {
	info, ok := port.StepInfoFrom(ctx)
	if !ok {
		return struct{}{}, fmt.Errorf("porttest: no step info in the activity context")
	}
	// A blocking body takes its gate before it records its start: a test
	// that sees the start and releases every gate then releases this one.
	// Taken after, a release that came in between missed it, and the body
	// blocked until its step timed out.
	var gate chan struct{}
	if in.Block {
		gate = b.gate(info.RunID)
	}
	var execID int64
	if err := b.pool.QueryRow(ctx, `INSERT INTO porttest.execution (run_id, step, attempt, payload) VALUES ($1, $2, $3, $4) RETURNING id`,
		string(info.RunID), info.Step, info.Attempt, in.Payload).Scan(&execID); err != nil {
		return struct{}{}, fmt.Errorf("record execution: %w", err)
	}
	var n int
	if err := b.pool.QueryRow(ctx, `SELECT count(*) FROM porttest.execution WHERE run_id = $1 AND step = $2`,
		string(info.RunID), info.Step).Scan(&n); err != nil {
		return struct{}{}, fmt.Errorf("count executions: %w", err)
	}
	if n <= in.Fail {
		if in.Unstorable {
			return struct{}{}, fmt.Errorf("attempt %d failed%s", n, unstorable)
		}
		return struct{}{}, fmt.Errorf("attempt %d failed%s", n, strings.Repeat("x", in.Pad))
	}
	if in.BadProgress {
		if err := port.Heartbeat(ctx, math.NaN()); err != nil {
			return struct{}{}, err
		}
	}
	if in.Block {
		select {
		case <-gate:
		case <-ctx.Done():
			b.mu.Lock()
			b.causes[info.RunID] = context.Cause(ctx)
			b.mu.Unlock()
			return struct{}{}, port.StopReason(ctx)
		}
	}
	// The result must commit even if the step's context ends now: finished
	// is what the step did, written outside its context.
	if _, err := b.pool.Exec(context.WithoutCancel(ctx), `UPDATE porttest.execution SET finished = true WHERE id = $1`, execID); err != nil {
		return struct{}{}, fmt.Errorf("record finish: %w", err)
	}
	return struct{}{}, nil
}

// registry is the suite's kind and activity over b.
func registry(b *bodies) (*port.Registry, error) {
	reg := port.NewRegistry()
	if err := reg.RegisterActivity(port.Bind(work, b.run)); err != nil {
		return nil, err
	}
	err := reg.Register(port.Definition{Kind: kind, Version: 1, StepTimeout: time.Minute,
		Retry:   port.RetryPolicy{MaxAttempts: 3, InitialInterval: 50 * time.Millisecond, MaxInterval: time.Second},
		Handler: port.HandleResult(handle)})
	return reg, err
}
