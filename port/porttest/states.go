package porttest

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/port"
)

// cell is one test: a method checked against a run in one state.
type cell struct {
	t      *testing.T
	h      Harness
	st     state
	bodies *bodies
	reg    *port.Registry
	rows   RowReader
	eng    port.TaskEngine // the engine under test
	// started: eng serves.
	started bool
	id      port.RunID
	// key, bk and prog are what the state's run was enqueued with.
	key, bk, topic string
	prog           program
	// other is the engine of state "other"'s run, not started.
	other port.TaskEngine
	// blocker is the run that holds the only slot in state "leased".
	blocker port.RunID
	// leasedPending: the engine did not take the run of state "leased"
	// (it holds nothing beyond its slots), so the run is plainly pending.
	leasedPending bool
	// seen is the view of each run at its last transition (at).
	seenMu sync.Mutex
	seen   map[port.RunID]port.RunView
}

// state is a run state of the specification and how to produce it.
type state struct {
	name   string
	status port.Status // "" for unknown and other
	other  bool
	make   func(c *cell) port.RunID
}

func (s state) known() bool { return s.status != "" }

func newCell(t *testing.T, h Harness, s state) *cell {
	ctx := context.Background()
	_, err := h.Pool.Exec(ctx, schema)
	require.NoError(t, err)
	b := &bodies{pool: h.Pool, gates: map[port.RunID]chan struct{}{}, causes: map[port.RunID]error{}}
	reg, err := registry(b)
	require.NoError(t, err)
	rows := h.Rows
	if rows == nil {
		rows = newRunTable(h.Pool, h.RunSchema)
	}
	name := t.Name()
	c := &cell{t: t, h: h, st: s, bodies: b, reg: reg, rows: rows,
		key: "key:" + name, bk: "bk:" + name, topic: "topic:" + name}
	c.eng = h.New(t, reg)
	return c
}

// start makes the engine under test serve; a body still blocked at the
// end of the test is released first, so Stop does not wait for it.
func (c *cell) start(opts port.StartOptions) {
	c.t.Helper()
	c.startEngine(c.eng, opts)
	c.started = true
}

func (c *cell) startEngine(e port.TaskEngine, opts port.StartOptions) {
	c.t.Helper()
	require.NoError(c.t, e.Start(context.Background(), opts))
	c.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = e.Stop(ctx) // a row may have stopped it already; Stop is idempotent
	})
	c.t.Cleanup(c.bodies.releaseAll) // runs before the Stop above
}

// enqueue enqueues p with the cell's key and business key.
func (c *cell) enqueue(p program, opts port.EnqueueOptions) port.RunID {
	c.t.Helper()
	c.prog = p
	opts.IdempotencyKey, opts.BusinessKey = c.key, c.bk
	id, err := c.eng.Enqueue(context.Background(), kind, p, opts)
	require.NoError(c.t, err)
	return id
}

func (c *cell) get(id port.RunID) port.RunView {
	c.t.Helper()
	v, err := c.eng.Get(context.Background(), id)
	require.NoError(c.t, err)
	return v
}

// waitStatus polls Get until the run reads one of want.
func (c *cell) waitStatus(id port.RunID, want ...port.Status) port.RunView {
	c.t.Helper()
	var last port.RunView
	eventually(c.t, func() bool {
		v, err := c.eng.Get(context.Background(), id)
		if err != nil {
			return false
		}
		last = v
		for _, s := range want {
			if v.Status == s {
				return true
			}
		}
		return false
	}, "run %s never read %v; last view %+v", id, want, &last)
	return last
}

// executions counts the step bodies of run id that started, by step ("" for
// every step), with an execution id above after.
func (c *cell) executions(id port.RunID, step string, after int64) int {
	c.t.Helper()
	var n int
	require.NoError(c.t, c.h.Pool.QueryRow(context.Background(),
		`SELECT count(*) FROM porttest.execution WHERE run_id = $1 AND ($2 = '' OR step = $2) AND id > $3`,
		string(id), step, after).Scan(&n))
	return n
}

// lastExecution is the highest execution id so far: bodies started later
// have a higher one.
func (c *cell) lastExecution() int64 {
	c.t.Helper()
	var n int64
	require.NoError(c.t, c.h.Pool.QueryRow(context.Background(), `SELECT coalesce(max(id), 0) FROM porttest.execution`).Scan(&n))
	return n
}

func (c *cell) waitExecution(id port.RunID, step string) {
	c.t.Helper()
	eventually(c.t, func() bool { return c.executions(id, step, 0) > 0 }, "step %s of run %s never started", step, id)
}

func (c *cell) row(id port.RunID) string {
	c.t.Helper()
	r, err := c.rows.Row(context.Background(), id)
	require.NoError(c.t, err)
	return r
}

func (c *cell) count() int {
	c.t.Helper()
	n, err := c.rows.Count(context.Background())
	require.NoError(c.t, err)
	return n
}

// unchanged asserts that call wrote nothing: the run's row and the number
// of runs are the same after it.
func (c *cell) unchanged(id port.RunID, call func()) {
	c.t.Helper()
	n := c.count()
	c.rowUnchanged(id, call)
	require.Equal(c.t, n, c.count(), "the call changed the number of runs")
}

// rowUnchanged asserts that call did not change the run's row (it may
// have added runs of its own).
func (c *cell) rowUnchanged(id port.RunID, call func()) {
	c.t.Helper()
	before := c.row(id)
	call()
	require.Equal(c.t, before, c.row(id), "the call changed the run's row")
}

func (c *cell) admin() port.Admin {
	c.t.Helper()
	a, ok := c.eng.(port.Admin)
	require.True(c.t, ok, "the engine does not implement port.Admin")
	return a
}

// open reports whether the state's run can still make progress.
func (c *cell) open() bool { return c.st.known() && !c.st.status.Terminal() }

// held reports whether a worker holds the state's run, so the engine may
// write its row (heartbeats) without a visible change.
func (c *cell) held() bool { return c.st.name == "leased" || c.st.name == "running" }

// unknownIDs are ids no run has: a well-formed one and one that is not an id.
func unknownIDs() []port.RunID {
	return []port.RunID{port.RunID(uuid.NewString()), "not-a-run-id"}
}

// otherSpellings are forms of id that uuid.Parse reads as the same UUID
// but that are not the string Enqueue returned: the specification calls
// them unknown.
func otherSpellings(id port.RunID) []port.RunID {
	s := string(id)
	out := []port.RunID{port.RunID("{" + s + "}"), port.RunID("urn:uuid:" + s)}
	if up := strings.ToUpper(s); up != s { // an id of digits only has no other case
		out = append(out, port.RunID(up))
	}
	return out
}

// The states of the specification, in its order. Each waits on the cell's
// topic after "work" (an hour, except succeeded's, which times out at once),
// so Signal can be checked in every state.
var states = []state{
	{name: "pending", status: port.StatusPending, make: func(c *cell) port.RunID {
		return c.enqueue(program{Block: true, Topic: c.topic}, port.EnqueueOptions{})
	}},
	{name: "delayed", status: port.StatusPending, make: func(c *cell) port.RunID {
		c.start(port.StartOptions{})
		return c.enqueue(program{Block: true, Topic: c.topic}, port.EnqueueOptions{AvailableAt: time.Now().Add(time.Hour)})
	}},
	{name: "leased", status: port.StatusRunning, make: func(c *cell) port.RunID {
		c.start(port.StartOptions{Concurrency: 1})
		blocker, err := c.eng.Enqueue(context.Background(), kind, program{Block: true, Note: "blocker"},
			port.EnqueueOptions{IdempotencyKey: c.key + ":blocker"})
		require.NoError(c.t, err)
		c.blocker = blocker
		c.waitExecution(blocker, "work")
		id := c.enqueue(program{Block: true, Topic: c.topic}, port.EnqueueOptions{})
		// An engine that takes no more runs than it has slots leaves it
		// pending: the row then checks a pending run held behind a busy slot.
		// Both of this project's engines take it (Temporal once the first
		// workflow task has run, which a loaded server may take seconds
		// to hand out): the wait is long enough that a slow take is not
		// mistaken for none, and costs only an engine that takes none.
		took := within(15*time.Second, func() bool { return c.get(id).Status == port.StatusRunning })
		if !took {
			c.leasedPending = true
			c.t.Logf("the engine did not take run %s while its only slot was busy: checked as pending", id)
		}
		require.Zero(c.t, c.executions(id, "", 0), "a body of the run behind the busy slot started")
		return id
	}},
	{name: "running", status: port.StatusRunning, make: func(c *cell) port.RunID {
		c.start(port.StartOptions{})
		id := c.enqueue(program{Block: true, Topic: c.topic}, port.EnqueueOptions{})
		c.waitExecution(id, "work")
		// The view may trail the body's start by one write (see the
		// specification's CurrentStep).
		eventually(c.t, func() bool {
			v := c.get(id)
			return v.Status == port.StatusRunning && v.CurrentStep == "work" && v.Attempts == 1
		}, "run %s never read running in its started step work", id)
		return id
	}},
	{name: "waiting", status: port.StatusWaiting, make: func(c *cell) port.RunID {
		c.start(port.StartOptions{})
		id := c.enqueue(program{Topic: c.topic}, port.EnqueueOptions{})
		c.waitStatus(id, port.StatusWaiting)
		return id
	}},
	{name: "succeeded", status: port.StatusSucceeded, make: func(c *cell) port.RunID {
		c.start(port.StartOptions{})
		id := c.enqueue(program{Topic: c.topic, TimeoutMs: 1}, port.EnqueueOptions{})
		c.waitStatus(id, port.StatusSucceeded, port.StatusFailed, port.StatusCanceled)
		return id
	}},
	{name: "failed", status: port.StatusFailed, make: func(c *cell) port.RunID {
		c.start(port.StartOptions{})
		id := c.enqueue(program{Fail: 99, MaxAttempts: 1, Topic: c.topic}, port.EnqueueOptions{})
		c.waitStatus(id, port.StatusSucceeded, port.StatusFailed, port.StatusCanceled)
		return id
	}},
	{name: "canceled", status: port.StatusCanceled, make: func(c *cell) port.RunID {
		c.start(port.StartOptions{})
		id := c.enqueue(program{Topic: c.topic}, port.EnqueueOptions{AvailableAt: time.Now().Add(time.Hour)})
		require.NoError(c.t, c.eng.Cancel(context.Background(), id, "porttest"))
		c.waitStatus(id, port.StatusSucceeded, port.StatusFailed, port.StatusCanceled)
		return id
	}},
	{name: "unknown", make: func(*cell) port.RunID { return port.RunID(uuid.NewString()) }},
	{name: "other", other: true, make: func(c *cell) port.RunID {
		c.other = c.h.Other(c.t, c.reg)
		c.prog = program{Topic: c.topic}
		id, err := c.other.Enqueue(context.Background(), kind, c.prog, port.EnqueueOptions{IdempotencyKey: c.key, BusinessKey: c.bk})
		require.NoError(c.t, err)
		return id
	}},
}

// wantStatus is the status the state's run reads.
func (c *cell) wantStatus() port.Status {
	if c.st.name == "leased" && c.leasedPending {
		return port.StatusPending
	}
	return c.st.status
}

// failedMessage is what a run of program{Fail: 99, MaxAttempts: 1} ends with.
func failedMessage() string {
	return (&port.StepError{Step: "work", Activity: work.Name(), Attempts: 1, Message: "attempt 1 failed"}).Error()
}

// within polls cond until it holds or d passed, and reports whether it held.
func within(d time.Duration, cond func() bool) bool {
	deadline := time.After(d)
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline:
			return false
		case <-tick.C:
		}
	}
	return true
}
