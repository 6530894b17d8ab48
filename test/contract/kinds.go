package contract

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/internal/testkit/pgtest"
	"github.com/taskport/taskport/port"
)

// The suite's side tables: what activities did, recorded as business rows.
const sideTables = `
CREATE TABLE contract_effect (
    run_id     text        NOT NULL,
    label      text        NOT NULL,
    executions int         NOT NULL DEFAULT 1,
    first_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (run_id, label)
);
CREATE TABLE contract_gate (key text PRIMARY KEY);
CREATE TABLE contract_decision (run_id text PRIMARY KEY, reason text NOT NULL);`

func newScenarioDB(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool := pgtest.NewPool(t)
	_, err := pool.Exec(context.Background(), sideTables)
	require.NoError(t, err)
	return pool
}

// Activity declarations, as a workflows/ package would declare them.
var (
	actEffect   = port.DeclareActivity[effectIn, int]("ct.effect")
	actGate     = port.DeclareActivity[string, bool]("ct.gate")
	actHold     = port.DeclareActivity[string, string]("ct.hold")
	actFail     = port.DeclareActivity[string, int]("ct.fail")
	actDecision = port.DeclareActivity[string, bool]("ct.decision")
)

type effectIn struct {
	Label string `json:"label"`
}

// sideEffects are the activity bodies; every one writes or reads business
// rows keyed by the run that executes it.
type sideEffects struct{ pool *pgxpool.Pool }

func runOf(ctx context.Context) (port.RunID, error) {
	info, ok := port.StepInfoFrom(ctx)
	if !ok {
		return "", errors.New("not running as a step")
	}
	return info.RunID, nil
}

// record counts one execution of label by the current run.
func (s sideEffects) record(ctx context.Context, label string) (int, error) {
	run, err := runOf(ctx)
	if err != nil {
		return 0, err
	}
	var n int
	err = s.pool.QueryRow(ctx, `
INSERT INTO contract_effect (run_id, label) VALUES ($1, $2)
ON CONFLICT (run_id, label) DO UPDATE SET executions = contract_effect.executions + 1
RETURNING executions`, string(run), label).Scan(&n)
	return n, err
}

func (s sideEffects) effect(ctx context.Context, in effectIn) (int, error) {
	return s.record(ctx, in.Label)
}

func (s sideEffects) gate(ctx context.Context, key string) (bool, error) {
	var open bool
	err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM contract_gate WHERE key = $1)`, key).Scan(&open)
	return open, err
}

// hold records that it started, then heartbeats until its gate opens or
// the run is canceled; on cancel it records that it stopped itself.
func (s sideEffects) hold(ctx context.Context, gate string) (string, error) {
	if _, err := s.record(ctx, "hold:started"); err != nil {
		return "", err
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		open, err := s.gate(context.WithoutCancel(ctx), gate)
		if err != nil {
			return "", err
		}
		if open {
			_, err := s.record(context.WithoutCancel(ctx), "hold:finished")
			return "finished", err
		}
		if err := port.Heartbeat(ctx, "holding"); err != nil {
			// The step stops itself between chunks of work; what it
			// records survives because it writes with a live context.
			if _, rerr := s.record(context.WithoutCancel(ctx), "hold:stopped"); rerr != nil {
				return "", rerr
			}
			return "", fmt.Errorf("hold stopped: %w", err)
		}
		<-tick.C
	}
}

func (s sideEffects) fail(ctx context.Context, mode string) (int, error) {
	n, err := s.record(ctx, "fail:"+mode)
	if err != nil {
		return 0, err
	}
	if mode == "non-retryable" {
		return n, port.NonRetryable(errors.New("input can never succeed"))
	}
	return n, fmt.Errorf("attempt %d failed", n)
}

func (s sideEffects) decision(ctx context.Context, reason string) (bool, error) {
	run, err := runOf(ctx)
	if err != nil {
		return false, err
	}
	_, err = s.pool.Exec(ctx, `INSERT INTO contract_decision (run_id, reason) VALUES ($1, $2) ON CONFLICT DO NOTHING`, string(run), reason)
	return err == nil, err
}

// fastRetry keeps retry scenarios short: 3 attempts, 50ms growing to 200ms.
var fastRetry = port.RetryPolicy{MaxAttempts: 3, InitialInterval: 50 * time.Millisecond, MaxInterval: 200 * time.Millisecond, BackoffCoefficient: 2}

type waitIn struct {
	Gate    string     `json:"gate"`
	Topic   port.Topic `json:"topic"`
	Timeout Duration   `json:"timeout"`
}

// Duration encodes as a Go duration string in inputs.
type Duration time.Duration

func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	*d = Duration(v)
	return err
}

type tagIn struct {
	Tag string `json:"tag"`
}

// kinds returns the suite's kinds. renamed selects the handler of
// ct.renamed: the original, or one whose first step has another name (a
// change that must fail loudly on replay).
func kinds(renamed bool) []port.Definition {
	three := port.Handle(func(f port.Flow, _ tagIn) error {
		for _, s := range []string{"s1", "s2", "s3"} {
			if _, err := actEffect.Run(f, s, effectIn{Label: s}); err != nil {
				return err
			}
		}
		return nil
	})
	// The ADR 2.2 wait: check the business DB, then wait for a signal with
	// a timeout; the signal only speeds things up.
	wait := port.Handle(func(f port.Flow, in waitIn) error {
		for i := 0; ; i++ {
			open, err := actGate.Run(f, fmt.Sprintf("check-%d", i), in.Gate)
			if err != nil {
				return err
			}
			if open {
				break
			}
			if _, err := f.WaitSignal(fmt.Sprintf("wait-%d", i), in.Topic, time.Duration(in.Timeout), nil); err != nil {
				return err
			}
		}
		_, err := actEffect.Run(f, "after", effectIn{Label: "after"})
		return err
	})
	hold := port.Handle(func(f port.Flow, in waitIn) error {
		if _, err := actHold.Run(f, "hold", in.Gate, port.WithHeartbeatTimeout(30*time.Second)); err != nil {
			return err
		}
		_, err := actEffect.Run(f, "after", effectIn{Label: "after"})
		return err
	})
	failing := func(mode string) port.Handler {
		return port.Handle(func(f port.Flow, _ tagIn) error {
			_, err := actFail.Run(f, "fail", mode)
			var se *port.StepError
			if errors.As(err, &se) {
				if _, derr := actDecision.Run(f, "open-decision", se.Error()); derr != nil {
					return derr
				}
			}
			return err
		})
	}
	memo := func(prefix string) port.Handler {
		return port.Handle(func(f port.Flow, in waitIn) error {
			if _, err := actEffect.Run(f, prefix+"a", effectIn{Label: prefix + "a"}); err != nil {
				return err
			}
			if _, err := f.WaitSignal("wait", in.Topic, time.Duration(in.Timeout), nil); err != nil {
				return err
			}
			_, err := actEffect.Run(f, prefix+"b", effectIn{Label: prefix + "b"})
			return err
		})
	}
	first := "first"
	if renamed {
		first = "renamed-first"
	}
	reused := port.Handle(func(f port.Flow, _ tagIn) error {
		if _, err := actEffect.Run(f, "same", effectIn{Label: "same-1"}); err != nil {
			return err
		}
		_, err := actEffect.Run(f, "same", effectIn{Label: "same-2"})
		return err
	})
	negative := port.Handle(func(f port.Flow, in waitIn) error {
		_, err := f.WaitSignal("wait", in.Topic, -time.Second, nil)
		return err
	})
	net := port.RetryPolicy{MaxAttempts: 5, InitialInterval: 50 * time.Millisecond, MaxInterval: 200 * time.Millisecond}
	return []port.Definition{
		{Kind: "ct.three", Version: 1, Retry: net, Handler: three},
		{Kind: "ct.wait", Version: 1, Retry: net, Handler: wait},
		{Kind: "ct.hold", Version: 1, Retry: port.RetryPolicy{MaxAttempts: 1}, Handler: hold},
		// A short step timeout bounds how long a step lost in transit to a
		// stopping worker stays charged-but-unrun (see Features).
		{Kind: "ct.fail", Version: 1, Retry: fastRetry, StepTimeout: 5 * time.Second, Handler: failing("retryable")},
		{Kind: "ct.nonretry", Version: 1, Retry: net, Handler: failing("non-retryable")},
		{Kind: "ct.memo", Version: 1, Retry: net, Handler: memo("")},
		{Kind: "ct.renamed", Version: 1, Retry: net, Handler: port.Handle(func(f port.Flow, in waitIn) error {
			if _, err := actEffect.Run(f, first, effectIn{Label: first}); err != nil {
				return err
			}
			if _, err := f.WaitSignal("wait", in.Topic, time.Duration(in.Timeout), nil); err != nil {
				return err
			}
			_, err := actEffect.Run(f, "second", effectIn{Label: "second"})
			return err
		})},
		{Kind: "ct.reused", Version: 1, Retry: net, Handler: reused},
		{Kind: "ct.negative", Version: 1, Retry: net, Handler: negative},
		{Kind: "ct.versioned", Version: 1, Retry: net, Handler: memo("v1-")},
	}
}

// versionTwo is ct.versioned@v2: no wait, different steps.
func versionTwo() port.Definition {
	return port.Definition{Kind: "ct.versioned", Version: 2, Retry: fastRetry, Handler: port.Handle(func(f port.Flow, _ waitIn) error {
		for _, s := range []string{"v2-a", "v2-b"} {
			if _, err := actEffect.Run(f, s, effectIn{Label: s}); err != nil {
				return err
			}
		}
		return nil
	})}
}

// registry builds a registry with the suite's activities and kinds.
func registry(t *testing.T, pool *pgxpool.Pool, defs ...port.Definition) *port.Registry {
	t.Helper()
	reg := port.NewRegistry()
	s := sideEffects{pool: pool}
	require.NoError(t, reg.RegisterActivity(
		port.Bind(actEffect, s.effect), port.Bind(actGate, s.gate), port.Bind(actHold, s.hold),
		port.Bind(actFail, s.fail), port.Bind(actDecision, s.decision)))
	require.NoError(t, reg.Register(defs...))
	return reg
}
