// Package testkinds holds the task kinds and the ledger activity the
// temporaladapter tests run, in-process and in the test worker subprocess.
// The activity records every attempt in a side table with a fenced commit,
// the way a business ledger does, so tests assert on rows, not on Temporal.
package testkinds

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskport/taskport/port"
)

// Schema creates the side tables; tests run it in their own database.
const Schema = `
CREATE TABLE tp_test_ledger (
    op      text PRIMARY KEY, -- run id / step name
    token   text NOT NULL,
    epoch   bigint NOT NULL,
    begins  int NOT NULL DEFAULT 1,
    done    bool NOT NULL DEFAULT false,
    commits int NOT NULL DEFAULT 0,
    result  text NOT NULL DEFAULT '',
    began   timestamptz NOT NULL DEFAULT now() -- first begin
);
CREATE TABLE tp_test_fenced (op text NOT NULL, token text NOT NULL, at timestamptz NOT NULL DEFAULT now());
CREATE TABLE tp_test_heartbeat_stop (op text NOT NULL, cause text NOT NULL);`

// Names of the kinds and the activity.
const (
	KindSteps     port.Kind = "test.steps"
	KindWait      port.Kind = "test.wait"
	KindVersioned port.Kind = "test.versioned"
)

// Effect is the ledger activity every test step runs.
var Effect = port.DeclareActivity[EffectIn, string]("test.effect")

// EffectIn tunes one step.
type EffectIn struct {
	Value     string `json:"value"`
	Chunks    int    `json:"chunks,omitempty"`   // heartbeating chunks of work
	ChunkMS   int    `json:"chunk_ms,omitempty"` // length of one chunk
	FailTimes int    `json:"fail_times,omitempty"`
	// Stubborn steps keep working after their heartbeat reports a stop and
	// still try to commit: the worst case the ledger fence must catch.
	Stubborn bool `json:"stubborn,omitempty"`
}

// StepsIn is the input of test.steps.
type StepsIn struct {
	Steps int      `json:"steps"`
	Slow  int      `json:"slow"` // 1-based index of the slow step; 0 none
	Step  EffectIn `json:"step"` // options of the slow (or failing) step
	// Attempts, when set, overrides the kind's MaxAttempts for the slow step.
	Attempts int `json:"attempts,omitempty"`
}

// WaitIn is the input of test.wait.
type WaitIn struct {
	Topic     port.Topic `json:"topic"`
	TimeoutMS int        `json:"timeout_ms,omitempty"` // zero: an hour
	Before    EffectIn   `json:"before"`
	// Middle, when it has chunks, is a step between a first and a second
	// wait on the same topic.
	Middle EffectIn `json:"middle"`
}

// Retry is short so tests do not wait for backoff.
var Retry = port.RetryPolicy{MaxAttempts: 3, InitialInterval: 50 * time.Millisecond, MaxInterval: 200 * time.Millisecond, BackoffCoefficient: 2}

// Definitions returns the kinds; versions picks test.versioned's versions
// (1, 2 or both).
func Definitions(versions ...int) []port.Definition {
	defs := []port.Definition{
		{Kind: KindSteps, Version: 1, Retry: Retry, HeartbeatTimeout: 2 * time.Second, StepTimeout: 30 * time.Second, Handler: port.Handle(steps)},
		{Kind: KindWait, Version: 1, Retry: Retry, HeartbeatTimeout: 2 * time.Second, Handler: port.Handle(wait)},
	}
	for _, v := range versions {
		h := port.Handle(versionedV1)
		if v == 2 {
			h = port.Handle(versionedV2)
		}
		defs = append(defs, port.Definition{Kind: KindVersioned, Version: v, Retry: Retry, Handler: h})
	}
	return defs
}

func steps(f port.Flow, in StepsIn) error {
	for i := 1; i <= in.Steps; i++ {
		ein := EffectIn{Value: "s" + strconv.Itoa(i)}
		var opts []port.StepOption
		if i == in.Slow {
			ein = in.Step
			ein.Value = "s" + strconv.Itoa(i)
			if in.Attempts > 0 {
				r := Retry
				r.MaxAttempts = in.Attempts
				opts = append(opts, port.WithRetry(r))
			}
		}
		if _, err := Effect.Run(f, "s"+strconv.Itoa(i), ein, opts...); err != nil {
			return err
		}
	}
	return nil
}

func wait(f port.Flow, in WaitIn) error {
	if _, err := Effect.Run(f, "before", in.Before); err != nil {
		return err
	}
	timeout := time.Hour
	if in.TimeoutMS > 0 {
		timeout = time.Duration(in.TimeoutMS) * time.Millisecond
	}
	var payload string
	got, err := f.WaitSignal("wait", in.Topic, timeout, &payload)
	if err != nil {
		return err
	}
	if !got {
		payload = "timeout"
	}
	if in.Middle.Chunks > 0 {
		if _, err := Effect.Run(f, "middle", in.Middle); err != nil {
			return err
		}
		var second string
		if _, err := f.WaitSignal("wait-again", in.Topic, timeout, &second); err != nil {
			return err
		}
		payload += "+" + second
	}
	_, err = Effect.Run(f, "after", EffectIn{Value: payload})
	return err
}

// versionedV1 waits for a signal between its steps so a test can restart
// the worker while a v1 run is open.
func versionedV1(f port.Flow, in WaitIn) error {
	if _, err := Effect.Run(f, "v1.first", EffectIn{Value: "v1"}); err != nil {
		return err
	}
	if _, err := f.WaitSignal("v1.wait", in.Topic, time.Hour, nil); err != nil {
		return err
	}
	_, err := Effect.Run(f, "v1.second", EffectIn{Value: "v1"})
	return err
}

func versionedV2(f port.Flow, in WaitIn) error {
	_, err := Effect.Run(f, "v2.only", EffectIn{Value: "v2"})
	return err
}

// Ledger is the activity body's dependency.
type Ledger struct{ Pool *pgxpool.Pool }

// Register adds the kinds and the activity to reg.
func Register(reg *port.Registry, pool *pgxpool.Pool, versions ...int) error {
	if err := reg.Register(Definitions(versions...)...); err != nil {
		return err
	}
	return reg.RegisterActivity(port.Bind(Effect, Ledger{Pool: pool}.Effect))
}

// Effect begins the operation with its fencing token, works, and commits
// only while its token is still the recorded one.
func (l Ledger) Effect(ctx context.Context, in EffectIn) (string, error) {
	info, ok := port.StepInfoFrom(ctx)
	if !ok {
		return "", errors.New("test.effect: not in an activity")
	}
	op := string(info.RunID) + "/" + info.Step
	token := info.Token.String()
	var done bool
	var result string
	err := l.Pool.QueryRow(ctx, `
INSERT INTO tp_test_ledger (op, token, epoch) VALUES ($1, $2, $3)
ON CONFLICT (op) DO UPDATE SET token = EXCLUDED.token, epoch = EXCLUDED.epoch, begins = tp_test_ledger.begins + 1
    WHERE tp_test_ledger.epoch <= EXCLUDED.epoch AND NOT tp_test_ledger.done
RETURNING done, result`, op, token, info.Token.Epoch).Scan(&done, &result)
	if errors.Is(err, pgx.ErrNoRows) {
		if err := l.Pool.QueryRow(ctx, `SELECT done, result FROM tp_test_ledger WHERE op = $1`, op).Scan(&done, &result); err != nil {
			return "", fmt.Errorf("test.effect %s: read ledger: %w", op, err)
		}
		if done {
			return result, nil // a previous attempt committed: reuse its result
		}
		return "", port.NonRetryable(fmt.Errorf("test.effect %s: begin: %w", op, port.ErrFenced))
	}
	if err != nil {
		return "", fmt.Errorf("test.effect %s: begin: %w", op, err)
	}
	if info.Attempt <= in.FailTimes {
		return "", fmt.Errorf("test.effect %s: injected failure on attempt %d", op, info.Attempt)
	}
	for i := range in.Chunks {
		if err := port.Heartbeat(ctx, map[string]int{"chunk": i, "of": in.Chunks}); err != nil {
			if _, xerr := l.Pool.Exec(context.WithoutCancel(ctx), `INSERT INTO tp_test_heartbeat_stop (op, cause) VALUES ($1, $2)`, op, err.Error()); xerr != nil {
				return "", fmt.Errorf("test.effect %s: record stop: %w", op, xerr)
			}
			if !in.Stubborn {
				return "", err
			}
		}
		time.Sleep(time.Duration(in.ChunkMS) * time.Millisecond) // the work itself
	}
	// A stubborn stale attempt commits with a context that is already
	// canceled; WithoutCancel lets it reach the fence.
	cctx := context.WithoutCancel(ctx)
	tag, err := l.Pool.Exec(cctx, `UPDATE tp_test_ledger SET done = true, commits = commits + 1, result = $3 WHERE op = $1 AND token = $2 AND NOT done`,
		op, token, in.Value)
	if err != nil {
		return "", fmt.Errorf("test.effect %s: commit: %w", op, err)
	}
	if tag.RowsAffected() == 0 {
		if _, err := l.Pool.Exec(cctx, `INSERT INTO tp_test_fenced (op, token) VALUES ($1, $2)`, op, token); err != nil {
			return "", fmt.Errorf("test.effect %s: record fenced: %w", op, err)
		}
		return "", port.NonRetryable(fmt.Errorf("test.effect %s: commit: %w", op, port.ErrFenced))
	}
	return in.Value, nil
}
