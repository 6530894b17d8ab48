package runstore_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/internal/runstore"
	"github.com/taskport/taskport/internal/testkit/pgtest"
	"github.com/taskport/taskport/port"
)

// Batches racing on overlapping keys, each in the opposite order of the
// next, neither deadlock nor duplicate: one run per key, created by exactly
// one item, and every batch reads the same id for it. A key twice in one
// batch names one run, created by its first item.
func TestInsertManyRacingBatches(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	const batches, keys = 6, 300
	results := make([][]runstore.Run, batches)
	created := make([][]bool, batches)
	var wg sync.WaitGroup
	for b := range batches {
		rs := make([]runstore.NewRun, 0, keys+1)
		for k := range keys {
			rs = append(rs, newRun(fmt.Sprintf("k%03d", k)))
		}
		if b%2 == 1 {
			slices.Reverse(rs)
		}
		rs = append(rs, rs[0]) // the batch's first key again, last
		wg.Go(func() {
			var err error
			results[b], created[b], err = runstore.InsertMany(ctx, pool, rs)
			require.NoError(t, err, "batch %d", b)
		})
	}
	wg.Wait()
	ids := map[string]port.RunID{}
	creators := map[string]int{}
	for b := range batches {
		require.Len(t, results[b], keys+1)
		require.Equal(t, results[b][0].ID, results[b][keys].ID, "batch %d: a key twice names one run", b)
		require.False(t, created[b][keys], "batch %d: the later item of a key did not create it", b)
		for i, r := range results[b] {
			if id, ok := ids[r.IdempotencyKey]; ok {
				require.Equal(t, id, r.ID, "batch %d, key %s", b, r.IdempotencyKey)
			}
			ids[r.IdempotencyKey] = r.ID
			if created[b][i] {
				creators[r.IdempotencyKey]++
			}
		}
	}
	require.Len(t, ids, keys)
	for k := range ids {
		require.Equal(t, 1, creators[k], "key %s created once", k)
	}
	var rows int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM taskport.run").Scan(&rows))
	require.Equal(t, keys, rows)

	none, none2, err := runstore.InsertMany(ctx, pool, nil)
	require.NoError(t, err)
	require.Empty(t, none)
	require.Empty(t, none2)
}

// A batch that meets a key already taken is inserted by the idempotent
// form after its fresh form fails as a whole: the new keys get runs, the
// taken one reports its existing run, and nothing is written twice.
func TestInsertManyMeetingATakenKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	newRun := func(key string) runstore.NewRun {
		return runstore.NewRun{Engine: runstore.EngineLease, Kind: "k", Version: 1, Key: key, Input: []byte(`{}`)}
	}
	first, created, err := runstore.Insert(ctx, pool, newRun("b"))
	require.NoError(t, err)
	require.True(t, created)

	runs, createdMany, err := runstore.InsertMany(ctx, pool, []runstore.NewRun{newRun("a"), newRun("b"), newRun("c")})
	require.NoError(t, err)
	require.Equal(t, []bool{true, false, true}, createdMany)
	require.Equal(t, first.ID, runs[1].ID)
	var rows int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM taskport.run").Scan(&rows))
	require.Equal(t, 3, rows)
}
