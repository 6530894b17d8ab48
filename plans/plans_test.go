package plans_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/acquisition"
	"github.com/taskport/taskport/app/apptest"
	"github.com/taskport/taskport/fileimport"
	"github.com/taskport/taskport/internal/testkit/pgtest"
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
		"newline in target":    {func(p *plans.NewPlan) { p.TargetPath = w.LibraryDir + "/a\nb.mkv" }, "target_path"},
		"escape in target":     {func(p *plans.NewPlan) { p.TargetPath = w.LibraryDir + "/a\x1b[2J.mkv" }, "target_path"},
		"NUL in target":        {func(p *plans.NewPlan) { p.TargetPath = w.LibraryDir + "/a\x00.mkv" }, "target_path"},
		"C1 control in target": {func(p *plans.NewPlan) { p.TargetPath = w.LibraryDir + "/a\u0085.mkv" }, "target_path"},
		"invalid UTF-8 target": {func(p *plans.NewPlan) { p.TargetPath = w.LibraryDir + "/a\xff.mkv" }, "target_path"},
		"long directory name":  {func(p *plans.NewPlan) { p.TargetPath = w.LibraryDir + "/" + strings.Repeat("d", 256) + "/a.mkv" }, "target_path"},
		"long file name":       {func(p *plans.NewPlan) { p.TargetPath = w.LibraryDir + "/" + strings.Repeat("f", 256) }, "target_path"},
		"file name without room for the import's temporary name": {func(p *plans.NewPlan) {
			p.TargetPath = w.LibraryDir + "/" + strings.Repeat("f", fileimport.MaxTargetName+1)
		}, "target_path"},
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
	// A service without a library root (the decision commands) creates no
	// plan; a relative root is refused up front.
	rootless, err := plans.New(w.Pool, plans.Config{})
	require.NoError(t, err)
	_, err = rootless.CreatePlan(context.Background(), good)
	var fe *port.FieldError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "library_root", fe.Field)
	_, err = plans.New(w.Pool, plans.Config{LibraryRoot: "library"})
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "library_root", fe.Field)
	for _, mode := range pgtest.UntypedModes {
		_, err = plans.New(pgtest.WithExecMode(t, w.Pool, mode), plans.Config{})
		require.ErrorAs(t, err, &fe, mode.String())
		require.Equal(t, "pool", fe.Field)
	}
	require.Equal(t, before, counts(t, w.Pool), "a rejected call writes nothing")

	p, err := w.Plans.CreatePlan(context.Background(), good)
	require.NoError(t, err)
	require.Equal(t, acquisition.AwaitingApproval, p.Status)
	require.Empty(t, w.Outbox(t, p.ID.String()), "nothing runs until the plan is approved")

	// The longest names that pass are ones the import can create, with its
	// temporary file beside them.
	longest := good
	longest.TargetPath = w.LibraryDir + "/" + strings.Repeat("d", 255) + "/" + strings.Repeat("f", fileimport.MaxTargetName)
	longest.InfoHash = strings.Repeat("1", 40)
	longest.Magnet = "magnet:?xt=urn:btih:" + longest.InfoHash
	_, err = w.Plans.CreatePlan(context.Background(), longest)
	require.NoError(t, err)
	src := filepath.Join(t.TempDir(), "src")
	require.NoError(t, os.WriteFile(src, a.Content, 0o644))
	_, err = fileimport.Import(context.Background(), fileimport.Request{Source: src, Target: longest.TargetPath, ExpectedSize: int64(len(a.Content)), ExpectedSHA256: a.SHA256})
	require.NoError(t, err)
}

func TestCallsOnUnknownOrMalformedIDsWriteNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := apptest.NewWorld(t, apptest.Options{})
	before := counts(t, w.Pool)
	unknown := uuid.NewString()
	require.ErrorIs(t, apptest.ErrOf(w.Plans.Approve(ctx, unknown, "ann", "")), port.ErrNotFound)
	require.ErrorIs(t, apptest.ErrOf(w.Plans.Reject(ctx, unknown, "ann", "")), port.ErrNotFound)
	require.ErrorIs(t, apptest.ErrOf(w.Plans.Cancel(ctx, unknown, "tester", "x")), port.ErrNotFound)
	require.ErrorIs(t, apptest.ErrOf(w.Plans.ReportDownloadComplete(ctx, unknown, "")), port.ErrNotFound)
	require.ErrorIs(t, apptest.ErrOf(w.Plans.ReportDownloadComplete(ctx, "0123456789abcdef0123456789abcdef01234567", "")), port.ErrNotFound)
	_, err := w.Plans.Timeline(ctx, unknown)
	require.ErrorIs(t, err, port.ErrNotFound)
	require.ErrorIs(t, apptest.ErrOf(w.Plans.ResolveDecision(ctx, unknown, acquisition.DecisionRetry, "ann")), port.ErrNotFound)

	for _, err := range []error{
		apptest.ErrOf(w.Plans.Approve(ctx, "not-a-uuid", "ann", "")),
		apptest.ErrOf(w.Plans.Cancel(ctx, "not-a-uuid", "tester", "")),
		apptest.ErrOf(w.Plans.ReportDownloadComplete(ctx, "not-a-hash", "")),
		apptest.ErrOf(w.Plans.ReportDownloadComplete(ctx, unknown, "relative/path")),
		apptest.ErrOf(w.Plans.ResolveDecision(ctx, unknown, "maybe", "ann")),
		apptest.ErrOf(w.Plans.ResolveDecision(ctx, unknown, acquisition.DecisionRetry, "")),
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
	require.ErrorIs(t, apptest.ErrOf(w.Plans.Approve(ctx, id, "", "")), port.ErrInvalidInput)
	require.ErrorIs(t, apptest.ErrOf(w.Plans.ReportDownloadComplete(ctx, id, "")), plans.ErrConflict, "not submitted yet")
	apptest.Acked(t)(w.Plans.Approve(ctx, id, "ann", ""))
	require.Equal(t, []string{"download.submit pending plan:" + id + ":download.submit"}, w.Outbox(t, id),
		"the hand-off is committed with the approval")
	require.Empty(t, w.Actions(t, id), "and no wake-up: no run waits for the approval")
	require.Empty(t, w.Recorder.Enqueued(), "the dispatcher enqueues it, not the API")
	_, err := w.Dispatcher.DispatchOnce(ctx)
	require.NoError(t, err)
	require.Len(t, w.Recorder.Enqueued(), 1)
	require.Equal(t, workflows.KindDownloadSubmit, w.Recorder.Enqueued()[0].Kind)
	require.Empty(t, w.Recorder.Signals())

	before := counts(t, w.Pool)
	again := apptest.Acked(t)(w.Plans.Approve(ctx, id, "bob", ""))
	require.True(t, again.Already, "approving twice is idempotent and says so: %s", again)
	require.ErrorIs(t, apptest.ErrOf(w.Plans.Reject(ctx, id, "bob", "")), plans.ErrConflict)
	require.Equal(t, before, counts(t, w.Pool))
}

// Cancel writes the flag, the plan.cancel outbox row and the row that
// cancels the plan's open runs in the engine (not its compensation) in one
// transaction; the dispatcher carries the cancel out.
func TestCancelWritesFlagThenCancelsRuns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := apptest.NewWorld(t, apptest.Options{})
	p := w.CreatePlan(t, apptest.NewAsset("c.mkv", 10))
	id := p.ID.String()
	apptest.Acked(t)(w.Plans.Approve(ctx, id, "ann", ""))
	w.Drive(t) // download.submit adds the torrent; download.await parks, waiting
	runs := slices.DeleteFunc(w.Recorder.Enqueued(), func(e apptest.Enqueued) bool { return e.Kind != workflows.KindDownloadAwait })
	require.Len(t, runs, 1)

	apptest.Acked(t)(w.Plans.Cancel(ctx, id, "tester", "no longer wanted"))
	tl, err := w.Plans.Timeline(ctx, id)
	require.NoError(t, err)
	require.Equal(t, acquisition.Canceling, tl.Plan.Status)
	require.Equal(t, "no longer wanted", tl.Plan.CancelReason)
	require.Contains(t, w.Outbox(t, id), "plan.cancel pending plan:"+id+":plan.cancel")
	require.Equal(t, []string{"cancel_plan_runs  pending"}, w.Actions(t, id))
	require.Empty(t, w.Recorder.Canceled(), "the API calls no engine")
	again := apptest.Acked(t)(w.Plans.Cancel(ctx, id, "tester", "again"))
	require.True(t, again.Already, "canceling twice says so: %s", again)
	require.Contains(t, again.Message, "no longer wanted", "and names the request that stands")

	_, err = w.Dispatcher.DispatchOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, []port.RunID{runs[0].RunID}, w.Recorder.Canceled(),
		"the open run is canceled once: the second request finds it canceled")
	require.Equal(t, []string{"cancel_plan_runs  dispatched", "cancel_plan_runs  dispatched"}, w.Actions(t, id))
	w.Drive(t)
	tl, err = w.Plans.Timeline(ctx, id)
	require.NoError(t, err)
	require.Equal(t, acquisition.Canceled, tl.Plan.Status)
	require.ErrorIs(t, apptest.ErrOf(w.Plans.Cancel(ctx, id, "tester", "late")), plans.ErrConflict)
}

// Defect 3: a second live or completed plan on the same target path is
// refused with an error naming the plan that holds it, and nothing is
// written.
func TestSecondPlanOnSameTargetIsRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := apptest.NewWorld(t, apptest.Options{})
	a, b := apptest.NewAsset("same.mkv", 10), apptest.NewAsset("other.mkv", 10)
	first := w.CreatePlan(t, a)
	before := counts(t, w.Pool)
	_, err := w.Plans.CreatePlan(ctx, plans.NewPlan{Title: "B", Magnet: b.Magnet(), InfoHash: b.Hash, TargetPath: w.Target(a),
		ExpectedSize: 10, ExpectedSHA256: b.SHA256})
	require.ErrorIs(t, err, plans.ErrConflict)
	require.ErrorContains(t, err, first.ID.String(), "the error names the plan that holds the target")
	var taken *acquisition.TakenError
	require.ErrorAs(t, err, &taken)
	require.Equal(t, acquisition.TakenError{Field: "target_path", Value: w.Target(a), PlanID: first.ID, Status: acquisition.AwaitingApproval}, *taken)
	require.Equal(t, before, counts(t, w.Pool), "nothing written")
}

// Defect 3: plans created at once on one target: exactly one is created,
// every other call gets the error naming it, whichever of the check and the
// unique index refused it.
func TestConcurrentPlansOnOneTarget(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := apptest.NewWorld(t, apptest.Options{})
	target := w.LibraryDir + "/contested.mkv"
	const n = 8
	ids := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		a := apptest.NewAsset(fmt.Sprintf("contested-%d.mkv", i), 10)
		wg.Go(func() {
			p, err := w.Plans.CreatePlan(ctx, plans.NewPlan{Title: a.Name, Magnet: a.Magnet(), InfoHash: a.Hash, TargetPath: target,
				ExpectedSize: 10, ExpectedSHA256: a.SHA256})
			ids[i], errs[i] = p.ID.String(), err
		})
	}
	wg.Wait()
	var winner string
	for i, err := range errs {
		if err == nil {
			require.Empty(t, winner, "two plans were created on one target")
			winner = ids[i]
		}
	}
	require.NotEmpty(t, winner)
	for _, err := range errs {
		if err != nil {
			var taken *acquisition.TakenError
			require.ErrorAs(t, err, &taken)
			require.Equal(t, winner, taken.PlanID.String())
		}
	}
	require.Equal(t, 1, counts(t, w.Pool)["plan"])
}

// A create retried with its idempotency key gets the plan its first attempt
// created and writes nothing, one after the other and when the retries race
// (the unique index of migration 00021 decides; the losers read the
// winner's plan). A key with a control character is refused.
func TestCreatePlanWithAKeyIsRetryable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := apptest.NewWorld(t, apptest.Options{})
	a := apptest.NewAsset("keyed.mkv", 10)
	np := plans.NewPlan{Title: "keyed", Magnet: a.Magnet(), TargetPath: w.Target(a), ExpectedSize: 10,
		ExpectedSHA256: a.SHA256, IdempotencyKey: "import:keyed"}
	first, err := w.Plans.CreatePlan(ctx, np)
	require.NoError(t, err)
	before := counts(t, w.Pool)
	again, err := w.Plans.CreatePlan(ctx, np)
	require.NoError(t, err)
	require.Equal(t, first.ID, again.ID)
	require.Equal(t, before, counts(t, w.Pool), "a retry writes nothing (no plan, no outbox row)")

	b := apptest.NewAsset("raced.mkv", 10)
	raced := plans.NewPlan{Title: "raced", Magnet: b.Magnet(), TargetPath: w.Target(b), ExpectedSize: 10,
		ExpectedSHA256: b.SHA256, IdempotencyKey: "import:raced"}
	const n = 8
	ids := make([]uuid.UUID, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			p, err := w.Plans.CreatePlan(ctx, raced)
			ids[i], errs[i] = p.ID, err
		})
	}
	wg.Wait()
	for i := range n {
		require.NoError(t, errs[i])
		require.Equal(t, ids[0], ids[i], "every racing retry returns the one plan")
	}
	require.Equal(t, before["plan"]+1, counts(t, w.Pool)["plan"])
	require.Equal(t, before["outbox_event"], counts(t, w.Pool)["outbox_event"], "a plan awaiting approval runs nothing")

	bad := np
	bad.IdempotencyKey = "a\nb"
	_, err = w.Plans.CreatePlan(ctx, bad)
	var fe *port.FieldError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "idempotency_key", fe.Field)
}

// Defect 4: a second active plan on the same info hash is refused with an
// error naming the plan that holds it, and nothing is written.
// A plan created from a magnet or a torrent file without an info hash takes
// the source's; a torrent URL names none, and is refused without one.
func TestInfoHashDefaultsToTheSources(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := apptest.NewWorld(t, apptest.Options{})
	a := apptest.NewAsset("from-magnet.mkv", 10)
	p, err := w.Plans.CreatePlan(ctx, plans.NewPlan{Title: "magnet only", Magnet: a.Magnet(),
		TargetPath: w.Target(a), ExpectedSize: 10, ExpectedSHA256: a.SHA256})
	require.NoError(t, err)
	require.Equal(t, a.Hash, p.InfoHash)

	before := counts(t, w.Pool)
	_, err = w.Plans.CreatePlan(ctx, plans.NewPlan{Title: "url only", TorrentURL: "https://example.com/a.torrent",
		TargetPath: w.LibraryDir + "/url.mkv", ExpectedSize: 10, ExpectedSHA256: a.SHA256})
	var fe *port.FieldError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "info_hash", fe.Field)
	require.Equal(t, before, counts(t, w.Pool), "nothing written")
}

func TestSecondActivePlanOnSameHashIsRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := apptest.NewWorld(t, apptest.Options{})
	a := apptest.NewAsset("hash.mkv", 10)
	first := w.CreatePlan(t, a)
	before := counts(t, w.Pool)
	_, err := w.Plans.CreatePlan(ctx, plans.NewPlan{Title: "again", Magnet: a.Magnet(), InfoHash: a.Hash,
		TargetPath: w.LibraryDir + "/elsewhere.mkv", ExpectedSize: 10, ExpectedSHA256: a.SHA256})
	require.ErrorIs(t, err, plans.ErrConflict)
	require.ErrorContains(t, err, first.ID.String(), "the error names the plan that holds the hash")
	var taken *acquisition.TakenError
	require.ErrorAs(t, err, &taken)
	require.Equal(t, "info_hash", taken.Field)
	require.Equal(t, before, counts(t, w.Pool), "nothing written")
}

// Free text is bounded: a title, note, reason or actor over its bound is
// refused naming the field, and nothing is written.
func TestFreeTextIsBounded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := apptest.NewWorld(t, apptest.Options{})
	id := w.CreatePlan(t, apptest.NewAsset("bounded.mkv", 10)).ID.String()
	long := func(n int) string { return strings.Repeat("é", n+1) } // characters, not bytes
	before := counts(t, w.Pool)
	b := apptest.NewAsset("title.mkv", 10)
	_, err := w.Plans.CreatePlan(ctx, plans.NewPlan{Title: long(plans.MaxTitle), Magnet: b.Magnet(), InfoHash: b.Hash,
		TargetPath: w.Target(b), ExpectedSize: 10, ExpectedSHA256: b.SHA256})
	for field, err := range map[string]error{
		"title":       err,
		"note":        apptest.ErrOf(w.Plans.Approve(ctx, id, "ann", long(plans.MaxNote))),
		"decided_by":  apptest.ErrOf(w.Plans.Reject(ctx, id, long(plans.MaxActor), "")),
		"reason":      apptest.ErrOf(w.Plans.Cancel(ctx, id, "ann", long(plans.MaxNote))),
		"canceled_by": apptest.ErrOf(w.Plans.Cancel(ctx, id, " ", "why")),
		"resolved_by": apptest.ErrOf(w.Plans.ResolveDecision(ctx, uuid.NewString(), acquisition.DecisionRetry, long(plans.MaxActor))),
	} {
		var fe *port.FieldError
		require.ErrorAs(t, err, &fe, field)
		require.Equal(t, field, fe.Field)
	}
	require.Equal(t, before, counts(t, w.Pool))
	// A refused approval or rejection decided nothing: the error names what
	// was asked, not the status the plan did not reach.
	_, err = w.Plans.Reject(ctx, id, " ", "")
	require.EqualError(t, err, "reject plan "+id+": invalid decided_by: must not be empty")
	_, err = w.Plans.Approve(ctx, "not-an-id", "ann", "")
	require.ErrorContains(t, err, "approve plan: invalid plan_id")
	apptest.Acked(t)(w.Plans.Approve(ctx, id, "ann", strings.Repeat("é", plans.MaxNote)))
	_, err = w.Plans.Reject(ctx, id, "bob", "")
	require.ErrorContains(t, err, "reject plan "+id+": plan was approved by ann")
}

// Free text is text: a field holding invalid UTF-8 or U+0000 (which
// Postgres refuses with SQLSTATE 22021), or a control character in a
// one-line field (a title, who acted: printed to a terminal, an escape code
// there), is refused naming the field, and nothing is written. A note may
// hold line feeds and tabs.
func TestFreeTextIsText(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := apptest.NewWorld(t, apptest.Options{})
	id := w.CreatePlan(t, apptest.NewAsset("text.mkv", 10)).ID.String()
	b := apptest.NewAsset("titled.mkv", 10)
	create := func(mut func(*plans.NewPlan)) error {
		np := plans.NewPlan{Title: "B", Magnet: b.Magnet(), InfoHash: b.Hash, TargetPath: w.Target(b), ExpectedSize: 10, ExpectedSHA256: b.SHA256}
		mut(&np)
		_, err := w.Plans.CreatePlan(ctx, np)
		return err
	}
	list := func(search string) error {
		_, err := w.Plans.ListPlans(ctx, plans.PlanQuery{Search: search})
		return err
	}
	before := counts(t, w.Pool)
	for name, tc := range map[string]struct {
		err   error
		field string
	}{
		"invalid UTF-8 title":      {create(func(p *plans.NewPlan) { p.Title = "bad\xff" }), "title"},
		"NUL in title":             {create(func(p *plans.NewPlan) { p.Title = "a\x00b" }), "title"},
		"escape in title":          {create(func(p *plans.NewPlan) { p.Title = "x\x1b[31mRED" }), "title"},
		"newline in title":         {create(func(p *plans.NewPlan) { p.Title = "a\nb" }), "title"},
		"C1 control in title":      {create(func(p *plans.NewPlan) { p.Title = "a\u0085b" }), "title"},
		"invalid UTF-8 magnet":     {create(func(p *plans.NewPlan) { p.Magnet += "&dn=\xff" }), "magnet"},
		"invalid UTF-8 url":        {create(func(p *plans.NewPlan) { p.Magnet, p.TorrentURL = "", "https://x/\xff.torrent" }), "torrent_url"},
		"invalid UTF-8 approver":   {apptest.ErrOf(w.Plans.Approve(ctx, id, "ann\xff", "")), "decided_by"},
		"escape in rejecter":       {apptest.ErrOf(w.Plans.Reject(ctx, id, "x\x1b[31mRED", "")), "decided_by"},
		"invalid UTF-8 note":       {apptest.ErrOf(w.Plans.Approve(ctx, id, "ann", "bad\xff")), "note"},
		"NUL in note":              {apptest.ErrOf(w.Plans.Reject(ctx, id, "ann", "a\x00b")), "note"},
		"escape in note":           {apptest.ErrOf(w.Plans.Approve(ctx, id, "ann", "a\x1b[2Jb")), "note"},
		"NUL in canceler":          {apptest.ErrOf(w.Plans.Cancel(ctx, id, "ann\x00", "why")), "canceled_by"},
		"invalid UTF-8 reason":     {apptest.ErrOf(w.Plans.Cancel(ctx, id, "ann", "bad\xff")), "reason"},
		"NUL in reason":            {apptest.ErrOf(w.Plans.Cancel(ctx, id, "ann", "a\x00b")), "reason"},
		"invalid UTF-8 resolver":   {apptest.ErrOf(w.Plans.ResolveDecision(ctx, uuid.NewString(), acquisition.DecisionRetry, "x\xff")), "resolved_by"},
		"escape in resolver":       {apptest.ErrOf(w.Plans.ResolveDecision(ctx, uuid.NewString(), acquisition.DecisionRetry, "x\x1b[31m")), "resolved_by"},
		"invalid UTF-8 content":    {apptest.ErrOf(w.Plans.ReportDownloadComplete(ctx, id, "/downloads/\xff")), "content_path"},
		"NUL in search":            {list("a\x00b"), "search"},
		"invalid UTF-8 search":     {list("\xff"), "search"},
		"invalid UTF-8 idem. key":  {create(func(p *plans.NewPlan) { p.IdempotencyKey = "k\xff" }), "idempotency_key"},
		"truncated UTF-8 in title": {create(func(p *plans.NewPlan) { p.Title = "\xc3" }), "title"},
	} {
		require.ErrorIs(t, tc.err, port.ErrInvalidInput, name)
		var fe *port.FieldError
		require.ErrorAs(t, tc.err, &fe, name)
		require.Equal(t, tc.field, fe.Field, name)
	}
	require.Equal(t, before, counts(t, w.Pool), "a refused call writes nothing")

	apptest.Acked(t)(w.Plans.Approve(ctx, id, "Anaïs", "first line\n\tsecond line"))
	tl, err := w.Plans.Timeline(ctx, id)
	require.NoError(t, err)
	require.Equal(t, acquisition.Approved, tl.Plan.Status, "a multi-line note passes")
}

// The plans list searches by id, info hash or part of a title, filters by
// status, and pages by cursor; bad input names its field.
func TestListPlansSearchesAndPages(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := apptest.NewWorld(t, apptest.Options{})
	var ps []acquisition.Plan
	for _, name := range []string{"alpha.mkv", "beta.mkv", "gamma.mkv"} {
		ps = append(ps, w.CreatePlan(t, apptest.NewAsset(name, 10)))
	}
	apptest.Acked(t)(w.Plans.Cancel(ctx, ps[1].ID.String(), "ann", "not needed"))
	titles := func(q plans.PlanQuery) []string {
		page, err := w.Plans.ListPlans(ctx, q)
		require.NoError(t, err)
		var out []string
		for _, p := range page.Plans {
			out = append(out, p.Title)
		}
		return out
	}
	require.Equal(t, []string{"gamma.mkv", "beta.mkv", "alpha.mkv"}, titles(plans.PlanQuery{}))
	require.Equal(t, []string{"beta.mkv"}, titles(plans.PlanQuery{Search: "ETA"}))
	require.Equal(t, []string{"alpha.mkv"}, titles(plans.PlanQuery{Search: " " + ps[0].ID.String()}))
	require.Equal(t, []string{"gamma.mkv"}, titles(plans.PlanQuery{Search: strings.ToUpper(ps[2].InfoHash)}))
	require.Equal(t, []string{"beta.mkv"}, titles(plans.PlanQuery{Status: acquisition.Canceling}))
	require.Empty(t, titles(plans.PlanQuery{Status: acquisition.Canceling, Search: "alpha"}))

	first, err := w.Plans.ListPlans(ctx, plans.PlanQuery{Limit: 2})
	require.NoError(t, err)
	require.Len(t, first.Plans, 2)
	require.NotEmpty(t, first.Next)
	last, err := w.Plans.ListPlans(ctx, plans.PlanQuery{Limit: 2, After: first.Next})
	require.NoError(t, err)
	require.Len(t, last.Plans, 1)
	require.Equal(t, ps[0].ID, last.Plans[0].ID)
	require.Empty(t, last.Next, "the last page says so")

	for field, q := range map[string]plans.PlanQuery{
		"status": {Status: "lost"},
		"after":  {After: "yesterday"},
		"limit":  {Limit: plans.MaxPage + 1},
		"search": {Search: strings.Repeat("x", plans.MaxTitle+1)},
	} {
		_, err := w.Plans.ListPlans(ctx, q)
		var fe *port.FieldError
		require.ErrorAs(t, err, &fe, field)
		require.Equal(t, field, fe.Field)
	}
}

// The approval is taken once, by the API (issue 25): one approval row, the
// plan approved and download.submit's outbox row in the approval's
// transaction, no wake-up and no run waiting for it. A rejection runs
// nothing. A plan canceled first refuses the approval with nothing written,
// and one approved first and then canceled never proceeds: its
// download.submit sees the cancel flag and adds no torrent.
func TestApprovalIsTakenOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := apptest.NewWorld(t, apptest.Options{})
	approvals := func(id string) int {
		var n int
		require.NoError(t, w.Pool.QueryRow(ctx, `SELECT count(*) FROM approval WHERE plan_id = $1`, id).Scan(&n))
		return n
	}

	approved := w.CreatePlan(t, apptest.NewAsset("approved.mkv", 10)).ID.String()
	apptest.Acked(t)(w.Plans.Approve(ctx, approved, "ann", ""))
	again := apptest.Acked(t)(w.Plans.Approve(ctx, approved, "ann", ""))
	require.True(t, again.Already)
	require.Equal(t, 1, approvals(approved))
	require.Equal(t, acquisition.Approved, w.Plan(t, approved).Status)
	require.Equal(t, []string{"download.submit pending plan:" + approved + ":download.submit"}, w.Outbox(t, approved))
	require.Empty(t, w.Actions(t, approved))

	rejected := w.CreatePlan(t, apptest.NewAsset("rejected.mkv", 10)).ID.String()
	apptest.Acked(t)(w.Plans.Reject(ctx, rejected, "ann", "no"))
	require.ErrorIs(t, apptest.ErrOf(w.Plans.Approve(ctx, rejected, "bob", "")), plans.ErrConflict)
	require.Equal(t, 1, approvals(rejected))
	require.Equal(t, acquisition.Rejected, w.Plan(t, rejected).Status)
	require.Empty(t, w.Outbox(t, rejected), "a rejected plan runs nothing")
	require.Empty(t, w.Actions(t, rejected))

	canceledFirst := w.CreatePlan(t, apptest.NewAsset("canceled-first.mkv", 10)).ID.String()
	apptest.Acked(t)(w.Plans.Cancel(ctx, canceledFirst, "tester", "changed my mind"))
	err := apptest.ErrOf(w.Plans.Approve(ctx, canceledFirst, "ann", ""))
	var te *acquisition.TransitionError
	require.ErrorAs(t, err, &te)
	require.Equal(t, acquisition.Canceling, te.Actual)
	require.Zero(t, approvals(canceledFirst), "nothing written")
	require.Empty(t, kindRows(t, w, canceledFirst, workflows.KindDownloadSubmit))

	canceledAfter := apptest.NewAsset("canceled-after.mkv", 10)
	after := w.CreatePlan(t, canceledAfter).ID.String()
	apptest.Acked(t)(w.Plans.Approve(ctx, after, "ann", ""))
	apptest.Acked(t)(w.Plans.Cancel(ctx, after, "tester", "too late"))

	w.Drive(t)
	require.Equal(t, acquisition.Canceled, w.Plan(t, canceledFirst).Status)
	require.Equal(t, acquisition.Canceled, w.Plan(t, after).Status)
	require.Zero(t, w.QBT.Added("tp-"+after), "a plan canceled before its download.submit ran adds no torrent")
	require.Equal(t, 1, w.QBT.Added("tp-"+approved))
	for _, e := range w.Recorder.Enqueued() {
		require.NotEqual(t, workflows.KindApprovalAwait, e.Kind, "no run waits for an approval")
	}
}
