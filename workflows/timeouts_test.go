package workflows_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/acquisition"
	"github.com/taskport/taskport/activities"
	"github.com/taskport/taskport/app/apptest"
	"github.com/taskport/taskport/ledger"
	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/qbittorrent"
	"github.com/taskport/taskport/workflows"
)

// A step allowed to run longer than the default timeout must heartbeat:
// on Temporal, the step of a worker that died is retried only when its
// heartbeat or its whole timeout runs out. asset.verify had no heartbeat
// timeout, so a worker lost while hashing held the plan for an hour.
func TestLongStepsHeartbeat(t *testing.T) {
	for _, d := range workflows.Definitions() {
		if d.StepTimeout > port.DefaultStepTimeout {
			require.Positive(t, d.HeartbeatTimeout, "%s: step timeout %s with no heartbeat timeout", d.Kind, d.StepTimeout)
			require.Less(t, d.HeartbeatTimeout, d.StepTimeout, d.Kind)
		}
	}
}

// Every kind says how long its steps may take, by what they wait on: a
// worker lost in a step holds it until the heartbeat timeout or, without
// one, the step timeout; the default minute is nobody's choice. A step
// allowed longer than a Postgres-only step must heartbeat.
func TestEveryKindSetsItsStepTimeouts(t *testing.T) {
	for _, d := range workflows.Definitions() {
		require.Positive(t, d.StepTimeout, "%s: no step timeout of its own", d.Kind)
		if d.StepTimeout > workflows.DBStepTimeout {
			require.Positive(t, d.HeartbeatTimeout, "%s: step timeout %s with no heartbeat timeout", d.Kind, d.StepTimeout)
		}
	}
	// NetworkStepTimeout's comment: six requests at the downloader's
	// timeout fit in one attempt.
	require.GreaterOrEqual(t, workflows.NetworkStepTimeout, 6*qbittorrent.DefaultTimeout)
}

// The steps that wait on qBittorrent heartbeat while they wait, under the
// network heartbeat timeout: submit, the download check and the
// compensation.
func TestNetworkStepsHeartbeatWhileTheyWait(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixtureWith(t, apptest.Options{HeartbeatEvery: 5 * time.Millisecond})
	apptest.Acked(t)(f.Plans.Approve(ctx, f.id, "ann", ""))
	// Every qBittorrent request takes a while: the step must beat meanwhile.
	f.QBT.SetDelay(100 * time.Millisecond)
	network := port.StepOptions{Retry: port.NetworkRetry(), Timeout: workflows.NetworkStepTimeout, HeartbeatTimeout: workflows.NetworkHeartbeatTimeout}

	r := f.run(t, workflows.KindDownloadSubmit, f.ref())
	require.NoError(t, r.Execute(ctx))
	require.NotEmpty(t, r.Heartbeats, "submit: no heartbeat while qBittorrent answered slowly")
	require.Equal(t, network, r.Options["submit"])
	require.True(t, f.Operations(t, f.id)[ledger.OpSubmit], "the slow downloader still took the add")

	r = f.run(t, workflows.KindDownloadAwait, workflows.WaitInput{PlanID: f.id})
	r.OnWait = func(string, port.Topic) { f.FinishDownload(t, f.plan, f.asset) }
	require.NoError(t, r.Execute(ctx))
	require.NotEmpty(t, r.Heartbeats, "download check: no heartbeat while qBittorrent answered slowly")
	require.Equal(t, network, r.Options["check-download-0"])
	require.Equal(t, acquisition.Downloaded, f.status(t))

	apptest.Acked(t)(f.Plans.Cancel(ctx, f.id, "ann", "stop"))
	r = f.run(t, workflows.KindPlanCancel, workflows.CancelInput{PlanID: f.id, Outcome: workflows.OutcomeCanceled})
	require.NoError(t, r.Execute(ctx))
	require.NotEmpty(t, r.Heartbeats, "compensation: no heartbeat while qBittorrent answered slowly")
	require.Equal(t, workflows.NetworkHeartbeatTimeout, r.Options["compensate"].HeartbeatTimeout)
	deleted, _ := f.QBT.Deleted(f.asset.Hash)
	require.True(t, deleted, "the slow downloader still removed the plan's torrent")
}

// download.cleanup beats while qBittorrent answers slowly too; and a beat
// interval that would not land within the heartbeat timeout is refused.
func TestCleanupHeartbeatsWhileItWaits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixtureWith(t, apptest.Options{HeartbeatEvery: 5 * time.Millisecond})
	f.imported(t)
	require.NoError(t, f.run(t, workflows.KindAssetVerify, f.ref()).Execute(ctx))
	f.QBT.SetDelay(100 * time.Millisecond)
	r := f.run(t, workflows.KindDownloadCleanup, f.ref())
	require.NoError(t, r.Execute(ctx))
	require.NotEmpty(t, r.Heartbeats, "cleanup: no heartbeat while qBittorrent answered slowly")
	require.Equal(t, workflows.NetworkHeartbeatTimeout, r.Options["cleanup"].HeartbeatTimeout)
	require.Equal(t, acquisition.Completed, f.status(t))

	for _, every := range []time.Duration{-time.Second, workflows.NetworkHeartbeatTimeout} {
		_, err := activities.New(f.Pool, f.Client, activities.LocalFiles{}, activities.Config{DownloadDir: f.DownloadDir, LibraryRoot: f.LibraryDir, HeartbeatEvery: every})
		var fe *port.FieldError
		require.ErrorAs(t, err, &fe, every)
		require.Equal(t, "heartbeat_every", fe.Field)
	}
}
