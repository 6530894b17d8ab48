// Package testkinds holds the task kinds and activities the lease engine's
// tests run, both in-process and in the testworker subprocess. Every
// activity records what it did in lease_test_effect, a side table the tests
// create (EffectTableSQL), so that the tests assert on rows, not on the
// engine's word.
package testkinds

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskport/taskport/port"
)

// EffectTableSQL creates the side table: one row per (run, step), counting
// executions. token is the fencing token of the latest attempt that began
// (ordered by epoch), done_by the token whose fenced commit landed.
const EffectTableSQL = `
CREATE TABLE IF NOT EXISTS lease_test_effect (
    run_id      uuid    NOT NULL,
    step        text    NOT NULL,
    executions  int     NOT NULL DEFAULT 1,
    epoch       bigint  NOT NULL DEFAULT 0,
    token       text    NOT NULL DEFAULT '',
    done_by     text    NOT NULL DEFAULT '',
    note        text    NOT NULL DEFAULT '',
    PRIMARY KEY (run_id, step)
)`

// Kinds.
const (
	Three     port.Kind = "test.three"
	Slow      port.Kind = "test.slow"
	Wait      port.Kind = "test.wait"
	Fail      port.Kind = "test.fail"
	Cancel    port.Kind = "test.cancel"
	Versioned port.Kind = "test.versioned"
	Continue  port.Kind = "test.continue"
)

// Activity declarations, as a workflows package would write them.
var (
	effectAct = port.DeclareActivity[StepIn, int]("test.effect")
	slowAct   = port.DeclareActivity[SlowIn, string]("test.slow")
	failAct   = port.DeclareActivity[FailIn, int]("test.fail")
	longAct   = port.DeclareActivity[StepIn, string]("test.long")
)

// StepIn names the step an activity records.
type StepIn struct {
	Step string `json:"step"`
	Note string `json:"note,omitempty"`
}

// SlowIn makes test.slow run for Millis, heartbeating.
type SlowIn struct {
	Step   string `json:"step"`
	Millis int    `json:"millis"`
}

// FailIn makes test.fail fail, retryably or not.
type FailIn struct {
	Step         string `json:"step"`
	NonRetryable bool   `json:"non_retryable"`
}

// Empty is the input of test.three and test.cancel.
type Empty struct{}

// SlowInput is the input of test.slow.
type SlowInput struct {
	Millis int `json:"millis"`
}

// WaitInput is the input of test.wait.
type WaitInput struct {
	Topic         string `json:"topic"`
	TimeoutMillis int    `json:"timeout_millis"`
	SleepMillis   int    `json:"sleep_millis"`
}

// ContinueInput is the input of test.continue: it continues as new until
// Generation reaches Until.
type ContinueInput struct {
	Generation int `json:"generation"`
	Until      int `json:"until"`
}

// FailInput is the input of test.fail.
type FailInput struct {
	NonRetryable bool `json:"non_retryable"`
}

// Retry is short so that tests of retries finish quickly; three attempts
// like the ADR's file kinds.
var Retry = port.RetryPolicy{MaxAttempts: 3, InitialInterval: 20 * time.Millisecond, MaxInterval: 100 * time.Millisecond, BackoffCoefficient: 2}

// Activities are the activity bodies; they write to lease_test_effect.
type Activities struct{ Pool *pgxpool.Pool }

func info(ctx context.Context) (port.StepInfo, error) {
	si, ok := port.StepInfoFrom(ctx)
	if !ok {
		return si, errors.New("not in an activity context")
	}
	return si, nil
}

// Effect counts one execution of the step.
func (a Activities) Effect(ctx context.Context, in StepIn) (int, error) {
	si, err := info(ctx)
	if err != nil {
		return 0, err
	}
	var n int
	err = a.Pool.QueryRow(ctx, `
INSERT INTO lease_test_effect (run_id, step, note) VALUES ($1, $2, $3)
ON CONFLICT (run_id, step) DO UPDATE SET executions = lease_test_effect.executions + 1, note = EXCLUDED.note
RETURNING executions`, si.RunID, in.Step, in.Note).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("record effect %s: %w", in.Step, err)
	}
	return n, nil
}

// Slow begins a ledger attempt with its fencing token (refused if a newer
// epoch began), heartbeats for Millis, then commits only if its token is
// still the recorded one: a stale attempt gets port.ErrFenced.
func (a Activities) Slow(ctx context.Context, in SlowIn) (string, error) {
	si, err := info(ctx)
	if err != nil {
		return "", err
	}
	tok := si.Token.String()
	tag, err := a.Pool.Exec(ctx, `
INSERT INTO lease_test_effect (run_id, step, epoch, token) VALUES ($1, $2, $3, $4)
ON CONFLICT (run_id, step) DO UPDATE SET executions = lease_test_effect.executions + 1,
  epoch = EXCLUDED.epoch, token = EXCLUDED.token
WHERE lease_test_effect.epoch < EXCLUDED.epoch`, si.RunID, in.Step, si.Token.Epoch, tok)
	if err != nil {
		return "", fmt.Errorf("begin %s: %w", in.Step, err)
	}
	if tag.RowsAffected() == 0 {
		return "", port.NonRetryable(fmt.Errorf("begin %s with %s: %w", in.Step, tok, port.ErrFenced))
	}
	deadline := time.Now().Add(time.Duration(in.Millis) * time.Millisecond)
	for time.Now().Before(deadline) {
		if err := port.Heartbeat(ctx, map[string]string{"step": in.Step}); err != nil {
			return "", err
		}
		select {
		case <-ctx.Done():
			return "", port.StopReason(ctx)
		case <-time.After(20 * time.Millisecond):
		}
	}
	// The commit deliberately ignores ctx: the point is to show that the
	// ledger, not the context, stops a stale attempt.
	tag, err = a.Pool.Exec(context.WithoutCancel(ctx), `
UPDATE lease_test_effect SET done_by = $3 WHERE run_id = $1 AND step = $2 AND token = $3`, si.RunID, in.Step, tok)
	if err != nil {
		return "", fmt.Errorf("commit %s: %w", in.Step, err)
	}
	if tag.RowsAffected() == 0 {
		return "", fmt.Errorf("commit %s with %s: %w", in.Step, tok, port.ErrFenced)
	}
	return tok, nil
}

// Fail counts an execution and fails.
func (a Activities) Fail(ctx context.Context, in FailIn) (int, error) {
	n, err := a.Effect(ctx, StepIn{Step: in.Step})
	if err != nil {
		return 0, err
	}
	err = fmt.Errorf("attempt %d of %s failed on purpose", n, in.Step)
	if in.NonRetryable {
		return 0, port.NonRetryable(err)
	}
	return 0, err
}

// Long heartbeats until its context ends, then records why in note.
func (a Activities) Long(ctx context.Context, in StepIn) (string, error) {
	if _, err := a.Effect(ctx, StepIn{Step: in.Step, Note: "started"}); err != nil {
		return "", err
	}
	for {
		if err := port.Heartbeat(ctx, nil); err != nil {
			why := "other"
			if port.Canceled(ctx) {
				why = "saw cancel"
			}
			if _, rerr := a.Effect(context.WithoutCancel(ctx), StepIn{Step: in.Step + ".stop", Note: why}); rerr != nil {
				return "", rerr
			}
			return "", err
		}
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Register adds every test kind (Versioned at the given versions) and
// activity to reg.
func Register(reg *port.Registry, pool *pgxpool.Pool, versioned ...int) error {
	a := Activities{Pool: pool}
	if err := reg.RegisterActivity(port.Bind(effectAct, a.Effect), port.Bind(slowAct, a.Slow),
		port.Bind(failAct, a.Fail), port.Bind(longAct, a.Long)); err != nil {
		return fmt.Errorf("register test activities: %w", err)
	}
	defs := []port.Definition{
		{Kind: Three, Version: 1, Retry: Retry, Handler: port.Handle(threeSteps)},
		{Kind: Slow, Version: 1, Retry: Retry, StepTimeout: time.Minute, Handler: port.Handle(slow)},
		{Kind: Wait, Version: 1, Retry: Retry, Handler: port.Handle(wait)},
		{Kind: Fail, Version: 1, Retry: Retry, Handler: port.Handle(fail)},
		{Kind: Cancel, Version: 1, Retry: Retry, Handler: port.Handle(cancel)},
		{Kind: Continue, Version: 1, Retry: Retry, Handler: port.Handle(continueAsNew)},
	}
	for _, v := range versioned {
		defs = append(defs, port.Definition{Kind: Versioned, Version: v, Retry: Retry, Handler: port.Handle(versionedHandler(v))})
	}
	if err := reg.Register(defs...); err != nil {
		return fmt.Errorf("register test kinds: %w", err)
	}
	return nil
}

func threeSteps(f port.Flow, _ Empty) error {
	for _, s := range []string{"s1", "s2", "s3"} {
		if _, err := effectAct.Run(f, s, StepIn{Step: s}); err != nil {
			return err
		}
	}
	return nil
}

func slow(f port.Flow, in SlowInput) error {
	if _, err := effectAct.Run(f, "s1", StepIn{Step: "s1"}); err != nil {
		return err
	}
	if _, err := slowAct.Run(f, "s2", SlowIn{Step: "s2", Millis: in.Millis}); err != nil {
		return err
	}
	_, err := effectAct.Run(f, "s3", StepIn{Step: "s3"})
	return err
}

func wait(f port.Flow, in WaitInput) error {
	if _, err := effectAct.Run(f, "before", StepIn{Step: "before"}); err != nil {
		return err
	}
	if in.SleepMillis > 0 {
		if err := f.Sleep("nap", time.Duration(in.SleepMillis)*time.Millisecond); err != nil {
			return err
		}
	}
	var payload string
	got, err := f.WaitSignal("wait", port.Topic(in.Topic), time.Duration(in.TimeoutMillis)*time.Millisecond, &payload)
	if err != nil {
		return err
	}
	note := "timeout"
	if got {
		note = "signal:" + payload
	}
	_, err = effectAct.Run(f, "after", StepIn{Step: "after", Note: note})
	return err
}

func fail(f port.Flow, in FailInput) error {
	_, err := failAct.Run(f, "boom", FailIn{Step: "boom", NonRetryable: in.NonRetryable})
	var se *port.StepError
	if errors.As(err, &se) {
		// A handler may react to a step that failed for good before
		// returning the error, e.g. by opening a pending decision.
		if _, rerr := effectAct.Run(f, "decision", StepIn{Step: "decision", Note: se.Message}); rerr != nil {
			return rerr
		}
	}
	return err
}

func cancel(f port.Flow, _ Empty) error {
	if _, err := longAct.Run(f, "long", StepIn{Step: "long"}); err != nil {
		return err
	}
	_, err := effectAct.Run(f, "after", StepIn{Step: "after"})
	return err
}

func versionedHandler(v int) func(port.Flow, Empty) error {
	return func(f port.Flow, _ Empty) error {
		_, err := effectAct.Run(f, fmt.Sprintf("v%d", v), StepIn{Step: fmt.Sprintf("v%d", v)})
		return err
	}
}

func continueAsNew(f port.Flow, in ContinueInput) error {
	note := fmt.Sprintf("generation %d", in.Generation)
	if _, err := effectAct.Run(f, "gen", StepIn{Step: "gen", Note: note}); err != nil {
		return err
	}
	if in.Generation < in.Until {
		return port.ContinueAsNew(ContinueInput{Generation: in.Generation + 1, Until: in.Until})
	}
	return nil
}
