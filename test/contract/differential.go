package contract

// The differential test: one seeded random workload runs on every engine,
// and the final business state, keyed by idempotency key (run ids differ
// between engines), must be the same on all of them and the same as the
// model's.
//
// The outcome is deterministic by construction, whatever the timing:
//   - cancels only target wait runs whose gate is never opened, and only once
//     the run is parked in its wait: such a run can only end canceled with no
//     effect, however the cancel races the wait's timeouts and gate checks;
//     a wait run that is not canceled has its gate opened (at a random point,
//     or at the end), so it can only end succeeded with "after" once;
//   - signals are hints only (the waits re-check the gate every 300ms), so a
//     hint lost or delivered changes timing, never the outcome;
//   - graceful worker restarts happen at any point for the runs whose
//     attempts are not counted: Stop finishes or hands back in-flight steps
//     before their commit, which changes nothing. They wait for the failing
//     runs to finish first, because a stop between two attempts of a retried
//     step can charge an attempt that never ran on Temporal (an activity
//     task handed to a stopping worker is lost until its timeout, which
//     counts; see Features.LosesPolledTasksOnStop). The lease engine did the
//     same until its claims stopped being canceled by Stop. That is checked
//     on its own by RestartDuringRetries;
//   - a worker kill (Stop with an expired context: in-flight steps are handed
//     back without finishing) only happens at a quiescent point, when every
//     run that has an effectful step left is parked in a closed-gate wait
//     (its in-flight steps are read-only gate checks). A kill during an
//     effectful step would legitimately run it twice (at least once, ADR
//     (b)) and make effect counts timing-dependent;
//   - retried and non-retryable failures are counted by attempts, which are
//     fixed by the retry policy; the decision reason is compared by class
//     ("retries exhausted" / "non-retryable"), not by its engine-specific text.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/test/contract/kinds"
)

type opKind int

const (
	opEnqueue   opKind = iota // a new run (kind chosen by the plan)
	opReenqueue               // an existing key again: must return the same run
	opSignal                  // a hint to a wait run
	opOpenGate                // the business truth a wait run waits for
	opCancel                  // cancel a wait run parked in its wait
	opRestart                 // stop the worker gracefully, start a new one
	opKill                    // stop the worker with no grace, at a quiescent point
)

func (k opKind) String() string {
	return [...]string{"enqueue", "re-enqueue", "signal", "open-gate", "cancel", "restart", "kill"}[k]
}

// diffOp is one step of the workload; key names the run it acts on.
type diffOp struct {
	kind    opKind
	runKind port.Kind
	key     string
}

func (o diffOp) String() string {
	if o.kind == opEnqueue {
		return fmt.Sprintf("%s %s %s", o.kind, o.runKind, o.key)
	}
	if o.key == "" {
		return o.kind.String()
	}
	return fmt.Sprintf("%s %s", o.kind, o.key)
}

// diffRun is the model's view of one key.
type diffRun struct {
	kind     port.Kind
	canceled bool // a wait run canceled in its wait; its gate never opens
}

// diffPlan is the workload, generated once from the seed and replayed on
// every engine.
type diffPlan struct {
	ops  []diffOp
	runs map[string]*diffRun
	keys []string // in enqueue order
}

// newDiffPlan draws n operations from a PCG seeded with seed.
func newDiffPlan(seed uint64, n int) *diffPlan {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	p := &diffPlan{runs: map[string]*diffRun{}}
	kindsByWeight := []port.Kind{"ct.three", "ct.three", "ct.wait", "ct.wait", "ct.wait", "ct.fail", "ct.nonretry"}
	// openWaits are wait runs whose fate is still open: neither gate opened
	// nor canceled.
	var openWaits []string
	pick := func(keys []string) (string, int) {
		i := rng.IntN(len(keys))
		return keys[i], i
	}
	for len(p.ops) < n {
		switch r := rng.IntN(100); {
		case r < 35 || len(p.keys) == 0:
			k := kindsByWeight[rng.IntN(len(kindsByWeight))]
			key := fmt.Sprintf("%s-%02d", strings.TrimPrefix(string(k), "ct."), len(p.keys))
			p.runs[key] = &diffRun{kind: k}
			p.keys = append(p.keys, key)
			if k == "ct.wait" {
				openWaits = append(openWaits, key)
			}
			p.ops = append(p.ops, diffOp{kind: opEnqueue, runKind: k, key: key})
		case r < 42:
			key, _ := pick(p.keys)
			p.ops = append(p.ops, diffOp{kind: opReenqueue, runKind: p.runs[key].kind, key: key})
		case r < 55:
			if len(openWaits) == 0 {
				continue
			}
			key, _ := pick(openWaits)
			p.ops = append(p.ops, diffOp{kind: opSignal, key: key})
		case r < 84:
			if len(openWaits) == 0 {
				continue
			}
			// Seal the fate of one wait: its gate opens, or it is
			// canceled (and its gate never opens).
			key, i := pick(openWaits)
			openWaits = slices.Delete(openWaits, i, i+1)
			op := opOpenGate
			if r >= 72 {
				op = opCancel
				p.runs[key].canceled = true
			}
			p.ops = append(p.ops, diffOp{kind: op, key: key})
		case r < 93:
			p.ops = append(p.ops, diffOp{kind: opRestart})
		default:
			p.ops = append(p.ops, diffOp{kind: opKill})
		}
	}
	// Every wait whose fate is still open is released at the end.
	for _, key := range openWaits {
		p.ops = append(p.ops, diffOp{kind: opOpenGate, key: key})
	}
	return p
}

// keyState is the normalized business state of one key.
type keyState struct {
	Status   port.Status
	Effects  map[string]int // label -> executions
	Decision string         // reason class, "" when none
}

func (s keyState) String() string {
	labels := make([]string, 0, len(s.Effects))
	for l, n := range s.Effects {
		labels = append(labels, fmt.Sprintf("%s×%d", l, n))
	}
	slices.Sort(labels)
	d := s.Decision
	if d == "" {
		d = "-"
	}
	return fmt.Sprintf("status=%s effects=[%s] decision=%s", s.Status, strings.Join(labels, " "), d)
}

// render is one line per key, sorted: a readable diff when engines differ.
func render(states map[string]keyState) string {
	keys := make([]string, 0, len(states))
	for k := range states {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%-14s %s\n", k, states[k])
	}
	return b.String()
}

// expected is the model's final state for every key.
func (p *diffPlan) expected() map[string]keyState {
	out := map[string]keyState{}
	for key, r := range p.runs {
		switch {
		case r.kind == "ct.three":
			out[key] = keyState{Status: port.StatusSucceeded, Effects: map[string]int{"s1": 1, "s2": 1, "s3": 1}}
		case r.kind == "ct.wait" && r.canceled:
			out[key] = keyState{Status: port.StatusCanceled, Effects: map[string]int{}}
		case r.kind == "ct.wait":
			out[key] = keyState{Status: port.StatusSucceeded, Effects: map[string]int{"after": 1}}
		case r.kind == "ct.fail":
			out[key] = keyState{Status: port.StatusFailed, Effects: map[string]int{"fail:retryable": kinds.FastRetry.MaxAttempts}, Decision: "retries exhausted"}
		case r.kind == "ct.nonretry":
			out[key] = keyState{Status: port.StatusFailed, Effects: map[string]int{"fail:non-retryable": 1}, Decision: "non-retryable"}
		}
	}
	return out
}

func diffWait(key string) kinds.WaitIn {
	return kinds.WaitIn{Gate: "gate:" + key, Topic: port.Topic("ct:" + key), Timeout: kinds.Duration(300 * time.Millisecond)}
}

func diffInput(kind port.Kind, key string) any {
	if kind == "ct.wait" {
		return diffWait(key)
	}
	return kinds.TagIn{Tag: key}
}

// diffWorker is the engine currently serving the world; restarts replace it.
type diffWorker struct {
	w *world
	e port.TaskEngine
}

// diffStepTimeout bounds, for the kinds the differential runs, how long a
// step attempt lost in transit to a stopping worker (Features.
// LosesPolledTasksOnStop) stays charged-but-unrun before its retry: with
// port.DefaultStepTimeout a restart or a kill on the 1.29 dev server could
// park a run for a minute, which changed no outcome but cost the cell up to
// two minutes. The attempts of these kinds are not compared (only the
// failing kinds' are, and those already have a short timeout), and their
// steps are single statements, far below the bound.
const diffStepTimeout = 10 * time.Second

// diffDefinitions are the effect kinds, with diffStepTimeout on the two
// the plan draws that have no step timeout of their own.
func diffDefinitions() []port.Definition {
	defs := kinds.Definitions(false)
	for i := range defs {
		if defs[i].Kind == kinds.Three || defs[i].Kind == kinds.Wait {
			defs[i].StepTimeout = diffStepTimeout
		}
	}
	return defs
}

func (d *diffWorker) restart(p *diffPlan, ids map[string]port.RunID) {
	d.settleRetries(p, ids)
	d.w.stop(d.e)
	d.e = d.w.start(registry(d.w.t, d.w.pool, diffDefinitions()...), port.StartOptions{})
}

// kill stops the worker with an expired context: in-flight steps are
// handed back unfinished, as a killed process leaves them.
func (d *diffWorker) kill(p *diffPlan, ids map[string]port.RunID, opened map[string]bool) {
	d.w.t.Helper()
	d.quiescent(p, ids, opened)
	ctx, cancel := context.WithCancel(bg)
	cancel()
	if err := d.e.Stop(ctx); err != nil {
		d.w.t.Logf("kill: stop reported %s", err.Error())
	}
	d.e = d.w.start(registry(d.w.t, d.w.pool, diffDefinitions()...), port.StartOptions{})
}

// settleRetries waits until every run whose attempts are counted (the
// failing kinds) has finished: on Temporal a worker stopped between two
// attempts can charge an attempt that never ran (see the package comment), which would
// make the count timing-dependent.
func (d *diffWorker) settleRetries(p *diffPlan, ids map[string]port.RunID) {
	d.w.t.Helper()
	for key, id := range ids {
		if k := p.runs[key].kind; k == "ct.fail" || k == "ct.nonretry" {
			d.w.waitStatus(d.e, id, port.StatusFailed)
		}
	}
}

// quiescent waits until every enqueued run is finished or is a wait run
// whose gate is closed: nothing effectful is in flight.
func (d *diffWorker) quiescent(p *diffPlan, ids map[string]port.RunID, opened map[string]bool) {
	d.w.t.Helper()
	for key, id := range ids {
		if p.runs[key].kind == "ct.wait" && !opened[key] {
			continue
		}
		d.w.waitStatus(d.e, id, port.StatusSucceeded, port.StatusFailed, port.StatusCanceled)
	}
}

// runPlan replays the plan on one engine and returns the final business
// state by idempotency key.
func runPlan(w *world, p *diffPlan) map[string]keyState {
	d := &diffWorker{w: w, e: w.start(registry(w.t, w.pool, diffDefinitions()...), port.StartOptions{})}
	ids := map[string]port.RunID{}
	opened := map[string]bool{} // gates opened so far
	counts := map[opKind]int{}
	spent := map[opKind]time.Duration{}
	for _, op := range p.ops {
		counts[op.kind]++
		began := time.Now()
		switch op.kind {
		case opEnqueue:
			ids[op.key] = w.enqueue(d.e, op.runKind, diffInput(op.runKind, op.key), op.key)
		case opReenqueue:
			again := w.enqueue(d.e, op.runKind, diffInput(op.runKind, op.key), op.key)
			require.Equal(w.t, ids[op.key], again, "re-enqueue of %s returns the same run", op.key)
		case opSignal:
			_, err := d.e.Signal(bg, diffWait(op.key).Topic, map[string]string{"hint": op.key})
			require.NoError(w.t, err)
		case opOpenGate:
			w.openGate(diffWait(op.key).Gate)
			opened[op.key] = true
			_, err := d.e.Signal(bg, diffWait(op.key).Topic, nil)
			require.NoError(w.t, err)
		case opCancel:
			w.waitStatus(d.e, ids[op.key], port.StatusWaiting)
			require.NoError(w.t, d.e.Cancel(bg, ids[op.key], "differential"))
		case opRestart:
			d.restart(p, ids)
		case opKill:
			d.kill(p, ids, opened)
		}
		spent[op.kind] += time.Since(began)
	}
	views := map[string]port.RunView{}
	for key, id := range ids {
		views[key] = w.waitStatus(d.e, id, port.StatusSucceeded, port.StatusFailed, port.StatusCanceled)
	}
	w.t.Logf("replayed %d ops: %v; time spent per op kind: %v", len(p.ops), counts, spent)
	state := businessState(w)
	// A key off the model gets its run view logged: attempts and last
	// error usually say why.
	for key, want := range p.expected() {
		if got := state[key]; got.String() != want.String() {
			v := views[key]
			w.t.Logf("%s off the model: %s; run view: status=%s attempts=%d step=%q last error=%q",
				key, got, v.Status, v.Attempts, v.CurrentStep, v.LastError)
		}
	}
	return state
}

// businessState reads what the runs did, by idempotency key, from the
// business tables and the run store.
func businessState(w *world) map[string]keyState {
	w.t.Helper()
	out := map[string]keyState{}
	rows, err := w.pool.Query(bg, `SELECT id::text, idempotency_key, status FROM taskport.run`)
	require.NoError(w.t, err)
	byRun := map[string]string{}
	var id, key string
	var status port.Status
	_, err = pgx.ForEachRow(rows, []any{&id, &key, &status}, func() error {
		byRun[id] = key
		out[key] = keyState{Status: status, Effects: map[string]int{}}
		return nil
	})
	require.NoError(w.t, err)

	rows, err = w.pool.Query(bg, `SELECT run_id, label, executions FROM contract_effect`)
	require.NoError(w.t, err)
	var label string
	var n int
	_, err = pgx.ForEachRow(rows, []any{&id, &label, &n}, func() error {
		out[byRun[id]].Effects[label] = n
		return nil
	})
	require.NoError(w.t, err)

	rows, err = w.pool.Query(bg, `SELECT run_id, reason FROM contract_decision`)
	require.NoError(w.t, err)
	var reason string
	_, err = pgx.ForEachRow(rows, []any{&id, &reason}, func() error {
		s := out[byRun[id]]
		s.Decision = reasonClass(reason)
		out[byRun[id]] = s
		return nil
	})
	require.NoError(w.t, err)
	return out
}

func reasonClass(reason string) string {
	for _, c := range []string{"non-retryable", "retries exhausted"} {
		if strings.Contains(reason, c) {
			return c
		}
	}
	return "other: " + reason
}

// RunDifferential replays one seeded workload of n operations on every
// engine, in parallel, and requires the same final business state from all
// of them and from the model.
func RunDifferential(t *testing.T, seed uint64, n int, engines ...Engine) {
	plan := newDiffPlan(seed, n)
	t.Logf("seed=%d ops=%d plan: %v", seed, n, plan.ops)
	want := plan.expected()
	states := make([]map[string]keyState, len(engines))
	t.Run("engines", func(t *testing.T) {
		for i, eng := range engines {
			t.Run(eng.Name, func(t *testing.T) {
				t.Parallel()
				pool := newScenarioDB(t)
				states[i] = runPlan(&world{t: t, pool: pool, factory: eng.Open(t, pool), engine: eng}, plan)
			})
		}
	})
	if t.Failed() {
		return
	}
	t.Logf("final business state (model):\n%s", render(want))
	for i, eng := range engines {
		require.Equal(t, render(want), render(states[i]), "engine %s differs from the model (seed %d)", eng.Name, seed)
	}
	for i := 1; i < len(engines); i++ {
		require.Equal(t, render(states[0]), render(states[i]), "%s and %s differ (seed %d)", engines[0].Name, engines[i].Name, seed)
	}
}

// RestartDuringRetries restarts the worker gracefully, over and over, while
// failing runs go through their retries. No body may run more than
// MaxAttempts times and every run must land in the pending-decision centre.
// An engine that does not lose polled tasks on stop must also run each body
// exactly MaxAttempts times: a graceful restart must not charge an attempt
// that never ran (the lease engine did, before its claim stopped being
// canceled by Stop). For an engine that may (Features.LosesPolledTasksOnStop)
// the attempts it charged without running are counted and printed.
func RestartDuringRetries(t *testing.T, engines ...Engine) {
	for _, eng := range engines {
		t.Run(eng.Name, func(t *testing.T) {
			t.Parallel()
			pool := newScenarioDB(t)
			w := &world{t: t, pool: pool, factory: eng.Open(t, pool), engine: eng}
			e := w.start(registry(t, pool, kinds.Definitions(false)...), port.StartOptions{})
			ids := map[string]port.RunID{}
			for i := range 20 {
				key := fmt.Sprintf("fail-%02d", i)
				ids[key] = w.enqueue(e, "ct.fail", kinds.TagIn{Tag: key}, key)
			}
			restarts := 0
			for open := len(ids); open > 0 && restarts < 60; restarts++ {
				w.stop(e)
				e = w.start(registry(t, pool, kinds.Definitions(false)...), port.StartOptions{})
				require.NoError(t, pool.QueryRow(bg, `SELECT count(*) FROM taskport.run WHERE status NOT IN ('failed', 'succeeded', 'canceled')`).Scan(&open))
			}
			t.Logf("injected: %d graceful restarts while %d failing runs retried", restarts, len(ids))
			short, undecided := 0, 0
			for key, id := range ids {
				v := w.waitStatus(e, id, port.StatusFailed)
				n := w.effects(id)["fail:retryable"]
				if n != kinds.FastRetry.MaxAttempts {
					short++
				}
				w.expect(n >= 1 && n <= kinds.FastRetry.MaxAttempts, "run %s: the failing step ran %d times, want 1..%d; last error %q",
					key, n, kinds.FastRetry.MaxAttempts, v.LastError)
				if !eng.Features(t).LosesPolledTasksOnStop {
					w.expect(n == kinds.FastRetry.MaxAttempts, "run %s: the failing step ran %d times, want %d (MaxAttempts); last error %q",
						key, n, kinds.FastRetry.MaxAttempts, v.LastError)
				}
				// The handler's failure path opens the pending decision: a
				// run failed behind the handler's back never lands there.
				var decisions int
				require.NoError(t, pool.QueryRow(bg, `SELECT count(*) FROM contract_decision WHERE run_id = $1`, string(id)).Scan(&decisions))
				if decisions != 1 {
					undecided++
				}
				w.expect(decisions == 1, "run %s failed with %d pending decision(s), want 1; last error %q", key, decisions, v.LastError)
			}
			t.Logf("checked: %d failed runs, %d with an attempt charged that never ran (allowed: %v), %d without their pending decision",
				len(ids), short, eng.Features(t).LosesPolledTasksOnStop, undecided)
		})
	}
}
