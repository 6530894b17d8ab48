package app_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/acquisition"
	"github.com/taskport/taskport/activities"
	"github.com/taskport/taskport/app"
	"github.com/taskport/taskport/app/apptest"
	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/qbittorrent"
	"github.com/taskport/taskport/temporaladapter"
)

var updateHistories = flag.Bool("update-histories", false, "record testdata/histories from live Temporal runs of every business kind")

const historyDir = "testdata/histories"

func historyFile(kind port.Kind, version int) string {
	return filepath.Join(historyDir, fmt.Sprintf("%s@v%d.history.json", kind, version))
}

// TestReplayBusinessHistories replays a committed Temporal history of every
// registered business kind@version on a worker that registers them all: a
// handler change that renames, reorders or removes a step within a version
// fails here instead of failing live runs (ADR 2.5). Record the fixtures
// with -update-histories after an intended change (with a version bump).
func TestReplayBusinessHistories(t *testing.T) {
	if *updateHistories {
		recordHistories(t)
	}
	reg := port.NewRegistry()
	// Replay runs no activity, so the dependencies only need to be valid.
	unused, err := qbittorrent.New(qbittorrent.Config{BaseURL: "http://127.0.0.1:1"})
	require.NoError(t, err)
	require.NoError(t, app.Register(reg, app.Deps{Pool: &pgxpool.Pool{}, Downloader: unused, Files: activities.LocalFiles{},
		Config: activities.Config{DownloadDir: "/replay", LibraryRoot: "/replay-library"}}))
	for _, def := range reg.Definitions() {
		path := historyFile(def.Kind, def.Version)
		_, err := os.Stat(path)
		require.NoError(t, err, "no replay fixture for %s@v%d: run go test ./app/ -run TestReplayBusinessHistories -update-histories", def.Kind, def.Version)
		require.NoError(t, temporaladapter.ReplayHistoryFile(reg, path), "%s@v%d", def.Kind, def.Version)
	}
}

// recordHistories drives every business kind on Temporal — a full
// acquisition, a corrupt download resolved by a retry decision, and a cancel
// mid-import — and writes one finished run's history per kind@version.
func recordHistories(t *testing.T) {
	temporal := engines[1]
	require.Equal(t, "temporal", temporal.name)
	ctx := context.Background()

	w := engineWorld(t, temporal.new, apptest.Options{})
	fullAcquisition(t, w)
	decisionRetry(t, w)
	files := &cancelingFiles{}
	cw := engineWorld(t, temporal.new, apptest.Options{Files: files, ChunkSize: 16 << 10})
	cancelMidImport(t, cw, files)

	require.NoError(t, os.MkdirAll(historyDir, 0o755))
	for _, world := range []*apptest.World{w, cw} {
		rows, err := world.Pool.Query(ctx, `
SELECT DISTINCT ON (kind, version) id, kind, version FROM taskport.run
WHERE status IN ('succeeded', 'failed', 'canceled') ORDER BY kind, version, (status = 'succeeded') DESC, created_at`)
		require.NoError(t, err)
		type run struct {
			id      string
			kind    port.Kind
			version int
		}
		var runs []run
		for rows.Next() {
			var r run
			require.NoError(t, rows.Scan(&r.id, &r.kind, &r.version))
			runs = append(runs, r)
		}
		require.NoError(t, rows.Err())
		for _, r := range runs {
			path := historyFile(r.kind, r.version)
			if _, err := os.Stat(path); err == nil && world == cw {
				continue // the first world's run of this kind is kept
			}
			require.NoError(t, temporaladapter.WriteHistoryFile(ctx, temporalServer.Client, port.RunID(r.id), path))
			t.Logf("recorded %s", path)
		}
	}
}

// decisionRetry fails an import on a corrupt download, resolves the
// decision as retry and waits for the plan to complete.
func decisionRetry(t *testing.T, w *apptest.World) {
	ctx := context.Background()
	a := apptest.NewAsset("retry.mkv", 50_000)
	p := w.CreatePlan(t, a)
	id := p.ID.String()
	apptest.Acked(t)(w.Plans.Approve(ctx, id, "ann", ""))
	require.Eventually(t, func() bool { return w.Plan(t, id).Status == acquisition.Downloading }, time.Minute, 20*time.Millisecond)
	corrupt := a
	corrupt.Content = append([]byte("x"), a.Content[1:]...)
	w.FinishDownload(t, p, corrupt)
	apptest.Acked(t)(w.Plans.ReportDownloadComplete(ctx, id, ""))
	var open []acquisition.Decision
	require.Eventually(t, func() bool {
		var err error
		open, err = w.Plans.ListDecisions(ctx, acquisition.DecisionOpen, 0)
		return err == nil && len(open) == 1
	}, 2*time.Minute, 50*time.Millisecond)
	w.FinishDownload(t, p, a)
	apptest.Acked(t)(w.Plans.ResolveDecision(ctx, open[0].ID.String(), acquisition.DecisionRetry, "ann"))
	require.Eventually(t, func() bool { return w.Plan(t, id).Status == acquisition.Completed }, 2*time.Minute, 50*time.Millisecond)
}
