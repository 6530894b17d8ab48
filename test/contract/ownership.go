package contract

import (
	"encoding/json"
	"errors"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/test/contract/kinds"
)

// row is run id's whole row and its waiters, as text: what a call that
// must write nothing leaves as it was.
func (w *world) row(id port.RunID) string {
	w.t.Helper()
	var row string
	require.NoError(w.t, w.pool.QueryRow(bg, `
SELECT to_jsonb(r)::text || coalesce((SELECT jsonb_agg(to_jsonb(x) ORDER BY x.topic)::text FROM taskport.waiter x WHERE x.run_id = r.id), '')
FROM taskport.run r WHERE r.id = $1`, string(id)).Scan(&row))
	return row
}

// storedStatus is the run's status as its row records it.
func (w *world) storedStatus(id port.RunID) port.Status {
	w.t.Helper()
	var s port.Status
	require.NoError(w.t, w.pool.QueryRow(bg, `SELECT status FROM taskport.run WHERE id = $1`, string(id)).Scan(&s))
	return s
}

// Cancel of a succeeded, a failed and a canceled run returns nil and
// writes nothing: no cancel flag, no reason, no updated_at (issue 24,
// bug 3).
func cancelFinishedWritesNothing(w *world) {
	e := w.start(registry(w.t, w.pool, kinds.Definitions(false)...), port.StartOptions{})
	done := map[port.Status]port.RunID{
		port.StatusSucceeded: w.enqueue(e, "ct.three", kinds.TagIn{}, "finished-ok"),
		port.StatusFailed:    w.enqueue(e, "ct.nonretry", kinds.TagIn{}, "finished-failed"),
		port.StatusCanceled:  w.enqueue(e, "ct.wait", longWait("finished-canceled"), "finished-canceled"),
	}
	w.waitStatus(e, done[port.StatusCanceled], port.StatusWaiting)
	require.NoError(w.t, e.Cancel(bg, done[port.StatusCanceled], "first"))
	for status, id := range done {
		w.waitStatus(e, id, status)
		// The row is terminal too: nothing but Cancel may write it now.
		require.Eventuallyf(w.t, func() bool { return w.storedStatus(id) == status }, waitFor, pollEvery, "run %s never stored %s", id, status)
		before := w.row(id)
		require.NoError(w.t, e.Cancel(bg, id, "too late"), "canceling a %s run", status)
		require.Equal(w.t, before, w.row(id), "Cancel of a %s run writes nothing", status)
	}
	w.requireCancelRecorded(done[port.StatusCanceled], "first")
}

// otherEngine is the name, in taskport.run.engine, of the engine this cell
// is not.
func (w *world) otherEngine() string {
	if w.engine.Name == "lease" {
		return "temporal"
	}
	return "lease"
}

// A run of the other engine is refused by Get, Cancel and Admin.Retry with
// port.ErrOtherEngine (a port.ErrNotFound) naming both engines, nothing is
// written, and ListRuns does not list it (issue 24, bug 4). The runs are
// rows as the other engine leaves them in a database both serve: one
// waiting on a topic, one failed.
func otherEngineRunRefused(w *world) {
	e := w.start(registry(w.t, w.pool, kinds.Definitions(false)...), port.StartOptions{})
	own := w.enqueue(e, "ct.three", kinds.TagIn{}, "own")
	w.waitStatus(e, own, port.StatusSucceeded)
	other := w.otherEngine()
	var theirs []port.RunID
	for _, status := range []port.Status{port.StatusWaiting, port.StatusFailed} {
		id := port.RunID(uuid.Must(uuid.NewV7()).String())
		_, err := w.pool.Exec(bg, `
INSERT INTO taskport.run (id, engine, kind, version, idempotency_key, input, status, current_step, finished_at)
VALUES ($1, $2, 'ct.wait', 1, $3, '{}', $4, 'wait', CASE WHEN $4 = 'failed' THEN now() END)`, string(id), other, "theirs-"+string(status), string(status))
		require.NoError(w.t, err)
		if status == port.StatusWaiting {
			_, err = w.pool.Exec(bg, `INSERT INTO taskport.waiter (topic, run_id, step) VALUES ('ct:theirs', $1, 'wait')`, string(id))
			require.NoError(w.t, err)
		}
		theirs = append(theirs, id)
	}
	admin := e.(port.Admin)
	for _, id := range theirs {
		before := w.row(id)
		_, err := e.Get(bg, id)
		requireOtherEngine(w, err, other, "Get")
		requireOtherEngine(w, e.Cancel(bg, id, "not yours"), other, "Cancel")
		_, err = admin.Retry(bg, id)
		requireOtherEngine(w, err, other, "Retry")
		require.Equal(w.t, before, w.row(id), "nothing written to the %s engine's run %s", other, id)
	}
	listed, err := admin.ListRuns(bg, port.RunFilter{})
	require.NoError(w.t, err)
	require.Len(w.t, listed, 1, "ListRuns lists only this engine's runs")
	require.Equal(w.t, own, listed[0].ID)
	listed, err = admin.ListRuns(bg, port.RunFilter{Statuses: []port.Status{port.StatusFailed}})
	require.NoError(w.t, err)
	require.Empty(w.t, listed, "the other engine's dead letter is not this engine's")
}

func requireOtherEngine(w *world, err error, other, call string) {
	w.t.Helper()
	require.ErrorIs(w.t, err, port.ErrOtherEngine, call)
	require.ErrorIs(w.t, err, port.ErrNotFound, call)
	self := "lease"
	if other == "lease" {
		self = "temporal"
	}
	require.ErrorContains(w.t, err, "owned by the "+other+" engine, not by this "+self+" engine", call)
}

// An input, a batch item, a signal payload or a cancel reason with a
// U+0000 (or anything else Postgres refuses) is a *port.FieldError naming
// the field, in a *port.ItemError naming the item for EnqueueMany, and
// nothing is written (issue 24, bug 5).
func nulInputRefused(w *world) {
	e := w.start(registry(w.t, w.pool, kinds.Definitions(false)...), port.StartOptions{})
	for _, in := range []any{kinds.TagIn{Tag: "a\x00b"}, json.RawMessage(`{"tag":"\u0000"}`), json.RawMessage(`{"tag":"\udead"}`)} {
		_, err := e.Enqueue(bg, "ct.three", in, port.EnqueueOptions{IdempotencyKey: "nul"})
		requireField(w, err, "input")
		_, err = e.EnqueueMany(bg, []port.EnqueueItem{
			{Kind: "ct.three", Input: kinds.TagIn{}, Options: port.EnqueueOptions{IdempotencyKey: "fine"}},
			{Kind: "ct.three", Input: in, Options: port.EnqueueOptions{IdempotencyKey: "nul"}},
		})
		var ie *port.ItemError
		require.ErrorAs(w.t, err, &ie)
		require.Equal(w.t, 1, ie.Index, "the batch names its bad item")
		requireField(w, err, "input")
	}
	_, err := e.Enqueue(bg, "ct.three", kinds.TagIn{}, port.EnqueueOptions{IdempotencyKey: "k\xff"})
	requireField(w, err, "idempotency_key")
	_, err = e.Enqueue(bg, "ct.three", kinds.TagIn{}, port.EnqueueOptions{IdempotencyKey: "k", BusinessKey: "plan\x00"})
	requireField(w, err, "business_key")
	require.Zero(w.t, w.runRows(), "a refused enqueue writes nothing")

	id := w.enqueue(e, "ct.wait", longWait("nul-signal"), "nul-signal")
	w.waitStatus(e, id, port.StatusWaiting)
	_, err = e.Signal(bg, "ct:nul-signal", map[string]string{"why": "\x00"})
	requireField(w, err, "payload")
	// A cancel reason Postgres cannot store: refused before the run is
	// looked up, after the id's form.
	before := w.row(id)
	requireField(w, e.Cancel(bg, id, "why\x00"), "reason")
	requireField(w, e.Cancel(bg, id, "why\xff"), "reason")
	require.Equal(w.t, before, w.row(id), "a refused cancel writes nothing")
	require.ErrorIs(w.t, e.Cancel(bg, "not-a-run", "why\x00"), port.ErrNotFound)
	require.Empty(w.t, w.effects(id))
}

func requireField(w *world, err error, field string) {
	w.t.Helper()
	var fe *port.FieldError
	require.True(w.t, errors.As(err, &fe), "want a *port.FieldError, got %v", err)
	require.Equal(w.t, field, fe.Field)
	require.ErrorIs(w.t, err, port.ErrInvalidInput)
}
