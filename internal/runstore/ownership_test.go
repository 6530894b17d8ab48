package runstore_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/internal/runstore"
	"github.com/taskport/taskport/internal/testkit/pgtest"
	"github.com/taskport/taskport/port"
)

// rowOf is run id's whole row, to compare before and after a call that
// must write nothing.
func rowOf(t *testing.T, pool *pgxpool.Pool, id port.RunID) string {
	t.Helper()
	var row string
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT to_jsonb(r)::text FROM taskport.run r WHERE id = $1`, string(id)).Scan(&row))
	return row
}

// insertAs records a run of engine with key, projected to status.
func insertAs(t *testing.T, pool *pgxpool.Pool, engine runstore.Engine, key string, status port.Status) port.RunID {
	t.Helper()
	ctx := context.Background()
	r := newRun(key)
	r.Engine = engine
	run, _, err := runstore.Insert(ctx, pool, r)
	require.NoError(t, err)
	if status != port.StatusPending {
		require.NoError(t, runstore.Project(ctx, pool, run.ID, runstore.Projection{Status: status, LastError: "was " + string(status)}))
	}
	return run.ID
}

// A cancel of a finished run writes nothing at all: no flag, no reason, no
// updated_at (issue 24, bug 3); it reports the run was not flagged, and
// the engines return nil.
func TestRequestCancelOfAFinishedRunWritesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	for _, status := range []port.Status{port.StatusSucceeded, port.StatusFailed, port.StatusCanceled} {
		id := insertAs(t, pool, runstore.EngineLease, "done-"+string(status), status)
		before := rowOf(t, pool, id)
		flagged, err := runstore.RequestCancel(ctx, pool, runstore.EngineLease, id, "too late")
		require.NoError(t, err, status)
		require.False(t, flagged, status)
		require.Equal(t, before, rowOf(t, pool, id), "a %s run is left as it is", status)
	}
}

// A run of the other engine is refused by Get, Cancel and the listing of
// the engine that does not own it, with port.ErrOtherEngine (a
// port.ErrNotFound) naming both engines, and nothing is written (issue 24,
// bug 4). A cancel reason Postgres cannot store is refused before any
// write.
func TestRunOfTheOtherEngineIsRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	for _, tt := range []struct{ owner, asker runstore.Engine }{
		{runstore.EngineTemporal, runstore.EngineLease},
		{runstore.EngineLease, runstore.EngineTemporal},
	} {
		for _, status := range []port.Status{port.StatusPending, port.StatusFailed} {
			id := insertAs(t, pool, tt.owner, string(tt.owner)+"-"+string(status), status)
			before := rowOf(t, pool, id)
			_, err := runstore.RequestCancel(ctx, pool, tt.asker, id, "not yours")
			require.ErrorIs(t, err, port.ErrOtherEngine)
			require.ErrorIs(t, err, port.ErrNotFound)
			require.ErrorContains(t, err, "owned by the "+string(tt.owner)+" engine, not by this "+string(tt.asker)+" engine")
			require.Equal(t, before, rowOf(t, pool, id), "nothing written to the %s run", tt.owner)

			_, err = runstore.GetOwned(ctx, pool, tt.asker, id)
			require.ErrorIs(t, err, port.ErrOtherEngine)
			require.ErrorContains(t, err, string(tt.owner))
			own, err := runstore.GetOwned(ctx, pool, tt.owner, id)
			require.NoError(t, err)
			require.Equal(t, id, own.ID)

			for _, f := range []port.RunFilter{{}, {Statuses: []port.Status{status}}, {Kind: "asset.import"}, {BusinessKey: "plan-1"}} {
				listed, err := runstore.List(ctx, pool, tt.asker, f)
				require.NoError(t, err)
				for _, v := range listed {
					require.NotEqual(t, id, v.ID, "%s lists only its own runs (%+v)", tt.asker, f)
				}
				listed, err = runstore.List(ctx, pool, tt.owner, f)
				require.NoError(t, err)
				require.Contains(t, ids(listed), id, "%s lists its own run (%+v)", tt.owner, f)
			}
		}
	}

	id := insertAs(t, pool, runstore.EngineLease, "reason", port.StatusPending)
	before := rowOf(t, pool, id)
	for _, reason := range []string{"a\x00b", "\xff"} {
		_, err := runstore.RequestCancel(ctx, pool, runstore.EngineLease, id, reason)
		var fe *port.FieldError
		require.ErrorAs(t, err, &fe)
		require.Equal(t, "reason", fe.Field)
	}
	require.Equal(t, before, rowOf(t, pool, id))
}

func ids(views []port.RunView) []port.RunID {
	out := make([]port.RunID, len(views))
	for i, v := range views {
		out[i] = v.ID
	}
	return out
}

// The engines the run store knows are those the schema admits: the
// listing's engine condition (no other engine owns the run) relies on it.
func TestEnginesAreTheSchemas(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	var schema []string
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT taskport.run_engines()`).Scan(&schema))
	var known []string
	for _, e := range runstore.Engines {
		known = append(known, string(e))
	}
	require.ElementsMatch(t, schema, known)
}
