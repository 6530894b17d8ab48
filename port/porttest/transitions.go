package porttest

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/port"
)

// The rows of this file follow runs through their transitions, reading
// every RunView field through Get and through Admin.ListRuns at each rest
// point, and drive the races the specification answers: Cancel against a
// run's end, two Cancels, two Retries, a Signal against a wait's
// registration.

// viewFields are the fields of a view the specification compares for a run
// at rest in one place (Get's).
type viewFields struct {
	Status      port.Status
	Attempts    int
	LastError   string
	CurrentStep string
}

func fieldsOf(v port.RunView) viewFields {
	return viewFields{v.Status, v.Attempts, v.LastError, v.CurrentStep}
}

// at polls Get until run id reads want, then checks the view's other
// fields and its listing, and returns the view.
func (c *cell) at(t *testing.T, id port.RunID, bk string, want viewFields, what string) port.RunView {
	t.Helper()
	var last port.RunView
	eventually(t, func() bool {
		v, err := c.eng.Get(ctx, id)
		last = v
		return err == nil && fieldsOf(v) == want
	}, "%s: run %s never read %+v; last view %+v", what, id, want, &last)
	require.Equal(t, id, last.ID, what)
	require.Equal(t, kind, last.Kind, what)
	require.Equal(t, 1, last.Version, what)
	require.Equal(t, bk, last.BusinessKey, what)
	if last.Status == port.StatusSucceeded {
		var out programResult
		require.NoError(t, json.Unmarshal(last.Output, &out), "%s: %+v", what, last)
		require.Equal(t, id, out.Run, "%s: the result of another run: %+v", what, last)
	} else {
		require.Nil(t, last.Output, "%s: a run that did not succeed has a result: %+v", what, last)
	}
	require.False(t, last.CreatedAt.IsZero(), "%s: %+v", what, last)
	require.False(t, last.UpdatedAt.Before(last.CreatedAt), "%s: UpdatedAt before CreatedAt: %+v", what, last)
	if last.Status.Terminal() {
		require.False(t, last.FinishedAt.IsZero(), "%s: terminal without FinishedAt: %+v", what, last)
		require.False(t, last.FinishedAt.Before(last.UpdatedAt), "%s: FinishedAt before UpdatedAt: %+v", what, last)
	} else {
		require.True(t, last.FinishedAt.IsZero(), "%s: open with FinishedAt: %+v", what, last)
	}
	if last.Status != port.StatusRunning {
		// At rest and held by no worker, nothing moves: the same view on
		// every Get.
		again, err := c.eng.Get(ctx, id)
		require.NoError(t, err)
		require.Equal(t, last, again, "%s: two Gets of a run at rest disagree", what)
	}
	// Against the view of the run's previous transition: CreatedAt never
	// moves, FinishedAt is set once, and UpdatedAt advanced with the
	// change of a field.
	c.seenMu.Lock()
	prev, ok := c.seen[id]
	if c.seen == nil {
		c.seen = map[port.RunID]port.RunView{}
	}
	c.seen[id] = last
	c.seenMu.Unlock()
	if ok {
		require.True(t, prev.CreatedAt.Equal(last.CreatedAt), "%s: CreatedAt moved from %s to %s", what, prev.CreatedAt, last.CreatedAt)
		if !prev.FinishedAt.IsZero() {
			require.True(t, prev.FinishedAt.Equal(last.FinishedAt), "%s: FinishedAt moved from %s to %s", what, prev.FinishedAt, last.FinishedAt)
		}
		if fieldsOf(prev) != fieldsOf(last) {
			require.True(t, last.UpdatedAt.After(prev.UpdatedAt), "%s: %+v became %+v, and UpdatedAt did not advance from %s (now %s)",
				what, fieldsOf(prev), fieldsOf(last), prev.UpdatedAt, last.UpdatedAt)
		} else {
			require.False(t, last.UpdatedAt.Before(prev.UpdatedAt), "%s: UpdatedAt went back from %s to %s", what, prev.UpdatedAt, last.UpdatedAt)
		}
	}
	c.listedAs(t, last, what)
	return last
}

// listedAs asserts that ListRuns lists run get.ID as the specification has
// it, given the view Get returned: a finished run with that view (Cursor
// aside), an open run as open, with the fields that do not move while it
// is open (kind, version, business key, creation) the same, no FinishedAt
// and no result.
func (c *cell) listedAs(t *testing.T, get port.RunView, what string) {
	t.Helper()
	vs, err := c.admin().ListRuns(ctx, port.RunFilter{Kind: kind, BusinessKey: get.BusinessKey})
	require.NoError(t, err)
	var listed *port.RunView
	for i := range vs {
		if vs[i].ID == get.ID {
			listed = &vs[i]
		}
	}
	require.NotNil(t, listed, "%s: run %s not listed under its business key", what, get.ID)
	got := *listed
	require.NotEmpty(t, got.Cursor, what)
	if get.Status.Terminal() {
		got.Cursor, get.Cursor = "", ""
		require.Equal(t, get, got, "%s: ListRuns and Get disagree", what)
		return
	}
	require.False(t, got.Status.Terminal(), "%s: an open run listed as %s: %+v", what, got.Status, got)
	require.Equal(t, get.Kind, got.Kind, what)
	require.Equal(t, get.Version, got.Version, what)
	require.Equal(t, get.BusinessKey, got.BusinessKey, what)
	require.True(t, get.CreatedAt.Equal(got.CreatedAt), "%s: CreatedAt: Get %s, ListRuns %s", what, get.CreatedAt, got.CreatedAt)
	require.True(t, got.FinishedAt.IsZero(), "%s: an open run listed with FinishedAt: %+v", what, got)
	require.Nil(t, got.Output, "%s: an open run listed with a result: %+v", what, got)
}

// checkTransitions is ListRuns/unknown's walk: runs in every state a run
// passes through, read through Get and ListRuns at each.
func checkTransitions(c *cell) {
	c.t.Run("every transition, through Get and ListRuns", func(t *testing.T) {
		enqueue := func(name string, p program) (port.RunID, string) {
			bk := c.bk + ":" + name
			id, err := c.eng.Enqueue(ctx, kind, p, port.EnqueueOptions{IdempotencyKey: c.key + ":" + name, BusinessKey: bk})
			require.NoError(t, err)
			return id, bk
		}
		topic := c.topic + ":walk"
		// Enqueued, nothing serving: pending, before any step.
		walk, walkBK := enqueue("walk", program{Block: true, Topic: topic, SleepMs: int(time.Hour / time.Millisecond)})
		c.at(t, walk, walkBK, viewFields{port.StatusPending, 0, "", ""}, "enqueued")
		c.start(port.StartOptions{})
		// The first step's body running.
		c.waitExecution(walk, "work")
		c.at(t, walk, walkBK, viewFields{port.StatusRunning, 1, "", "work"}, "first step running")
		// Parked on a signal, then on a sleep.
		c.bodies.release(walk)
		c.at(t, walk, walkBK, viewFields{port.StatusWaiting, 0, "", "wait"}, "waiting on a signal")
		n, err := c.eng.Signal(ctx, port.Topic(topic), "walk")
		require.NoError(t, err)
		require.Equal(t, 1, n)
		c.at(t, walk, walkBK, viewFields{port.StatusWaiting, 0, "", "nap"}, "waiting on a sleep")
		// Canceled in its sleep: the sleep stays its step.
		require.NoError(t, c.eng.Cancel(ctx, walk, "porttest"))
		c.at(t, walk, walkBK, viewFields{port.StatusCanceled, 0, "", "nap"}, "canceled in a sleep")

		// A step's retry scheduled: pending with the failed attempt, then
		// canceled in the backoff with that attempt and no error.
		backoff, backoffBK := enqueue("backoff", program{Fail: 1, BackoffMs: int(time.Hour / time.Millisecond)})
		c.at(t, backoff, backoffBK, viewFields{port.StatusPending, 1, "attempt 1 failed", "work"}, "retry scheduled")
		require.NoError(t, c.eng.Cancel(ctx, backoff, "porttest"))
		c.at(t, backoff, backoffBK, viewFields{port.StatusCanceled, 1, "", "work"}, "canceled in a retry backoff")

		// Canceled running its step: it ends in that step, with its attempt.
		running, runningBK := enqueue("running", program{Block: true})
		c.waitExecution(running, "work")
		c.at(t, running, runningBK, viewFields{port.StatusRunning, 1, "", "work"}, "running before its cancel")
		require.NoError(t, c.eng.Cancel(ctx, running, "porttest"))
		c.at(t, running, runningBK, viewFields{port.StatusCanceled, 1, "", "work"}, "canceled running a step")

		// Succeeded.
		done, doneBK := enqueue("done", program{})
		c.at(t, done, doneBK, viewFields{port.StatusSucceeded, 1, "", "done"}, "succeeded")

		// Failed, then retried: the new run is the kind's at its current
		// version, with the business key, from its start; the failed run
		// reads as it did.
		failed, failedBK := enqueue("failed", program{Fail: 99, MaxAttempts: 1, Note: "retried"})
		before := c.at(t, failed, failedBK, viewFields{port.StatusFailed, 1, failedMessage(), "work"}, "failed")
		again, err := c.admin().Retry(ctx, failed)
		require.NoError(t, err)
		c.at(t, again, failedBK, viewFields{port.StatusFailed, 1, failedMessage(), "work"}, "the retry, failed in turn")
		require.Equal(t, before, c.at(t, failed, failedBK, viewFields{port.StatusFailed, 1, failedMessage(), "work"}, "failed, after its retry"))
	})
}

// checkCancelRaces is Cancel/unknown's: the races of Cancel the
// specification answers.
func checkCancelRaces(c *cell) {
	// Two Cancels at once of a run in a step, and of a parked one: both
	// return nil, the run ends canceled once, in its step, and no body
	// starts after them.
	c.t.Run("twice at once", func(t *testing.T) {
		if !c.started {
			c.start(port.StartOptions{})
		}
		for _, p := range []struct {
			name string
			prog program
			want viewFields
		}{
			{"running", program{Block: true, Topic: c.topic + ":twice"}, viewFields{port.StatusCanceled, 1, "", "work"}},
			{"waiting", program{Topic: c.topic + ":twice"}, viewFields{port.StatusCanceled, 0, "", "wait"}},
		} {
			bk := c.bk + ":twice-" + p.name
			id, err := c.eng.Enqueue(ctx, kind, p.prog, port.EnqueueOptions{IdempotencyKey: c.key + ":twice-" + p.name, BusinessKey: bk})
			require.NoError(t, err)
			if p.name == "running" {
				// Its body started: Temporal reads an attempt running from
				// the moment a worker took its task, before the body.
				c.waitExecution(id, "work")
				c.at(t, id, bk, viewFields{port.StatusRunning, 1, "", "work"}, "before the cancels")
			} else {
				c.at(t, id, bk, viewFields{port.StatusWaiting, 0, "", "wait"}, "before the cancels")
			}
			errs := concurrently(2, func(int) error { return c.eng.Cancel(ctx, id, "porttest") })
			mark := c.lastExecution()
			for _, err := range errs {
				require.NoError(t, err, p.name)
			}
			c.bodies.release(id)
			c.at(t, id, bk, p.want, "canceled twice at once, "+p.name)
			require.Zero(t, c.executions(id, "", mark), "a step body started after the cancels returned")
		}
	})
	// A Cancel racing the run's end: Cancel returns nil; the run ends
	// either succeeded (its end came first: the cancel wrote nothing) or
	// canceled (the flag came first: no result, no error), never
	// succeeded with the cancel recorded; no body starts after Cancel
	// returned. That last is checked where done's body had started before
	// the Cancel: where they race (case 0), a body the engine started just
	// before the flag records its start (its first statement) at any time
	// after, which the test could not tell from a body started too late.
	c.t.Run("racing the run's end", func(t *testing.T) {
		if !c.started {
			c.start(port.StartOptions{})
		}
		seen := map[port.Status]int{}
		for i := range 6 {
			name := "end-race-" + string(rune('a'+i))
			bk := c.bk + ":" + name
			id, err := c.eng.Enqueue(ctx, kind, program{Block: true}, port.EnqueueOptions{IdempotencyKey: c.key + ":" + name, BusinessKey: bk})
			require.NoError(t, err)
			c.waitExecution(id, "work")
			var errs []error
			switch i % 3 {
			case 0: // as the last step begins
				errs = concurrently(2, func(j int) error {
					if j == 0 {
						c.bodies.release(id)
						return nil
					}
					return c.eng.Cancel(ctx, id, "porttest")
				})
			case 1: // once the last step's body started
				c.bodies.release(id)
				c.waitExecution(id, "done")
				errs = []error{nil, c.eng.Cancel(ctx, id, "porttest")}
			case 2: // once the last step's body finished, as the run ends
				c.bodies.release(id)
				eventually(t, func() bool { return c.finished(id, "done") }, "%s: step done never finished", name)
				errs = []error{nil, c.eng.Cancel(ctx, id, "porttest")}
			}
			require.NoError(t, errs[1])
			mark := c.lastExecution()
			v := c.waitStatus(id, port.StatusSucceeded, port.StatusFailed, port.StatusCanceled)
			seen[v.Status]++
			switch v.Status {
			case port.StatusSucceeded:
				c.at(t, id, bk, viewFields{port.StatusSucceeded, 1, "", "done"}, name)
				row := c.row(id)
				var stored map[string]any
				if json.Unmarshal([]byte(row), &stored) == nil {
					if at, ok := stored["cancel_requested_at"]; ok {
						require.Nil(t, at, "%s: a run that succeeded has its cancel recorded: %s", name, row)
					}
				}
			case port.StatusCanceled:
				// It ends in the last step whose body started (the
				// specification's CurrentStep), done if done's did.
				step := "work"
				if c.executions(id, "done", 0) > 0 || (i%3 == 0 && v.CurrentStep == "done") {
					// Where they race, done's body may have started and
					// been canceled before it recorded its start.
					step = "done"
				}
				c.at(t, id, bk, viewFields{port.StatusCanceled, 1, "", step}, name)
				_, err := port.Result[programResult](ctx, c.eng, id)
				require.ErrorIs(t, err, port.ErrCanceled, name)
			default:
				require.Failf(t, "a run ended neither succeeded nor canceled", "%s: %+v", name, v)
			}
			if i%3 != 0 {
				require.Zero(t, c.executions(id, "", mark), "%s: a step body started after Cancel returned", name)
			}
		}
		t.Logf("ends: %v", seen)
	})
}

// checkRetryTwiceAtOnce is Retry/failed's: two Retries of one failed run
// at once start one run, which both return.
func checkRetryTwiceAtOnce(c *cell) {
	c.t.Run("twice at once", func(t *testing.T) {
		bk := c.bk + ":retried-at-once"
		id, err := c.eng.Enqueue(ctx, kind, program{Fail: 99, MaxAttempts: 1, Note: "retried at once"},
			port.EnqueueOptions{IdempotencyKey: c.key + ":retried-at-once", BusinessKey: bk})
		require.NoError(t, err)
		c.at(t, id, bk, viewFields{port.StatusFailed, 1, failedMessage(), "work"}, "failed")
		n := c.count()
		var (
			mu  sync.Mutex
			ids []port.RunID
		)
		errs := concurrently(4, func(int) error {
			next, err := c.admin().Retry(ctx, id)
			mu.Lock()
			defer mu.Unlock()
			ids = append(ids, next)
			return err
		})
		for _, err := range errs {
			require.NoError(t, err)
		}
		for _, next := range ids {
			require.Equal(t, ids[0], next, "concurrent Retries returned different runs: %v", ids)
		}
		require.Equal(t, n+1, c.count(), "concurrent Retries of one run started more than one")
		require.NotEqual(t, id, ids[0])
		c.at(t, ids[0], bk, viewFields{port.StatusFailed, 1, failedMessage(), "work"}, "the retry, failed in turn")
	})
}

// checkSignalRacingTheWait is Signal/unknown's: a signal sent as a run
// registers its wait on the topic is received by that wait, counted or
// kept, never lost.
func checkSignalRacingTheWait(c *cell) {
	c.t.Run("racing the wait's registration", func(t *testing.T) {
		if !c.started {
			c.start(port.StartOptions{})
		}
		for i := range 6 {
			name := "wait-race-" + string(rune('a'+i))
			topic := c.topic + ":" + name
			bk := c.bk + ":" + name
			id, err := c.eng.Enqueue(ctx, kind, program{Topic: topic}, port.EnqueueOptions{IdempotencyKey: c.key + ":" + name, BusinessKey: bk})
			require.NoError(t, err)
			c.waitExecution(id, "work")
			n, err := c.eng.Signal(ctx, port.Topic(topic), name)
			require.NoError(t, err)
			require.Contains(t, []int{0, 1}, n, name)
			c.at(t, id, bk, viewFields{port.StatusSucceeded, 1, "", "done"}, name+": the wait did not receive the signal")
			require.Equal(t, name, c.donePayload(id))
		}
	})
}

// checkSecondSignalAcrossContinue is Signal/unknown's: two signals sent to
// a run parked on a topic, before it wakes, both count; its wait receives
// the first, and its next wait on the topic the second, in the execution a
// ContinueAsNew began, which that wait makes its CurrentStep. A run that
// never waits on the topic again drops its second signal: a later run's
// wait there finds nothing kept.
func checkSecondSignalAcrossContinue(c *cell) {
	c.t.Run("a second signal to a parked run, across a ContinueAsNew", func(t *testing.T) {
		enqueue := func(name string, p program) (port.RunID, string, string) {
			topic, bk := c.topic+":"+name, c.bk+":"+name
			p.Topic = topic
			id, err := c.eng.Enqueue(ctx, kind, p, port.EnqueueOptions{IdempotencyKey: c.key + ":" + name, BusinessKey: bk})
			require.NoError(t, err)
			return id, topic, bk
		}
		again, againTopic, againBK := enqueue("second-signal", program{ContinueOnce: true, WaitAgain: true})
		ends, endsTopic, endsBK := enqueue("second-signal-dropped", program{})
		if !c.started {
			c.start(port.StartOptions{})
		}
		c.at(t, again, againBK, viewFields{port.StatusWaiting, 0, "", "wait"}, "parked")
		c.at(t, ends, endsBK, viewFields{port.StatusWaiting, 0, "", "wait"}, "parked")
		// Stopped, so that the runs do not wake between the signals.
		stop, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		require.NoError(t, c.eng.Stop(stop))
		for _, topic := range []string{againTopic, endsTopic} {
			for _, payload := range []string{"first", "second"} {
				n, err := c.eng.Signal(ctx, port.Topic(topic), payload)
				require.NoError(t, err)
				require.Equal(t, 1, n, "the %s signal on %s did not count the parked run", payload, topic)
			}
		}
		c.startEngine(c.h.New(t, c.reg), port.StartOptions{})
		v := c.at(t, again, againBK, viewFields{port.StatusSucceeded, 0, "", "again"}, "the next execution's wait received the second signal")
		require.Equal(t, "first", c.donePayload(again), "the first wait's signal")
		var out programResult
		require.NoError(t, json.Unmarshal(v.Output, &out))
		require.Equal(t, "second", out.Payload, "the second wait's signal")

		c.at(t, ends, endsBK, viewFields{port.StatusSucceeded, 1, "", "done"}, "the run that waits once")
		require.Equal(t, "first", c.donePayload(ends))
		later, err := c.eng.Enqueue(ctx, kind, program{Topic: endsTopic, TimeoutMs: 1}, port.EnqueueOptions{IdempotencyKey: c.key + ":second-signal-later"})
		require.NoError(t, err)
		c.waitStatus(later, port.StatusSucceeded)
		require.Empty(t, c.donePayload(later), "a later run's wait received the signal that reached an ended run")
	})
}

// donePayload is what run id's step "done" recorded: the payload its wait
// received.
func (c *cell) donePayload(id port.RunID) string {
	c.t.Helper()
	var got string
	require.NoError(c.t, c.h.Pool.QueryRow(ctx, `SELECT payload FROM porttest.execution WHERE run_id = $1 AND step = 'done'`, string(id)).Scan(&got))
	return got
}

// finished reports whether a body of step of run id finished.
func (c *cell) finished(id port.RunID, step string) bool {
	c.t.Helper()
	var n int
	require.NoError(c.t, c.h.Pool.QueryRow(ctx, `SELECT count(*) FROM porttest.execution WHERE run_id = $1 AND step = $2 AND finished`,
		string(id), step).Scan(&n))
	return n > 0
}

// concurrently runs f(0) .. f(n-1) at once and returns their errors.
func concurrently(n int, f func(i int) error) []error {
	errs := make([]error, n)
	var start, wg sync.WaitGroup
	start.Add(1)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start.Wait()
			errs[i] = f(i)
		}()
	}
	start.Done()
	wg.Wait()
	return errs
}

// checkAttemptsAndErrors is Get/unknown's: Attempts and LastError through
// a step's retries, a step that failed for good and a handler that went
// past it, and a sleep that never parks, read through Get and ListRuns at
// each rest point.
func checkAttemptsAndErrors(c *cell) {
	enqueue := func(t *testing.T, name string, p program) (port.RunID, string) {
		bk := c.bk + ":" + name
		id, err := c.eng.Enqueue(ctx, kind, p, port.EnqueueOptions{IdempotencyKey: c.key + ":" + name, BusinessKey: bk})
		require.NoError(t, err)
		return id, bk
	}
	signal := func(t *testing.T, topic string) {
		n, err := c.eng.Signal(ctx, port.Topic(topic), "go")
		require.NoError(t, err)
		require.Equal(t, 1, n)
	}
	// The second attempt's body running: Attempts 2, and LastError the
	// first attempt's ("the latest failed attempt of CurrentStep"); once
	// the step succeeded and the run waits, neither is left.
	c.t.Run("a step's second attempt running, then past it", func(t *testing.T) {
		topic := c.topic + ":second-attempt"
		id, bk := enqueue(t, "second-attempt", program{Fail: 1, Block: true, Topic: topic})
		eventually(t, func() bool { return c.executions(id, "work", 0) == 2 }, "the second attempt of work never started")
		c.at(t, id, bk, viewFields{port.StatusRunning, 2, "attempt 1 failed", "work"}, "second attempt running")
		c.bodies.release(id)
		c.at(t, id, bk, viewFields{port.StatusWaiting, 0, "", "wait"}, "waiting after a retried step")
		signal(t, topic)
		c.at(t, id, bk, viewFields{port.StatusSucceeded, 1, "", "done"}, "succeeded after a retried step")
	})
	// A step that failed for good, which the handler goes past: the wait
	// that begins next clears LastError, and the run ends with none.
	c.t.Run("a step failed for good, the handler going on", func(t *testing.T) {
		topic := c.topic + ":goes-on"
		id, bk := enqueue(t, "goes-on", program{Fail: 99, MaxAttempts: 2, GoesOn: true, Topic: topic})
		c.at(t, id, bk, viewFields{port.StatusWaiting, 0, "", "wait"}, "waiting after a step that failed for good")
		require.Equal(t, 2, c.executions(id, "work", 0), "attempts of work")
		signal(t, topic)
		c.at(t, id, bk, viewFields{port.StatusSucceeded, 1, "", "done"}, "succeeded past a step that failed for good")
	})
	// A ContinueAsNew keeps the step the run was last in with its
	// attempts: an execution that ends before any step reads the retried
	// step of the one before.
	c.t.Run("continued as new after a retried step", func(t *testing.T) {
		id, bk := enqueue(t, "continued-retried", program{ContinueOnce: true, DoneFail: 1})
		c.at(t, id, bk, viewFields{port.StatusSucceeded, 2, "", "done"}, "succeeded in the execution after a retried step")
	})
	// A later step than the first, in its retry backoff: pending in that
	// step with its failed attempt, and canceled there with it, no error.
	c.t.Run("a later step in its retry backoff, then canceled", func(t *testing.T) {
		id, bk := enqueue(t, "later-backoff", program{DoneFail: 1, BackoffMs: int(time.Hour / time.Millisecond)})
		c.at(t, id, bk, viewFields{port.StatusPending, 1, "attempt 1 failed", "done"}, "a later step's retry scheduled")
		require.NoError(t, c.eng.Cancel(ctx, id, "porttest"))
		c.at(t, id, bk, viewFields{port.StatusCanceled, 1, "", "done"}, "canceled in a later step's retry backoff")
	})
	// A handler that fails after its wait, or its sleep, ends failed in
	// that wait or sleep: no attempts, its error.
	c.t.Run("failed after a wait and after a sleep", func(t *testing.T) {
		id, bk := enqueue(t, "fails-after-wait", program{Topic: c.topic + ":fails-after-wait", TimeoutMs: 1, FailsAfterWait: true})
		c.at(t, id, bk, viewFields{port.StatusFailed, 0, "handler failed after its wait", "wait"}, "failed after its wait")
		id, bk = enqueue(t, "fails-after-sleep", program{SleepMs: 1, FailsAfterWait: true})
		c.at(t, id, bk, viewFields{port.StatusFailed, 0, "handler failed after its wait", "nap"}, "failed after its sleep")
	})
	// A run that fails in a step's last attempt reads that attempt.
	c.t.Run("failed on a step's second attempt", func(t *testing.T) {
		id, bk := enqueue(t, "failed-second", program{Fail: 99, MaxAttempts: 2})
		msg := (&port.StepError{Step: "work", Activity: work.Name(), Attempts: 2, Message: "attempt 2 failed"}).Error()
		c.at(t, id, bk, viewFields{port.StatusFailed, 2, msg, "work"}, "failed on its second attempt")
	})
	// Flow.Now is deterministic: the run's retries replay its handler (the
	// lease engine) or reuse a step's input (Temporal), and either way each
	// step's input, made from Now, is the same on every attempt; and Now
	// never goes back.
	c.t.Run("Now across retries", func(t *testing.T) {
		id, bk := enqueue(t, "now-retried", program{NowInputs: true, Fail: 1, DoneFail: 1})
		c.at(t, id, bk, viewFields{port.StatusSucceeded, 2, "", "done"}, "succeeded after retries")
		var nows []time.Time
		for _, step := range []string{"work", "done"} {
			rows, err := c.h.Pool.Query(ctx, `SELECT payload FROM porttest.execution WHERE run_id = $1 AND step = $2 ORDER BY id`, string(id), step)
			require.NoError(t, err)
			got, err := pgx.CollectRows(rows, pgx.RowTo[string])
			require.NoError(t, err)
			require.Len(t, got, 2, "attempts of %s", step)
			require.Equal(t, got[0], got[1], "Flow.Now before %s read otherwise on its retry", step)
			at, err := time.Parse(time.RFC3339Nano, got[0])
			require.NoError(t, err)
			nows = append(nows, at)
		}
		require.False(t, nows[1].Before(nows[0]), "Flow.Now went back: %s, then %s", nows[0], nows[1])
	})
	// A long error message, a step's (its StepError's) or a handler's,
	// is kept as the specification bounds it (port.MaxErrorBytes): its
	// first bytes and "…", the same on every engine.
	c.t.Run("long error messages", func(t *testing.T) {
		pad := strings.Repeat("x", 5<<20)
		kept := func(s string) string { return s[:port.MaxErrorBytes] + "…" } // ASCII: no rune to keep whole
		id, bk := enqueue(t, "long-step-error", program{Fail: 99, MaxAttempts: 1, ErrorPad: len(pad)})
		msg := kept((&port.StepError{Step: "work", Activity: work.Name(), Attempts: 1, Message: kept("attempt 1 failed" + pad)}).Error())
		v := c.waitStatus(id, port.StatusSucceeded, port.StatusFailed, port.StatusCanceled)
		require.Equal(t, viewFields{port.StatusFailed, 1, msg, "work"}, fieldsOf(v), "a step's long error (%d bytes read)", len(v.LastError))
		c.at(t, id, bk, fieldsOf(v), "failed with a long step error")
		id, bk = enqueue(t, "long-handler-error", program{HandlerFails: true, ErrorPad: len(pad)})
		v = c.waitStatus(id, port.StatusSucceeded, port.StatusFailed, port.StatusCanceled)
		require.Equal(t, viewFields{port.StatusFailed, 1, kept("handler failed" + pad), "work"}, fieldsOf(v),
			"a handler's long error (%d bytes read)", len(v.LastError))
		c.at(t, id, bk, fieldsOf(v), "failed with a long handler error")
	})
	// A sleep of zero never parks: like a wait with a zero timeout, it is
	// the run's step when it returns. A negative one fails the run (the
	// handler returns Sleep's *FieldError) in the step before it.
	c.t.Run("a sleep of zero, and a negative one, as the last move", func(t *testing.T) {
		zero, negative := 0, -1
		id, bk := enqueue(t, "nap-zero", program{LastNapMs: &zero})
		c.at(t, id, bk, viewFields{port.StatusSucceeded, 0, "", "last-nap"}, "succeeded after a zero sleep")
		id, bk = enqueue(t, "nap-negative", program{LastNapMs: &negative})
		v := c.waitStatus(id, port.StatusSucceeded, port.StatusFailed, port.StatusCanceled)
		require.Equal(t, port.StatusFailed, v.Status, "%+v", v)
		require.Contains(t, v.LastError, "duration", "%+v", v)
		c.at(t, id, bk, viewFields{port.StatusFailed, 1, v.LastError, "done"}, "failed on a negative sleep")
	})
}

// checkListPaging is ListRuns/unknown's: runs created in one transaction
// (the same CreatedAt) listed newest first, by creation then id, both
// descending; keyset pages that together list each run once, in that
// order, untouched by a run created between two pages; and the filters on
// status, kind and version, across open and finished runs. Nothing serves
// the engine: the runs stay where Enqueue and Cancel left them.
func checkListPaging(c *cell) {
	c.t.Run("pages, ties and filters", func(t *testing.T) {
		bk := c.bk + ":paged"
		items := make([]port.EnqueueItem, 5)
		for i := range items {
			items[i] = port.EnqueueItem{Kind: kind, Input: program{}, Options: port.EnqueueOptions{
				IdempotencyKey: c.key + ":paged-" + string(rune('a'+i)), BusinessKey: bk}}
		}
		res, err := c.eng.EnqueueMany(ctx, items)
		require.NoError(t, err)
		list := func(f port.RunFilter) []port.RunView {
			t.Helper()
			f.BusinessKey = bk
			vs, err := c.admin().ListRuns(ctx, f)
			require.NoError(t, err)
			return vs
		}
		all := list(port.RunFilter{})
		require.Len(t, all, len(items))
		for i := 1; i < len(all); i++ {
			prev, v := all[i-1], all[i]
			require.True(t, v.CreatedAt.Equal(prev.CreatedAt), "runs of one batch created apart: %s, %s", prev.CreatedAt, v.CreatedAt)
			require.Greater(t, string(prev.ID), string(v.ID), "runs of the same CreatedAt not listed by id, descending")
		}
		for _, r := range res {
			require.Contains(t, runIDs(all), r.ID)
		}
		var paged []port.RunView
		after := ""
		for page := 0; ; page++ {
			vs := list(port.RunFilter{Limit: 2, After: after})
			require.LessOrEqual(t, len(vs), 2)
			paged = append(paged, vs...)
			if page == 0 {
				// Created between two pages: later than every run listed,
				// so no later page lists it.
				_, err := c.eng.Enqueue(ctx, kind, program{}, port.EnqueueOptions{IdempotencyKey: c.key + ":paged-late", BusinessKey: bk})
				require.NoError(t, err)
			}
			if len(vs) < 2 {
				break
			}
			after = vs[len(vs)-1].Cursor
			require.Less(t, page, len(items), "paging never ended")
		}
		require.Equal(t, runIDs(all), runIDs(paged), "pages of 2 list other runs than one page")

		canceled := all[1].ID
		require.NoError(t, c.eng.Cancel(ctx, canceled, "porttest"))
		require.Equal(t, []port.RunID{canceled}, runIDs(list(port.RunFilter{Statuses: []port.Status{port.StatusCanceled}})))
		open := list(port.RunFilter{Statuses: []port.Status{port.StatusPending, port.StatusRunning, port.StatusWaiting}})
		require.Len(t, open, len(items), "the open runs (the late one among them)")
		require.NotContains(t, runIDs(open), canceled)
		both := list(port.RunFilter{Statuses: []port.Status{port.StatusCanceled, port.StatusPending}, Kind: kind, Version: 1})
		require.Len(t, both, len(items)+1)
		require.Equal(t, canceled, both[2].ID, "a finished run out of its place in the listing")
		require.Empty(t, list(port.RunFilter{Kind: kind + "_other"}))
		require.Empty(t, list(port.RunFilter{Version: 2}))
		require.Empty(t, list(port.RunFilter{BelowVersion: 1}))
		require.Len(t, list(port.RunFilter{BelowVersion: 2}), len(items)+1)
	})
}

func runIDs(vs []port.RunView) []port.RunID {
	out := make([]port.RunID, 0, len(vs))
	for _, v := range vs {
		out = append(out, v.ID)
	}
	return out
}
