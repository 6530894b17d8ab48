package workflows_test

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/acquisition"
	"github.com/taskport/taskport/activities"
	"github.com/taskport/taskport/app/apptest"
	"github.com/taskport/taskport/ledger"
	"github.com/taskport/taskport/plans"
	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/port/engineapi"
	"github.com/taskport/taskport/qbittorrent"
	"github.com/taskport/taskport/workflows"
	"github.com/taskport/taskport/workflows/flowtest"
)

// fixture is a world with one plan, and helpers to run one kind on it
// through flowtest.
type fixture struct {
	*apptest.World
	asset apptest.Asset
	plan  acquisition.Plan
	id    string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	return newFixtureWith(t, apptest.Options{})
}

func newFixtureWith(t *testing.T, opts apptest.Options) *fixture {
	t.Helper()
	w := apptest.NewWorld(t, opts)
	a := apptest.NewAsset("item.mkv", 200_000)
	p := w.CreatePlan(t, a)
	return &fixture{World: w, asset: a, plan: p, id: p.ID.String()}
}

func (f *fixture) run(t *testing.T, kind port.Kind, input any) *flowtest.Run {
	t.Helper()
	r, err := flowtest.New(f.Registry, kind, port.RunID("run-"+string(kind)), input)
	require.NoError(t, err)
	return r
}

func (f *fixture) status(t *testing.T) acquisition.Status {
	t.Helper()
	p, err := acquisition.GetPlan(context.Background(), f.Pool, f.plan.ID)
	require.NoError(t, err)
	return p.Status
}

func (f *fixture) ref() workflows.PlanRef { return workflows.PlanRef{PlanID: f.id} }

// submitted brings the plan to "downloading" by running the real kinds.
func (f *fixture) submitted(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	apptest.Acked(t)(f.Plans.Approve(ctx, f.id, "ann", ""))
	require.NoError(t, f.run(t, workflows.KindDownloadSubmit, f.ref()).Execute(ctx))
}

// downloaded brings the plan to "downloaded".
func (f *fixture) downloaded(t *testing.T) {
	t.Helper()
	f.submitted(t)
	f.FinishDownload(t, f.plan, f.asset)
	require.NoError(t, f.run(t, workflows.KindDownloadAwait, workflows.WaitInput{PlanID: f.id}).Execute(context.Background()))
}

func (f *fixture) imported(t *testing.T) {
	t.Helper()
	f.downloaded(t)
	require.NoError(t, f.run(t, workflows.KindAssetImport, f.ref()).Execute(context.Background()))
}

func TestDefinitionsRetryClasses(t *testing.T) {
	t.Parallel()
	for _, d := range workflows.Definitions() {
		switch d.Kind {
		case workflows.KindAssetImport, workflows.KindAssetVerify:
			require.Equal(t, port.FileRetry(), d.Retry, d.Kind)
		default:
			require.Equal(t, port.NetworkRetry(), d.Retry, d.Kind)
		}
	}
	require.Len(t, workflows.Definitions(), 9)
}

// approval.await checks the DB, waits with a loop-indexed name, and treats a
// signal as a hint: a signal without a DB change only causes another check.
func TestApprovalAwait(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	r := f.run(t, workflows.KindApprovalAwait, workflows.WaitInput{PlanID: f.id})
	r.OnWait = func(name string, topic port.Topic) {
		require.Equal(t, workflows.ApprovalTopic(f.id), topic)
		switch name {
		case "wait-approval-0": // times out: no signal
		case "wait-approval-1": // a stray signal, nothing in the DB
			require.NoError(t, r.Signal(topic, nil))
		case "wait-approval-2":
			apptest.Acked(t)(f.Plans.Approve(ctx, f.id, "ann", ""))
			require.NoError(t, r.Signal(topic, nil))
		}
	}
	require.NoError(t, r.Execute(ctx))
	require.Equal(t, []string{
		"check-approval-0", "wait-approval-0", "check-approval-1", "wait-approval-1",
		"check-approval-2", "wait-approval-2", "check-approval-3", "hand-off",
	}, r.Steps)
	for _, w := range r.Waits {
		require.Equal(t, workflows.ApprovalWait, w.Timeout)
	}
	require.Equal(t, []bool{false, true, true}, []bool{r.Waits[0].Received, r.Waits[1].Received, r.Waits[2].Received})
	require.Contains(t, f.Outbox(t, f.id), "download.submit pending plan:"+f.id+":download.submit")

	// Replaying the finished run runs no activity again.
	executed := len(r.Executed)
	require.NoError(t, r.Execute(ctx))
	require.Len(t, r.Executed, executed)
}

// approval.await is retired: only runs an older release started remain. One
// for a plan that an older release's API approved (the approval row and the
// status, with no hand-off: that API left it to this run) hands the plan on
// to download.submit; one for a plan this release's API approved and handed
// on, already downloading, writes nothing and moves nothing.
func TestRetiredApprovalAwaitHandsOnOnlyWhatAnOlderAPIApproved(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	_, err := acquisition.InsertApproval(ctx, f.Pool, acquisition.Approval{ID: uuid.New(), PlanID: f.plan.ID,
		Decision: acquisition.Approved, DecidedBy: "older release"})
	require.NoError(t, err)
	require.NoError(t, acquisition.Move(ctx, f.Pool, f.plan.ID, acquisition.Approve))
	require.Empty(t, f.Outbox(t, f.id))
	r := f.run(t, workflows.KindApprovalAwait, workflows.WaitInput{PlanID: f.id})
	require.NoError(t, r.Execute(ctx))
	require.Equal(t, []string{"check-approval-0", "hand-off"}, r.Steps)
	require.Equal(t, []string{"download.submit pending plan:" + f.id + ":download.submit"}, f.Outbox(t, f.id))

	g := newFixture(t)
	g.submitted(t)
	before := g.Outbox(t, g.id)
	r = g.run(t, workflows.KindApprovalAwait, workflows.WaitInput{PlanID: g.id})
	require.NoError(t, r.Execute(ctx))
	require.Equal(t, []string{"check-approval-0", "hand-off"}, r.Steps)
	require.Equal(t, before, g.Outbox(t, g.id), "nothing written")
	require.Equal(t, acquisition.Downloading, g.status(t))
}

// A long wait continues as new, carrying the loop index into the names.
func TestApprovalAwaitContinuesAsNew(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	r := f.run(t, workflows.KindApprovalAwait, workflows.WaitInput{PlanID: f.id})
	r.RestartAfter = 4
	r.OnWait = func(name string, _ port.Topic) {
		if name == "wait-approval-3" {
			apptest.Acked(t)(f.Plans.Reject(ctx, f.id, "ann", "no"))
		}
	}
	require.NoError(t, r.Execute(ctx))
	require.Equal(t, 1, r.ContinuedAsNew)
	require.Equal(t, []string{
		"check-approval-0", "wait-approval-0", "check-approval-1", "wait-approval-1", "check-approval-2",
		// continued as new with iteration 3: names never repeat
		"check-approval-3", "wait-approval-3", "check-approval-4",
	}, r.Steps)
	require.Equal(t, acquisition.Rejected, f.status(t))
	require.NotContains(t, f.Outbox(t, f.id), "download.submit pending plan:"+f.id+":download.submit")
}

// download.submit: qBittorrent accepts the add and the connection drops; the
// retry reconciles by hash/tag instead of adding again.
func TestDownloadSubmitReconcilesDroppedAdd(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	apptest.Acked(t)(f.Plans.Approve(ctx, f.id, "ann", ""))
	f.QBT.DropNextAdds(1)
	r := f.run(t, workflows.KindDownloadSubmit, f.ref())
	require.NoError(t, r.Execute(ctx))
	require.Equal(t, []string{"submit", "submit"}, r.Executed, "one failed attempt, one retry")
	require.Equal(t, 1, f.QBT.AddRequests(), "the retry reconciled instead of adding again")
	ts := f.QBT.Torrents()
	require.Len(t, ts, 1)
	require.True(t, ts[0].HasTag("tp-"+f.id))
	require.Equal(t, filepath.Join(f.DownloadDir, f.id), ts[0].SavePath)
	d, err := acquisition.GetDownload(ctx, f.Pool, f.plan.ID)
	require.NoError(t, err)
	require.Equal(t, acquisition.DownloadSubmitted, d.State)
	require.Equal(t, acquisition.Downloading, f.status(t))
	require.True(t, f.Operations(t, f.id)[ledger.OpSubmit])
	require.Contains(t, f.Outbox(t, f.id), "download.await pending plan:"+f.id+":download.await")
}

// Retries exhausted: the run fails and a decision is opened.
func TestDownloadSubmitExhaustedOpensDecision(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	apptest.Acked(t)(f.Plans.Approve(ctx, f.id, "ann", ""))
	f.QBT.FailNext(1000, http.StatusServiceUnavailable)
	r := f.run(t, workflows.KindDownloadSubmit, f.ref())
	err := r.Execute(ctx)
	var se *port.StepError
	require.ErrorAs(t, err, &se)
	require.Equal(t, 5, se.Attempts)
	require.Equal(t, []string{"submit", "open-decision"}, r.Steps)
	// Opening the decision only writes Postgres: the short timeout, and no
	// heartbeat timeout (it does not beat), whatever submit's own options.
	require.Equal(t, workflows.DBStepTimeout, r.Options["open-decision"].Timeout)
	require.Zero(t, r.Options["open-decision"].HeartbeatTimeout)
	ds, err := f.Plans.ListDecisions(ctx, acquisition.DecisionOpen, 0)
	require.NoError(t, err)
	require.Len(t, ds, 1)
	require.Equal(t, workflows.KindDownloadSubmit, ds[0].Kind)
	require.Equal(t, port.RunID("run-download.submit"), ds[0].RunID)
	require.JSONEq(t, `{"plan_id":"`+f.id+`"}`, string(ds[0].Input))
	require.Equal(t, acquisition.Failed, f.status(t))
	require.False(t, f.Operations(t, f.id)[ledger.OpSubmit])
}

// download.await: the check sees completion in qBittorrent even with no
// report, after waiting with the 10-minute timeout.
func TestDownloadAwait(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	f.submitted(t)
	r := f.run(t, workflows.KindDownloadAwait, workflows.WaitInput{PlanID: f.id})
	r.OnWait = func(name string, _ port.Topic) {
		if name == "wait-download-1" {
			f.FinishDownload(t, f.plan, f.asset)
		}
	}
	require.NoError(t, r.Execute(ctx))
	require.Equal(t, []string{"check-download-0", "wait-download-0", "check-download-1", "wait-download-1", "check-download-2"}, r.Steps)
	require.Equal(t, workflows.DownloadWait, r.Waits[0].Timeout)
	d, err := acquisition.GetDownload(ctx, f.Pool, f.plan.ID)
	require.NoError(t, err)
	require.Equal(t, acquisition.DownloadCompleted, d.State)
	require.Equal(t, filepath.Join(f.DownloadDir, f.id, f.asset.Name), d.ContentPath)
	require.Equal(t, acquisition.Downloaded, f.status(t))
	require.Contains(t, f.Outbox(t, f.id), "asset.import pending plan:"+f.id+":asset.import")
}

// crashAfterCopy copies, then fails once as if the worker died between the
// copy and the ledger commit.
type crashAfterCopy struct {
	activities.LocalFiles
	crashed bool
}

func (c *crashAfterCopy) Import(ctx context.Context, req activities.ImportRequest) (activities.ImportResult, error) {
	r, err := c.LocalFiles.Import(ctx, req)
	if err == nil && !c.crashed {
		c.crashed = true
		return activities.ImportResult{}, errors.New("worker died before the commit")
	}
	return r, err
}

// asset.import: the copy finished but its result was not committed; the
// retry begins a newer attempt, reconciles by path+size+hash and copies
// nothing.
func TestAssetImportCopiedButNotCommittedReconciles(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixtureWith(t, apptest.Options{Files: &crashAfterCopy{}})
	f.downloaded(t)
	r := f.run(t, workflows.KindAssetImport, f.ref())
	require.NoError(t, r.Execute(ctx))
	require.Equal(t, []string{"import", "import"}, r.Executed)
	op, _, err := ledger.Read(ctx, f.Pool, f.plan.ID, ledger.OpImport)
	require.NoError(t, err)
	require.Equal(t, 2, op.Attempts)
	require.Equal(t, "run-asset.import/import#2", op.Token)
	require.JSONEq(t, `{"size":200000,"sha256":"`+f.asset.SHA256+`","reconciled":true,"origin":"created"}`, string(op.Result),
		"reconciled with the file its own first attempt created")
	require.Equal(t, f.asset.SHA256, apptest.FileSHA256(t, f.Target(f.asset)))
	require.Equal(t, []string{f.asset.Name}, f.LibraryFiles(t))
	require.Equal(t, acquisition.Imported, f.status(t))
	require.Contains(t, f.Outbox(t, f.id), "asset.verify pending plan:"+f.id+":asset.verify")
	require.Equal(t, workflows.ImportHeartbeatTimeout, r.Options["import"].HeartbeatTimeout)
	last := r.Heartbeats[len(r.Heartbeats)-1].(activities.ImportProgress)
	require.Equal(t, activities.ImportProgress{Bytes: 200_000, Total: 200_000, Percent: 100}, last)
}

// The step committed but the engine lost its result (a crash right after):
// the rerun returns the ledger's result and does nothing again.
func TestAssetImportLostResultReturnsLedgerResult(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	f.downloaded(t)
	r := f.run(t, workflows.KindAssetImport, f.ref())
	r.LoseResult("import")
	require.ErrorIs(t, r.Execute(ctx), flowtest.ErrCrashed)
	beats := len(r.Heartbeats)
	require.Positive(t, beats, "progress was reported")
	require.NoError(t, r.Execute(ctx))
	require.Len(t, r.Heartbeats, beats, "the rerun copied nothing")
	op, _, err := ledger.Read(ctx, f.Pool, f.plan.ID, ledger.OpImport)
	require.NoError(t, err)
	require.Equal(t, "run-asset.import/import#1", op.Token, "the rerun's Begin found the result and recorded no attempt")
}

func TestAssetVerify(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	f.imported(t)
	require.NoError(t, f.run(t, workflows.KindAssetVerify, f.ref()).Execute(ctx))
	require.Equal(t, acquisition.Verified, f.status(t))
	require.Contains(t, f.Outbox(t, f.id), "download.cleanup pending plan:"+f.id+":download.cleanup")
}

// A library file changed after import fails verification at once (no
// retries: it cannot heal) and opens a decision.
func TestAssetVerifyMismatchOpensDecision(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	f.imported(t)
	require.NoError(t, os.WriteFile(f.Target(f.asset), []byte("tampered"), 0o644))
	r := f.run(t, workflows.KindAssetVerify, f.ref())
	var se *port.StepError
	require.ErrorAs(t, r.Execute(ctx), &se)
	require.True(t, se.NonRetryable)
	require.Equal(t, []string{"verify"}, r.Executed[:1])
	require.Equal(t, acquisition.Failed, f.status(t))
	ds, err := f.Plans.ListDecisions(ctx, acquisition.DecisionOpen, 0)
	require.NoError(t, err)
	require.Len(t, ds, 1)
}

func TestDownloadCleanup(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	f.imported(t)
	require.NoError(t, f.run(t, workflows.KindAssetVerify, f.ref()).Execute(ctx))
	require.NoError(t, f.run(t, workflows.KindDownloadCleanup, f.ref()).Execute(ctx))
	deleted, withFiles := f.QBT.Deleted(f.asset.Hash)
	require.True(t, deleted && withFiles)
	require.True(t, f.QBT.Paused(f.asset.Hash) || deleted)
	require.Equal(t, acquisition.Completed, f.status(t))
	d, err := acquisition.GetDownload(ctx, f.Pool, f.plan.ID)
	require.NoError(t, err)
	require.Equal(t, acquisition.DownloadRemoved, d.State)
	require.Contains(t, f.Outbox(t, f.id), "notify.webhook pending plan:"+f.id+":plan.completed")
}

// plan.cancel removes the torrent, the download dir, a crashed import's temp
// file and the library file that import created, then ends the plan as
// canceled.
func TestPlanCancelCompensates(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	f.downloaded(t)
	// A crashed import: it began, noted that it creates the target, put the
	// file in place (a rename only ever places a complete copy), left a
	// temp file of an overlapping attempt, and no result.
	op, err := ledger.Begin(ctx, f.Pool, f.plan.ID, ledger.OpImport, port.FencingToken{Scope: "dead-run/import", Epoch: 1})
	require.NoError(t, err)
	require.NoError(t, ledger.Note(ctx, f.Pool, op, map[string]any{"origin": "created", "size": len(f.asset.Content), "sha256": f.asset.SHA256}))
	temp := filepath.Join(f.LibraryDir, "."+f.asset.Name+".tp-import-123456")
	require.NoError(t, os.WriteFile(temp, []byte("partial"), 0o644))
	require.NoError(t, os.WriteFile(f.Target(f.asset), f.asset.Content, 0o644))

	apptest.Acked(t)(f.Plans.Cancel(ctx, f.id, "tester", "stop"))
	r := f.run(t, workflows.KindPlanCancel, workflows.CancelInput{PlanID: f.id, Outcome: workflows.OutcomeCanceled})
	require.NoError(t, r.Execute(ctx))
	require.Equal(t, acquisition.Canceled, f.status(t))
	require.Empty(t, f.LibraryFiles(t))
	deleted, withFiles := f.QBT.Deleted(f.asset.Hash)
	require.True(t, deleted && withFiles)
	require.NoDirExists(t, filepath.Join(f.DownloadDir, f.id))
	require.True(t, f.Operations(t, f.id)[ledger.OpCompensate])
	require.Contains(t, f.Outbox(t, f.id), "notify.webhook pending plan:"+f.id+":plan.canceled")

	// An import run started after the cancel does nothing.
	imp := f.run(t, workflows.KindAssetImport, f.ref())
	require.NoError(t, imp.Execute(ctx))
	require.Empty(t, f.LibraryFiles(t))
	require.False(t, f.Operations(t, f.id)[ledger.OpImport])
}

// decision.resolve: retry re-enqueues the failed kind under a key derived from
// the decision; abandon compensates and ends the plan abandoned.
func TestDecisionResolve(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, action := range []acquisition.DecisionStatus{acquisition.DecisionRetry, acquisition.DecisionAbandon} {
		t.Run(string(action), func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			apptest.Acked(t)(f.Plans.Approve(ctx, f.id, "ann", ""))
			f.QBT.FailNext(5, http.StatusInternalServerError)
			require.Error(t, f.run(t, workflows.KindDownloadSubmit, f.ref()).Execute(ctx))
			ds, err := f.Plans.ListDecisions(ctx, acquisition.DecisionOpen, 0)
			require.NoError(t, err)
			require.Len(t, ds, 1)
			did := ds[0].ID.String()

			r := f.run(t, workflows.KindDecisionResolve, workflows.DecisionRef{DecisionID: did})
			var se *port.StepError
			require.ErrorAs(t, r.Execute(ctx), &se, "an open decision cannot be carried out")
			require.True(t, se.NonRetryable)

			apptest.Acked(t)(f.Plans.ResolveDecision(ctx, did, action, "ann"))
			// The same resolution again is acknowledged as done; the other
			// one is refused.
			again, err := f.Plans.ResolveDecision(ctx, did, action, "ann")
			require.NoError(t, err)
			require.True(t, again.Already, "resolving twice says so: %s", again)
			other := acquisition.DecisionAbandon
			if action == other {
				other = acquisition.DecisionRetry
			}
			require.ErrorIs(t, apptest.ErrOf(f.Plans.ResolveDecision(ctx, did, other, "ann")), plans.ErrConflict)
			r = f.run(t, workflows.KindDecisionResolve, workflows.DecisionRef{DecisionID: did})
			require.NoError(t, r.Execute(ctx))
			if action == acquisition.DecisionRetry {
				require.Contains(t, f.Outbox(t, f.id), "download.submit pending decision:"+did+":retry")
				require.Equal(t, acquisition.Approved, f.status(t))
				return
			}
			require.Contains(t, f.Outbox(t, f.id), "plan.cancel pending decision:"+did+":abandon")
			require.NoError(t, f.run(t, workflows.KindPlanCancel, workflows.CancelInput{PlanID: f.id, Outcome: workflows.OutcomeAbandoned}).Execute(ctx))
			require.Equal(t, acquisition.Abandoned, f.status(t))
		})
	}
}

// notify.webhook sends the idempotency header; a 4xx other than 408/429 is not
// retried, a 5xx is (network retry class).
func TestNotifyWebhook(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	in := workflows.NotifyInput{PlanID: f.id, Event: "plan.completed", Status: "completed"}
	require.NoError(t, f.run(t, workflows.KindNotifyWebhook, in).Execute(ctx))
	require.Equal(t, []string{"plan:" + f.id + ":plan.completed"}, f.Webhooks.Keys())

	f.Webhooks.FailWith(http.StatusBadRequest)
	r := f.run(t, workflows.KindNotifyWebhook, workflows.NotifyInput{PlanID: f.id, Event: "e2", Status: "s"})
	var se *port.StepError
	require.ErrorAs(t, r.Execute(ctx), &se)
	require.Equal(t, 1, se.Attempts)
	ds, err := f.Plans.ListDecisions(ctx, acquisition.DecisionOpen, 0)
	require.NoError(t, err)
	require.Len(t, ds, 1, "the failed webhook is in the decision centre")
	require.Equal(t, acquisition.AwaitingApproval, f.status(t), "a webhook failure does not fail the plan")

	f.Webhooks.FailWith(http.StatusServiceUnavailable)
	r, err = flowtest.New(f.Registry, workflows.KindNotifyWebhook, "run-2", workflows.NotifyInput{PlanID: f.id, Event: "e3", Status: "s"})
	require.NoError(t, err)
	require.ErrorAs(t, r.Execute(ctx), &se)
	require.Equal(t, 5, se.Attempts)
	require.Len(t, f.Webhooks.Keys(), 1+1+5)
}

// An activity run outside an engine has no fencing token: it fails clearly
// and writes nothing.
func TestActivityOutsideEngineIsRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	apptest.Acked(t)(f.Plans.Approve(ctx, f.id, "ann", ""))
	b, err := engineapi.Activity(f.Registry, workflows.SubmitDownload.Name())
	require.NoError(t, err)
	_, err = engineapi.Invoke(ctx, b, []byte(`{"plan_id":"`+f.id+`"}`))
	require.ErrorIs(t, err, ledger.ErrNoFencingToken)
	require.True(t, port.IsNonRetryable(err))
	require.Zero(t, f.QBT.AddRequests())
	require.Empty(t, f.Operations(t, f.id))
}

// Defect 3: an import that finds the expected file already at the target
// adopts it; compensating the plan later leaves that file alone, since the
// plan never created it.
func TestPlanCancelLeavesAdoptedFile(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	require.NoError(t, os.WriteFile(f.Target(f.asset), f.asset.Content, 0o644))
	f.imported(t)
	require.Equal(t, acquisition.Imported, f.status(t))

	apptest.Acked(t)(f.Plans.Cancel(ctx, f.id, "tester", "stop"))
	require.NoError(t, f.run(t, workflows.KindPlanCancel, workflows.CancelInput{PlanID: f.id, Outcome: workflows.OutcomeCanceled}).Execute(ctx))
	require.Equal(t, acquisition.Canceled, f.status(t))
	require.Equal(t, f.asset.SHA256, apptest.FileSHA256(t, f.Target(f.asset)), "the adopted file is left in place")
}

// Defect 3: an import never overwrites a different file that is already at
// the target: it fails for good (a decision), and neither the failed import
// nor the compensation afterwards touches that file.
func TestImportNeverOverwritesDifferentFile(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	theirs := []byte("somebody else's file")
	require.NoError(t, os.WriteFile(f.Target(f.asset), theirs, 0o644))
	f.downloaded(t)
	var se *port.StepError
	require.ErrorAs(t, f.run(t, workflows.KindAssetImport, f.ref()).Execute(ctx), &se)
	require.True(t, se.NonRetryable, "a different file at the target cannot heal by retrying")
	require.Equal(t, acquisition.Failed, f.status(t))

	apptest.Acked(t)(f.Plans.Cancel(ctx, f.id, "tester", "stop"))
	require.NoError(t, f.run(t, workflows.KindPlanCancel, workflows.CancelInput{PlanID: f.id, Outcome: workflows.OutcomeCanceled}).Execute(ctx))
	got, err := os.ReadFile(f.Target(f.asset))
	require.NoError(t, err)
	require.Equal(t, theirs, got, "the other file is untouched")
	require.Equal(t, []string{f.asset.Name}, f.LibraryFiles(t))
}

// Defect 4: a torrent with the plan's hash that does not carry the plan's
// managed tag belongs to someone else. The add's "Fails." is then a
// non-retryable error, not "already present", and no later action of the
// plan (cancel included) touches that torrent.
func TestForeignTorrentWithSameHashIsNeverTouched(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	require.NoError(t, f.Client.Add(ctx, qbittorrent.AddRequest{URLs: []string{f.asset.Magnet()}, Tags: []string{"someone-else"}}))
	apptest.Acked(t)(f.Plans.Approve(ctx, f.id, "ann", ""))
	var se *port.StepError
	require.ErrorAs(t, f.run(t, workflows.KindDownloadSubmit, f.ref()).Execute(ctx), &se)
	require.True(t, se.NonRetryable)
	require.Equal(t, acquisition.Failed, f.status(t))

	apptest.Acked(t)(f.Plans.Cancel(ctx, f.id, "tester", "stop"))
	require.NoError(t, f.run(t, workflows.KindPlanCancel, workflows.CancelInput{PlanID: f.id, Outcome: workflows.OutcomeCanceled}).Execute(ctx))
	require.Equal(t, acquisition.Canceled, f.status(t))
	deleted, _ := f.QBT.Deleted(f.asset.Hash)
	require.False(t, deleted, "the other owner's torrent is not deleted")
	require.False(t, f.QBT.Paused(f.asset.Hash), "nor paused")
	require.Len(t, f.QBT.Torrents(), 1)
}
