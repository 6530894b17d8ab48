package app_test

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/acquisition"
	"github.com/taskport/taskport/activities"
	"github.com/taskport/taskport/app/apptest"
	"github.com/taskport/taskport/ledger"
	"github.com/taskport/taskport/plans"
	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/workflows/flowtest"
)

func requireNoFailures(t *testing.T, res []apptest.DriveResult) {
	t.Helper()
	for _, r := range res {
		if r.Err != nil {
			require.ErrorIs(t, r.Err, flowtest.ErrParked, "run %s", r)
		}
	}
}

// A full acquisition, every hand-over through the outbox and the
// dispatcher: approve -> submit -> complete -> import -> verify -> cleanup.
func TestFullAcquisition(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := apptest.NewWorld(t, apptest.Options{})
	a := apptest.NewAsset("film.mkv", 300_000)
	p := w.CreatePlan(t, a)
	id := p.ID.String()

	requireNoFailures(t, w.Drive(t))
	require.Equal(t, acquisition.AwaitingApproval, w.Plan(t, id).Status, "nothing moves before approval")

	apptest.Acked(t)(w.Plans.Approve(ctx, id, "ann", "looks fine"))
	requireNoFailures(t, w.Drive(t))
	require.Equal(t, acquisition.Downloading, w.Plan(t, id).Status)
	require.Equal(t, 1, w.QBT.AddRequests())
	require.Len(t, w.QBT.Torrents(), 1)
	require.True(t, w.QBT.Torrents()[0].HasTag("tp-"+id))

	w.FinishDownload(t, p, a)
	apptest.Acked(t)(w.Plans.ReportDownloadComplete(ctx, a.Hash, ""))
	requireNoFailures(t, w.Drive(t))

	require.Equal(t, acquisition.Completed, w.Plan(t, id).Status)
	require.Equal(t, a.SHA256, apptest.FileSHA256(t, w.Target(a)))
	require.Equal(t, []string{a.Name}, w.LibraryFiles(t), "no temp file left beside the target")
	deleted, withFiles := w.QBT.Deleted(a.Hash)
	require.True(t, deleted && withFiles, "cleanup deletes the torrent with its files")
	require.Equal(t, map[ledger.Op]bool{
		ledger.OpSubmit: true, ledger.OpImport: true, ledger.OpVerify: true, ledger.OpCleanup: true,
	}, w.Operations(t, id))
	require.Equal(t, []string{
		"download.submit dispatched plan:" + id + ":download.submit",
		"download.await dispatched plan:" + id + ":download.await",
		"asset.import dispatched plan:" + id + ":asset.import",
		"asset.verify dispatched plan:" + id + ":asset.verify",
		"download.cleanup dispatched plan:" + id + ":download.cleanup",
		"notify.webhook dispatched plan:" + id + ":plan.completed",
	}, w.Outbox(t, id))
	require.Equal(t, []string{"plan:" + id + ":plan.completed"}, w.Webhooks.Keys())

	// The timeline merges every owner's lines, oldest first.
	tl, err := w.Plans.Timeline(ctx, id)
	require.NoError(t, err)
	sources := map[string]bool{}
	for i, e := range tl.Entries {
		sources[e.Source] = true
		if i > 0 {
			require.False(t, e.At.Before(tl.Entries[i-1].At), "timeline out of order at %d: %+v", i, e)
		}
	}
	require.Equal(t, map[string]bool{"plan": true, "approval": true, "download": true, "operation": true, "handoff": true}, sources)
}

// cancelingFiles cancels the plan from inside the copy, after its first
// chunk, as a user would while a large file is being imported.
type cancelingFiles struct {
	activities.LocalFiles
	once   sync.Once
	cancel func()
	last   atomic.Int64 // bytes copied at the last progress report
}

func (f *cancelingFiles) Import(ctx context.Context, req activities.ImportRequest) (activities.ImportResult, error) {
	progress := req.Progress
	req.Progress = func(copied, total int64) {
		progress(copied, total)
		f.last.Store(copied)
		f.once.Do(f.cancel)
	}
	return f.LocalFiles.Import(ctx, req)
}

func TestCancelMidImport(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	files := &cancelingFiles{}
	w := apptest.NewWorld(t, apptest.Options{Files: files, ChunkSize: 16 << 10})
	a := apptest.NewAsset("series.mkv", 400_000)
	p := w.CreatePlan(t, a)
	id := p.ID.String()
	var cancelErr error
	var sawTemp bool
	files.cancel = func() {
		entries, _ := os.ReadDir(w.LibraryDir)
		sawTemp = len(entries) > 0
		_, cancelErr = w.Plans.Cancel(ctx, id, "tester", "changed my mind")
	}

	apptest.Acked(t)(w.Plans.Approve(ctx, id, "ann", ""))
	w.Drive(t)
	w.FinishDownload(t, p, a)
	apptest.Acked(t)(w.Plans.ReportDownloadComplete(ctx, id, ""))
	res := w.Drive(t)
	require.NoError(t, cancelErr)
	require.True(t, sawTemp, "the cancel landed while the temp file was being written")
	require.Less(t, files.last.Load(), int64(len(a.Content)), "the copy stopped between chunks")

	st := w.Plan(t, id)
	require.Equal(t, acquisition.Canceled, st.Status)
	require.Empty(t, w.LibraryFiles(t), "no temp file and no library file")
	deleted, withFiles := w.QBT.Deleted(a.Hash)
	require.True(t, deleted && withFiles, "compensation removes the torrent with its files")
	_, err := os.Stat(filepath.Join(w.DownloadDir, id))
	require.ErrorIs(t, err, os.ErrNotExist)
	ops := w.Operations(t, id)
	require.False(t, ops[ledger.OpImport], "the canceled import commits nothing")
	require.True(t, ops[ledger.OpCompensate])
	require.NotContains(t, ops, ledger.OpVerify)
	require.Contains(t, w.Outbox(t, id), "plan.cancel dispatched plan:"+id+":plan.cancel")
	require.Contains(t, w.Webhooks.Keys(), "plan:"+id+":plan.canceled")
	var sawImport bool
	for _, r := range res {
		if r.Kind == "asset.import" {
			sawImport = true
			require.NotEmpty(t, r.Run.Heartbeats, "the import reported progress")
		}
	}
	require.True(t, sawImport)
}

// A run that fails for good opens a decision; resolving it as retry runs the
// kind again and the plan completes.
func TestDecisionRetryAfterCorruptDownload(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := apptest.NewWorld(t, apptest.Options{})
	a := apptest.NewAsset("doc.mkv", 100_000)
	p := w.CreatePlan(t, a)
	id := p.ID.String()
	apptest.Acked(t)(w.Plans.Approve(ctx, id, "ann", ""))
	w.Drive(t)

	corrupt := a
	corrupt.Content = append([]byte("x"), a.Content[1:]...)
	w.FinishDownload(t, p, corrupt)
	apptest.Acked(t)(w.Plans.ReportDownloadComplete(ctx, id, ""))
	w.Drive(t)
	require.Equal(t, acquisition.Failed, w.Plan(t, id).Status)
	require.Empty(t, w.LibraryFiles(t), "a mismatching copy leaves nothing behind")
	open, err := w.Plans.ListDecisions(ctx, acquisition.DecisionOpen, 0)
	require.NoError(t, err)
	require.Len(t, open, 1)
	require.Equal(t, port.Kind("asset.import"), open[0].Kind)

	w.FinishDownload(t, p, a) // the user fixed the download
	apptest.Acked(t)(w.Plans.ResolveDecision(ctx, open[0].ID.String(), acquisition.DecisionRetry, "ann"))
	// The same resolution again says so and writes nothing; the other one
	// is refused.
	outbox := w.Outbox(t, id)
	again, err := w.Plans.ResolveDecision(ctx, open[0].ID.String(), acquisition.DecisionRetry, "bob")
	require.NoError(t, err)
	require.True(t, again.Already, "resolving twice is idempotent and says so: %s", again)
	require.Contains(t, again.Message, "already resolved as retry by ann")
	_, err = w.Plans.ResolveDecision(ctx, open[0].ID.String(), acquisition.DecisionAbandon, "bob")
	require.ErrorIs(t, err, plans.ErrConflict)
	require.Equal(t, outbox, w.Outbox(t, id))
	w.Drive(t)
	require.Equal(t, acquisition.Completed, w.Plan(t, id).Status)
	require.Equal(t, a.SHA256, apptest.FileSHA256(t, w.Target(a)))
	require.Contains(t, w.Outbox(t, id), "asset.import dispatched decision:"+open[0].ID.String()+":retry")
}
