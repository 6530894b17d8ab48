package contract

import (
	"errors"
	"fmt"

	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/test/contract/kinds"
)

// bulkNew is how many new runs enqueueMany's batch starts: more than the
// Temporal engine's parallel starts, so that they go in several waves.
const bulkNew = 24

// enqueueMany: one batch holds new runs, a key recorded before the batch
// and a key twice. The results report new and existing runs in the items'
// order; the duplicate names the first item's run, with the first item's
// input; the same batch again changes nothing; each run's steps run once.
func enqueueMany(w *world) {
	e := w.start(registry(w.t, w.pool, kinds.Definitions(false)...), port.StartOptions{})
	before := w.enqueue(e, kinds.Three, kinds.TagIn{Tag: "before"}, "bulk-before")
	item := func(key, tag string) port.EnqueueItem {
		return port.EnqueueItem{Kind: kinds.Three, Input: kinds.TagIn{Tag: tag}, Options: port.EnqueueOptions{IdempotencyKey: key, BusinessKey: "plan-bulk"}}
	}
	items := []port.EnqueueItem{item("bulk-0", "first"), item("bulk-before", "ignored"), item("bulk-0", "second")}
	for i := 1; i < bulkNew; i++ {
		items = append(items, item(fmt.Sprintf("bulk-%d", i), "new"))
	}
	res, err := e.EnqueueMany(bg, items)
	require.NoError(w.t, err)
	require.Len(w.t, res, len(items))
	require.Equal(w.t, port.EnqueueResult{ID: res[0].ID, Created: true}, res[0], "a new key")
	require.Equal(w.t, port.EnqueueResult{ID: before, Created: false}, res[1], "a key recorded before the batch names its run")
	require.Equal(w.t, port.EnqueueResult{ID: res[0].ID, Created: false}, res[2], "a key twice in the batch names the first item's run")
	ids := map[port.RunID]bool{}
	for i, r := range res[3:] {
		require.True(w.t, r.Created, "item %d", i+3)
		ids[r.ID] = true
	}
	ids[res[0].ID] = true
	require.Len(w.t, ids, bulkNew, "one run per new key")
	var tag string
	require.NoError(w.t, w.pool.QueryRow(bg, `SELECT input->>'tag' FROM taskport.run WHERE id = $1`, string(res[0].ID)).Scan(&tag))
	require.Equal(w.t, "first", tag, "the first item of a key gives the run its input")

	again, err := e.EnqueueMany(bg, items)
	require.NoError(w.t, err)
	for i, r := range again {
		require.Equal(w.t, port.EnqueueResult{ID: res[i].ID, Created: false}, r, "the same batch again: item %d", i)
	}
	for id := range ids {
		v := w.waitStatus(e, id, port.StatusSucceeded)
		require.Equal(w.t, "plan-bulk", v.BusinessKey, "run %s", id)
	}
	w.waitStatus(e, before, port.StatusSucceeded)
	ids[before] = true
	// A batch enqueued after the others finished, finishing in turn, shows
	// that a duplicate had every chance to run.
	probe, err := e.EnqueueMany(bg, append(items, item("bulk-probe", "probe")))
	require.NoError(w.t, err)
	require.True(w.t, probe[len(items)].Created)
	w.waitStatus(e, probe[len(items)].ID, port.StatusSucceeded)
	for id := range ids {
		require.Equal(w.t, map[string]int{"s1": 1, "s2": 1, "s3": 1}, w.effects(id), "run %s: each step's side effect once", id)
	}
	require.Equal(w.t, bulkNew+2, w.runRows(), "the runs of the new keys, the run from before and the probe")
	w.t.Logf("checked: %d items -> %d new runs and %d existing; every run's steps once", len(items), bulkNew, len(items)-bulkNew)
}

// enqueueManyBadItem: one bad item refuses its whole batch, naming the
// item's index and field, and nothing is written; an empty batch is a
// no-op.
func enqueueManyBadItem(w *world) {
	e := w.start(registry(w.t, w.pool, kinds.Definitions(false)...), port.StartOptions{})
	good := func(key string) port.EnqueueItem {
		return port.EnqueueItem{Kind: kinds.Three, Input: kinds.TagIn{}, Options: port.EnqueueOptions{IdempotencyKey: key}}
	}
	cases := []struct {
		name  string
		bad   port.EnqueueItem
		field string
		is    error
	}{
		{"empty key", port.EnqueueItem{Kind: kinds.Three, Input: kinds.TagIn{}}, "idempotency_key", port.ErrInvalidInput},
		{"unknown kind", port.EnqueueItem{Kind: "ct.nope", Input: kinds.TagIn{}, Options: port.EnqueueOptions{IdempotencyKey: "k"}}, "unknown kind", port.ErrUnknownKind},
		{"malformed input", port.EnqueueItem{Kind: kinds.Three, Input: []byte(`{"tag": 7}`), Options: port.EnqueueOptions{IdempotencyKey: "k"}}, "input", port.ErrInvalidInput},
		{"priority", port.EnqueueItem{Kind: kinds.Three, Input: kinds.TagIn{}, Options: port.EnqueueOptions{IdempotencyKey: "k", Priority: 1000}}, "priority", port.ErrInvalidInput},
	}
	for _, c := range cases {
		res, err := e.EnqueueMany(bg, []port.EnqueueItem{good("ok-1"), good("ok-2"), c.bad, good("ok-3")})
		require.ErrorIs(w.t, err, c.is, c.name)
		var ie *port.ItemError
		require.True(w.t, errors.As(err, &ie), "%s: %v", c.name, err)
		require.Equal(w.t, 2, ie.Index, c.name)
		require.Contains(w.t, err.Error(), "item 2", c.name)
		require.Contains(w.t, err.Error(), c.field, c.name)
		require.Nil(w.t, res, c.name)
	}
	require.Zero(w.t, w.runRows(), "a refused batch writes nothing")

	res, err := e.EnqueueMany(bg, nil)
	require.NoError(w.t, err)
	require.Empty(w.t, res)
	require.Zero(w.t, w.runRows(), "an empty batch writes nothing")
}
