package app_test

import (
	"context"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/acquisition"
	"github.com/taskport/taskport/app/apptest"
	"github.com/taskport/taskport/plans"
	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/workflows"
)

// parkedPlan is a world on an engine with an approved plan whose
// download.await run is parked in its wait, and the business API as another
// process holds it.
func parkedPlan(t *testing.T, build engineBuilder, name string) (*apptest.World, *plans.Service, string) {
	t.Helper()
	w := engineWorld(t, build, apptest.Options{})
	id := w.CreatePlan(t, apptest.NewAsset(name, 10_000)).ID.String()
	api := apiProcess(t, w)
	apptest.Acked(t)(api.Approve(context.Background(), id, "ann", ""))
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, w.Pool.QueryRow(context.Background(), `SELECT count(*) FROM taskport.waiter WHERE topic = $1`,
			workflows.DownloadTopic(id)).Scan(&n))
		return n == 1
	}, 60*time.Second, 20*time.Millisecond, "download.await never waited")
	return w, api, id
}

// Defect 11: the approval's hand-off is not lost when the API process dies
// (or loses its connection) right after the commit: the plans API calls no
// engine after its commit at all, the enqueue of download.submit is an
// outbox row of the approval's transaction. No run waits for the approval
// (issue 25): no wake-up is sent, and a repeated approve writes nothing.
func TestApproveHandsOnAfterCommit(t *testing.T) {
	for _, e := range engines {
		t.Run(e.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			w := engineWorld(t, e.new, apptest.Options{})
			id := w.CreatePlan(t, apptest.NewAsset("wake.mkv", 10_000)).ID.String()
			api := apiProcess(t, w)

			ack := apptest.Acked(t)(api.Approve(ctx, id, "ann", ""))
			require.False(t, ack.Already)
			require.Eventually(t, func() bool { return w.Plan(t, id).Status == acquisition.Downloading },
				60*time.Second, 20*time.Millisecond, "the approved plan was never submitted")
			require.Contains(t, w.Outbox(t, id), "download.submit dispatched plan:"+id+":download.submit")
			require.Empty(t, w.Actions(t, id), "no wake-up: nothing waits for the approval")

			again := apptest.Acked(t)(api.Approve(ctx, id, "bob", ""))
			require.True(t, again.Already, "a repeated approve says it changed nothing: %s", again)
			require.Contains(t, again.Message, "already approved by ann")
			require.Empty(t, w.Actions(t, id))
			runs, err := w.Engine.(port.Admin).ListRuns(ctx, port.RunFilter{BusinessKey: id, Kind: workflows.KindDownloadSubmit})
			require.NoError(t, err)
			require.Len(t, runs, 1, "and enqueues nothing twice")
		})
	}
}

// Defect 11: a cancel whose process dies (or loses its engine) right after
// the commit still cancels the plan's parked runs: the cancel of the runs is
// an outbox row of the cancel's transaction. No run stays open.
func TestCancelStopsParkedRunsAfterCommit(t *testing.T) {
	for _, e := range engines {
		t.Run(e.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			w, api, id := parkedPlan(t, e.new, "stop.mkv")

			apptest.Acked(t)(api.Cancel(ctx, id, "tester", "changed my mind"))
			require.Eventually(t, func() bool { return w.Plan(t, id).Status == acquisition.Canceled },
				60*time.Second, 20*time.Millisecond)
			require.Eventually(t, func() bool {
				var open int
				require.NoError(t, w.Pool.QueryRow(ctx, `SELECT count(*) FROM taskport.run WHERE business_key = $1 AND status NOT IN ('succeeded','failed','canceled')`, id).Scan(&open))
				return open == 0
			}, 60*time.Second, 20*time.Millisecond, "a run of the canceled plan is still open")
			_, err := api.Cancel(ctx, id, "tester", "again")
			require.ErrorIs(t, err, plans.ErrConflict, "a canceled plan says why a second cancel does nothing")
			require.ErrorContains(t, err, "is canceled")
		})
	}
}

// apiProcess is the business API as a separate process (the CLI, /admin)
// holds it: over its own pool, with no engine.
func apiProcess(t *testing.T, w *apptest.World) *plans.Service {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), w.Pool.Config().ConnString())
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	api, err := plans.New(pool, plans.Config{LibraryRoot: w.LibraryDir})
	require.NoError(t, err)
	return api
}

// Defect 10 on both engines: a compensation that exhausted its attempts (the
// downloader was down) waits on a decision; a second cancel says so instead
// of doing nothing; retrying the decision runs the compensation, which ends
// the plan canceled and notifies it.
func TestRetryFailedCompensationOnEngines(t *testing.T) {
	for _, e := range engines {
		t.Run(e.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			w := engineWorld(t, e.new, apptest.Options{})
			a := apptest.NewAsset("compensate.mkv", 10_000)
			id := w.CreatePlan(t, a).ID.String()
			apptest.Acked(t)(w.Plans.Approve(ctx, id, "ann", ""))
			require.Eventually(t, func() bool { return w.Plan(t, id).Status == acquisition.Downloading },
				60*time.Second, 20*time.Millisecond)

			w.QBT.FailNext(1_000_000, http.StatusServiceUnavailable)
			apptest.Acked(t)(w.Plans.Cancel(ctx, id, "tester", "stop"))
			var d acquisition.Decision
			require.Eventually(t, func() bool {
				open, err := acquisition.OpenDecisionsOf(ctx, w.Pool, w.Plan(t, id).ID)
				require.NoError(t, err)
				if len(open) == 1 {
					d = open[0]
				}
				return len(open) == 1
			}, 2*time.Minute, 50*time.Millisecond, "the compensation never gave up")
			require.Equal(t, workflows.KindPlanCancel, d.Kind)
			require.Equal(t, acquisition.Canceling, w.Plan(t, id).Status)
			_, err := w.Plans.Cancel(ctx, id, "tester", "again")
			require.ErrorContains(t, err, d.ID.String(), "a second cancel names the decision to resolve")

			w.QBT.FailNext(0, 0)
			apptest.Acked(t)(w.Plans.ResolveDecision(ctx, d.ID.String(), acquisition.DecisionRetry, "ann"))
			require.Eventually(t, func() bool { return w.Plan(t, id).Status == acquisition.Canceled },
				2*time.Minute, 50*time.Millisecond)
			deleted, _ := w.QBT.Deleted(a.Hash)
			require.True(t, deleted, "the retried compensation removed the torrent")
			require.Eventually(t, func() bool { return slices.Contains(w.Webhooks.Keys(), "plan:"+id+":plan.canceled") },
				60*time.Second, 20*time.Millisecond)
		})
	}
}
