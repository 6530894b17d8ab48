package contract

import (
	"errors"

	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/test/contract/kinds"
)

// The operator's scenarios (port.Admin): retry of a dead letter, and keyset
// paging of the run listing.

// gatedIn is the input of ct.gated.
type gatedIn struct {
	Gate string `json:"gate"`
}

// gatedKind fails at once while its gate is closed (the handler's own
// error, no step retry), and records "after" once it is open: a dead letter
// that a retry can fix, as an operator fixes the cause and retries. Its
// versions run the same code.
func gatedKind(version int) port.Definition {
	return port.Definition{Kind: "ct.gated", Version: version, Retry: kinds.FastRetry, Handler: port.Handle(func(f port.Flow, in gatedIn) error {
		open, err := kinds.Gate.Run(f, "check", in.Gate)
		if err != nil {
			return err
		}
		if !open {
			return errors.New("gate " + in.Gate + " is closed")
		}
		_, err = kinds.Effect.Run(f, "after", kinds.EffectIn{Label: "after"})
		return err
	})}
}

// Retry starts a new run of a failed one with its kind, input and business
// key, once however often it is asked; the failed run stays failed and
// listed. A run that is not failed, or unknown, is refused and nothing is
// written, and so is a retry by a process whose code is older than the
// failed run's version (a rolling deploy).
func adminRetry(w *world) {
	e := w.start(registry(w.t, w.pool, append(kinds.Definitions(false), gatedKind(1), gatedKind(2))...), port.StartOptions{})
	admin, ok := e.(port.Admin)
	require.True(w.t, ok, "engines implement port.Admin")
	failed, err := e.Enqueue(bg, "ct.gated", gatedIn{Gate: "retry"}, port.EnqueueOptions{IdempotencyKey: "gated", BusinessKey: "plan-r"})
	require.NoError(w.t, err)
	w.waitStatus(e, failed, port.StatusFailed)
	require.Empty(w.t, w.effects(failed), "the dead letter did nothing")

	holding := w.enqueue(e, "ct.hold", longWait("holding"), "holding")
	w.waitEffect(holding, "hold:started")
	done := w.enqueue(e, "ct.three", kinds.TagIn{}, "done")
	w.waitStatus(e, done, port.StatusSucceeded)
	before := w.runRows()
	for _, id := range []port.RunID{holding, done} {
		_, err := admin.Retry(bg, id)
		require.ErrorIs(w.t, err, port.ErrInvalidInput, "retry of %s", id)
		require.ErrorContains(w.t, err, "only a failed run can be retried")
	}
	for _, id := range []port.RunID{"0190a5c6-0000-7000-8000-000000000000", "not-a-run", ""} {
		_, err := admin.Retry(bg, id)
		require.ErrorIs(w.t, err, port.ErrNotFound, "Retry(%q)", id)
	}
	older := w.factory(w.t, registry(w.t, w.pool, append(kinds.Definitions(false), gatedKind(1))...)).(port.Admin)
	_, err = older.Retry(bg, failed)
	require.ErrorIs(w.t, err, port.ErrUnknownVersion, "the failed run's input was written for v2")
	require.Equal(w.t, before, w.runRows(), "a refused retry writes nothing")
	w.openGate("holding")
	w.waitStatus(e, holding, port.StatusSucceeded)

	w.openGate("retry") // the operator fixes the cause
	next, err := admin.Retry(bg, failed)
	require.NoError(w.t, err)
	require.NotEqual(w.t, failed, next)
	v := w.waitStatus(e, next, port.StatusSucceeded)
	require.Equal(w.t, map[string]int{"after": 1}, w.effects(next), "the new run read the failed run's input (its gate)")
	require.Equal(w.t, port.Kind("ct.gated"), v.Kind)
	require.Equal(w.t, 2, v.Version, "the kind's current version")
	require.Equal(w.t, "plan-r", v.BusinessKey)
	var key string
	require.NoError(w.t, w.pool.QueryRow(bg, `SELECT idempotency_key FROM taskport.run WHERE id = $1`, string(next)).Scan(&key))
	require.Equal(w.t, port.RetryKey(failed), key)

	again, err := admin.Retry(bg, failed)
	require.NoError(w.t, err)
	require.Equal(w.t, next, again, "a repeated retry returns the same run")
	require.Equal(w.t, before+1, w.runRows())
	old := w.waitStatus(e, failed, port.StatusFailed)
	require.Equal(w.t, "gate retry is closed", old.LastError, "the failed run stays as it failed")
	dead, err := admin.ListRuns(bg, port.RunFilter{Statuses: []port.Status{port.StatusFailed}})
	require.NoError(w.t, err)
	require.Equal(w.t, []port.RunID{failed}, ids(dead), "the dead letter stays listed")
	_, err = admin.Retry(bg, next)
	require.ErrorIs(w.t, err, port.ErrInvalidInput, "the retry succeeded: nothing to retry")
}

// Pages of the listing cover every run once, newest first, whatever is
// enqueued between two pages.
func adminPaging(w *world) {
	e := w.start(registry(w.t, w.pool, kinds.Definitions(false)...), port.StartOptions{})
	admin := e.(port.Admin)
	var all []port.RunID
	for _, key := range []string{"p1", "p2", "p3", "p4", "p5", "p6", "p7"} {
		id, err := e.Enqueue(bg, "ct.three", kinds.TagIn{}, port.EnqueueOptions{IdempotencyKey: key, BusinessKey: "plan-p"})
		require.NoError(w.t, err)
		all = append(all, id)
	}
	other := w.enqueue(e, "ct.wait", longWait("other"), "other")
	for _, id := range all {
		w.waitStatus(e, id, port.StatusSucceeded)
	}

	f := port.RunFilter{Kind: "ct.three", Statuses: []port.Status{port.StatusSucceeded}, BusinessKey: "plan-p", Limit: 3}
	var listed []port.RunView
	var sizes []int
	for {
		page, err := admin.ListRuns(bg, f)
		require.NoError(w.t, err)
		listed = append(listed, page...)
		sizes = append(sizes, len(page))
		if len(page) < f.Limit {
			break
		}
		f.After = page[len(page)-1].Cursor
		if len(sizes) == 1 {
			// Created between two pages: newer than every page, on none.
			w.enqueue(e, "ct.three", kinds.TagIn{}, "between")
		}
	}
	require.Equal(w.t, []int{3, 3, 1}, sizes)
	require.ElementsMatch(w.t, all, ids(listed), "every run once: no gap, no duplicate")
	for i := 1; i < len(listed); i++ {
		require.False(w.t, listed[i].CreatedAt.After(listed[i-1].CreatedAt), "newest first: %v", ids(listed))
	}
	require.NotContains(w.t, ids(listed), other, "filtered by kind")

	_, err := admin.ListRuns(bg, port.RunFilter{After: "garbage"})
	require.ErrorIs(w.t, err, port.ErrInvalidInput)
	_, err = admin.ListRuns(bg, port.RunFilter{Limit: -1})
	require.ErrorIs(w.t, err, port.ErrInvalidInput)
}

func ids(views []port.RunView) []port.RunID {
	out := make([]port.RunID, len(views))
	for i, v := range views {
		out[i] = v.ID
	}
	return out
}
