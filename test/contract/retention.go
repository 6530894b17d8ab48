package contract

import (
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/retention"
	"github.com/taskport/taskport/test/contract/kinds"
)

// pruning is what both engines offer the retention cleaner.
type pruning interface{ Pruner() retention.Pruner }

// Retention's promise on idempotency (package retention): a key dedupes
// while its run is recorded; once the cleaner pruned the run, Enqueue with
// that key starts a new run with a new id. A run younger than its age
// still dedupes, and the pruned run's business effects stay.
func retentionFreesPrunedKey(w *world) {
	e := w.start(registry(w.t, w.pool, kinds.Definitions(false)...), port.StartOptions{})
	old := w.enqueue(e, "ct.three", kinds.TagIn{}, "pruned")
	young := w.enqueue(e, "ct.three", kinds.TagIn{}, "young")
	w.waitStatus(e, old, port.StatusSucceeded)
	w.waitStatus(e, young, port.StatusSucceeded)
	_, err := w.pool.Exec(bg, `UPDATE taskport.run SET finished_at = now() - interval '2 hours' WHERE id = $1`, old)
	require.NoError(w.t, err)

	p, ok := e.(pruning)
	require.True(w.t, ok, "%T offers no retention pruner", e)
	cleaner, err := retention.New(w.pool, []retention.Pruner{p.Pruner()},
		retention.Config{Policy: retention.Policy{Completed: time.Hour}})
	require.NoError(w.t, err)
	deleted, err := cleaner.RunOnce(bg)
	require.NoError(w.t, err)
	require.Equal(w.t, int64(1), deleted["taskport.run"])
	_, err = e.Get(bg, old)
	require.ErrorIs(w.t, err, port.ErrNotFound)

	reborn := w.enqueue(e, "ct.three", kinds.TagIn{}, "pruned")
	require.NotEqual(w.t, old, reborn, "a pruned key starts a new run")
	require.Equal(w.t, young, w.enqueue(e, "ct.three", kinds.TagIn{}, "young"), "a kept key still dedupes")
	w.waitStatus(e, reborn, port.StatusSucceeded)
	for _, id := range []port.RunID{old, young, reborn} {
		require.Equal(w.t, map[string]int{"s1": 1, "s2": 1, "s3": 1}, w.effects(id), "run %s: its effects, once each", id)
	}
	require.Equal(w.t, 2, w.runRows())
}
