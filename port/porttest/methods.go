package porttest

import (
	"cmp"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/port/porttx"
)

// method is one table of the specification: check asserts the row of c's
// state.
type method struct {
	name  string
	check func(c *cell)
}

var methods = []method{
	{"Enqueue", checkEnqueue},
	{"EnqueueMany", checkEnqueueMany},
	{"EnqueueTx", checkEnqueueTx},
	{"Signal", checkSignal},
	{"Cancel", checkCancel},
	{"Get", checkGet},
	{"Wait", checkWait},
	{"ListRuns", checkListRuns},
	{"Retry", checkRetry},
	{"Start", checkStart},
	{"Stop", checkStop},
}

var ctx = context.Background()

// checkView asserts the RunView fields of the specification for the run of
// c's state, as it stands.
func checkView(c *cell, v port.RunView) {
	t := c.t
	t.Helper()
	require.Equal(t, c.id, v.ID)
	require.Equal(t, kind, v.Kind)
	require.Equal(t, 1, v.Version)
	require.Equal(t, c.bk, v.BusinessKey)
	require.Equal(t, c.wantStatus(), v.Status, "status; view %+v", v)
	type fields struct {
		Attempts    int
		LastError   string
		CurrentStep string
	}
	want := map[string]fields{
		"pending":   {0, "", ""},
		"delayed":   {0, "", ""},
		"running":   {1, "", "work"},
		"waiting":   {0, "", "wait"},
		"succeeded": {1, "", "done"},
		"failed":    {1, failedMessage(), "work"},
		"canceled":  {0, "", ""},
	}
	got := fields{v.Attempts, v.LastError, v.CurrentStep}
	if c.st.name == "leased" {
		// Not started: no attempt, no error. CurrentStep is "" or "work"
		// (scheduled): the specification does not say which yet.
		require.Equal(t, fields{0, "", got.CurrentStep}, got, "view %+v", v)
		require.Contains(t, []string{"", "work"}, got.CurrentStep, "view %+v", v)
		t.Logf("leased but not started: CurrentStep %q", got.CurrentStep)
	} else {
		require.Equal(t, want[c.st.name], got, "view %+v", v)
	}
	checkOutput(c, v)
	checkTimes(c, v)
}

// checkOutput asserts RunView.Output: the run's own result once it
// succeeded, nil otherwise.
func checkOutput(c *cell, v port.RunView) {
	t := c.t
	t.Helper()
	if v.Status != port.StatusSucceeded {
		require.Nil(t, v.Output, "a run that did not succeed has no result: %+v", v)
		return
	}
	require.JSONEq(t, `{"run":"`+string(c.id)+`","payload":""}`, string(v.Output), "view %+v", v)
}

// checkTimes asserts the only order timestamps promise.
func checkTimes(c *cell, v port.RunView) {
	t := c.t
	t.Helper()
	require.False(t, v.CreatedAt.IsZero(), "CreatedAt zero: %+v", v)
	require.False(t, v.UpdatedAt.Before(v.CreatedAt), "UpdatedAt before CreatedAt: %+v", v)
	if v.Status.Terminal() {
		require.False(t, v.FinishedAt.IsZero(), "terminal without FinishedAt: %+v", v)
		require.False(t, v.FinishedAt.Before(v.UpdatedAt), "FinishedAt before UpdatedAt: %+v", v)
	} else {
		require.True(t, v.FinishedAt.IsZero(), "open with FinishedAt: %+v", v)
	}
}

// requireErr asserts err wraps want and, for ErrNotFound, that it does not
// claim another engine unless it should.
func requireErr(t *testing.T, err, want error) {
	t.Helper()
	require.Error(t, err)
	require.ErrorIs(t, err, want, "error %q", err)
	if want == port.ErrNotFound {
		require.NotErrorIs(t, err, port.ErrOtherEngine, "an unknown id said to be another engine's: %q", err)
	}
}

func checkGet(c *cell) {
	t := c.t
	switch {
	case c.st.other:
		c.unchanged(c.id, func() {
			_, err := c.eng.Get(ctx, c.id)
			requireErr(t, err, port.ErrOtherEngine)
		})
	case !c.st.known():
		for _, id := range unknownIDs() {
			_, err := c.eng.Get(ctx, id)
			requireErr(t, err, port.ErrNotFound)
		}
		// A step that runs past its timeout, or goes its heartbeat timeout
		// without a heartbeat: its body's context ends with a cause that
		// is ErrLeaseLost (the attempt no longer owns the step), and the
		// run reads the timeout as its error, on every engine.
		c.start(port.StartOptions{})
		for name, p := range map[string]program{
			"step attempt timed out":            {Block: true, MaxAttempts: 1, StepTimeoutMs: 300},
			"step missed its heartbeat timeout": {Block: true, MaxAttempts: 1, HeartbeatTimeoutMs: 300},
		} {
			t.Run(name, func(t *testing.T) {
				id, err := c.eng.Enqueue(ctx, kind, p, port.EnqueueOptions{IdempotencyKey: c.key + ":" + name})
				require.NoError(t, err)
				eventually(t, func() bool { return c.bodies.cause(id) != nil }, "the body's context never ended")
				require.ErrorIs(t, c.bodies.cause(id), port.ErrLeaseLost, "the body's context cause")
				v := c.waitStatus(id, port.StatusSucceeded, port.StatusFailed, port.StatusCanceled)
				require.Equal(t, port.StatusFailed, v.Status, "%+v", v)
				require.Contains(t, v.LastError, name, "%+v", v)
				require.Equal(t, 1, v.Attempts, "%+v", v)
				require.Equal(t, "work", v.CurrentStep, "%+v", v)
			})
		}
		// A ContinueAsNew does not change CurrentStep, nor does the end of
		// the run: an execution that ends before any step reads the step
		// the execution before it ended in, with its attempts.
		t.Run("continued as new, then ended before any step", func(t *testing.T) {
			id, err := c.eng.Enqueue(ctx, kind, program{ContinueOnce: true}, port.EnqueueOptions{IdempotencyKey: c.key + ":continued"})
			require.NoError(t, err)
			v := c.waitStatus(id, port.StatusSucceeded, port.StatusFailed, port.StatusCanceled)
			require.Equal(t, port.StatusSucceeded, v.Status, "%+v", v)
			require.Equal(t, "done", v.CurrentStep, "%+v", v)
			require.Equal(t, 1, v.Attempts, "%+v", v)
			require.Empty(t, v.LastError, "%+v", v)
			require.JSONEq(t, `{"run":"`+string(id)+`","payload":""}`, string(v.Output), "the second execution's result")
		})
		// A run fails when its handler returns port.ErrCanceled that no
		// Cancel caused: canceled means a cancel reached the run.
		t.Run("a handler that returns ErrCanceled of its own accord", func(t *testing.T) {
			id, err := c.eng.Enqueue(ctx, kind, program{GiveUp: true}, port.EnqueueOptions{IdempotencyKey: c.key + ":give-up"})
			require.NoError(t, err)
			v := c.waitStatus(id, port.StatusSucceeded, port.StatusFailed, port.StatusCanceled)
			require.Equal(t, port.StatusFailed, v.Status, "%+v", v)
			require.Equal(t, "gave up: "+port.ErrCanceled.Error(), v.LastError, "%+v", v)
			require.Equal(t, "work", v.CurrentStep, "%+v", v)
			require.Equal(t, 1, v.Attempts, "%+v", v)
			_, err = port.Result[programResult](ctx, c.eng, id)
			require.ErrorIs(t, err, port.ErrRunFailed)
		})
		// An error whose message Postgres cannot store (a NUL, bytes that
		// are not UTF-8: a file name in an os error) fails its attempt,
		// then its run, once per attempt, reading U+FFFD for those bytes.
		t.Run("errors Postgres cannot store", func(t *testing.T) {
			id, err := c.eng.Enqueue(ctx, kind, program{Fail: 99, MaxAttempts: 2, Unstorable: true}, port.EnqueueOptions{IdempotencyKey: c.key + ":bad-step-error"})
			require.NoError(t, err)
			v := c.waitStatus(id, port.StatusSucceeded, port.StatusFailed, port.StatusCanceled)
			require.Equal(t, port.StatusFailed, v.Status, "%+v", v)
			require.Equal(t, (&port.StepError{Step: "work", Activity: work.Name(), Attempts: 2, Message: "attempt 2 failed" + storedAs}).Error(), v.LastError)
			require.Equal(t, 2, c.executions(id, "work", 0), "each attempt's body ran once")
			id, err = c.eng.Enqueue(ctx, kind, program{HandlerUnstorable: true}, port.EnqueueOptions{IdempotencyKey: c.key + ":bad-run-error"})
			require.NoError(t, err)
			v = c.waitStatus(id, port.StatusSucceeded, port.StatusFailed, port.StatusCanceled)
			require.Equal(t, port.StatusFailed, v.Status, "%+v", v)
			require.Equal(t, "handler failed"+storedAs, v.LastError)
			var rf *port.RunFailedError
			_, err = port.Result[programResult](ctx, c.eng, id)
			require.ErrorAs(t, err, &rf)
			require.Equal(t, "handler failed"+storedAs, rf.Message)
		})
		checkAttemptsAndErrors(c)
		// The longest business key a run may have runs as any other (the
		// Temporal UI's summary of the run names it).
		t.Run("the longest business key", func(t *testing.T) {
			bk := strings.Repeat("<é&", port.MaxNameLen/len("<é&")) // MaxNameLen bytes, escaped in JSON
			id, err := c.eng.Enqueue(ctx, kind, program{}, port.EnqueueOptions{IdempotencyKey: c.key + ":long-business-key", BusinessKey: bk})
			require.NoError(t, err)
			v := c.waitStatus(id, port.StatusSucceeded, port.StatusFailed, port.StatusCanceled)
			require.Equal(t, port.StatusSucceeded, v.Status, "%+v", v)
			require.Equal(t, bk, v.BusinessKey)
		})
		// Progress a heartbeat cannot encode is dropped; the step goes on.
		t.Run("progress that does not encode", func(t *testing.T) {
			id, err := c.eng.Enqueue(ctx, kind, program{BadProgress: true}, port.EnqueueOptions{IdempotencyKey: c.key + ":bad-progress"})
			require.NoError(t, err)
			v := c.waitStatus(id, port.StatusSucceeded, port.StatusFailed, port.StatusCanceled)
			require.Equal(t, port.StatusSucceeded, v.Status, "%+v", v)
			require.Equal(t, 1, c.executions(id, "work", 0), "one body of work")
		})
		// Flow.Now before an execution's first step is when the execution
		// began: not before a delayed run was due, and, after a
		// ContinueAsNew, not before the time the execution before it last
		// read (the program fails the run otherwise).
		for name, enq := range map[string]func() (port.RunID, error){
			"Now of a delayed run": func() (port.RunID, error) {
				due := time.Now().Add(time.Second)
				return c.eng.Enqueue(ctx, kind, program{NotBeforeMs: due.UnixMilli()},
					port.EnqueueOptions{IdempotencyKey: c.key + ":now-delayed", AvailableAt: due})
			},
			"Now after a ContinueAsNew": func() (port.RunID, error) {
				return c.eng.Enqueue(ctx, kind, program{ContinueOnce: true, Note: "now"}, port.EnqueueOptions{IdempotencyKey: c.key + ":now-continued"})
			},
		} {
			t.Run(name, func(t *testing.T) {
				id, err := enq()
				require.NoError(t, err)
				v := c.waitStatus(id, port.StatusSucceeded, port.StatusFailed, port.StatusCanceled)
				require.Equal(t, port.StatusSucceeded, v.Status, "%+v", v)
			})
		}
	case c.held():
		for _, id := range otherSpellings(c.id) {
			_, err := c.eng.Get(ctx, id)
			requireErr(t, err, port.ErrNotFound)
		}
		// A step that started shows in the view within the engine's
		// report interval (the lease engine: the step-start marker's
		// group commit or the next heartbeat), not at the instant the
		// body starts: poll for it, then check the whole view.
		if c.st.name == "running" {
			require.Eventually(t, func() bool { return c.get(c.id).CurrentStep != "" }, waitFor, pollEvery,
				"the running step never showed in the view")
		}
		checkView(c, c.get(c.id))
	default:
		c.unchanged(c.id, func() {
			for _, id := range otherSpellings(c.id) {
				_, err := c.eng.Get(ctx, id)
				requireErr(t, err, port.ErrNotFound)
			}
			checkView(c, c.get(c.id))
		})
	}
}

// checkWait asserts port.Wait and port.Result: a terminal run's view and
// result at once, an open run's wait ending with its context, the errors
// of Get for an id that is not this engine's run; none writes anything.
func checkWait(c *cell) {
	t := c.t
	switch {
	case c.st.other:
		c.unchanged(c.id, func() {
			_, err := port.Wait(ctx, c.eng, c.id)
			requireErr(t, err, port.ErrOtherEngine)
			_, err = port.Result[programResult](ctx, c.eng, c.id)
			requireErr(t, err, port.ErrOtherEngine)
		})
	case !c.st.known():
		for _, id := range unknownIDs() {
			_, err := port.Wait(ctx, c.eng, id)
			requireErr(t, err, port.ErrNotFound)
			_, err = port.Result[programResult](ctx, c.eng, id)
			requireErr(t, err, port.ErrNotFound)
		}
	case c.open():
		// The run cannot end while the wait lasts (nothing releases or
		// signals it): the wait ends with its context, having written
		// nothing (a held run's row moves with its heartbeats).
		wait := func() {
			wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			defer cancel()
			_, err := port.Wait(wctx, c.eng, c.id)
			require.ErrorIs(t, err, context.DeadlineExceeded)
			_, err = port.Result[programResult](wctx, c.eng, c.id)
			require.ErrorIs(t, err, context.DeadlineExceeded)
		}
		if c.held() {
			wait()
		} else {
			c.unchanged(c.id, wait)
		}
	default:
		c.unchanged(c.id, func() {
			v, err := port.Wait(ctx, c.eng, c.id)
			require.NoError(t, err)
			checkView(c, v)
			got, err := port.Result[programResult](ctx, c.eng, c.id)
			switch c.st.status {
			case port.StatusSucceeded:
				require.NoError(t, err)
				require.Equal(t, programResult{Run: c.id}, got)
			case port.StatusFailed:
				var rf *port.RunFailedError
				require.ErrorAs(t, err, &rf)
				require.ErrorIs(t, err, port.ErrRunFailed)
				require.Equal(t, failedMessage(), rf.Message)
				require.Equal(t, c.id, rf.ID)
			case port.StatusCanceled:
				require.ErrorIs(t, err, port.ErrCanceled)
			}
		})
	}
}

func checkCancel(c *cell) {
	t := c.t
	switch {
	case c.st.other:
		c.unchanged(c.id, func() {
			err := c.eng.Cancel(ctx, c.id, "porttest")
			requireErr(t, err, port.ErrOtherEngine)
		})
	case !c.st.known():
		for _, id := range unknownIDs() {
			c.unchanged(id, func() { requireErr(t, c.eng.Cancel(ctx, id, "porttest"), port.ErrNotFound) })
		}
		// A run in its retry backoff is pending (the specification's
		// states): nothing serving, Cancel ends it canceled at once, with
		// the attempt it spent and no error.
		t.Run("in its retry backoff, nothing serving", func(t *testing.T) {
			c.start(port.StartOptions{})
			id, err := c.eng.Enqueue(ctx, kind, program{Fail: 1, BackoffMs: int(time.Hour / time.Millisecond)},
				port.EnqueueOptions{IdempotencyKey: c.key + ":backoff"})
			require.NoError(t, err)
			eventually(t, func() bool { v := c.get(id); return v.Status == port.StatusPending && v.LastError != "" },
				"run %s never read pending in its retry backoff", id)
			require.NoError(t, c.eng.Stop(ctx))
			c.started = false
			require.NoError(t, c.eng.Cancel(ctx, id, "porttest"))
			v := c.get(id)
			require.Equal(t, port.StatusCanceled, v.Status, "%+v", v)
			require.Equal(t, 1, v.Attempts, "%+v", v)
			require.Equal(t, "work", v.CurrentStep, "%+v", v)
			require.Empty(t, v.LastError, "%+v", v)
			require.False(t, v.FinishedAt.IsZero(), "%+v", v)
		})
		// A reason as long as Postgres text holds it is a reason: the
		// specification refuses only what text cannot store. Cancel
		// returns nil and the run ends canceled: a run not yet started
		// (EnqueueTx, nothing serving), a parked run and one in a step.
		t.Run("a long reason", func(t *testing.T) {
			reason := strings.Repeat("a long reason. ", 5<<20/15)
			canceled := func(name string, id port.RunID, step string) {
				t.Helper()
				require.NoError(t, c.eng.Cancel(ctx, id, reason), "%s: Cancel with a reason of %d bytes", name, len(reason))
				c.bodies.release(id)
				v := c.waitStatus(id, port.StatusSucceeded, port.StatusFailed, port.StatusCanceled)
				require.Equal(t, viewFields{port.StatusCanceled, v.Attempts, "", step}, fieldsOf(v), name)
			}
			if txe, ok := c.eng.(porttx.Enqueuer); ok {
				if c.started {
					require.NoError(t, c.eng.Stop(ctx))
					c.started = false
				}
				tx, err := c.h.Pool.Begin(ctx)
				require.NoError(t, err)
				id, err := txe.EnqueueTx(ctx, tx, kind, program{}, port.EnqueueOptions{IdempotencyKey: c.key + ":long-reason-tx"})
				require.NoError(t, err)
				require.NoError(t, tx.Commit(ctx))
				canceled("not started", id, "")
			}
			c.start(port.StartOptions{})
			for _, p := range []struct {
				name string
				prog program
				step string
			}{{"waiting", program{Topic: c.topic + ":long-reason"}, "wait"}, {"running", program{Block: true}, "work"}} {
				id, err := c.eng.Enqueue(ctx, kind, p.prog, port.EnqueueOptions{IdempotencyKey: c.key + ":long-reason-" + p.name})
				require.NoError(t, err)
				if p.name == "running" {
					c.waitExecution(id, "work")
				} else {
					c.waitStatus(id, port.StatusWaiting)
				}
				canceled(p.name, id, p.step)
			}
		})
		checkCancelRaces(c)
	case !c.open():
		c.unchanged(c.id, func() { require.NoError(t, c.eng.Cancel(ctx, c.id, "porttest")) })
	default:
		// Under another spelling of its id the run is unknown: Cancel
		// cancels nothing (Temporal's used to write the flag, miss the
		// workflow, and return nil).
		spelt := func() {
			for _, id := range otherSpellings(c.id) {
				requireErr(t, c.eng.Cancel(ctx, id, "porttest"), port.ErrNotFound)
			}
		}
		if c.held() {
			spelt()
		} else {
			c.unchanged(c.id, spelt)
		}
		if c.st.name == "waiting" {
			// Nothing serves the engine now: the cancel of a parked run
			// must not wait for a worker (the "pending" state never
			// started one).
			require.NoError(t, c.eng.Stop(ctx))
			c.started = false
		}
		// A reason Postgres cannot store is refused, naming it, and
		// nothing is written (no flag: the run goes on).
		c.unchanged(c.id, func() {
			for _, reason := range []string{"a\x00b", "\xff"} {
				var fe *port.FieldError
				require.ErrorAs(t, c.eng.Cancel(ctx, c.id, reason), &fe, "Cancel with reason %q", reason)
				require.Equal(t, "reason", fe.Field)
			}
		})
		before := c.get(c.id)
		require.NoError(t, c.eng.Cancel(ctx, c.id, "porttest"))
		mark := c.lastExecution()
		if !c.started {
			// Cancel and Get work whether or not the engine serves: a run
			// no step body is in ends canceled at the Cancel.
			v := c.get(c.id)
			require.Equal(t, port.StatusCanceled, v.Status, "a run nothing serves did not read canceled after Cancel: %+v", v)
			require.False(t, v.FinishedAt.IsZero(), "%+v", v)
		}
		if c.st.name == "running" {
			eventually(t, func() bool { return c.bodies.cause(c.id) != nil }, "the running body's context was never canceled")
			require.ErrorIs(t, c.bodies.cause(c.id), port.ErrCanceled, "the running body's context cause")
		}
		if !c.started {
			c.start(port.StartOptions{})
		}
		c.bodies.release(c.id) // a body that started anyway must not hold the run
		c.bodies.releaseAll()
		v := c.waitStatus(c.id, port.StatusSucceeded, port.StatusFailed, port.StatusCanceled)
		require.Equal(t, port.StatusCanceled, v.Status, "view %+v", v)
		if c.st.name == "leased" {
			// The blocker finished; the canceled run must never have started.
			c.waitStatus(c.blocker, port.StatusSucceeded, port.StatusFailed, port.StatusCanceled)
		}
		require.Zero(t, c.executions(c.id, "", mark), "a step body started after Cancel returned")
		require.Empty(t, v.LastError, "a cancel sets no error: %+v", v)
		require.Equal(t, before.CurrentStep, v.CurrentStep, "the end of the run changed CurrentStep: %+v", v)
		require.Equal(t, before.Attempts, v.Attempts, "the cancel changed Attempts: %+v", v)
		checkTimes(c, v)
		if c.st.name == "running" {
			require.Equal(t, 1, c.executions(c.id, "", 0), "executions of the canceled run")
		}
		// Terminal: the view stays as it first read canceled, once the
		// engine went on serving (a Temporal run canceled at rest reads
		// canceled at once, and its workflow ends afterwards).
		c.marker(c.eng, "after-cancel")
		got := c.get(c.id)
		require.Equal(t, fieldsOf(v), fieldsOf(got), "the canceled run changed")
		require.True(t, v.FinishedAt.Equal(got.FinishedAt), "FinishedAt moved from %s to %s", v.FinishedAt, got.FinishedAt)
		require.Nil(t, got.Output, "%+v", got)
		// A second Cancel writes nothing.
		c.unchanged(c.id, func() { require.NoError(t, c.eng.Cancel(ctx, c.id, "again")) })
	}
}

func checkEnqueue(c *cell) {
	t := c.t
	switch {
	case c.st.other:
		c.unchanged(c.id, func() {
			_, err := c.eng.Enqueue(ctx, kind, c.prog, port.EnqueueOptions{IdempotencyKey: c.key})
			requireErr(t, err, port.ErrOtherEngine)
		})
	case !c.st.known():
		n := c.count()
		id, err := c.eng.Enqueue(ctx, kind, program{}, port.EnqueueOptions{IdempotencyKey: c.key, BusinessKey: c.bk})
		require.NoError(t, err)
		require.Equal(t, n+1, c.count())
		v := c.get(id)
		require.Equal(t, port.RunView{ID: id, Kind: kind, Version: 1, BusinessKey: c.bk, Status: port.StatusPending,
			CreatedAt: v.CreatedAt, UpdatedAt: v.UpdatedAt, Cursor: v.Cursor}, v)
		checkTimes(c, v)
		// The years 1 and 9999 are valid AvailableAt (the bounds): a run due
		// in 9999 is pending and cancels as any delayed run; one due in the
		// year 1 runs as any other.
		c.t.Run("AvailableAt at the bounds", func(t *testing.T) {
			last, err := c.eng.Enqueue(ctx, kind, program{}, port.EnqueueOptions{IdempotencyKey: c.key + ":9999",
				AvailableAt: time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)})
			require.NoError(t, err)
			first, err := c.eng.Enqueue(ctx, kind, program{}, port.EnqueueOptions{IdempotencyKey: c.key + ":0001",
				AvailableAt: time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC)})
			require.NoError(t, err)
			c.start(port.StartOptions{})
			v := c.waitStatus(first, port.StatusSucceeded, port.StatusFailed, port.StatusCanceled)
			require.Equal(t, port.StatusSucceeded, v.Status, "the run due in the year 1: %+v", v)
			v = c.get(last)
			require.Equal(t, port.StatusPending, v.Status, "the run due in 9999: %+v", v)
			require.NoError(t, c.eng.Cancel(ctx, last, "porttest"))
			v = c.waitStatus(last, port.StatusSucceeded, port.StatusFailed, port.StatusCanceled)
			require.Equal(t, port.StatusCanceled, v.Status, "%+v", v)
			require.Zero(t, c.executions(last, "", 0), "the run due in 9999 ran")
		})
		// Each refused with a *FieldError naming its field, matching the
		// sentinel a caller tells it by, and nothing written.
		type refused struct {
			kind  port.Kind
			in    any
			opts  port.EnqueueOptions
			field string
			is    error
		}
		invalid := map[string]refused{
			"NUL in the input":        {in: program{Note: "a\x00b"}, opts: port.EnqueueOptions{IdempotencyKey: c.key + ":nul-input"}, field: "input"},
			"lone surrogate in input": {in: json.RawMessage(`{"note":"\ud800"}`), opts: port.EnqueueOptions{IdempotencyKey: c.key + ":surrogate"}, field: "input"},
			"oversize input": {in: program{Note: strings.Repeat("x", port.MaxPayloadBytes)}, opts: port.EnqueueOptions{IdempotencyKey: c.key + ":big"},
				field: "input", is: port.ErrPayloadTooLarge},
			"input the handler refuses": {in: json.RawMessage(`{"no_such_field":1}`), opts: port.EnqueueOptions{IdempotencyKey: c.key + ":strict"}, field: "input"},
			"unknown kind":              {kind: "porttest.no-such-kind", opts: port.EnqueueOptions{IdempotencyKey: c.key + ":nokind"}, field: "kind", is: port.ErrUnknownKind},
			"min version too new":       {opts: port.EnqueueOptions{IdempotencyKey: c.key + ":minv", MinVersion: 2}, field: "min_version", is: port.ErrUnknownVersion},
			"negative min version":      {opts: port.EnqueueOptions{IdempotencyKey: c.key + ":minv-neg", MinVersion: -1}, field: "min_version"},
			"empty key":                 {opts: port.EnqueueOptions{}, field: "idempotency_key"},
			"key over the limit":        {opts: port.EnqueueOptions{IdempotencyKey: strings.Repeat("k", port.MaxNameLen+1)}, field: "idempotency_key"},
			"NUL in the key":            {opts: port.EnqueueOptions{IdempotencyKey: c.key + "\x00"}, field: "idempotency_key"},
			"C1 control in the key":     {opts: port.EnqueueOptions{IdempotencyKey: c.key + "\u009b31m"}, field: "idempotency_key"},
			"invalid UTF-8 key":         {opts: port.EnqueueOptions{IdempotencyKey: c.key + "\xff"}, field: "idempotency_key"},
			"NUL in the business key":   {opts: port.EnqueueOptions{IdempotencyKey: c.key + ":nul-bk", BusinessKey: "a\x00b"}, field: "business_key"},
			"priority above the range":  {opts: port.EnqueueOptions{IdempotencyKey: c.key + ":prio", Priority: port.MaxPriority + 1}, field: "priority"},
			"priority below the range":  {opts: port.EnqueueOptions{IdempotencyKey: c.key + ":prio-", Priority: port.MinPriority - 1}, field: "priority"},
			"available after 9999": {opts: port.EnqueueOptions{IdempotencyKey: c.key + ":late", AvailableAt: time.Date(300000, 1, 1, 0, 0, 0, 0, time.UTC)},
				field: "available_at"},
			"available before year 1": {opts: port.EnqueueOptions{IdempotencyKey: c.key + ":early", AvailableAt: time.Date(-5000, 1, 1, 0, 0, 0, 0, time.UTC)},
				field: "available_at"},
		}
		for name, r := range invalid {
			k, in := cmp.Or(r.kind, kind), r.in
			if in == nil {
				in = program{}
			}
			n := c.count()
			_, err := c.eng.Enqueue(ctx, k, in, r.opts)
			var fe *port.FieldError
			require.ErrorAs(t, err, &fe, "%s: %v", name, err)
			require.Equal(t, r.field, fe.Field, "%s: %v", name, err)
			require.ErrorIs(t, err, cmp.Or(r.is, port.ErrInvalidInput), name)
			require.Equal(t, n, c.count(), "%s: a run was written", name)
			// EnqueueMany refuses the same item, by its index, writing
			// nothing of the batch.
			_, err = c.eng.EnqueueMany(ctx, []port.EnqueueItem{
				{Kind: kind, Input: program{}, Options: port.EnqueueOptions{IdempotencyKey: c.key + ":batch-ok:" + name}},
				{Kind: k, Input: in, Options: r.opts},
			})
			var ie *port.ItemError
			require.ErrorAs(t, err, &ie, "%s: %v", name, err)
			require.Equal(t, 1, ie.Index, name)
			require.ErrorAs(t, err, &fe, "%s: %v", name, err)
			require.Equal(t, r.field, fe.Field, "%s: %v", name, err)
			require.Equal(t, n, c.count(), "%s: the batch wrote a run", name)
		}
	default:
		if !c.held() {
			c.unchanged(c.id, func() { c.enqueueAgain() })
			return
		}
		n := c.count()
		c.enqueueAgain()
		require.Equal(t, n, c.count())
	}
}

// enqueueTxUntyped enqueues a run of a new key through a transaction on a
// connection in each of pgx's query exec modes that send no parameter
// types (exec, simple_protocol: a business pool behind PgBouncer's
// transaction pooling), commits each, and returns their runs, which must
// read and run as any other.
func enqueueTxUntyped(c *cell, eng porttx.Enqueuer) []port.RunID {
	t := c.t
	var ids []port.RunID
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol} {
		cfg := c.h.Pool.Config().ConnConfig.Copy()
		cfg.DefaultQueryExecMode = mode
		conn, err := pgx.ConnectConfig(ctx, cfg)
		require.NoError(t, err)
		tx, err := conn.Begin(ctx)
		require.NoError(t, err)
		id, err := eng.EnqueueTx(ctx, tx, kind, program{}, port.EnqueueOptions{IdempotencyKey: c.key + "/" + mode.String(), BusinessKey: c.bk})
		require.NoError(t, err, mode.String())
		require.NoError(t, tx.Commit(ctx))
		require.NoError(t, conn.Close(ctx))
		v := c.get(id)
		require.Equal(t, port.RunView{ID: id, Kind: kind, Version: 1, BusinessKey: c.bk, Status: port.StatusPending,
			CreatedAt: v.CreatedAt, UpdatedAt: v.UpdatedAt, Cursor: v.Cursor}, v, mode.String())
		ids = append(ids, id)
	}
	return ids
}

// enqueueAgain enqueues the state's (kind, key) with another input and
// expects the recorded run back.
func (c *cell) enqueueAgain() {
	id, err := c.eng.Enqueue(ctx, kind, program{Note: "another input"}, port.EnqueueOptions{IdempotencyKey: c.key})
	require.NoError(c.t, err)
	require.Equal(c.t, c.id, id)
}

// checkEnqueueTx asserts porttx.Enqueuer: Enqueue's table, written only
// through the caller's transaction. A new key's run exists once the
// transaction commits and then runs its steps once; rolled back, nothing
// was written and nothing runs; a refusal leaves the transaction usable.
func checkEnqueueTx(c *cell) {
	t := c.t
	eng, ok := c.eng.(porttx.Enqueuer)
	require.True(t, ok, "the engine does not implement porttx.Enqueuer")
	// inTx runs fn in a transaction and commits it, or rolls it back.
	inTx := func(commit bool, fn func(tx pgx.Tx)) {
		t.Helper()
		tx, err := c.h.Pool.Begin(ctx)
		require.NoError(t, err)
		fn(tx)
		if commit {
			require.NoError(t, tx.Commit(ctx))
		} else {
			require.NoError(t, tx.Rollback(ctx))
		}
	}
	switch {
	case c.st.other:
		c.unchanged(c.id, func() {
			inTx(true, func(tx pgx.Tx) {
				_, err := eng.EnqueueTx(ctx, tx, kind, c.prog, port.EnqueueOptions{IdempotencyKey: c.key})
				requireErr(t, err, port.ErrOtherEngine)
			})
		})
	case !c.st.known():
		n := c.count()
		var rolledBack port.RunID
		inTx(false, func(tx pgx.Tx) {
			id, err := eng.EnqueueTx(ctx, tx, kind, program{}, port.EnqueueOptions{IdempotencyKey: c.key, BusinessKey: c.bk})
			require.NoError(t, err)
			rolledBack = id
		})
		require.Equal(t, n, c.count(), "a rolled back EnqueueTx wrote a run")
		_, err := c.eng.Get(ctx, rolledBack)
		requireErr(t, err, port.ErrNotFound)

		var id port.RunID
		inTx(true, func(tx pgx.Tx) {
			// A refusal first: the transaction goes on.
			_, err := eng.EnqueueTx(ctx, tx, kind, program{}, port.EnqueueOptions{IdempotencyKey: c.key + "\x00"})
			var fe *port.FieldError
			require.ErrorAs(t, err, &fe)
			id, err = eng.EnqueueTx(ctx, tx, kind, program{}, port.EnqueueOptions{IdempotencyKey: c.key, BusinessKey: c.bk})
			require.NoError(t, err)
			again, err := eng.EnqueueTx(ctx, tx, kind, program{Note: "another input"}, port.EnqueueOptions{IdempotencyKey: c.key})
			require.NoError(t, err)
			require.Equal(t, id, again, "the same key in the same transaction is the same run")
		})
		require.Equal(t, n+1, c.count())
		v := c.get(id)
		require.Equal(t, port.RunView{ID: id, Kind: kind, Version: 1, BusinessKey: c.bk, Status: port.StatusPending,
			CreatedAt: v.CreatedAt, UpdatedAt: v.UpdatedAt, Cursor: v.Cursor}, v)
		untyped := enqueueTxUntyped(c, eng)
		require.Equal(t, n+1+len(untyped), c.count())
		c.start(port.StartOptions{})
		rctx, cancel := context.WithTimeout(ctx, waitFor)
		defer cancel()
		for _, id := range append([]port.RunID{id}, untyped...) {
			got, err := port.Result[programResult](rctx, c.eng, id)
			require.NoError(t, err)
			require.Equal(t, programResult{Run: id}, got)
			require.Equal(t, 1, c.executions(id, "work", 0), "the committed run's first step ran once")
		}
		require.Zero(t, c.executions(rolledBack, "work", 0), "the rolled back run never ran")
		// Committed, then canceled while nothing serves: canceled at once,
		// and no step of it runs once a worker serves.
		require.NoError(t, c.eng.Stop(ctx))
		var canceled port.RunID
		inTx(true, func(tx pgx.Tx) {
			var err error
			canceled, err = eng.EnqueueTx(ctx, tx, kind, program{}, port.EnqueueOptions{IdempotencyKey: c.key + ":canceled"})
			require.NoError(t, err)
		})
		require.NoError(t, c.eng.Cancel(ctx, canceled, "porttest"))
		v = c.get(canceled)
		require.Equal(t, port.StatusCanceled, v.Status, "%+v", v)
		c.start(port.StartOptions{})
		c.marker(c.eng, "enqueue-tx-canceled")
		require.Zero(t, c.executions(canceled, "", 0), "a step of the canceled run ran")
		require.Equal(t, v, c.get(canceled))

	default:
		again := func() {
			inTx(true, func(tx pgx.Tx) {
				id, err := eng.EnqueueTx(ctx, tx, kind, program{Note: "another input"}, port.EnqueueOptions{IdempotencyKey: c.key})
				require.NoError(t, err)
				require.Equal(t, c.id, id)
			})
		}
		if !c.held() {
			c.unchanged(c.id, again)
			return
		}
		n := c.count()
		again()
		require.Equal(t, n, c.count())
	}
}

func checkEnqueueMany(c *cell) {
	t := c.t
	fresh := c.key + ":fresh"
	item := func(key string, p program) port.EnqueueItem {
		return port.EnqueueItem{Kind: kind, Input: p, Options: port.EnqueueOptions{IdempotencyKey: key}}
	}
	switch {
	case c.st.other:
		c.unchanged(c.id, func() {
			_, err := c.eng.EnqueueMany(ctx, []port.EnqueueItem{item(c.key, program{})})
			var ie *port.ItemError
			require.ErrorAs(t, err, &ie, "%v", err)
			require.Equal(t, 0, ie.Index)
			requireErr(t, err, port.ErrOtherEngine)
		})
		// The specification: the item is named; the batch's other items
		// are recorded (the check rides on the read of the taken keys),
		// and run: the Temporal engine used to record them and start no
		// workflow, so they stayed pending for good.
		recorded := item(fresh, program{})
		recorded.Options.BusinessKey = c.bk + ":recorded"
		_, err := c.eng.EnqueueMany(ctx, []port.EnqueueItem{recorded, item(c.key, program{})})
		var ie *port.ItemError
		require.ErrorAs(t, err, &ie, "%v", err)
		require.Equal(t, 1, ie.Index)
		requireErr(t, err, port.ErrOtherEngine)
		vs, err := c.admin().ListRuns(ctx, port.RunFilter{BusinessKey: recorded.Options.BusinessKey})
		require.NoError(t, err)
		require.Len(t, vs, 1, "the batch's other item was not recorded")
		if !c.started {
			c.start(port.StartOptions{})
		}
		c.waitStatus(vs[0].ID, port.StatusSucceeded)
	case !c.st.known():
		n := c.count()
		res, err := c.eng.EnqueueMany(ctx, nil)
		require.NoError(t, err)
		require.Empty(t, res)
		_, err = c.eng.EnqueueMany(ctx, []port.EnqueueItem{item(fresh, program{}), item(fresh+":nul", program{Note: "a\x00b"})})
		var ie *port.ItemError
		require.ErrorAs(t, err, &ie, "%v", err)
		require.Equal(t, 1, ie.Index)
		var fe *port.FieldError
		require.ErrorAs(t, err, &fe, "%v", err)
		require.ErrorIs(t, err, port.ErrInvalidInput)
		require.Equal(t, n, c.count(), "a refused batch wrote runs")
	default:
		n := c.count()
		before := c.row(c.id)
		res, err := c.eng.EnqueueMany(ctx, []port.EnqueueItem{
			item(c.key, program{Note: "a"}), item(fresh, program{Note: "first"}),
			item(c.key, program{Note: "b"}), item(fresh, program{Note: "second"})})
		require.NoError(t, err)
		require.Len(t, res, 4)
		require.Equal(t, port.EnqueueResult{ID: c.id, Created: false}, res[0])
		require.True(t, res[1].Created)
		require.Equal(t, port.EnqueueResult{ID: c.id, Created: false}, res[2])
		require.Equal(t, port.EnqueueResult{ID: res[1].ID, Created: false}, res[3])
		require.Equal(t, n+1, c.count())
		if !c.held() {
			require.Equal(t, before, c.row(c.id), "the batch changed the recorded run")
		}
	}
}

func checkSignal(c *cell) {
	t := c.t
	payload := "porttest payload"
	signal := func(topic string) int {
		n, err := c.eng.Signal(ctx, port.Topic(topic), payload)
		require.NoError(t, err)
		return n
	}
	// received asserts the run went through its wait with the payload.
	received := func() {
		c.bodies.release(c.id)
		c.bodies.releaseAll()
		v := c.waitStatus(c.id, port.StatusSucceeded, port.StatusFailed, port.StatusCanceled)
		require.Equal(t, port.StatusSucceeded, v.Status, "view %+v", v)
		require.Equal(t, payload, c.donePayload(c.id), "the wait did not receive the signal")
		require.Equal(t, 1, c.executions(c.id, "work", 0), "duplicate executions of work")
		require.Equal(t, 1, c.executions(c.id, "done", 0), "duplicate executions of done")
	}
	// receives enqueues a run that waits on topic and asserts that its
	// wait received want.
	receives := func(topic, key, want string) {
		t.Helper()
		id, err := c.eng.Enqueue(ctx, kind, program{Topic: topic}, port.EnqueueOptions{IdempotencyKey: c.key + key})
		require.NoError(t, err)
		v := c.waitStatus(id, port.StatusSucceeded, port.StatusFailed, port.StatusCanceled)
		require.Equal(t, port.StatusSucceeded, v.Status, "this engine's wait did not receive the kept signal: %+v", v)
		require.Equal(t, want, c.donePayload(id))
	}
	switch c.st.name {
	case "other":
		c.unchanged(c.id, func() { require.Zero(t, signal(c.topic), "another engine's run counted") })
		// The signal was kept for this engine's next wait on the topic; and
		// with the other engine's run parked on the topic, a second one is
		// too: that run is not counted and not reached (an engine that
		// reaches for it depends on the other engine's server being up).
		c.start(port.StartOptions{})
		receives(c.topic, ":first", payload)
		t.Run("waiting on the other engine", func(t *testing.T) {
			c.startEngine(c.other, port.StartOptions{})
			otherStatus := func() port.Status {
				v, err := c.other.Get(ctx, c.id)
				require.NoError(t, err)
				return v.Status
			}
			eventually(t, func() bool { return otherStatus() == port.StatusWaiting }, "the other engine's run %s never waited", c.id)
			n, err := c.eng.Signal(ctx, port.Topic(c.topic), "second")
			require.NoError(t, err)
			require.Zero(t, n, "another engine's waiting run counted")
			receives(c.topic, ":second", "second")
			require.Equal(t, port.StatusWaiting, otherStatus(), "the signal reached the other engine's run")
		})
	case "unknown":
		require.Zero(t, signal(c.topic))
		// A topic the engines refuse, or a payload over the limit, is
		// refused naming it, and nothing is kept: the next wait on the
		// topic receives the valid signal sent after them.
		for _, bad := range []struct {
			topic   string
			payload any
			field   string
			is      error
		}{
			{topic: "", payload: payload, field: "topic", is: port.ErrInvalidInput},
			{topic: "a topic", payload: payload, field: "topic", is: port.ErrInvalidInput},
			{topic: c.topic + ":refused", payload: strings.Repeat("x", port.MaxPayloadBytes), field: "payload", is: port.ErrPayloadTooLarge},
			{topic: c.topic + ":refused", payload: map[string]string{"s": "a\x00b"}, field: "payload", is: port.ErrInvalidInput},
		} {
			n, err := c.eng.Signal(ctx, port.Topic(bad.topic), bad.payload)
			var fe *port.FieldError
			require.ErrorAs(t, err, &fe, "Signal(%q): %v", bad.topic, err)
			require.Equal(t, bad.field, fe.Field)
			require.ErrorIs(t, err, bad.is)
			require.Zero(t, n)
		}
		c.start(port.StartOptions{})
		require.Zero(t, signal(c.topic+":refused"))
		receives(c.topic+":refused", ":after-refused", payload)
		checkSignalRacingTheWait(c)
		checkSecondSignalAcrossContinue(c)
	case "delayed":
		c.unchanged(c.id, func() { require.Zero(t, signal(c.topic)) })
	case "succeeded", "failed", "canceled":
		c.unchanged(c.id, func() { require.Zero(t, signal(c.topic)) })
		// Found no run parked: kept for the topic's next wait.
		receives(c.topic, ":after-end", payload)
	case "pending":
		require.Zero(t, signal(c.topic))
		c.start(port.StartOptions{})
		received()
		// Each kept signal is for one wait: two sent while nobody waits
		// are received by the next two waits, oldest first, not both by
		// the first (where the second would be lost with that run).
		t.Run("two kept signals, two waits", func(t *testing.T) {
			topic := c.topic + ":kept-two"
			for _, p := range []string{"kept 1", "kept 2"} {
				n, err := c.eng.Signal(ctx, port.Topic(topic), p)
				require.NoError(t, err)
				require.Zero(t, n, "nobody waits on %s", topic)
			}
			receives(topic, ":kept-1", "kept 1")
			receives(topic, ":kept-2", "kept 2")
		})
	case "leased", "running":
		require.Zero(t, signal(c.topic), "a run not yet waiting counted")
		received()
	case "waiting":
		t.Run("NUL payload", func(t *testing.T) {
			c.unchanged(c.id, func() {
				n, err := c.eng.Signal(ctx, port.Topic(c.topic), map[string]string{"s": "a\x00b"})
				var fe *port.FieldError
				require.ErrorAs(t, err, &fe, "%v", err)
				require.Equal(t, "payload", fe.Field)
				require.ErrorIs(t, err, port.ErrInvalidInput)
				require.Zero(t, n)
			})
		})
		require.Equal(t, 1, signal(c.topic))
		received()
		// After the wait: a run running a step between two waits is not
		// waiting, so it is not counted, and a signal sent then is kept for
		// the topic's next wait. betweenWaits enqueues p on topic, wakes its
		// first wait, signals it while it runs "mid", then lets it go on
		// and returns its view once it ended.
		betweenWaits := func(topic string, p program) port.RunView {
			p.Topic = topic
			id, err := c.eng.Enqueue(ctx, kind, p, port.EnqueueOptions{IdempotencyKey: c.key + ":" + topic})
			require.NoError(t, err)
			c.waitStatus(id, port.StatusWaiting)
			require.Equal(t, 1, signal(topic))
			c.waitExecution(id, "mid")
			require.Zero(t, signal(topic), "a run running a step after its wait counted")
			c.bodies.release(id)
			return c.waitStatus(id, port.StatusSucceeded, port.StatusFailed, port.StatusCanceled)
		}
		// A run parked in a sleep after its wait on the topic is not
		// parked in a WaitSignal there: a signal counts 0 and is kept for
		// the topic's next wait.
		t.Run("asleep after its wait", func(t *testing.T) {
			topic := c.topic + ":asleep"
			id, err := c.eng.Enqueue(ctx, kind, program{Topic: topic, SleepMs: int(time.Hour / time.Millisecond)},
				port.EnqueueOptions{IdempotencyKey: c.key + ":" + topic})
			require.NoError(t, err)
			c.waitStatus(id, port.StatusWaiting)
			require.Equal(t, 1, signal(topic))
			eventually(t, func() bool { v := c.get(id); return v.Status == port.StatusWaiting && v.CurrentStep == "nap" },
				"run %s never slept", id)
			require.Zero(t, signal(topic), "a run asleep counted")
			require.NoError(t, c.eng.Cancel(ctx, id, "porttest"))
			receives(topic, ":asleep-next", payload)
		})
		// A run canceled in its wait is no longer parked there: a signal
		// then counts 0 and is kept for the topic's next wait.
		t.Run("canceled in its wait", func(t *testing.T) {
			topic := c.topic + ":canceled"
			id, err := c.eng.Enqueue(ctx, kind, program{Topic: topic}, port.EnqueueOptions{IdempotencyKey: c.key + ":" + topic})
			require.NoError(t, err)
			c.waitStatus(id, port.StatusWaiting)
			require.NoError(t, c.eng.Cancel(ctx, id, "porttest"))
			c.waitStatus(id, port.StatusCanceled)
			require.Zero(t, signal(topic), "a canceled run counted")
			receives(topic, ":canceled-next", payload)
		})
		t.Run("between two waits", func(t *testing.T) {
			v := betweenWaits(c.topic+":two", program{SecondWait: true})
			require.Equal(t, port.StatusSucceeded, v.Status, "the second wait did not receive the kept signal in time: %+v", v)
		})
		// Kept for the topic, not for that run alone: when the run ends
		// without waiting again, another run's wait receives it.
		t.Run("between two waits, then no wait", func(t *testing.T) {
			topic := c.topic + ":gone"
			v := betweenWaits(topic, program{MidOnly: true})
			require.Equal(t, port.StatusSucceeded, v.Status, "%+v", v)
			next, err := c.eng.Enqueue(ctx, kind, program{Topic: topic}, port.EnqueueOptions{IdempotencyKey: c.key + ":gone-next"})
			require.NoError(t, err)
			v = c.waitStatus(next, port.StatusSucceeded, port.StatusFailed, port.StatusCanceled)
			require.Equal(t, port.StatusSucceeded, v.Status, "the next run's wait did not receive the signal the first run ended without: %+v", v)
			require.Equal(t, payload, c.donePayload(next))
		})
		// Last, as it stops the engine: a run parked on the topic whose
		// timeout fell due while nothing served it is still parked there: the signal counts 1, and the
		// wait, resumed under the next Start, returns it received.
		t.Run("its timeout past while nothing serves", func(t *testing.T) {
			topic := c.topic + ":timed-out"
			id, err := c.eng.Enqueue(ctx, kind, program{Topic: topic, TimeoutMs: 200},
				port.EnqueueOptions{IdempotencyKey: c.key + ":" + topic})
			require.NoError(t, err)
			parked := c.waitStatus(id, port.StatusWaiting)
			stopping, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			require.NoError(t, c.eng.Stop(stopping))
			c.started = false
			// The timeout is on the clock of the engine's Postgres (and
			// Temporal's server, on this host): poll it, well past.
			eventually(t, func() bool {
				var past bool
				require.NoError(t, c.h.Pool.QueryRow(ctx, `SELECT now() > $1::timestamptz + interval '1 second'`, parked.UpdatedAt).Scan(&past))
				return past
			}, "the wait's timeout never fell due")
			require.Equal(t, 1, signal(topic), "the run parked on the topic, its timeout past")
			c.startEngine(c.h.New(t, c.reg), port.StartOptions{})
			v := c.waitStatus(id, port.StatusSucceeded, port.StatusFailed, port.StatusCanceled)
			require.Equal(t, port.StatusSucceeded, v.Status, "%+v", v)
			require.Equal(t, payload, c.donePayload(id), "the wait did not return the signal it was counted for")
		})
	}
}

func checkListRuns(c *cell) {
	t := c.t
	list := func(f port.RunFilter) []port.RunView {
		vs, err := c.admin().ListRuns(ctx, f)
		require.NoError(t, err)
		return vs
	}
	ids := runIDs
	switch {
	case c.st.other:
		c.unchanged(c.id, func() {
			require.NotContains(t, ids(list(port.RunFilter{})), c.id, "another engine's run listed")
			require.NotContains(t, ids(list(port.RunFilter{BusinessKey: c.bk})), c.id, "another engine's run listed")
		})
	case !c.st.known():
		require.NotContains(t, ids(list(port.RunFilter{Kind: kind})), c.id)
		for field, f := range map[string]port.RunFilter{
			"limit":         {Limit: port.MaxRunsPerPage + 1},
			"status":        {Statuses: []port.Status{"dead"}},
			"version":       {Version: 1 << 40},
			"below_version": {Kind: kind, BelowVersion: -1},
			"after":         {After: "not a cursor"},
		} {
			_, err := c.admin().ListRuns(ctx, f)
			var fe *port.FieldError
			require.ErrorAs(t, err, &fe, "ListRuns(%+v)", f)
			require.Equal(t, field, fe.Field)
			require.ErrorIs(t, err, port.ErrInvalidInput)
		}
		checkListPaging(c)
		checkTransitions(c)
	default:
		vs := list(port.RunFilter{Kind: kind, BusinessKey: c.bk})
		require.Equal(t, []port.RunID{c.id}, ids(vs))
		got := vs[0]
		if !c.wantStatus().Terminal() {
			// The specification: a listing tells an open run from a
			// finished one; where the open run is, is Get's to say.
			require.False(t, got.Status.Terminal(), "an open run listed as %s", got.Status)
			require.NotContains(t, ids(list(port.RunFilter{Kind: kind,
				Statuses: []port.Status{port.StatusSucceeded, port.StatusFailed, port.StatusCanceled}})), c.id)
			return
		}
		require.Equal(t, c.wantStatus(), got.Status)
		require.NotContains(t, ids(list(port.RunFilter{Kind: kind, Statuses: otherStatuses(got.Status)})), c.id)
		if !c.held() {
			want := c.get(c.id)
			got.Cursor, want.Cursor = "", ""
			require.Equal(t, want, got, "ListRuns and Get disagree")
		}
	}
}

func otherStatuses(s port.Status) []port.Status {
	all := []port.Status{port.StatusPending, port.StatusRunning, port.StatusWaiting, port.StatusSucceeded, port.StatusFailed, port.StatusCanceled}
	return slices.DeleteFunc(all, func(x port.Status) bool { return x == s })
}

func checkRetry(c *cell) {
	t := c.t
	switch {
	case c.st.other:
		c.unchanged(c.id, func() {
			_, err := c.admin().Retry(ctx, c.id)
			requireErr(t, err, port.ErrOtherEngine)
		})
	case !c.st.known():
		for _, id := range unknownIDs() {
			_, err := c.admin().Retry(ctx, id)
			requireErr(t, err, port.ErrNotFound)
		}
	case c.st.status == port.StatusFailed:
		c.unchanged(c.id, func() {
			for _, id := range otherSpellings(c.id) {
				_, err := c.admin().Retry(ctx, id)
				requireErr(t, err, port.ErrNotFound)
			}
		})
		var again port.RunID
		c.rowUnchanged(c.id, func() {
			var err error
			again, err = c.admin().Retry(ctx, c.id)
			require.NoError(t, err)
		})
		require.NotEqual(t, c.id, again)
		second, err := c.admin().Retry(ctx, c.id)
		require.NoError(t, err)
		require.Equal(t, again, second, "a repeated Retry started another run")
		v := c.get(again)
		require.Equal(t, kind, v.Kind)
		require.Equal(t, c.bk, v.BusinessKey)
		checkRetryTwiceAtOnce(c)
	default:
		refuse := func() {
			_, err := c.admin().Retry(ctx, c.id)
			requireErr(t, err, port.ErrInvalidInput)
		}
		if c.held() {
			n := c.count()
			refuse()
			require.Equal(t, n, c.count())
			return
		}
		c.unchanged(c.id, refuse)
	}
}

// marker runs a run of the engine under test to its end, so that every
// run the engine could have taken meanwhile had its chance.
func (c *cell) marker(e port.TaskEngine, name string) {
	c.t.Helper()
	id, err := e.Enqueue(ctx, kind, program{}, port.EnqueueOptions{IdempotencyKey: c.key + ":marker:" + name})
	require.NoError(c.t, err)
	eventually(c.t, func() bool {
		v, err := e.Get(ctx, id)
		return err == nil && v.Status.Terminal()
	}, "marker run %s never ended", id)
}

func checkStart(c *cell) {
	t := c.t
	switch {
	case c.st.name == "pending":
		// Versions that name what is not registered, or serve nothing,
		// are refused before anything is served: the run stays pending.
		c.unchanged(c.id, func() {
			for _, v := range []map[port.Kind][]int{{kind: {99}}, {kind: {1}, kind + "_misspelt": {1}}, {}} {
				var fe *port.FieldError
				require.ErrorAs(t, c.eng.Start(ctx, port.StartOptions{Versions: v}), &fe, "Start with Versions %v", v)
				require.Equal(t, "versions", fe.Field)
			}
			for _, n := range []int{port.MaxConcurrency + 1, -1} {
				var fe *port.FieldError
				require.ErrorAs(t, c.eng.Start(ctx, port.StartOptions{Concurrency: n}), &fe, "Start with Concurrency %d", n)
				require.Equal(t, "concurrency", fe.Field)
			}
		})
		c.start(port.StartOptions{})
		c.bodies.release(c.id)
		c.waitStatus(c.id, port.StatusWaiting)
		require.Equal(t, 1, c.executions(c.id, "work", 0))
	case c.st.other || !c.open():
		// Another engine's run and a finished run are never taken.
		c.rowUnchanged(c.id, func() {
			if !c.started {
				c.start(port.StartOptions{})
			}
			c.marker(c.eng, "start")
		})
		require.Zero(t, c.executions(c.id, "", 0)-c.finishedExecutions(), "a body ran for a run it should not take")
	default:
		// delayed, leased, running, waiting: the engine already serves.
		err := c.eng.Start(ctx, port.StartOptions{})
		require.ErrorIs(t, err, port.ErrAlreadyStarted)
		if c.st.name == "delayed" {
			c.rowUnchanged(c.id, func() { c.marker(c.eng, "delayed") })
			require.Zero(t, c.executions(c.id, "", 0), "a delayed run ran early")
		}
	}
}

// finishedExecutions counts the bodies of the state's run that ran before
// the row's check (a succeeded run ran work and done).
func (c *cell) finishedExecutions() int {
	switch c.st.name {
	case "succeeded":
		return 2
	case "failed":
		return 1
	}
	return 0
}

func checkStop(c *cell) {
	t := c.t
	stop := func(e port.TaskEngine) {
		sctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		require.NoError(t, e.Stop(sctx))
	}
	switch c.st.name {
	case "running", "leased":
		c.stopReleasing(c.id)
		// Nothing serves the run now: the specification's "A run a Stop
		// left" reads pending (lease) or running (Temporal), in the step
		// its body ran (running) or before any (leased), and moves no
		// further until a Start. An engine still serving when the body
		// was released (a router stops its engines one after the other)
		// may have taken the run on to its wait: it is parked there.
		stopped := fieldsOf(c.get(c.id))
		want := viewFields{stopped.Status, 1, "", "work"}
		switch {
		case stopped.Status == port.StatusWaiting:
			want = viewFields{port.StatusWaiting, 0, "", "wait"}
		case c.st.name == "leased":
			want = viewFields{stopped.Status, 0, "", ""}
		}
		require.Contains(t, []port.Status{port.StatusPending, port.StatusRunning, port.StatusWaiting}, stopped.Status, "the run after Stop: %+v", stopped)
		require.Equal(t, want, stopped, "the run after Stop, nothing serving")
		t.Logf("after Stop, nothing serving, the run reads %s", stopped.Status)
		require.Never(t, func() bool { return fieldsOf(c.get(c.id)) != want }, time.Second, pollEvery,
			"the run moved with nothing serving it")
		next := c.h.New(t, c.reg)
		c.startEngine(next, port.StartOptions{})
		v := c.waitStatus(c.id, port.StatusWaiting, port.StatusFailed, port.StatusSucceeded, port.StatusCanceled)
		require.Equal(t, port.StatusWaiting, v.Status, "view %+v", v)
		var finished int
		require.NoError(t, c.h.Pool.QueryRow(ctx, `SELECT count(*) FROM porttest.execution WHERE run_id = $1 AND step = 'work' AND finished`, string(c.id)).Scan(&finished))
		require.Equal(t, 1, finished, "step work finished more than once")
		if c.st.name == "leased" {
			var attempt int
			require.NoError(t, c.h.Pool.QueryRow(ctx, `SELECT min(attempt) FROM porttest.execution WHERE run_id = $1 AND step = 'work'`, string(c.id)).Scan(&attempt))
			require.Equal(t, 1, attempt, "the first body of a run leased but not started saw a later attempt")
		}
	case "waiting":
		stop(c.eng)
		require.Equal(t, port.StatusWaiting, c.get(c.id).Status)
		next := c.h.New(t, c.reg)
		c.startEngine(next, port.StartOptions{})
		n, err := next.Signal(ctx, port.Topic(c.topic), "after stop")
		require.NoError(t, err)
		require.Equal(t, 1, n)
		v := c.waitStatus(c.id, port.StatusSucceeded, port.StatusFailed, port.StatusCanceled)
		require.Equal(t, port.StatusSucceeded, v.Status)
	default:
		// Not serving (pending, unknown, other), or runs that stay as they
		// are: Stop and a second Stop return nil and write nothing.
		c.unchanged(c.id, func() {
			stop(c.eng)
			stop(c.eng)
		})
		if c.st.name == "unknown" {
			checkCancelAfterStop(c)
			checkStopPastItsBound(c)
		}
	}
}

// checkStopPastItsBound: a body that outlives the engine's stop bound is
// handed back; its context ends with a cause matching ErrLeaseLost (the
// attempt no longer owns the step), and the run goes on under the next
// Start, its step finishing once. (Whether the stopped attempt counts
// differs: docs/engines.md, "Known differences".)
func checkStopPastItsBound(c *cell) {
	c.t.Run("a step that outlives the stop bound", func(t *testing.T) {
		id := c.blockedInWork(":outlives", program{Block: true})
		sctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		require.NoError(t, c.eng.Stop(sctx))
		c.started = false
		eventually(t, func() bool { return c.bodies.cause(id) != nil }, "the body's context never ended")
		require.ErrorIs(t, c.bodies.cause(id), port.ErrLeaseLost, "the body's context cause")
		// Nothing serves the run now: it reads pending, and goes on
		// reading pending once a retry it is due is not taken (Temporal's
		// next attempt scheduled and due, the lease engine's claim handed
		// back), as a run between two attempts does.
		eventually(t, func() bool { return c.get(id).Status == port.StatusPending }, "run %s never read pending after the stop", id)
		require.Never(t, func() bool { return c.get(id).Status != port.StatusPending }, time.Second, pollEvery,
			"run %s stopped read other than pending with nothing serving", id)
		c.bodies.release(id)
		c.startEngine(c.h.New(t, c.reg), port.StartOptions{})
		v := c.waitStatus(id, port.StatusSucceeded, port.StatusFailed, port.StatusCanceled)
		require.Equal(t, port.StatusSucceeded, v.Status, "%+v", v)
		var finished int
		require.NoError(t, c.h.Pool.QueryRow(ctx, `SELECT count(*) FROM porttest.execution WHERE run_id = $1 AND step = 'work' AND finished`, string(id)).Scan(&finished))
		require.Equal(t, 1, finished, "step work finished more than once")
		rows, err := c.h.Pool.Query(ctx, `SELECT attempt FROM porttest.execution WHERE run_id = $1 AND step = 'work' ORDER BY id`, string(id))
		require.NoError(t, err)
		attempts, err := pgx.CollectRows(rows, pgx.RowTo[int])
		require.NoError(t, err)
		t.Logf("attempts of the bodies of work: %v; the run's Attempts: %d", attempts, v.Attempts)
	})
}

// checkCancelAfterStop: a run a Stop left between two moves (its step's
// body finished under the Stop), canceled while nothing serves it, ends
// canceled at the Cancel in that step, as any run no step body is in; no
// step of it runs once a worker serves again, and it reads as it did.
func checkCancelAfterStop(c *cell) {
	c.t.Run("canceled after a Stop left it between two steps", func(t *testing.T) {
		id := c.blockedInWork(":stopped-canceled", program{Block: true, Topic: c.topic + ":stopped-canceled"})
		c.stopReleasing(id)
		require.True(t, c.finished(id, "work"), "work did not finish under the Stop")
		// An engine still serving when the body was released (a router
		// stops its engines one after the other) may have taken the run
		// on to its wait: it is then canceled there.
		want := viewFields{port.StatusCanceled, 1, "", "work"}
		if c.get(id).Status == port.StatusWaiting {
			want = viewFields{port.StatusCanceled, 0, "", "wait"}
			t.Logf("the run parked in its wait before the engine stopped")
		}
		require.NoError(t, c.eng.Cancel(ctx, id, "porttest"))
		v := c.get(id)
		require.Equal(t, want, fieldsOf(v), "%+v", v)
		require.False(t, v.FinishedAt.IsZero(), "%+v", v)
		mark := c.lastExecution()
		c.start(port.StartOptions{})
		c.marker(c.eng, "stopped-canceled")
		require.Zero(t, c.executions(id, "", mark), "a step of the canceled run ran")
		got := c.get(id)
		require.Equal(t, fieldsOf(v), fieldsOf(got))
		require.True(t, v.FinishedAt.Equal(got.FinishedAt), "FinishedAt moved from %s to %s", v.FinishedAt, got.FinishedAt)
		// Nothing left serving for the rows after this one.
		require.NoError(t, c.eng.Stop(ctx))
		c.started = false
	})
}

// blockedInWork makes the engine under test serve and returns a run of p
// (which blocks in work) under a new key (c.key+suffix), whose body of work
// started.
func (c *cell) blockedInWork(suffix string, p program) port.RunID {
	c.t.Helper()
	c.start(port.StartOptions{})
	id, err := c.eng.Enqueue(ctx, kind, p, port.EnqueueOptions{IdempotencyKey: c.key + suffix})
	require.NoError(c.t, err)
	c.waitExecution(id, "work")
	return id
}

// stopReleasing stops the engine under test while it releases the blocked
// bodies of run id (and every other), so that they finish under the Stop.
func (c *cell) stopReleasing(id port.RunID) {
	c.t.Helper()
	done := make(chan error, 1)
	go func() {
		sctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		done <- c.eng.Stop(sctx)
	}()
	c.bodies.release(id)
	c.bodies.releaseAll()
	require.NoError(c.t, <-done)
	c.started = false
}
