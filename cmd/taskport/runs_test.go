package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/cmd/internal/stack"
	"github.com/taskport/taskport/internal/runstore"
	"github.com/taskport/taskport/internal/testkit/devserver"
	"github.com/taskport/taskport/internal/testkit/pgtest"
	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/temporaladapter"
	"github.com/taskport/taskport/workflows"
)

// `taskport runs` on each engine: a pending run (enqueued as the dispatcher
// would, no worker) is listed (table and JSON), shown, signalled and
// canceled (the cancel request is in the run store); a failed run is
// retried as a new run under the derived key and stays listed; a run that
// did not fail is not retried.
func TestRunsCommandsOnBothEngines(t *testing.T) {
	srv := devserver.Start(t, devserver.Options{SearchAttributes: temporaladapter.SearchAttributes()})
	for _, e := range []struct {
		name string
		tag  runstore.Engine
	}{{"lease", runstore.EngineLease}, {"temporal", runstore.EngineTemporal}} {
		t.Run(e.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := pgtest.NewDatabase(t)
			queue := "runs-cli-" + rand.Text()[:10]
			engineArgs := []string{"--database-url", db, "--log-level", "error", "--engine", e.name, "--temporal-address", srv.HostPort,
				"--task-queue", queue, "--db-pool-size", "2", "--engine-db-pool-size", "2"}
			run := func(args ...string) (string, error) { return execute(append([]string{"runs"}, args...), engineArgs...) }

			s, err := stack.Build(ctx, &stack.Globals{DatabaseURL: db, PoolSize: 2}, stack.Config{Engine: e.name, EnginePoolSize: 2,
				TemporalAddress: srv.HostPort, TemporalNamespace: "default", TaskQueue: queue, StopTimeout: time.Second,
				ReconcileInterval: -1, LibraryRoot: "/library", DownloadDir: "/downloads", QBittorrentURL: "http://127.0.0.1:1"}, slog.New(slog.DiscardHandler))
			require.NoError(t, err)
			t.Cleanup(s.Close)
			plan := uuid.NewString()
			pending, err := s.Engine().Enqueue(ctx, workflows.KindApprovalAwait, workflows.WaitInput{PlanID: plan},
				port.EnqueueOptions{IdempotencyKey: "plan:" + plan + ":approval", BusinessKey: plan})
			require.NoError(t, err)

			out, err := run("list", "--kind", string(workflows.KindApprovalAwait))
			require.NoError(t, err)
			require.True(t, strings.HasPrefix(out, "RUN "), out)
			require.Contains(t, out, string(pending))
			require.Contains(t, out, "approval.await@v1")
			var listed []port.RunView
			out, err = run("list", "--business-key", plan, "--json")
			require.NoError(t, err)
			require.NoError(t, json.Unmarshal([]byte(out), &listed))
			require.Len(t, listed, 1)
			require.Equal(t, pending, listed[0].ID)
			var got port.RunView
			out, err = run("get", string(pending), "--json")
			require.NoError(t, err)
			require.NoError(t, json.Unmarshal([]byte(out), &got))
			require.Equal(t, plan, got.BusinessKey)
			require.Equal(t, port.StatusPending, got.Status)

			out, err = run("signal", string(workflows.ApprovalTopic(plan)), "--payload", `{"by":"ann"}`)
			require.NoError(t, err)
			require.Contains(t, out, "signal "+string(workflows.ApprovalTopic(plan))+" delivered to")
			_, err = run("signal", "t", "--payload", "{not json")
			require.ErrorContains(t, err, "--payload")

			_, err = run("retry", string(pending))
			require.ErrorIs(t, err, port.ErrInvalidInput, "a pending run is not retried")

			out, err = run("cancel", string(pending), "--reason", "from the test")
			require.NoError(t, err)
			require.Contains(t, out, "cancel of run "+string(pending)+" requested")
			pool, err := pgxpool.New(ctx, db)
			require.NoError(t, err)
			t.Cleanup(pool.Close)
			var reason string
			require.NoError(t, pool.QueryRow(ctx, `SELECT cancel_reason FROM taskport.run WHERE id = $1 AND cancel_requested_at IS NOT NULL`,
				string(pending)).Scan(&reason))
			require.Equal(t, "from the test", reason)

			failed, _, err := runstore.Insert(ctx, pool, runstore.NewRun{Engine: e.tag, Kind: workflows.KindApprovalAwait, Version: 1,
				Key: "plan:" + plan + ":approval:old", BusinessKey: plan, Input: json.RawMessage(`{"plan_id":"` + plan + `"}`)})
			require.NoError(t, err)
			require.NoError(t, runstore.Project(ctx, pool, failed.ID, runstore.Projection{Status: port.StatusFailed, LastError: "gave up"}))
			var retried map[string]string
			out, err = run("retry", string(failed.ID), "--json")
			require.NoError(t, err)
			require.NoError(t, json.Unmarshal([]byte(out), &retried))
			require.Equal(t, string(failed.ID), retried["failed"])
			var key string
			require.NoError(t, pool.QueryRow(ctx, `SELECT idempotency_key FROM taskport.run WHERE id = $1`, retried["retry"]).Scan(&key))
			require.Equal(t, port.RetryKey(failed.IdempotencyKey, failed.ID), key)
			out, err = run("list", "--status", "failed")
			require.NoError(t, err)
			require.Contains(t, out, string(failed.ID), "the failed run stays listed")
			require.Contains(t, out, "gave up")
		})
	}
}
