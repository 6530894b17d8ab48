package plans_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/acquisition"
	"github.com/taskport/taskport/app/apptest"
	"github.com/taskport/taskport/ledger"
	"github.com/taskport/taskport/plans"
	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/workflows"
)

// openDecision returns the one open decision of kind.
func openDecision(t *testing.T, w *apptest.World, kind port.Kind) acquisition.Decision {
	t.Helper()
	open, err := w.Plans.ListDecisions(context.Background(), acquisition.DecisionOpen, 0)
	require.NoError(t, err)
	var found []acquisition.Decision
	for _, d := range open {
		if d.Kind == kind {
			found = append(found, d)
		}
	}
	require.Len(t, found, 1, "open decisions: %+v", open)
	return found[0]
}

// kindRows are the outbox rows of a plan's runs of kind.
func kindRows(t *testing.T, w *apptest.World, id string, kind port.Kind) []string {
	t.Helper()
	var out []string
	for _, row := range w.Outbox(t, id) {
		if strings.HasPrefix(row, string(kind)+" ") {
			out = append(out, row)
		}
	}
	return out
}

// failedSubmit creates and approves a plan whose download.submit exhausts
// its attempts: the plan is failed, with a decision open.
func failedSubmit(t *testing.T, w *apptest.World, name string) (string, acquisition.Decision) {
	t.Helper()
	p := w.CreatePlan(t, apptest.NewAsset(name, 10_000))
	id := p.ID.String()
	apptest.Acked(t)(w.Plans.Approve(context.Background(), id, "ann", ""))
	w.QBT.FailNext(5, http.StatusInternalServerError)
	w.Drive(t)
	require.Equal(t, acquisition.Failed, w.Plan(t, id).Status)
	return id, openDecision(t, w, workflows.KindDownloadSubmit)
}

// completed drives a plan for a to completion.
func completed(t *testing.T, w *apptest.World, a apptest.Asset) acquisition.Plan {
	t.Helper()
	ctx := context.Background()
	p := w.CreatePlan(t, a)
	apptest.Acked(t)(w.Plans.Approve(ctx, p.ID.String(), "ann", ""))
	w.Drive(t)
	w.FinishDownload(t, p, a)
	apptest.Acked(t)(w.Plans.ReportDownloadComplete(ctx, p.ID.String(), ""))
	w.Drive(t)
	require.Equal(t, acquisition.Completed, w.Plan(t, p.ID.String()).Status)
	return p
}

// Defect 1: abandoning the decision of a failed notification gives up that
// notification only. The completed plan, its library file and its ledger
// stay as they are; no compensation runs.
func TestAbandonWebhookDecisionKeepsCompletedPlan(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := apptest.NewWorld(t, apptest.Options{})
	w.Webhooks.FailWith(http.StatusBadRequest)
	a := apptest.NewAsset("kept.mkv", 60_000)
	p := completed(t, w, a)
	id := p.ID.String()
	d := openDecision(t, w, workflows.KindNotifyWebhook)

	ack := apptest.Acked(t)(w.Plans.ResolveDecision(ctx, d.ID.String(), acquisition.DecisionAbandon, "ann"))
	require.Contains(t, ack.Message, "notification is given up")
	w.Drive(t)

	require.Equal(t, acquisition.Completed, w.Plan(t, id).Status, "no transition leaves a final state")
	require.Equal(t, a.SHA256, apptest.FileSHA256(t, w.Target(a)), "the library file is untouched")
	require.NotContains(t, w.Operations(t, id), ledger.OpCompensate, "no compensation ran")
	require.Empty(t, kindRows(t, w, id, workflows.KindPlanCancel))
}

// Defect 2: abandoning a decision of a plan that was canceled meanwhile
// leaves the plan canceled, not stuck in canceling.
func TestAbandonAfterCancelLeavesPlanCanceled(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := apptest.NewWorld(t, apptest.Options{})
	id, d := failedSubmit(t, w, "late.mkv")

	apptest.Acked(t)(w.Plans.Cancel(ctx, id, "tester", "not needed"))
	w.Drive(t)
	require.Equal(t, acquisition.Canceled, w.Plan(t, id).Status)

	ack := apptest.Acked(t)(w.Plans.ResolveDecision(ctx, d.ID.String(), acquisition.DecisionAbandon, "ann"))
	require.Contains(t, ack.Message, "already canceled: nothing to abandon", "the answer says the plan is unchanged")
	w.Drive(t)
	require.Equal(t, acquisition.Canceled, w.Plan(t, id).Status, "a final plan stays final")
	require.Equal(t, []string{"plan.cancel dispatched plan:" + id + ":plan.cancel"}, kindRows(t, w, id, workflows.KindPlanCancel),
		"no second compensation")
}

// Defect 2: a plan.cancel whose compensation result is already stored still
// ends a plan left in canceling.
func TestStoredCompensationEndsCancelingPlan(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := apptest.NewWorld(t, apptest.Options{})
	p := w.CreatePlan(t, apptest.NewAsset("stored.mkv", 10_000))
	id := p.ID.String()
	apptest.Acked(t)(w.Plans.Cancel(ctx, id, "tester", "stop"))
	// An earlier compensation committed its result, and the plan was left
	// in canceling (the state the old abandon path produced).
	op, err := ledger.Begin(ctx, w.Pool, p.ID, ledger.OpCompensate, port.FencingToken{Scope: "earlier-run/compensate", Epoch: 1})
	require.NoError(t, err)
	require.NoError(t, ledger.Commit(ctx, w.Pool, op, workflows.Outcome{}))
	require.Equal(t, acquisition.Canceling, w.Plan(t, id).Status)

	w.Drive(t)
	require.Equal(t, acquisition.Canceled, w.Plan(t, id).Status, "no plan stays stuck in canceling")
	require.Contains(t, w.Webhooks.Keys(), "plan:"+id+":plan.canceled")
}

// Defect 10: a retry of a failed plan.canceled notification runs although
// the plan has a cancel request (that request is why it runs).
func TestRetryCanceledNotificationDelivers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := apptest.NewWorld(t, apptest.Options{})
	p := w.CreatePlan(t, apptest.NewAsset("notify.mkv", 10_000))
	id := p.ID.String()
	w.Webhooks.FailWith(http.StatusBadRequest)
	apptest.Acked(t)(w.Plans.Cancel(ctx, id, "tester", "stop"))
	w.Drive(t)
	require.Equal(t, acquisition.Canceled, w.Plan(t, id).Status)
	d := openDecision(t, w, workflows.KindNotifyWebhook)

	w.Webhooks.FailWith(0)
	apptest.Acked(t)(w.Plans.ResolveDecision(ctx, d.ID.String(), acquisition.DecisionRetry, "ann"))
	w.Drive(t)
	require.Equal(t, []string{"plan:" + id + ":plan.canceled", "plan:" + id + ":plan.canceled"}, w.Webhooks.Keys(),
		"the refused delivery, then the retried one")
}

// Defect 10: a retry of a compensation that exhausted its attempts runs, and
// ends the plan canceled with its torrent removed.
func TestRetryFailedCompensationEndsPlan(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := apptest.NewWorld(t, apptest.Options{})
	a := apptest.NewAsset("comp.mkv", 10_000)
	p := w.CreatePlan(t, a)
	id := p.ID.String()
	apptest.Acked(t)(w.Plans.Approve(ctx, id, "ann", ""))
	w.Drive(t)
	require.Equal(t, acquisition.Downloading, w.Plan(t, id).Status)

	w.QBT.FailNext(1000, http.StatusServiceUnavailable) // the downloader is down
	apptest.Acked(t)(w.Plans.Cancel(ctx, id, "tester", "stop"))
	w.Drive(t)
	d := openDecision(t, w, workflows.KindPlanCancel)
	require.Equal(t, acquisition.Canceling, w.Plan(t, id).Status)
	_, err := w.Plans.Cancel(ctx, id, "tester", "again")
	require.ErrorIs(t, err, plans.ErrConflict, "a second cancel cannot help: it says what can")
	require.ErrorContains(t, err, d.ID.String())

	w.QBT.FailNext(0, 0)
	apptest.Acked(t)(w.Plans.ResolveDecision(ctx, d.ID.String(), acquisition.DecisionRetry, "ann"))
	w.Drive(t)
	require.Equal(t, acquisition.Canceled, w.Plan(t, id).Status)
	deleted, _ := w.QBT.Deleted(a.Hash)
	require.True(t, deleted, "the retried compensation removed the torrent")
}

// Defect 10: a retry of a main-chain kind on a plan with a cancel request is
// refused when it is resolved, and nothing is written: it is never
// acknowledged and then swallowed.
func TestRetryMainChainOnCanceledPlanIsRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := apptest.NewWorld(t, apptest.Options{})
	id, d := failedSubmit(t, w, "chain.mkv")
	apptest.Acked(t)(w.Plans.Cancel(ctx, id, "tester", "stop"))

	before := w.Outbox(t, id)
	_, err := w.Plans.ResolveDecision(ctx, d.ID.String(), acquisition.DecisionRetry, "ann")
	require.Error(t, err, "a retry that cannot run is refused")
	require.ErrorContains(t, err, "cancel")
	require.Equal(t, before, w.Outbox(t, id), "nothing written")
	still, err := acquisition.GetDecision(ctx, w.Pool, d.ID)
	require.NoError(t, err)
	require.Equal(t, acquisition.DecisionOpen, still.Status, "the decision stays open")
}
