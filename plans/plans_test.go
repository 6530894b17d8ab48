package plans_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/app/apptest"
	"github.com/taskport/taskport/ledger"
	"github.com/taskport/taskport/plans"
	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/workflows"
)

// counts returns how many rows each business table holds.
func counts(t *testing.T, pool *pgxpool.Pool) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, table := range []string{"plan", "approval", "download_task", "asset_operation", "outbox_event", "decision"} {
		var n int
		require.NoError(t, pool.QueryRow(context.Background(), "SELECT count(*) FROM "+table).Scan(&n))
		out[table] = n
	}
	return out
}

func TestCreatePlanRejectsBadInputAndWritesNothing(t *testing.T) {
	t.Parallel()
	w := apptest.NewWorld(t, apptest.Options{})
	a := apptest.NewAsset("a.mkv", 10)
	good := plans.NewPlan{Title: "A", Magnet: a.Magnet(), InfoHash: a.Hash, TargetPath: w.Target(a), ExpectedSize: 10, ExpectedSHA256: a.SHA256}
	before := counts(t, w.Pool)
	for name, tc := range map[string]struct {
		mut   func(*plans.NewPlan)
		field string
	}{
		"empty title":          {func(p *plans.NewPlan) { p.Title = "  " }, "title"},
		"short hash":           {func(p *plans.NewPlan) { p.InfoHash = "abc" }, "info_hash"},
		"non-hex hash":         {func(p *plans.NewPlan) { p.InfoHash = "zz" + a.Hash[2:] }, "info_hash"},
		"bad sha256":           {func(p *plans.NewPlan) { p.ExpectedSHA256 = "nothex" }, "expected_sha256"},
		"negative size":        {func(p *plans.NewPlan) { p.ExpectedSize = -1 }, "expected_size"},
		"relative target":      {func(p *plans.NewPlan) { p.TargetPath = "lib/a.mkv" }, "target_path"},
		"target outside root":  {func(p *plans.NewPlan) { p.TargetPath = "/etc/passwd" }, "target_path"},
		"target escapes root":  {func(p *plans.NewPlan) { p.TargetPath = w.LibraryDir + "/../x.mkv" }, "target_path"},
		"target is the root":   {func(p *plans.NewPlan) { p.TargetPath = w.LibraryDir }, "target_path"},
		"no source":            {func(p *plans.NewPlan) { p.Magnet = "" }, "source"},
		"two sources":          {func(p *plans.NewPlan) { p.TorrentURL = "https://x/a.torrent" }, "source"},
		"magnet of other hash": {func(p *plans.NewPlan) { p.InfoHash = "ff" + a.Hash[2:] }, "info_hash"},
		"not a magnet":         {func(p *plans.NewPlan) { p.Magnet = "http://x" }, "magnet"},
		"torrent url scheme": {func(p *plans.NewPlan) {
			p.Magnet, p.TorrentURL = "", "ftp://x/a.torrent"
		}, "torrent_url"},
		"garbage torrent": {func(p *plans.NewPlan) { p.Magnet, p.Torrent = "", []byte("nope") }, "torrent"},
	} {
		np := good
		tc.mut(&np)
		_, err := w.Plans.CreatePlan(context.Background(), np)
		require.ErrorIs(t, err, port.ErrInvalidInput, name)
		var fe *port.FieldError
		require.ErrorAs(t, err, &fe, name)
		require.Equal(t, tc.field, fe.Field, name)
	}
	require.Equal(t, before, counts(t, w.Pool), "a rejected call writes nothing")

	p, err := w.Plans.CreatePlan(context.Background(), good)
	require.NoError(t, err)
	require.Equal(t, ledger.PlanAwaitingApproval, p.Status)
	require.Equal(t, []string{"approval.await pending plan:" + p.ID.String() + ":approval.await"}, w.Outbox(t, p.ID.String()))
}

func TestCallsOnUnknownOrMalformedIDsWriteNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := apptest.NewWorld(t, apptest.Options{})
	before := counts(t, w.Pool)
	unknown := uuid.NewString()
	require.ErrorIs(t, w.Plans.Approve(ctx, unknown, "ann", ""), port.ErrNotFound)
	require.ErrorIs(t, w.Plans.Reject(ctx, unknown, "ann", ""), port.ErrNotFound)
	require.ErrorIs(t, w.Plans.Cancel(ctx, unknown, "x"), port.ErrNotFound)
	require.ErrorIs(t, w.Plans.ReportDownloadComplete(ctx, unknown, ""), port.ErrNotFound)
	require.ErrorIs(t, w.Plans.ReportDownloadComplete(ctx, "0123456789abcdef0123456789abcdef01234567", ""), port.ErrNotFound)
	_, err := w.Plans.Timeline(ctx, unknown)
	require.ErrorIs(t, err, port.ErrNotFound)
	require.ErrorIs(t, w.Plans.ResolveDecision(ctx, unknown, ledger.DecisionRetry, "ann"), port.ErrNotFound)

	for _, err := range []error{
		w.Plans.Approve(ctx, "not-a-uuid", "ann", ""),
		w.Plans.Cancel(ctx, "not-a-uuid", ""),
		w.Plans.ReportDownloadComplete(ctx, "not-a-hash", ""),
		w.Plans.ReportDownloadComplete(ctx, unknown, "relative/path"),
		w.Plans.ResolveDecision(ctx, unknown, "maybe", "ann"),
		w.Plans.ResolveDecision(ctx, unknown, ledger.DecisionRetry, ""),
	} {
		require.ErrorIs(t, err, port.ErrInvalidInput)
	}
	_, err = w.Plans.ListDecisions(ctx, "weird", 0)
	require.ErrorIs(t, err, port.ErrInvalidInput)
	require.Equal(t, before, counts(t, w.Pool))
}

func TestStateConflictsWriteNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := apptest.NewWorld(t, apptest.Options{})
	a := apptest.NewAsset("b.mkv", 10)
	p := w.CreatePlan(t, a)
	id := p.ID.String()
	require.ErrorIs(t, w.Plans.Approve(ctx, id, "", ""), port.ErrInvalidInput)
	require.ErrorIs(t, w.Plans.ReportDownloadComplete(ctx, id, ""), plans.ErrConflict, "not submitted yet")
	require.NoError(t, w.Plans.Approve(ctx, id, "ann", ""))
	require.Equal(t, []port.Topic{workflows.ApprovalTopic(id)}, w.Recorder.Signals())
	before := counts(t, w.Pool)
	require.ErrorIs(t, w.Plans.Approve(ctx, id, "bob", ""), plans.ErrConflict)
	require.ErrorIs(t, w.Plans.Reject(ctx, id, "bob", ""), plans.ErrConflict)
	require.Equal(t, before, counts(t, w.Pool))
}

// Cancel writes the flag and the plan.cancel outbox row in one transaction,
// then cancels the plan's open runs in the engine (not its compensation).
func TestCancelWritesFlagThenCancelsRuns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := apptest.NewWorld(t, apptest.Options{})
	p := w.CreatePlan(t, apptest.NewAsset("c.mkv", 10))
	id := p.ID.String()
	w.Drive(t) // approval.await parks, waiting
	runs := w.Recorder.Enqueued()
	require.Len(t, runs, 1)

	require.NoError(t, w.Plans.Cancel(ctx, id, "no longer wanted"))
	tl, err := w.Plans.Timeline(ctx, id)
	require.NoError(t, err)
	require.Equal(t, ledger.PlanCanceling, tl.Plan.Status)
	require.Equal(t, "no longer wanted", tl.Plan.CancelReason)
	require.Equal(t, []port.RunID{runs[0].RunID}, w.Recorder.Canceled())
	require.Contains(t, w.Outbox(t, id), "plan.cancel pending plan:"+id+":plan.cancel")
	require.NoError(t, w.Plans.Cancel(ctx, id, "again"), "canceling twice is a no-op")

	w.Drive(t)
	tl, err = w.Plans.Timeline(ctx, id)
	require.NoError(t, err)
	require.Equal(t, ledger.PlanCanceled, tl.Plan.Status)
	require.ErrorIs(t, w.Plans.Cancel(ctx, id, "late"), plans.ErrConflict)
}
