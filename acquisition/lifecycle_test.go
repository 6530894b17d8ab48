package acquisition_test

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/acquisition"
	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/workflows"
)

var allStatuses = []acquisition.Status{
	acquisition.AwaitingApproval, acquisition.Approved, acquisition.Downloading, acquisition.Downloaded,
	acquisition.Imported, acquisition.Verified, acquisition.Completed, acquisition.Failed,
	acquisition.Canceling, acquisition.Canceled, acquisition.Rejected, acquisition.Abandoned,
}

// transitions are every named transition, and the retry of every kind.
func transitions() []acquisition.Transition {
	ts := []acquisition.Transition{
		acquisition.Approve, acquisition.Reject, acquisition.Submit, acquisition.FinishDownload, acquisition.Import,
		acquisition.Verify, acquisition.Complete, acquisition.Fail, acquisition.CancelRequest,
		acquisition.EndCanceled, acquisition.EndAbandoned,
	}
	for _, d := range workflows.Definitions() {
		if t, ok := acquisition.Retry(d.Kind); ok {
			ts = append(ts, t)
		}
	}
	return ts
}

// No transition leaves a final status, and every transition ends somewhere
// a plan can be.
func TestNoTransitionLeavesAFinalStatus(t *testing.T) {
	t.Parallel()
	for _, tr := range transitions() {
		require.Contains(t, allStatuses, tr.To(), tr.String())
		for _, s := range allStatuses {
			if s.Final() {
				require.False(t, tr.Allows(s), "%s allowed from final %s", tr, s)
			}
		}
	}
}

// Every status that is not final has a kind that moves it on, except
// awaiting_approval and failed (an operator decides); the main chain's kinds
// map back to their status.
func TestEveryLiveStatusHasAKind(t *testing.T) {
	t.Parallel()
	for _, s := range allStatuses {
		kind := acquisition.Next(s)
		switch {
		case s == acquisition.AwaitingApproval || s == acquisition.Failed || s == acquisition.Rejected:
			require.Empty(t, kind, s)
		case s.Final():
			require.Equal(t, workflows.KindNotifyWebhook, kind, "%s is notified", s)
		default:
			require.NotEmpty(t, kind, s)
			if at, chain := acquisition.MainChain(kind); chain {
				require.Equal(t, s, at, "%s runs in %s", kind, s)
				retry, ok := acquisition.Retry(kind)
				require.True(t, ok)
				require.True(t, retry.Allows(acquisition.Failed))
				require.True(t, acquisition.Fail.Allows(s), "a failure of %s fails the plan", kind)
			}
		}
	}
	// The retired approval.await is off the chain: its failure (a run an
	// older release started) leaves the plan awaiting approval, and a plan
	// it failed before the upgrade goes back to awaiting approval on retry.
	_, chain := acquisition.MainChain(workflows.KindApprovalAwait)
	require.False(t, chain)
	retry, ok := acquisition.Retry(workflows.KindApprovalAwait)
	require.True(t, ok)
	require.True(t, retry.Allows(acquisition.Failed))
	require.Equal(t, acquisition.AwaitingApproval, retry.To())
	_, chain = acquisition.MainChain(workflows.KindNotifyWebhook)
	require.False(t, chain, "a notification never fails a plan")
	_, chain = acquisition.MainChain(workflows.KindPlanCancel)
	require.False(t, chain)
}

// The holding rules: a plan keeps its target until it ends without a file of
// its own, and its info hash until it ends.
func TestHoldRules(t *testing.T) {
	t.Parallel()
	for _, s := range allStatuses {
		require.Equal(t, s != acquisition.Rejected && s != acquisition.Canceled && s != acquisition.Abandoned, s.HoldsTarget(), s)
		require.Equal(t, !s.Final(), s.HoldsInfoHash(), s)
	}
}

// What resolving a decision does, for each kind of decision and plan state.
func TestDecisionEffects(t *testing.T) {
	t.Parallel()
	planID := uuid.New()
	plan := func(s acquisition.Status, cancel bool) acquisition.Plan {
		p := acquisition.Plan{ID: planID, Status: s}
		if cancel {
			p.CancelRequestedAt = time.Now()
		}
		return p
	}
	for _, tc := range []struct {
		name    string
		kind    port.Kind
		plan    acquisition.Plan
		retry   acquisition.Effect // 0: refused
		abandon acquisition.Effect
	}{
		{"failed main-chain step", workflows.KindAssetImport, plan(acquisition.Failed, false), acquisition.Rerun, acquisition.Compensate},
		{"main-chain step, plan canceling", workflows.KindAssetImport, plan(acquisition.Canceling, true), 0, acquisition.GiveUp},
		{"main-chain step, plan canceled", workflows.KindDownloadSubmit, plan(acquisition.Canceled, true), 0, acquisition.GiveUp},
		{"notification of a completed plan", workflows.KindNotifyWebhook, plan(acquisition.Completed, false), acquisition.Rerun, acquisition.GiveUp},
		{"notification of a canceled plan", workflows.KindNotifyWebhook, plan(acquisition.Canceled, true), acquisition.Rerun, acquisition.GiveUp},
		{"notification of a live plan", workflows.KindNotifyWebhook, plan(acquisition.Downloading, false), acquisition.Rerun, acquisition.GiveUp},
		{"failed compensation", workflows.KindPlanCancel, plan(acquisition.Canceling, true), acquisition.Rerun, acquisition.Compensate},
		{"compensation of an ended plan", workflows.KindPlanCancel, plan(acquisition.Abandoned, true), 0, acquisition.GiveUp},
	} {
		retry, what, err := acquisition.RetryEffect(tc.kind, tc.plan)
		if tc.retry == 0 {
			require.ErrorIs(t, err, acquisition.ErrConflict, tc.name)
			require.ErrorContains(t, err, planID.String(), "%s: the refusal names the plan", tc.name)
		} else {
			require.NoError(t, err, tc.name)
			require.Equal(t, tc.retry, retry, tc.name)
			require.NotEmpty(t, what, tc.name)
		}
		abandon, what := acquisition.AbandonEffect(tc.kind, tc.plan)
		require.Equal(t, tc.abandon, abandon, tc.name)
		require.NotEmpty(t, what, tc.name)
	}
}
