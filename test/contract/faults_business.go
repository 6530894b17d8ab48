package contract

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/acquisition"
	"github.com/taskport/taskport/activities"
	"github.com/taskport/taskport/app/apptest"
	"github.com/taskport/taskport/ledger"
	"github.com/taskport/taskport/port"
)

// businessFaults run the real business kinds (app.Register) on the engine
// under test, with faults the real parts cannot produce on demand: a
// qBittorrent Web API (the fake, speaking the real protocol) that drops the
// connection after accepting an add, and a worker that dies between a
// finished copy and its ledger commit. They assert on the downloader's
// torrents, the ledger rows and the files.
var businessFaults = []scenario{
	{"qbittorrent_accepts_add_then_drops", droppedAdd},
	{"copy_finished_result_not_committed", copiedNotCommitted},
}

// businessWorld is an acquisition world whose engine is the one under test,
// started, with the outbox dispatcher running.
func (w *world) businessWorld(files activities.Files) *apptest.World {
	w.t.Helper()
	var eng port.TaskEngine
	bw := apptest.NewWorld(w.t, apptest.Options{Pool: w.pool, Files: files, NewEngine: func(reg *port.Registry, _ *pgxpool.Pool) port.TaskEngine {
		eng = w.factory(w.t, reg)
		return eng
	}})
	require.NoError(w.t, eng.Start(bg, port.StartOptions{}))
	w.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = eng.Stop(ctx)
	})
	require.NoError(w.t, bw.Dispatcher.Start(bg))
	return bw
}

// acquire drives a plan for a through approval, download and completion
// report, and waits until the plan is final.
func (w *world) acquire(bw *apptest.World, a apptest.Asset) acquisition.Plan {
	w.t.Helper()
	p := bw.CreatePlan(w.t, a)
	id := p.ID.String()
	apptest.Acked(w.t)(bw.Plans.Approve(bg, id, "ann", ""))
	w.waitPlan(bw, id, acquisition.Downloading, acquisition.Downloaded, acquisition.Imported, acquisition.Verified, acquisition.Completed)
	bw.FinishDownload(w.t, p, a)
	apptest.Acked(w.t)(bw.Plans.ReportDownloadComplete(bg, id, ""))
	final := w.waitPlan(bw, id, acquisition.Completed, acquisition.Failed, acquisition.Canceled, acquisition.Abandoned)
	w.expect(final.Status == acquisition.Completed, "plan %s ended %s, want completed", id, final.Status)
	return final
}

func (w *world) waitPlan(bw *apptest.World, id string, want ...acquisition.Status) acquisition.Plan {
	w.t.Helper()
	var last acquisition.Plan
	require.Eventuallyf(w.t, func() bool {
		tl, err := bw.Plans.Timeline(bg, id)
		if err != nil {
			return false
		}
		last = tl.Plan
		for _, s := range want {
			if last.Status == s {
				return true
			}
		}
		return false
	}, waitFor, pollEvery, "plan %s never reached %v; last %s", id, want, &last.Status)
	return last
}

// qBittorrent accepts the add, then the connection drops before the answer:
// the step's retry must find the torrent by tag/hash instead of adding it
// again, leaving exactly one torrent.
func droppedAdd(w *world) {
	bw := w.businessWorld(nil)
	bw.QBT.DropNextAdds(1)
	a := apptest.NewAsset("dropped.mkv", 120_000)
	p := bw.CreatePlan(w.t, a)
	id := p.ID.String()
	apptest.Acked(w.t)(bw.Plans.Approve(bg, id, "ann", ""))
	w.waitPlan(bw, id, acquisition.Downloading)

	torrents := bw.QBT.Torrents()
	w.t.Logf("injected: the connection dropped after qBittorrent accepted add #1; adds sent: %d, torrents: %d", bw.QBT.AddRequests(), len(torrents))
	w.expect(len(torrents) == 1, "%d torrents in qBittorrent, want exactly 1", len(torrents))
	w.expect(bw.QBT.AddRequests() == 1, "%d adds sent, want 1: the retry must reconcile by tag/hash", bw.QBT.AddRequests())
	op, found, err := ledger.Read(bg, bw.Pool, p.ID, ledger.OpSubmit)
	require.NoError(w.t, err)
	w.expect(found && op.Done() && op.Attempts >= 2, "submit ledger row: found=%v done=%v attempts=%d, want a result after >= 2 attempts", found, op.Done(), op.Attempts)

	bw.FinishDownload(w.t, p, a)
	apptest.Acked(w.t)(bw.Plans.ReportDownloadComplete(bg, id, ""))
	final := w.waitPlan(bw, id, acquisition.Completed, acquisition.Failed)
	w.expect(final.Status == acquisition.Completed, "plan ended %s, want completed", final.Status)
	w.expect(apptest.FileSHA256(w.t, bw.Target(a)) == a.SHA256, "library file hash differs")
}

// countingFiles copies for real and, once, dies after the copy finished and
// before the step could commit its result, as a killed worker would.
type countingFiles struct {
	activities.LocalFiles
	mu      sync.Mutex
	copies  int // imports that wrote the target (not reconciled)
	crashed bool
}

func (c *countingFiles) Import(ctx context.Context, req activities.ImportRequest) (activities.ImportResult, error) {
	r, err := c.LocalFiles.Import(ctx, req)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err == nil && !r.Reconciled {
		c.copies++
	}
	if err == nil && !c.crashed {
		c.crashed = true
		return activities.ImportResult{}, errWorkerDied
	}
	return r, err
}

// errWorkerDied is retryable: the engine must run the step again.
var errWorkerDied = errors.New("worker died after the copy, before the commit")

func copiedNotCommitted(w *world) {
	files := &countingFiles{}
	bw := w.businessWorld(files)
	a := apptest.NewAsset("copied.mkv", 300_000)
	p := w.acquire(bw, a)

	op, found, err := ledger.Read(bg, bw.Pool, p.ID, ledger.OpImport)
	require.NoError(w.t, err)
	files.mu.Lock()
	copies := files.copies
	files.mu.Unlock()
	w.t.Logf("injected: the worker died after the copy, before the commit; copies written: %d, import attempts: %d", copies, op.Attempts)
	w.expect(copies == 1, "%d copies written, want 1: the retry must reconcile by path+size+hash", copies)
	w.expect(found && op.Done() && op.Attempts == 2, "import ledger row: found=%v done=%v attempts=%d, want a result at attempt 2", found, op.Done(), op.Attempts)
	var res struct {
		Reconciled bool `json:"reconciled"`
	}
	require.NoError(w.t, json.Unmarshal(op.Result, &res))
	w.expect(res.Reconciled, "import result %s does not record the reconciliation", op.Result)
	w.expect(apptest.FileSHA256(w.t, bw.Target(a)) == a.SHA256, "library file hash differs")
	w.expect(len(bw.LibraryFiles(w.t)) == 1, "library holds %v, want only the asset", bw.LibraryFiles(w.t))
}
