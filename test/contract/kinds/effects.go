// Package kinds is the one set of test kinds: the contract suite's, the
// worker subprocess's (test/contract/worker) and the adapters' mechanics
// tests all register these. Every activity records what it did as business
// rows in the scenario's own database, so that tests assert on rows, not on
// an engine's word.
//
// Two families:
//   - the effect kinds (this file, "ct.*"): steps count their executions in
//     contract_effect (Schema), waits check a gate row first (ADR 2.2);
//   - the ledger kinds (ledger.go, "ft.*"): every step is a fenced operation
//     of the real operation ledger, for the process-fault scenarios.
package kinds

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskport/taskport/port"
)

// Schema is the effect kinds' side tables. contract_effect counts the
// executions of each (run, label), keeps the note of the latest one and the
// fencing-token epoch of every one, in order.
const Schema = `
CREATE TABLE contract_effect (
    run_id     text        NOT NULL,
    label      text        NOT NULL,
    executions int         NOT NULL DEFAULT 1,
    note       text        NOT NULL DEFAULT '',
    epochs     bigint[]    NOT NULL,
    first_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (run_id, label)
);
CREATE TABLE contract_gate (key text PRIMARY KEY);
CREATE TABLE contract_decision (run_id text PRIMARY KEY, reason text NOT NULL);`

// The effect kinds.
const (
	// Three runs steps s1, s2, s3 and returns their names.
	Three port.Kind = "ct.three"
	// Wait checks its gate, waits for a signal (or the timeout) while it is
	// closed, checks again, then runs "after" with what the last wait got.
	Wait port.Kind = "ct.wait"
	// Hold runs step "hold" until its gate opens (or Timeout passes), then
	// "after".
	Hold port.Kind = "ct.hold"
	// FailKind's step fails on every attempt; NonRetry's fails once, for
	// good. Both open a decision when the step fails for good.
	FailKind port.Kind = "ct.fail"
	NonRetry port.Kind = "ct.nonretry"
	// Memo: step a, a wait, step b.
	Memo port.Kind = "ct.memo"
	// Renamed: step "first" (or "renamed-first"), a wait, step "second".
	Renamed port.Kind = "ct.renamed"
	// Reused runs two steps under one name.
	Reused port.Kind = "ct.reused"
	// Negative waits with a negative timeout.
	Negative port.Kind = "ct.negative"
	// Versioned v1: v1-a, a wait, v1-b; v2: v2-a, v2-b.
	Versioned port.Kind = "ct.versioned"
	// Continue continues as new until its generation reaches Until.
	Continue port.Kind = "ct.continue"
	// Silent's step never heartbeats, under a short heartbeat timeout.
	Silent port.Kind = "ct.silent"
	// Marker records a GetVersion marker (see MarkerKind).
	Marker port.Kind = "ct.marker"
	// Twice waits on its topic, runs "middle" (held at its gate), waits on
	// the topic again, then runs "after" noting both payloads.
	Twice port.Kind = "ct.twice"
)

// Activity declarations, as a workflows/ package would declare them.
var (
	Effect   = port.DeclareActivity[EffectIn, int]("ct.effect")
	Gate     = port.DeclareActivity[string, bool]("ct.gate")
	HoldStep = port.DeclareActivity[HoldIn, string]("ct.hold")
	Fail     = port.DeclareActivity[string, int]("ct.fail")
	Decision = port.DeclareActivity[string, bool]("ct.decision")
	Quiet    = port.DeclareActivity[string, int]("ct.silent")
)

// EffectIn names the label an Effect step records, and its note.
type EffectIn struct {
	Label string `json:"label"`
	Note  string `json:"note,omitempty"`
}

// HoldIn is the hold step's gate and, when positive, the longest it holds.
type HoldIn struct {
	Gate string   `json:"gate"`
	For  Duration `json:"for,omitempty"`
	// Quiet: the step never heartbeats; it only watches its context.
	Quiet bool `json:"quiet,omitempty"`
}

// WaitIn is the input of Wait, Hold, Memo, Renamed, Negative and Versioned.
type WaitIn struct {
	Gate    string     `json:"gate"`
	Topic   port.Topic `json:"topic"`
	Timeout Duration   `json:"timeout"`
	// Nap, when positive, is a durable Sleep before Wait's first check.
	Nap Duration `json:"nap,omitempty"`
	// Quiet makes Hold's step a quiet one (HoldIn.Quiet), with no heartbeat
	// timeout.
	Quiet bool `json:"quiet,omitempty"`
}

// TagIn is the input of the kinds that need none; Tag tells runs apart.
type TagIn struct {
	Tag string `json:"tag"`
}

// ContinueIn is the input of Continue.
type ContinueIn struct {
	Generation int `json:"generation"`
	Until      int `json:"until"`
}

// Duration encodes as a Go duration string in inputs.
type Duration time.Duration

// MarshalText writes d as a Go duration string.
func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

// UnmarshalText reads a Go duration string.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	*d = Duration(v)
	return err
}

// FastRetry keeps retry scenarios short: 3 attempts, 50ms growing to 200ms.
var FastRetry = port.RetryPolicy{MaxAttempts: 3, InitialInterval: 50 * time.Millisecond, MaxInterval: 200 * time.Millisecond, BackoffCoefficient: 2}

// Bodies are the effect kinds' activity bodies; every one writes or reads
// business rows keyed by the run that executes it.
type Bodies struct{ Pool *pgxpool.Pool }

// RunOf is the run executing the step of ctx.
func RunOf(ctx context.Context) (port.RunID, error) {
	info, ok := port.StepInfoFrom(ctx)
	if !ok {
		return "", errors.New("not running as a step")
	}
	return info.RunID, nil
}

// Record counts one execution of label by the current step's run, with its
// note and its fencing-token epoch.
func (b Bodies) Record(ctx context.Context, label, note string) (int, error) {
	info, ok := port.StepInfoFrom(ctx)
	if !ok {
		return 0, errors.New("not running as a step")
	}
	var n int
	err := b.Pool.QueryRow(ctx, `
INSERT INTO contract_effect (run_id, label, note, epochs) VALUES ($1, $2, $3, ARRAY[$4::bigint])
ON CONFLICT (run_id, label) DO UPDATE SET executions = contract_effect.executions + 1,
    note = EXCLUDED.note, epochs = contract_effect.epochs || EXCLUDED.epochs
RETURNING executions`, string(info.RunID), label, note, info.Token.Epoch).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("record %s: %w", label, err)
	}
	return n, nil
}

// Effect records one execution of in.Label.
func (b Bodies) Effect(ctx context.Context, in EffectIn) (int, error) {
	return b.Record(ctx, in.Label, in.Note)
}

// Gate reports whether the gate key is open.
func (b Bodies) Gate(ctx context.Context, key string) (bool, error) {
	var open bool
	err := b.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM contract_gate WHERE key = $1)`, key).Scan(&open)
	return open, err
}

// Hold records that it started, then heartbeats (a quiet one only reads its
// context) until its gate opens (or in.For passes) and records
// "hold:finished"; when its heartbeat reports a stop it records
// "hold:stopped", with the heartbeat's error as the note, and returns.
func (b Bodies) Hold(ctx context.Context, in HoldIn) (string, error) {
	if _, err := b.Record(ctx, "hold:started", ""); err != nil {
		return "", err
	}
	// What the step records after a stop survives because it writes with a
	// live context.
	live := context.WithoutCancel(ctx)
	var until <-chan time.Time
	if in.For > 0 {
		until = time.After(time.Duration(in.For))
	}
	beat := port.Heartbeat
	if in.Quiet {
		beat = func(ctx context.Context, _ any) error { return port.StopReason(ctx) }
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		open, err := b.Gate(live, in.Gate)
		if err != nil {
			return "", err
		}
		if open {
			_, err := b.Record(live, "hold:finished", "gate")
			return "finished", err
		}
		if err := beat(ctx, "holding"); err != nil {
			if _, rerr := b.Record(live, "hold:stopped", err.Error()); rerr != nil {
				return "", rerr
			}
			return "", fmt.Errorf("hold stopped: %w", err)
		}
		select {
		case <-until:
			_, err := b.Record(live, "hold:finished", "time")
			return "finished", err
		case <-tick.C:
		}
	}
}

// Fail counts an execution and fails: for good when mode is
// "non-retryable".
func (b Bodies) Fail(ctx context.Context, mode string) (int, error) {
	n, err := b.Record(ctx, "fail:"+mode, "")
	if err != nil {
		return 0, err
	}
	if mode == "non-retryable" {
		return n, port.NonRetryable(errors.New("input can never succeed"))
	}
	return n, fmt.Errorf("attempt %d failed", n)
}

// Decision opens the run's decision with reason; twice is a no-op.
func (b Bodies) Decision(ctx context.Context, reason string) (bool, error) {
	run, err := RunOf(ctx)
	if err != nil {
		return false, err
	}
	_, err = b.Pool.Exec(ctx, `INSERT INTO contract_decision (run_id, reason) VALUES ($1, $2) ON CONFLICT DO NOTHING`, string(run), reason)
	return err == nil, err
}

// Quiet counts an execution, then works without ever heartbeating until
// its context ends.
func (b Bodies) Quiet(ctx context.Context, label string) (int, error) {
	if _, err := b.Record(ctx, label, ""); err != nil {
		return 0, err
	}
	<-ctx.Done()
	return 0, context.Cause(ctx)
}

// Effects returns the executions of each label of run id.
func Effects(ctx context.Context, pool *pgxpool.Pool, id port.RunID) (map[string]int, error) {
	rows, err := pool.Query(ctx, `SELECT label, executions FROM contract_effect WHERE run_id = $1`, string(id))
	if err != nil {
		return nil, fmt.Errorf("read effects of %s: %w", id, err)
	}
	out := map[string]int{}
	var label string
	var n int
	_, err = pgx.ForEachRow(rows, []any{&label, &n}, func() error { out[label] = n; return nil })
	if err != nil {
		return nil, fmt.Errorf("read effects of %s: %w", id, err)
	}
	return out, nil
}

// Notes returns the note of the latest execution of each label of run id.
func Notes(ctx context.Context, pool *pgxpool.Pool, id port.RunID) (map[string]string, error) {
	rows, err := pool.Query(ctx, `SELECT label, note FROM contract_effect WHERE run_id = $1`, string(id))
	if err != nil {
		return nil, fmt.Errorf("read notes of %s: %w", id, err)
	}
	out := map[string]string{}
	var label, note string
	_, err = pgx.ForEachRow(rows, []any{&label, &note}, func() error { out[label] = note; return nil })
	if err != nil {
		return nil, fmt.Errorf("read notes of %s: %w", id, err)
	}
	return out, nil
}

// OpenEffectGate opens the effect kinds' gate key.
func OpenEffectGate(ctx context.Context, pool *pgxpool.Pool, key string) error {
	if _, err := pool.Exec(ctx, `INSERT INTO contract_gate (key) VALUES ($1) ON CONFLICT DO NOTHING`, key); err != nil {
		return fmt.Errorf("open gate %s: %w", key, err)
	}
	return nil
}

// SilentHeartbeat is the heartbeat timeout of Silent's step.
const SilentHeartbeat = time.Second

// Definitions returns the effect kinds. renamed selects the handler of
// Renamed: the original, or one whose first step has another name (a change
// that must fail loudly on replay).
func Definitions(renamed bool) []port.Definition {
	net := port.RetryPolicy{MaxAttempts: 5, InitialInterval: 50 * time.Millisecond, MaxInterval: 200 * time.Millisecond}
	return []port.Definition{
		{Kind: Three, Version: 1, Retry: net, Handler: port.HandleResult(three)},
		{Kind: Wait, Version: 1, Retry: net, Handler: port.Handle(wait)},
		{Kind: Hold, Version: 1, Retry: port.RetryPolicy{MaxAttempts: 1}, Handler: port.Handle(hold)},
		// A short step timeout bounds how long a step lost in transit to a
		// stopping worker stays charged-but-unrun (see contract.Features).
		{Kind: FailKind, Version: 1, Retry: FastRetry, StepTimeout: 5 * time.Second, Handler: failing("retryable")},
		{Kind: NonRetry, Version: 1, Retry: net, Handler: failing("non-retryable")},
		{Kind: Memo, Version: 1, Retry: net, Handler: memo("")},
		{Kind: Renamed, Version: 1, Retry: net, Handler: renamedHandler(renamed)},
		{Kind: Reused, Version: 1, Retry: net, Handler: port.Handle(reused)},
		{Kind: Negative, Version: 1, Retry: net, Handler: port.Handle(negative)},
		{Kind: Versioned, Version: 1, Retry: net, Handler: memo("v1-")},
		{Kind: Continue, Version: 1, Retry: net, Handler: port.Handle(continueAsNew)},
		// The step timeout ends the silent attempts' bodies on Temporal,
		// which tells a worker of a missed heartbeat only through the
		// heartbeat it never sends.
		{Kind: Silent, Version: 1, Retry: FastRetry, StepTimeout: 5 * time.Second, Handler: port.Handle(silent)},
		{Kind: Twice, Version: 1, Retry: net, Handler: port.Handle(twice)},
	}
}

// VersionTwo is Versioned@v2: no wait, different steps.
func VersionTwo() port.Definition {
	return port.Definition{Kind: Versioned, Version: 2, Retry: FastRetry, Handler: port.Handle(func(f port.Flow, _ WaitIn) error {
		for _, s := range []string{"v2-a", "v2-b"} {
			if _, err := Effect.Run(f, s, EffectIn{Label: s}); err != nil {
				return err
			}
		}
		return nil
	})}
}

// MarkerKind is Marker@v1 built as code that supports the GetVersion
// values [lo, hi] of change "new-step": steps "before" and "after" around a
// wait on the topic of its input, each noting the value it got.
func MarkerKind(lo, hi int) port.Definition {
	return markerKind(func(f port.Flow) string { return fmt.Sprint(f.GetVersion("new-step", lo, hi)) })
}

// UnmarkedKind is Marker@v1 as it was before the change "new-step": the same
// steps and wait, no GetVersion, each step noting "unmarked".
func UnmarkedKind() port.Definition {
	return markerKind(func(port.Flow) string { return "unmarked" })
}

func markerKind(version func(port.Flow) string) port.Definition {
	return port.Definition{Kind: Marker, Version: 1, Retry: FastRetry, Handler: port.Handle(func(f port.Flow, in WaitIn) error {
		v := version(f)
		if _, err := Effect.Run(f, "before", EffectIn{Label: "before", Note: v}); err != nil {
			return err
		}
		if _, err := f.WaitSignal("go", in.Topic, time.Duration(in.Timeout), nil); err != nil {
			return err
		}
		_, err := Effect.Run(f, "after", EffectIn{Label: "after", Note: v})
		return err
	})}
}

// Register adds the effect activities and defs to reg.
func Register(reg *port.Registry, pool *pgxpool.Pool, defs ...port.Definition) error {
	b := Bodies{Pool: pool}
	if err := reg.RegisterActivity(port.Bind(Effect, b.Effect), port.Bind(Gate, b.Gate), port.Bind(HoldStep, b.Hold),
		port.Bind(Fail, b.Fail), port.Bind(Decision, b.Decision), port.Bind(Quiet, b.Quiet)); err != nil {
		return fmt.Errorf("register effect activities: %w", err)
	}
	if err := reg.Register(defs...); err != nil {
		return fmt.Errorf("register effect kinds: %w", err)
	}
	return nil
}

// three returns the names of the steps it ran, its result.
func three(f port.Flow, _ TagIn) ([]string, error) {
	steps := []string{"s1", "s2", "s3"}
	for _, s := range steps {
		if _, err := Effect.Run(f, s, EffectIn{Label: s}); err != nil {
			return nil, err
		}
	}
	return steps, nil
}

// wait is the ADR 2.2 wait: check the business DB, then wait for a signal
// with a timeout; the signal only speeds things up. "after" notes what the
// last wait got: the signal's payload, or "timeout".
func wait(f port.Flow, in WaitIn) error {
	if in.Nap > 0 {
		if err := f.Sleep("nap", time.Duration(in.Nap)); err != nil {
			return err
		}
	}
	got := ""
	for i := 0; ; i++ {
		open, err := Gate.Run(f, fmt.Sprintf("check-%d", i), in.Gate)
		if err != nil {
			return err
		}
		if open {
			break
		}
		var payload json.RawMessage
		ok, err := f.WaitSignal(fmt.Sprintf("wait-%d", i), in.Topic, time.Duration(in.Timeout), &payload)
		if err != nil {
			return err
		}
		got = "timeout"
		if ok {
			got = "signal:" + string(payload)
		}
	}
	_, err := Effect.Run(f, "after", EffectIn{Label: "after", Note: got})
	return err
}

func hold(f port.Flow, in WaitIn) error {
	heartbeat := 30 * time.Second
	if in.Quiet {
		heartbeat = 0
	}
	if _, err := HoldStep.Run(f, "hold", HoldIn{Gate: in.Gate, For: in.Timeout, Quiet: in.Quiet}, port.WithHeartbeatTimeout(heartbeat)); err != nil {
		return err
	}
	_, err := Effect.Run(f, "after", EffectIn{Label: "after"})
	return err
}

// failing's step fails; when it has failed for good the handler opens a
// decision with the *port.StepError's text, as the business kinds do.
func failing(mode string) port.Handler {
	return port.Handle(func(f port.Flow, _ TagIn) error {
		_, err := Fail.Run(f, "fail", mode)
		var se *port.StepError
		if errors.As(err, &se) {
			if _, derr := Decision.Run(f, "open-decision", se.Error()); derr != nil {
				return derr
			}
		}
		return err
	})
}

func memo(prefix string) port.Handler {
	return port.Handle(func(f port.Flow, in WaitIn) error {
		if _, err := Effect.Run(f, prefix+"a", EffectIn{Label: prefix + "a"}); err != nil {
			return err
		}
		if _, err := f.WaitSignal("wait", in.Topic, time.Duration(in.Timeout), nil); err != nil {
			return err
		}
		_, err := Effect.Run(f, prefix+"b", EffectIn{Label: prefix + "b"})
		return err
	})
}

func renamedHandler(renamed bool) port.Handler {
	first := "first"
	if renamed {
		first = "renamed-first"
	}
	return port.Handle(func(f port.Flow, in WaitIn) error {
		if _, err := Effect.Run(f, first, EffectIn{Label: first}); err != nil {
			return err
		}
		if _, err := f.WaitSignal("wait", in.Topic, time.Duration(in.Timeout), nil); err != nil {
			return err
		}
		_, err := Effect.Run(f, "second", EffectIn{Label: "second"})
		return err
	})
}

func reused(f port.Flow, _ TagIn) error {
	if _, err := Effect.Run(f, "same", EffectIn{Label: "same-1"}); err != nil {
		return err
	}
	_, err := Effect.Run(f, "same", EffectIn{Label: "same-2"})
	return err
}

func negative(f port.Flow, in WaitIn) error {
	_, err := f.WaitSignal("wait", in.Topic, -time.Second, nil)
	return err
}

func continueAsNew(f port.Flow, in ContinueIn) error {
	note := fmt.Sprintf("generation %d", in.Generation)
	if _, err := Effect.Run(f, "gen", EffectIn{Label: "gen", Note: note}); err != nil {
		return err
	}
	if in.Generation < in.Until {
		return port.ContinueAsNew(ContinueIn{Generation: in.Generation + 1, Until: in.Until})
	}
	return nil
}

func silent(f port.Flow, _ TagIn) error {
	_, err := Quiet.Run(f, "silent", "silent", port.WithHeartbeatTimeout(SilentHeartbeat))
	return err
}

func twice(f port.Flow, in WaitIn) error {
	var got []string
	for i, name := range []string{"first", "second"} {
		if i == 1 {
			if _, err := HoldStep.Run(f, "middle", HoldIn{Gate: in.Gate}, port.WithHeartbeatTimeout(30*time.Second)); err != nil {
				return err
			}
		}
		var payload json.RawMessage
		ok, err := f.WaitSignal(name, in.Topic, time.Duration(in.Timeout), &payload)
		if err != nil {
			return err
		}
		if !ok {
			payload = json.RawMessage("timeout")
		}
		got = append(got, string(payload))
	}
	_, err := Effect.Run(f, "after", EffectIn{Label: "after", Note: strings.Join(got, "+")})
	return err
}
