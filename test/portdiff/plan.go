package portdiff

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/taskport/taskport/port"
)

type enqueueMode int

const (
	enqueueOne     enqueueMode = iota // Enqueue
	enqueueBatch                      // an item of an EnqueueMany
	enqueueDelayed                    // Enqueue with AvailableAt an hour away, then canceled before its start
	enqueueRace                       // an item of an EnqueueMany, canceled while the batch is in flight
)

// RunPlan is one run of the plan.
type RunPlan struct {
	Key         string
	Program     int
	BusinessKey string
	Enqueue     enqueueMode
	// CancelAt is the index in the program's parking points where the run
	// is canceled; -1: never (delayed and race runs are canceled before).
	CancelAt int
	// CancelFinished: once terminal, the run is canceled again (a no-op).
	CancelFinished bool
}

type opKind int

const (
	opEnqueue        opKind = iota // Enqueue of Runs[0] (delayed or not)
	opBatch                        // EnqueueMany of Runs, Repeats, and the race cancels of Races
	opRelease                      // let the held body of Runs[0]'s Step go
	opSignalBefore                 // signal Runs[0]'s wait Step while the run is held before it
	opSignal                       // signal Runs[0]'s wait Step, where it is parked
	opCancel                       // cancel Runs[0] where it is (pending, held, parked)
	opCancelFinished               // cancel Runs[0], terminal: a no-op
	opReenqueue                    // Enqueue of Runs[0]'s key again
	opList                         // Admin.ListRuns with Filter
	opGetUnknown                   // Get of an id no engine assigned
)

// Op is one operation of the plan.
type Op struct {
	Kind  opKind
	Runs  []string
	Step  string
	Races []string // batch members canceled while the batch is in flight
	// Repeats are extra batch items: keys already in the batch or
	// already enqueued.
	Repeats []string
	Filter  port.RunFilter
}

func (o Op) String() string {
	name := [...]string{"enqueue", "enqueue-many", "release", "signal-before", "signal", "cancel", "cancel-finished", "re-enqueue", "list", "get-unknown"}[o.Kind]
	switch o.Kind {
	case opBatch:
		s := name + " " + strings.Join(o.Runs, ",")
		if len(o.Repeats) > 0 {
			s += " +" + strings.Join(o.Repeats, ",")
		}
		if len(o.Races) > 0 {
			s += " race-cancel " + strings.Join(o.Races, ",")
		}
		return s
	case opRelease, opSignalBefore, opSignal:
		return name + " " + o.Runs[0] + "/" + o.Step
	case opList:
		return fmt.Sprintf("list kind=%q status=%v bk=%q", o.Filter.Kind, o.Filter.Statuses, o.Filter.BusinessKey)
	case opGetUnknown:
		return name
	}
	return name + " " + o.Runs[0]
}

// Plan is what one seed draws: programs, runs, and the operations in order.
type Plan struct {
	Seed     uint64
	Programs []Program
	Runs     []RunPlan
	Ops      []Op
}

func (p *Plan) run(key string) RunPlan {
	i := slices.IndexFunc(p.Runs, func(r RunPlan) bool { return r.Key == key })
	return p.Runs[i]
}

func (p *Plan) program(key string) Program { return p.Programs[p.run(key).Program] }

func (p *Plan) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d\n", p.Seed)
	for _, pr := range p.Programs {
		fmt.Fprintf(&b, "  program %s\n", pr)
	}
	for _, r := range p.Runs {
		fmt.Fprintf(&b, "  run %s: %s bk=%q enqueue=%s cancel-at=%d cancel-finished=%v\n", r.Key, p.Programs[r.Program].Kind, r.BusinessKey,
			[...]string{"one", "batch", "delayed", "race"}[r.Enqueue], r.CancelAt, r.CancelFinished)
	}
	for i, op := range p.Ops {
		fmt.Fprintf(&b, "  op %d: %s\n", i, op)
	}
	return b.String()
}

// path is where a run of p stops on its way: the indices of its parking
// moves, the index of its last move reached, and whether it fails there.
func (p Program) path() (parks []int, last int, fails bool) {
	for i, m := range p.Moves {
		if m.parks() {
			parks = append(parks, i)
		}
		if m.ends() {
			return parks, i, true
		}
	}
	return parks, len(p.Moves) - 1, false
}

// NewPlan draws a plan from seed: the same seed, the same plan.
func NewPlan(seed uint64) *Plan {
	rng := rand.New(rand.NewPCG(seed, seed^0x5eed_0f_d1ff))
	p := &Plan{Seed: seed}
	for i := range 3 {
		// The first program starts with a held step, so that a run of it
		// can race its cancel against its start deterministically.
		p.Programs = append(p.Programs, newProgram(rng, i, i == 0))
	}
	businessKeys := []string{"", "bk-a", "bk-b"}
	for i := range 7 {
		r := RunPlan{Key: fmt.Sprintf("r%d", i), Program: rng.IntN(len(p.Programs)), BusinessKey: businessKeys[rng.IntN(len(businessKeys))], CancelAt: -1}
		prog := p.Programs[r.Program]
		parks, _, _ := prog.path()
		switch x := rng.IntN(100); {
		case x < 10:
			r.Enqueue = enqueueDelayed
		case x < 22 && prog.Moves[0].Kind == moveHold:
			r.Enqueue, r.BusinessKey = enqueueRace, "race-"+r.Key
		case x < 55:
			r.Enqueue = enqueueBatch
		}
		if r.Enqueue == enqueueOne || r.Enqueue == enqueueBatch {
			if len(parks) > 0 && rng.IntN(100) < 35 {
				r.CancelAt = rng.IntN(len(parks))
			}
			// A long sleep ends only by a cancel: the run is canceled
			// there at the latest.
			for j, at := range parks {
				if m := prog.Moves[at]; m.Kind == moveSleep && (r.CancelAt == -1 || r.CancelAt > j) {
					r.CancelAt = j
				}
			}
		}
		r.CancelFinished = rng.IntN(100) < 30
		p.Runs = append(p.Runs, r)
	}
	p.Ops = interleave(rng, p)
	return p
}

func newProgram(rng *rand.Rand, n int, holdFirst bool) Program {
	p := Program{Kind: port.Kind(fmt.Sprintf("pd.p%d", n)), Version: 1 + rng.IntN(2)}
	count := 2 + rng.IntN(4)
	add := func(m Move) {
		prefix := [...]string{"s", "h", "w", "z", "m", "u"}[m.Kind]
		m.Name = fmt.Sprintf("%s%d", prefix, len(p.Moves))
		p.Moves = append(p.Moves, m)
	}
	step := func(kind moveKind) Move {
		m := Move{Kind: kind, Attempts: 1 + rng.IntN(3)}
		switch x := rng.IntN(100); {
		case x < 50:
		case x < 80:
			m.Fail = rng.IntN(m.Attempts) // succeeds on a later attempt (or at once)
		default:
			m.Fail = m.Attempts // never succeeds
		}
		m.NonRetryable = m.Fail > 0 && rng.IntN(100) < 20
		return m
	}
	if holdFirst {
		add(step(moveHold))
	}
	for len(p.Moves) < count {
		if last := len(p.Moves) - 1; last >= 0 && p.Moves[last].ends() {
			break // nothing after a move that fails the run is reached
		}
		switch x := rng.IntN(100); {
		case x < 22:
			add(step(moveStep))
		case x < 42:
			add(step(moveHold))
		case x < 70:
			m := Move{Kind: moveWait}
			switch y := rng.IntN(100); {
			case y < 40:
				m.Wait = waitSignalAfter
			case y < 60:
				m.Wait = waitSignalBefore
			case y < 75:
				m.Wait = waitPollSignaled
			default:
				m.Wait = waitTimeout
			}
			// A signal before the wait is sent while the run is held in
			// the step just before.
			if m.Wait == waitSignalBefore || m.Wait == waitPollSignaled {
				if last := len(p.Moves) - 1; last < 0 || p.Moves[last].Kind != moveHold {
					h := step(moveHold)
					h.Fail, h.NonRetryable = 0, false
					add(h)
				}
			}
			add(m)
		case x < 82:
			add(Move{Kind: moveSleep, Long: rng.IntN(100) < 30})
		case x < 93:
			add(Move{Kind: moveMarker, Max: 1 + rng.IntN(3)})
		default:
			add(Move{Kind: moveUnbound})
		}
	}
	return p
}

// interleave turns every run's own sequence of operations into one, in a
// random order that keeps each run's order, with ListRuns, Get of an
// unknown id and re-enqueues in between.
func interleave(rng *rand.Rand, p *Plan) []Op {
	scripts := map[string][]Op{}
	// Batches: the batch and race runs, in groups of up to three; a
	// group's operation opens its first member's script.
	var pending []string
	for _, r := range p.Runs {
		if r.Enqueue == enqueueBatch || r.Enqueue == enqueueRace {
			pending = append(pending, r.Key)
		}
	}
	rng.Shuffle(len(pending), func(i, j int) { pending[i], pending[j] = pending[j], pending[i] })
	member := map[string]string{} // run key -> the key whose script holds its batch
	for len(pending) > 0 {
		n := min(len(pending), 1+rng.IntN(3))
		group := pending[:n]
		pending = pending[n:]
		op := Op{Kind: opBatch, Runs: slices.Clone(group)}
		for _, k := range group {
			member[k] = group[0]
			if p.run(k).Enqueue == enqueueRace {
				op.Races = append(op.Races, k)
			}
		}
		// One key twice in the batch.
		op.Repeats = append(op.Repeats, group[rng.IntN(len(group))])
		scripts[group[0]] = append(scripts[group[0]], op)
	}
	for _, r := range p.Runs {
		s := scripts[r.Key]
		if r.Enqueue == enqueueOne || r.Enqueue == enqueueDelayed {
			s = append(s, Op{Kind: opEnqueue, Runs: []string{r.Key}})
		}
		if r.Enqueue == enqueueDelayed {
			s = append(s, Op{Kind: opCancel, Runs: []string{r.Key}})
		}
		if r.Enqueue == enqueueOne || r.Enqueue == enqueueBatch {
			s = append(s, runOps(p.Programs[r.Program], r)...)
		}
		if r.CancelFinished {
			s = append(s, Op{Kind: opCancelFinished, Runs: []string{r.Key}})
		}
		scripts[r.Key] = s
	}
	enqueued := map[string]bool{}
	var out []Op
	for {
		var ready []string
		for _, r := range p.Runs {
			// A batch member's script waits for its batch.
			if len(scripts[r.Key]) > 0 && (member[r.Key] == "" || member[r.Key] == r.Key || enqueued[r.Key]) {
				ready = append(ready, r.Key)
			}
		}
		if len(ready) == 0 {
			return out
		}
		if len(enqueued) > 0 && rng.IntN(100) < 18 {
			out = append(out, globalOp(rng, p, enqueued))
		}
		key := ready[rng.IntN(len(ready))]
		op := scripts[key][0]
		scripts[key] = scripts[key][1:]
		if op.Kind == opBatch {
			// A batch also repeats a key enqueued before it, when there is one.
			for _, r := range p.Runs {
				if enqueued[r.Key] {
					op.Repeats = append(op.Repeats, r.Key)
					break
				}
			}
		}
		for _, k := range op.Runs {
			if op.Kind == opBatch || op.Kind == opEnqueue {
				enqueued[k] = true
			}
		}
		out = append(out, op)
	}
}

// runOps is what the test does to a run at each of its parking points.
func runOps(prog Program, r RunPlan) []Op {
	parks, _, _ := prog.path()
	var out []Op
	for j, at := range parks {
		m := prog.Moves[at]
		if j == r.CancelAt {
			return append(out, Op{Kind: opCancel, Runs: []string{r.Key}})
		}
		switch m.Kind {
		case moveHold:
			if next, ok := nextPositional(prog, at); ok && next.Kind == moveWait && (next.Wait == waitSignalBefore || next.Wait == waitPollSignaled) {
				out = append(out, Op{Kind: opSignalBefore, Runs: []string{r.Key}, Step: next.Name})
			}
			out = append(out, Op{Kind: opRelease, Runs: []string{r.Key}, Step: m.Name})
		case moveWait:
			out = append(out, Op{Kind: opSignal, Runs: []string{r.Key}, Step: m.Name})
		}
	}
	return out
}

func nextPositional(prog Program, at int) (Move, bool) {
	for _, m := range prog.Moves[at+1:] {
		if m.positional() {
			return m, true
		}
	}
	return Move{}, false
}

func globalOp(rng *rand.Rand, p *Plan, enqueued map[string]bool) Op {
	var keys []string
	for _, r := range p.Runs {
		if enqueued[r.Key] {
			keys = append(keys, r.Key)
		}
	}
	switch x := rng.IntN(100); {
	case x < 20:
		return Op{Kind: opGetUnknown}
	case x < 45:
		return Op{Kind: opReenqueue, Runs: []string{keys[rng.IntN(len(keys))]}}
	default:
		var f port.RunFilter
		switch rng.IntN(4) {
		case 1:
			f.Kind = p.Programs[rng.IntN(len(p.Programs))].Kind
		case 2:
			f.Statuses = []port.Status{port.StatusWaiting, port.StatusRunning}
		case 3:
			f.BusinessKey = "bk-a"
		}
		return Op{Kind: opList, Filter: f}
	}
}
