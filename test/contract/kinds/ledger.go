package kinds

// The ledger kinds ("ft.*") of the process-fault scenarios, shared by the
// test process (which enqueues and checks) and the worker subprocess
// (test/contract/worker, which runs them), so both register exactly the same
// code.
//
// Every step is a side effect through the real operation ledger (ADR 2.3):
// ledger.Run begins an attempt with the step's fencing token, the body logs
// one fault_attempt row per physical execution (with the pid of the process
// that ran it), and the commit transaction bumps fault_commit. A commit
// refused by the fence is logged in fault_fenced by the attempt that saw it.

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskport/taskport/acquisition"
	"github.com/taskport/taskport/ledger"
	"github.com/taskport/taskport/port"
)

// The ledger kinds.
const (
	// Steps runs the fenced steps s1, s2, s3; one of them may be held at a
	// gate so that a test can fault the worker running it.
	Steps port.Kind = "ft.steps"
	// LedgerVersioned is v1: step v1-a, a wait, step v1-b; v2: steps v2-a, v2-b.
	LedgerVersioned port.Kind = "ft.versioned"
	// Poison runs the fenced step "poison", held at a gate nobody opens, so
	// that a test can kill the worker on every attempt. When the step fails
	// for good the handler opens a decision (fault_decision) and fails, as
	// the business kinds do with a *port.StepError.
	Poison port.Kind = "ft.poison"
)

// PoisonAttempts is Poison's retry budget: each attempt costs a worker.
const PoisonAttempts = 2

// StepNames are the steps of Steps, in order.
var StepNames = []string{"s1", "s2", "s3"}

// HeartbeatTimeout is short so that Temporal notices a killed or frozen
// worker within seconds (the SDK sends heartbeats at most every 80% of it).
const HeartbeatTimeout = 2 * time.Second

// LedgerSchema is the ledger kinds' side tables; the test creates them in
// its own database before any worker starts.
const LedgerSchema = `
CREATE TABLE fault_gate (key text PRIMARY KEY);
CREATE TABLE fault_attempt (
    id       bigserial   PRIMARY KEY,
    run_id   text        NOT NULL,
    step     text        NOT NULL,
    token    text        NOT NULL,
    pid      int         NOT NULL,
    begun_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX fault_attempt_run ON fault_attempt (run_id, step);
CREATE TABLE fault_commit (
    run_id       text        NOT NULL,
    step         text        NOT NULL,
    commits      int         NOT NULL DEFAULT 1,
    token        text        NOT NULL,
    pid          int         NOT NULL,
    committed_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (run_id, step)
);
CREATE TABLE fault_decision (
    run_id        text    PRIMARY KEY,
    step          text    NOT NULL,
    attempts      int     NOT NULL,
    non_retryable boolean NOT NULL,
    reason        text    NOT NULL,
    pid           int     NOT NULL
);
CREATE TABLE fault_fenced (
    id     bigserial   PRIMARY KEY,
    run_id text        NOT NULL,
    step   text        NOT NULL,
    token  text        NOT NULL,
    pid    int         NOT NULL,
    at     timestamptz NOT NULL DEFAULT clock_timestamp()
);`

// StepsIn is the input of Steps.
type StepsIn struct {
	// Plan owns the ledger rows of the run's operations (one per step).
	Plan uuid.UUID `json:"plan"`
	// HoldAt names the step whose body waits for Gate; empty holds none.
	HoldAt string `json:"hold_at,omitempty"`
	Gate   string `json:"gate,omitempty"`
	// Stubborn makes the held step ignore what its heartbeat reports and
	// commit anyway, like a body that cannot see its lease (ADR table, "lease
	// lost"): only the ledger's fence then stops a stale attempt.
	Stubborn bool `json:"stubborn,omitempty"`
}

// VersionedIn is the input of both versions of LedgerVersioned.
type VersionedIn struct {
	Plan  uuid.UUID  `json:"plan"`
	Topic port.Topic `json:"topic"`
	// TimeoutMS bounds v1's wait.
	TimeoutMS int64 `json:"timeout_ms"`
}

// PoisonIn is the input of Poison.
type PoisonIn struct {
	// Plan owns the ledger row of the poison step.
	Plan uuid.UUID `json:"plan"`
}

// decisionIn is what the handler records of the step's *port.StepError.
type decisionIn struct {
	Step         string `json:"step"`
	Attempts     int    `json:"attempts"`
	NonRetryable bool   `json:"non_retryable"`
	Reason       string `json:"reason"`
}

type opIn struct {
	Plan     uuid.UUID `json:"plan"`
	Gate     string    `json:"gate,omitempty"`
	Stubborn bool      `json:"stubborn,omitempty"`
}

type opOut struct {
	Token string `json:"token"`
}

var (
	actOp     = port.DeclareActivity[opIn, opOut]("ft.op")
	actDecide = port.DeclareActivity[decisionIn, bool]("ft.decide")
)

// retry leaves room for the attempts a frozen Temporal worker swallows: its
// outstanding polls can still be handed a retry, which then times out too.
var retry = port.RetryPolicy{MaxAttempts: 10, InitialInterval: 100 * time.Millisecond, MaxInterval: 500 * time.Millisecond, BackoffCoefficient: 2}

// RegisterLedger adds the activities and the given versions of the ledger
// kinds (every version when none is given) to reg. Steps is always
// registered.
func RegisterLedger(reg *port.Registry, pool *pgxpool.Pool, versions ...int) error {
	b := body{pool: pool, pid: os.Getpid()}
	if err := reg.RegisterActivity(port.Bind(actOp, b.op), port.Bind(actDecide, b.decide)); err != nil {
		return fmt.Errorf("register fault activities: %w", err)
	}
	poisonRetry := retry
	poisonRetry.MaxAttempts = PoisonAttempts
	defs := []port.Definition{
		{Kind: Steps, Version: 1, Retry: retry, HeartbeatTimeout: HeartbeatTimeout, Handler: port.Handle(steps)},
		{Kind: Poison, Version: 1, Retry: poisonRetry, HeartbeatTimeout: HeartbeatTimeout, Handler: port.Handle(poison)},
	}
	if len(versions) == 0 {
		versions = []int{1, 2}
	}
	for _, v := range versions {
		switch v {
		case 1:
			defs = append(defs, port.Definition{Kind: LedgerVersioned, Version: 1, Retry: retry, HeartbeatTimeout: HeartbeatTimeout, Handler: port.Handle(versionOne)})
		case 2:
			defs = append(defs, port.Definition{Kind: LedgerVersioned, Version: 2, Retry: retry, HeartbeatTimeout: HeartbeatTimeout, Handler: port.Handle(versionTwo)})
		default:
			return fmt.Errorf("register %s: no version %d", LedgerVersioned, v)
		}
	}
	if err := reg.Register(defs...); err != nil {
		return fmt.Errorf("register fault kinds: %w", err)
	}
	return nil
}

func steps(f port.Flow, in StepsIn) error {
	for _, s := range StepNames {
		op := opIn{Plan: in.Plan}
		if s == in.HoldAt {
			op.Gate, op.Stubborn = in.Gate, in.Stubborn
		}
		if _, err := actOp.Run(f, s, op); err != nil {
			return err
		}
	}
	return nil
}

func poison(f port.Flow, in PoisonIn) error {
	_, err := actOp.Run(f, "poison", opIn{Plan: in.Plan, Gate: "never-opened"})
	var se *port.StepError
	if errors.As(err, &se) {
		d := decisionIn{Step: se.Step, Attempts: se.Attempts, NonRetryable: se.NonRetryable, Reason: se.Error()}
		if _, derr := actDecide.Run(f, "open-decision", d); derr != nil {
			return derr
		}
	}
	return err
}

func versionOne(f port.Flow, in VersionedIn) error {
	if _, err := actOp.Run(f, "v1-a", opIn{Plan: in.Plan}); err != nil {
		return err
	}
	if _, err := f.WaitSignal("wait", in.Topic, time.Duration(in.TimeoutMS)*time.Millisecond, nil); err != nil {
		return err
	}
	_, err := actOp.Run(f, "v1-b", opIn{Plan: in.Plan})
	return err
}

func versionTwo(f port.Flow, in VersionedIn) error {
	for _, s := range []string{"v2-a", "v2-b"} {
		if _, err := actOp.Run(f, s, opIn{Plan: in.Plan}); err != nil {
			return err
		}
	}
	return nil
}

// NewPlan inserts a plan for the ledger rows of one run, with a target path
// and info hash of its own (no two active plans may share either).
func NewPlan(ctx context.Context, db ledger.DBTX, id uuid.UUID) error {
	hash := hex.EncodeToString(id[:]) + "00000000"
	_, err := acquisition.InsertPlan(ctx, db, acquisition.Plan{
		ID: id, Title: "fault " + id.String(), SourceType: "magnet", Source: "magnet:?xt=urn:btih:" + hash,
		InfoHash: hash, TargetPath: "/library/fault/" + id.String(), ExpectedSize: 1,
		ExpectedSHA256: strings.Repeat("0", 64),
	})
	return err
}

// OpenGate lets the ledger steps held at key finish.
func OpenGate(ctx context.Context, db ledger.DBTX, key string) error {
	_, err := db.Exec(ctx, `INSERT INTO fault_gate (key) VALUES ($1) ON CONFLICT DO NOTHING`, key)
	if err != nil {
		return fmt.Errorf("open gate %s: %w", key, err)
	}
	return nil
}

type body struct {
	pool *pgxpool.Pool
	pid  int
}

// op is the activity of every step: one fenced ledger operation named
// after the step.
func (b body) op(ctx context.Context, in opIn) (opOut, error) {
	info, ok := port.StepInfoFrom(ctx)
	if !ok {
		return opOut{}, port.NonRetryable(errors.New("ft.op runs only as a step"))
	}
	// A stubborn body keeps using the database after its context ends.
	work := ctx
	if in.Stubborn {
		work = context.WithoutCancel(ctx)
	}
	executed := false
	out, err := ledger.Run(work, b.pool, ledger.Fenced[opOut]{
		PlanID: in.Plan,
		Op:     ledger.Op(info.Step),
		Do: func(context.Context, ledger.Operation) (opOut, error) {
			executed = true
			if _, err := b.pool.Exec(work, `INSERT INTO fault_attempt (run_id, step, token, pid) VALUES ($1, $2, $3, $4)`,
				string(info.RunID), info.Step, info.Token.String(), b.pid); err != nil {
				return opOut{}, fmt.Errorf("log attempt of %s: %w", info.Step, err)
			}
			if err := b.hold(ctx, work, in); err != nil {
				return opOut{}, err
			}
			return opOut{Token: info.Token.String()}, nil
		},
		Apply: func(ctx context.Context, tx pgx.Tx, r opOut) error {
			_, err := tx.Exec(ctx, `
INSERT INTO fault_commit (run_id, step, token, pid) VALUES ($1, $2, $3, $4)
ON CONFLICT (run_id, step) DO UPDATE SET commits = fault_commit.commits + 1, token = EXCLUDED.token, pid = EXCLUDED.pid,
    committed_at = clock_timestamp()`,
				string(info.RunID), info.Step, r.Token, b.pid)
			if err != nil {
				return fmt.Errorf("record commit of %s: %w", info.Step, err)
			}
			return nil
		},
	})
	if executed && errors.Is(err, port.ErrFenced) {
		if _, lerr := b.pool.Exec(context.WithoutCancel(ctx), `INSERT INTO fault_fenced (run_id, step, token, pid) VALUES ($1, $2, $3, $4)`,
			string(info.RunID), info.Step, info.Token.String(), b.pid); lerr != nil {
			return opOut{}, errors.Join(err, fmt.Errorf("log fenced commit of %s: %w", info.Step, lerr))
		}
	}
	return out, err
}

// decide records the decision Poison's handler opens; opening it twice is a
// no-op, like acquisition.OpenDecision.
func (b body) decide(ctx context.Context, in decisionIn) (bool, error) {
	info, ok := port.StepInfoFrom(ctx)
	if !ok {
		return false, port.NonRetryable(errors.New("ft.decide runs only as a step"))
	}
	_, err := b.pool.Exec(ctx, `
INSERT INTO fault_decision (run_id, step, attempts, non_retryable, reason, pid) VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (run_id) DO NOTHING`, string(info.RunID), in.Step, in.Attempts, in.NonRetryable, in.Reason, b.pid)
	if err != nil {
		return false, fmt.Errorf("open decision for %s: %w", in.Step, err)
	}
	return true, nil
}

// hold waits for the step's gate, heartbeating, like a long copy between
// chunks. A well-behaved body stops when its heartbeat says so; a stubborn
// one goes on.
func (b body) hold(ctx, work context.Context, in opIn) error {
	if in.Gate == "" {
		return nil
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		var open bool
		if err := b.pool.QueryRow(work, `SELECT EXISTS (SELECT 1 FROM fault_gate WHERE key = $1)`, in.Gate).Scan(&open); err != nil {
			return fmt.Errorf("read gate %s: %w", in.Gate, err)
		}
		if open {
			return nil
		}
		if err := port.Heartbeat(ctx, "holding"); err != nil && !in.Stubborn {
			return fmt.Errorf("hold at gate %s: %w", in.Gate, err)
		}
		<-tick.C
	}
}
