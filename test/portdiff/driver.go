package portdiff

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/internal/testkit/pgtest"
	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/test/contract"
)

// How long the driver waits: awaitFor bounds reaching a point the program
// says the run reaches (a run that never does is recorded as it is, and
// left alone from then on); settleFor is how long the other fields may take
// to reach what SEMANTICS.md prescribes once the run is at its point.
const (
	awaitFor  = 15 * time.Second
	settleFor = 1500 * time.Millisecond
	pollEvery = 20 * time.Millisecond
)

var bg = context.Background()

// expect is what SEMANTICS.md prescribes for a run at one point. The
// driver only uses it to know when to stop polling; the trace records what
// the engine says.
type expect struct {
	status port.Status
	// step is the CurrentStep; anyStep when it is not deterministic.
	step    string
	anyStep bool
	// attempts; -1: not deterministic.
	attempts int
	// lastError; anyError: not prescribed here (a failed run's error is
	// the handler's, whose text the engines build).
	lastError string
	anyError  bool
	// held: the step body that must have started (a held step).
	held string
}

const anyAttempts = -1

// at reports whether v is at the point: status and step, and the held
// body started.
func (x expect) at(v port.RunView, w *world, key string) bool {
	if x.status.Terminal() {
		return v.Status.Terminal()
	}
	return v.Status == x.status && (x.anyStep || v.CurrentStep == x.step) && (x.held == "" || w.started(key, x.held))
}

// full reports whether v also has the other fields prescribed.
func (x expect) full(v port.RunView, w *world, key string) bool {
	return x.at(v, w, key) && v.Status == x.status && (x.anyStep || v.CurrentStep == x.step) &&
		(x.attempts == anyAttempts || v.Attempts == x.attempts) && (x.anyError || v.LastError == x.lastError)
}

// parkedAt is the prescription for a run parked at move i of prog.
func parkedAt(prog Program, i int) expect {
	m := prog.Moves[i]
	if m.Kind == moveHold {
		return expect{status: port.StatusRunning, step: m.Name, attempts: 1, held: m.Name}
	}
	return expect{status: port.StatusWaiting, step: m.Name}
}

// finished is the prescription for a run of prog that ran to its end.
func finished(prog Program) expect {
	_, last, fails := prog.path()
	if fails {
		m := prog.Moves[last]
		return expect{status: port.StatusFailed, step: m.Name, attempts: m.attemptsAtEnd(), anyError: true}
	}
	x := expect{status: port.StatusSucceeded}
	for _, m := range prog.Moves {
		if m.positional() {
			x.step, x.attempts = m.Name, m.attemptsAtEnd()
		}
	}
	return x
}

// canceledAt is the prescription for a run canceled where x saw it.
func canceledAt(x expect) expect {
	return expect{status: port.StatusCanceled, step: x.step, anyStep: x.anyStep, attempts: x.attempts}
}

// driver executes a plan on one engine.
type driver struct {
	t     *testing.T
	plan  *Plan
	e     port.TaskEngine
	admin port.Admin
	w     *world
	ids   map[string]port.RunID
	keyOf map[port.RunID]string
	// now is where each enqueued run is: its prescription.
	now map[string]expect
	// parkIdx is the index, in its program's parking points, of the point
	// each run is at (or last was at).
	parkIdx map[string]int
	// lost are the runs that did not reach where the program says; the
	// driver no longer acts on them.
	lost  map[string]bool
	op    int
	trace Trace
}

// Record executes plan on eng, over a fresh database, and returns the
// trace. The engine is stopped when t ends.
func Record(t *testing.T, plan *Plan, eng contract.Engine) Trace {
	t.Helper()
	pool := pgtest.NewPool(t)
	w := newWorld()
	reg, err := register(plan.Programs, w)
	require.NoError(t, err)
	e := eng.Open(t, pool)(t, reg)
	admin, ok := e.(port.Admin)
	require.True(t, ok, "%s implements port.Admin", eng.Name)
	require.NoError(t, e.Start(bg, port.StartOptions{Concurrency: 16}))
	t.Cleanup(func() {
		// Held bodies go first, or a graceful stop would wait for them.
		for _, r := range plan.Runs {
			w.releaseAll(r.Key)
		}
		ctx, cancel := context.WithTimeout(bg, time.Minute)
		defer cancel()
		_ = e.Stop(ctx) // the outcome is the trace's; a slow stop is not
	})
	d := &driver{t: t, plan: plan, e: e, admin: admin, w: w, ids: map[string]port.RunID{}, keyOf: map[port.RunID]string{},
		now: map[string]expect{}, parkIdx: map[string]int{}, lost: map[string]bool{}, trace: Trace{Engine: eng.Name}}
	for i, op := range plan.Ops {
		d.op = i
		d.apply(op)
	}
	d.op = len(plan.Ops)
	for _, r := range plan.Runs {
		d.final(r.Key)
	}
	return d.trace
}

func (d *driver) record(what, run string, fields ...Field) {
	prog := ""
	if run != "" {
		prog = string(d.plan.program(run).Kind)
	}
	d.trace.Entries = append(d.trace.Entries, Entry{Op: d.op, What: what, Run: run, Program: prog, Fields: fields})
}

func (d *driver) input(key string) (port.Kind, runInput) {
	return d.plan.program(key).Kind, runInput{Key: key}
}

func (d *driver) apply(op Op) {
	what := op.String()
	// A run that is not where the program says is left alone, but for a
	// cancel: it ends the run (and shows whether a cancel works there).
	if len(op.Runs) == 1 && d.lost[op.Runs[0]] && op.Kind != opCancel {
		d.record(what, op.Runs[0], Field{"skipped", "the run is not where the program says"})
		return
	}
	switch op.Kind {
	case opEnqueue:
		key := op.Runs[0]
		kind, in := d.input(key)
		r := d.plan.run(key)
		opts := port.EnqueueOptions{IdempotencyKey: key, BusinessKey: r.BusinessKey}
		if r.Enqueue == enqueueDelayed {
			opts.AvailableAt = time.Now().Add(time.Hour)
		}
		id, err := d.e.Enqueue(bg, kind, in, opts)
		d.record(what, key, Field{"error", errClass(err)})
		if err != nil {
			d.lost[key] = true
			return
		}
		d.ids[key], d.keyOf[id] = id, key
		d.advance(what, key, -1)
	case opBatch:
		d.batch(what, op)
	case opRelease:
		d.w.release(op.Runs[0], op.Step)
		d.advance(what, op.Runs[0], d.parkIdx[op.Runs[0]])
	case opSignalBefore:
		n, err := d.e.Signal(bg, topic(op.Runs[0], op.Step), signalPayload{Key: op.Runs[0], Wait: op.Step})
		d.record(what, op.Runs[0], Field{"error", errClass(err)}, Field{"delivered", strconv.Itoa(n)})
	case opSignal:
		n, err := d.e.Signal(bg, topic(op.Runs[0], op.Step), signalPayload{Key: op.Runs[0], Wait: op.Step})
		d.record(what+" (answer)", op.Runs[0], Field{"error", errClass(err)}, Field{"delivered", strconv.Itoa(n)})
		d.advance(what, op.Runs[0], d.parkIdx[op.Runs[0]])
	case opCancel:
		key := op.Runs[0]
		err := d.e.Cancel(bg, d.ids[key], "portdiff")
		d.w.releaseAll(key)
		d.record(what+" (answer)", key, Field{"error", errClass(err)})
		x := canceledAt(d.now[key])
		poll := x
		if d.lost[key] {
			// Where it ends is not known: poll for any canceled view,
			// record it whole.
			poll.anyStep, poll.attempts = true, anyAttempts
		}
		d.lost[key] = false
		d.observeAs(what, key, poll, x)
	case opCancelFinished:
		d.cancelFinished(what, op.Runs[0])
	case opReenqueue:
		key := op.Runs[0]
		kind, in := d.input(key)
		id, err := d.e.Enqueue(bg, kind, in, port.EnqueueOptions{IdempotencyKey: key})
		d.record(what, key, Field{"error", errClass(err)}, Field{"run", d.name(id)})
	case opList:
		d.list(what, op.Filter)
	case opGetUnknown:
		id := port.RunID(uuidFrom(d.plan.Seed, d.op))
		_, err := d.e.Get(bg, id)
		d.record(what, "", Field{"error", errClass(err)})
	}
}

// name is the key of the run id names, for traces.
func (d *driver) name(id port.RunID) string {
	if k, ok := d.keyOf[id]; ok {
		return k
	}
	return "(an id no enqueue returned)"
}

// advance observes key after the test let it go from parking point from
// (-1: from its enqueue): at its next parking point, or at its end.
func (d *driver) advance(what, key string, from int) {
	prog := d.plan.program(key)
	r := d.plan.run(key)
	parks, _, _ := prog.path()
	var x expect
	switch {
	case r.Enqueue == enqueueDelayed:
		x = expect{status: port.StatusPending}
	case from+1 < len(parks):
		x = parkedAt(prog, parks[from+1])
		d.parkIdx[key] = from + 1
	default:
		x = finished(prog)
		d.parkIdx[key] = len(parks)
	}
	d.observe(what, key, x)
}

// observe waits until key is at the point x and records its view.
func (d *driver) observe(what, key string, x expect) { d.observeAs(what, key, x, x) }

// observeAs polls for poll and records the fields that rec prescribes.
func (d *driver) observeAs(what, key string, poll, x expect) {
	v, err, ok := d.await(key, poll)
	d.now[key] = x
	var skip []string
	if x.anyStep {
		skip = append(skip, "current_step")
	}
	if x.attempts == anyAttempts {
		skip = append(skip, "attempts")
	}
	fields := view(v, err, d.keyOf, skip...)
	if !ok {
		d.lost[key] = true
		fields = append(fields, Field{"reached", "no"})
	}
	d.record(what, key, fields...)
}

// await polls Get until key is at x with every prescribed field, or has
// been at x (or terminal) for settleFor, or awaitFor passed (ok false: the
// run is not where the program says).
func (d *driver) await(key string, x expect) (port.RunView, error, bool) {
	deadline := time.Now().Add(awaitFor)
	var settled time.Time
	var v port.RunView
	var err error
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for {
		v, err = d.e.Get(bg, d.ids[key])
		if err == nil {
			if x.full(v, d.w, key) {
				return v, nil, true
			}
			if x.at(v, d.w, key) || v.Status.Terminal() {
				if settled.IsZero() {
					settled = time.Now()
				}
				if time.Since(settled) > settleFor {
					return v, nil, x.at(v, d.w, key)
				}
			}
		}
		if time.Now().After(deadline) {
			d.t.Logf("%s: run %s never reached %+v; last view %+v, error %v", d.trace.Engine, key, x, v, err)
			return v, err, false
		}
		<-tick.C
	}
}

// batch enqueues the members of op in one EnqueueMany, with repeated keys,
// and cancels the race members while the batch is in flight: each as soon
// as its run row is listed.
func (d *driver) batch(what string, op Op) {
	var items []port.EnqueueItem
	for _, key := range append(slices.Clone(op.Runs), op.Repeats...) {
		kind, in := d.input(key)
		items = append(items, port.EnqueueItem{Kind: kind, Input: in, Options: port.EnqueueOptions{IdempotencyKey: key, BusinessKey: d.plan.run(key).BusinessKey}})
	}
	type answer struct {
		res []port.EnqueueResult
		err error
	}
	done := make(chan answer, 1)
	go func() {
		res, err := d.e.EnqueueMany(bg, items)
		done <- answer{res, err}
	}()
	canceled := map[string]error{}
	for _, key := range op.Races {
		canceled[key] = d.raceCancel(key)
	}
	a := <-done
	d.record(what+" (answer)", "", Field{"error", errClass(a.err)})
	if a.err != nil {
		for _, key := range op.Runs {
			d.lost[key] = true
		}
		return
	}
	for i, res := range a.res {
		key := items[i].Options.IdempotencyKey
		if i < len(op.Runs) {
			d.ids[key], d.keyOf[res.ID] = res.ID, key
		}
		d.record(fmt.Sprintf("%s (item %d)", what, i), key, Field{"run", d.name(res.ID)}, Field{"created", strconv.FormatBool(res.Created)})
	}
	for _, key := range op.Runs {
		if err, raced := canceled[key]; raced {
			d.record(what+" (race cancel)", key, Field{"error", errClass(err)})
			d.w.releaseAll(key)
			// Deterministic: canceled, no error; not where it was.
			d.observe(what, key, expect{status: port.StatusCanceled, anyStep: true, attempts: anyAttempts})
			continue
		}
		d.advance(what, key, -1)
	}
}

// raceCancel cancels the run of key as soon as ListRuns shows its row (its
// business key is its own), while the EnqueueMany that creates it may
// still be starting it.
func (d *driver) raceCancel(key string) error {
	bk := d.plan.run(key).BusinessKey
	deadline := time.Now().Add(awaitFor)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for time.Now().Before(deadline) {
		runs, err := d.admin.ListRuns(bg, port.RunFilter{BusinessKey: bk})
		if err == nil && len(runs) == 1 {
			return d.e.Cancel(bg, runs[0].ID, "portdiff race")
		}
		<-tick.C
	}
	return errors.New("the run row never showed in ListRuns")
}

// cancelFinished cancels a terminal run: no error, and nothing changes,
// UpdatedAt included.
func (d *driver) cancelFinished(what, key string) {
	before, err, _ := d.await(key, d.now[key])
	if err != nil || !before.Status.Terminal() {
		d.record(what, key, Field{"skipped", "the run is not terminal"})
		return
	}
	cerr := d.e.Cancel(bg, d.ids[key], "portdiff again")
	after, gerr := d.e.Get(bg, d.ids[key])
	fields := []Field{{"error", errClass(cerr)}, {"unchanged", strconv.FormatBool(gerr == nil && after.Status == before.Status &&
		after.CurrentStep == before.CurrentStep && after.Attempts == before.Attempts &&
		after.LastError == before.LastError && after.UpdatedAt.Equal(before.UpdatedAt) && after.FinishedAt.Equal(before.FinishedAt))}}
	var skip []string
	if d.now[key].anyStep {
		// Where a raced cancel caught the run is not deterministic.
		skip = append(skip, "current_step", "attempts")
	}
	d.record(what, key, append(fields, view(after, gerr, d.keyOf, skip...)...)...)
}

// list records, for every run of the plan, whether the listing holds it
// and as what.
func (d *driver) list(what string, f port.RunFilter) {
	runs, err := d.admin.ListRuns(bg, f)
	d.record(what+" (answer)", "", Field{"error", errClass(err)})
	listed := map[string]port.RunView{}
	for _, v := range runs {
		listed[d.name(v.ID)] = v
	}
	for _, r := range d.plan.Runs {
		v, ok := listed[r.Key]
		if !ok {
			d.record(what, r.Key, Field{"listed", "false"})
			continue
		}
		delete(listed, r.Key)
		var skip []string
		if x, seen := d.now[r.Key]; seen && x.anyStep {
			skip = append(skip, "current_step", "attempts")
		}
		if !v.Status.Terminal() {
			// The specification (port, "ListRuns"): a listing reads the
			// run store's projection, which tells an open run from a
			// finished one; where an open run is (its status among the
			// open ones, step, attempts, last error) is Get's to say, and
			// Temporal's projection lags it.
			v.Status = "open"
			skip = append(skip, "current_step", "attempts", "last_error")
		}
		d.record(what, r.Key, append([]Field{{"listed", "true"}}, view(v, nil, d.keyOf, skip...)...)...)
	}
	for k := range listed {
		d.record(what, "", Field{"listed", k})
	}
}

// final records where each run ended: its view and how many bodies of
// each step started.
func (d *driver) final(key string) {
	if _, enqueued := d.ids[key]; !enqueued {
		d.record("final", key, Field{"skipped", "never enqueued"})
		return
	}
	x := d.now[key]
	var v port.RunView
	var err error
	if d.lost[key] {
		// Recorded where it stopped; waiting again would only cost time.
		v, err = d.e.Get(bg, d.ids[key])
	} else {
		v, err, _ = d.await(key, x)
	}
	var skip []string
	if x.anyStep {
		skip = append(skip, "current_step", "attempts")
	}
	fields := view(v, err, d.keyOf, skip...)
	execs := d.w.executions(key)
	r := d.plan.run(key)
	prog := d.plan.program(key)
	for _, m := range prog.Moves {
		if m.Kind != moveStep && m.Kind != moveHold {
			continue
		}
		n := strconv.Itoa(execs[m.Name])
		// A cancel racing the start may find the first body started.
		if r.Enqueue == enqueueRace && m.Name == prog.Moves[0].Name {
			n = "at most once: " + strconv.FormatBool(execs[m.Name] <= 1)
		}
		fields = append(fields, Field{"bodies_started:" + m.Name, n})
	}
	d.record("final", key, fields...)
}

// uuidFrom is a well-formed RunID no engine assigned, the same on every
// engine for one seed and operation.
func uuidFrom(seed uint64, op int) string {
	rng := rand.New(rand.NewPCG(seed, uint64(op)))
	a, b := rng.Uint64(), rng.Uint64()
	return fmt.Sprintf("%08x-%04x-4%03x-8%03x-%012x", a>>32, (a>>16)&0xffff, a&0xfff, b>>52, b&0xffffffffffff)
}
