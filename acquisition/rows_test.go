package acquisition_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/acquisition"
	"github.com/taskport/taskport/internal/testkit/pgtest"
)

// newPlan is a plan awaiting approval on a target and hash of its own.
func newPlan(t *testing.T, pool *pgxpool.Pool) acquisition.Plan {
	target, hash := unique()
	return planIn(t, pool, acquisition.AwaitingApproval, target, hash)
}

// The package's part of a plan's timeline: the plan, its approval, its
// download and its decisions, and nothing of another plan.
func TestTimelineOfBusinessRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	target, hash := unique()
	p := planIn(t, pool, acquisition.AwaitingApproval, target, hash)
	_, err := acquisition.InsertApproval(ctx, pool, acquisition.Approval{ID: uuid.New(), PlanID: p.ID, Decision: acquisition.Approved,
		DecidedBy: "ann", Note: "fine"})
	require.NoError(t, err)
	_, err = acquisition.UpsertDownload(ctx, pool, acquisition.DownloadTask{PlanID: p.ID, InfoHash: hash, Tag: "tp-x", SavePath: "/dl",
		State: acquisition.DownloadSubmitted})
	require.NoError(t, err)
	_, err = acquisition.CompleteDownload(ctx, pool, p.ID, "/dl/a.mkv")
	require.NoError(t, err)
	d, err := acquisition.OpenDecision(ctx, pool, p.ID, "asset.import", "run-1", []byte(`{}`), "disk full")
	require.NoError(t, err)
	_, err = acquisition.ResolveDecision(ctx, pool, d.ID, acquisition.DecisionRetry, "bob")
	require.NoError(t, err)
	_, err = acquisition.RequestCancel(ctx, pool, p.ID, "ann", "enough")
	require.NoError(t, err)
	other, err := acquisition.InsertApproval(ctx, pool, acquisition.Approval{ID: uuid.New(),
		PlanID: newPlan(t, pool).ID, Decision: acquisition.Rejected, DecidedBy: "eve"})
	require.NoError(t, err)
	require.True(t, other)

	entries, err := acquisition.Timeline(ctx, pool, p.ID)
	require.NoError(t, err)
	var lines []string
	for _, e := range entries {
		require.False(t, e.At.IsZero())
		lines = append(lines, e.Source+": "+e.Event+": "+e.Detail)
	}
	require.ElementsMatch(t, []string{
		"plan: created: t",
		"plan: cancel requested: ann: enough",
		"approval: approved: ann: fine",
		"download: submitted: tp-x " + hash,
		"download: completed: /dl/a.mkv",
		"decision: opened for asset.import: disk full",
		"decision: resolved: retry: bob",
	}, lines)
}

// ListPlans is newest first and honours the limit; a value full of SQL
// syntax is stored as it is, since every value goes in as an argument.
func TestListPlansNewestFirst(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	var ids []uuid.UUID
	for _, title := range []string{"first", "second", `third'); DELETE FROM plan; --`} {
		_, hash := unique()
		p, err := acquisition.InsertPlan(ctx, pool, acquisition.Plan{
			ID: uuid.Must(uuid.NewV7()), Title: title, SourceType: "magnet", Source: "magnet:?xt=urn:btih:" + hash,
			InfoHash: hash, TargetPath: "/lib/" + title, ExpectedSize: 3, ExpectedSHA256: sha64,
		})
		require.NoError(t, err)
		ids = append(ids, p.ID)
	}
	got, err := acquisition.ListPlans(ctx, pool, acquisition.PlanFilter{Limit: 2})
	require.NoError(t, err)
	require.Len(t, got, 2)
	require.Equal(t, []uuid.UUID{ids[2], ids[1]}, []uuid.UUID{got[0].ID, got[1].ID})
	require.Equal(t, `third'); DELETE FROM plan; --`, got[0].Title)
	require.Equal(t, "/lib/second", got[1].TargetPath)
	require.Equal(t, sha64, got[1].ExpectedSHA256)

	all, err := acquisition.ListPlans(ctx, pool, acquisition.PlanFilter{Limit: 10})
	require.NoError(t, err)
	require.Len(t, all, 3)
}

func TestListDecisionsFiltersByStatus(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	p := newPlan(t, pool)
	first, err := acquisition.OpenDecision(ctx, pool, p.ID, "download.await", "run-1", []byte(`{"plan_id":"x"}`), "timed out")
	require.NoError(t, err)
	second, err := acquisition.OpenDecision(ctx, pool, p.ID, "asset.import", "run-2", []byte(`{}`), "disk full")
	require.NoError(t, err)
	again, err := acquisition.OpenDecision(ctx, pool, p.ID, "download.await", "run-1", []byte(`{}`), "twice")
	require.NoError(t, err)
	require.Equal(t, first.ID, again.ID, "opening the same run twice returns the first decision")
	resolved, err := acquisition.ResolveDecision(ctx, pool, first.ID, acquisition.DecisionRetry, "ann")
	require.NoError(t, err)
	require.True(t, resolved)
	resolved, err = acquisition.ResolveDecision(ctx, pool, first.ID, acquisition.DecisionAbandon, "bob")
	require.NoError(t, err)
	require.False(t, resolved, "the first resolution stands")

	ids := func(status acquisition.DecisionStatus, limit int) []uuid.UUID {
		ds, err := acquisition.ListDecisions(ctx, pool, status, limit)
		require.NoError(t, err)
		var out []uuid.UUID
		for _, d := range ds {
			out = append(out, d.ID)
		}
		return out
	}
	require.Equal(t, []uuid.UUID{first.ID, second.ID}, ids("", 10), "no status lists all, oldest first")
	require.Equal(t, []uuid.UUID{first.ID}, ids("", 1))
	require.Equal(t, []uuid.UUID{second.ID}, ids(acquisition.DecisionOpen, 10))
	require.Equal(t, []uuid.UUID{first.ID}, ids(acquisition.DecisionRetry, 10))
	require.Empty(t, ids(acquisition.DecisionAbandon, 10))

	d, err := acquisition.GetDecision(ctx, pool, first.ID)
	require.NoError(t, err)
	require.Equal(t, "ann", d.ResolvedBy)
	require.Equal(t, acquisition.DecisionRetry, d.Status)
	require.JSONEq(t, `{"plan_id":"x"}`, string(d.Input))
}

// The first completion report counts; an empty content path leaves the
// recorded one alone, and a removed download is never completed.
func TestCompleteDownloadFirstReportWins(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	submitted := func(state acquisition.DownloadState) acquisition.Plan {
		p := newPlan(t, pool)
		_, err := acquisition.UpsertDownload(ctx, pool, acquisition.DownloadTask{PlanID: p.ID, InfoHash: p.InfoHash, Tag: "tp", SavePath: "/dl", State: acquisition.DownloadSubmitted})
		require.NoError(t, err)
		require.NoError(t, acquisition.SetDownloadProgress(ctx, pool, p.ID, 0.5))
		require.NoError(t, acquisition.SetDownloadState(ctx, pool, p.ID, state))
		return p
	}
	complete := func(p acquisition.Plan, contentPath string, wantChanged bool) acquisition.DownloadTask {
		changed, err := acquisition.CompleteDownload(ctx, pool, p.ID, contentPath)
		require.NoError(t, err)
		require.Equal(t, wantChanged, changed)
		d, err := acquisition.GetDownload(ctx, pool, p.ID)
		require.NoError(t, err)
		return d
	}

	known := submitted(acquisition.DownloadSubmitted)
	complete(known, "/dl/a.mkv", true)
	d := complete(known, "/dl/other.mkv", false)
	require.Equal(t, acquisition.DownloadCompleted, d.State)
	require.Equal(t, "/dl/a.mkv", d.ContentPath, "a later report changes nothing")
	require.InDelta(t, 1.0, d.Progress, 1e-9)
	require.False(t, d.CompletedAt.IsZero())

	d = complete(submitted(acquisition.DownloadSubmitted), "", true)
	require.Equal(t, acquisition.DownloadCompleted, d.State)
	require.Empty(t, d.ContentPath)

	d = complete(submitted(acquisition.DownloadRemoved), "/dl/r.mkv", false)
	require.Equal(t, acquisition.DownloadRemoved, d.State)
	require.InDelta(t, 0.5, d.Progress, 1e-9)
	require.True(t, d.CompletedAt.IsZero())
}
