package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/app/apptest"
	"github.com/taskport/taskport/internal/runstore"
	"github.com/taskport/taskport/internal/testkit/devserver"
	"github.com/taskport/taskport/internal/testkit/pgtest"
	"github.com/taskport/taskport/leaseadapter"
	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/runscmd"
	"github.com/taskport/taskport/temporaladapter"
	"github.com/taskport/taskport/workflows"
)

// The --json shapes of the runs commands (package runscmd).
type (
	runJSON = runscmd.RunJSON
	runPage = runscmd.PageJSON
	retried = runscmd.RetryJSON
)

// runsEngine is an engine the runs commands are tested on: how the test's
// worker is built, the flags that point the CLI at the same engine, and
// what the engine says of a run's workflow task timeout (nil: the engine
// has none).
type runsEngine struct {
	name  string
	setup func(t *testing.T) (newEngine func(*port.Registry, *pgxpool.Pool) port.TaskEngine, flags []string,
		taskTimeout func(port.RunID) time.Duration)
}

// cliTaskTimeout is the --temporal-workflow-task-timeout the CLI is given,
// unlike the engine's default, so that a run the CLI starts shows it.
const cliTaskTimeout = 7 * time.Second

var runsEngines = []runsEngine{
	{"lease", func(t *testing.T) (func(*port.Registry, *pgxpool.Pool) port.TaskEngine, []string, func(port.RunID) time.Duration) {
		return func(reg *port.Registry, pool *pgxpool.Pool) port.TaskEngine {
			e, err := leaseadapter.New(pool, reg, leaseadapter.Config{
				PollInterval: 100 * time.Millisecond, StopTimeout: 5 * time.Second, Logger: slog.New(slog.DiscardHandler)})
			require.NoError(t, err)
			return e
		}, []string{"--engine", "lease"}, nil
	}},
	{"temporal", func(t *testing.T) (func(*port.Registry, *pgxpool.Pool) port.TaskEngine, []string, func(port.RunID) time.Duration) {
		srv := devserver.Start(t, devserver.Options{Namespace: "runs-cli", SearchAttributes: temporaladapter.SearchAttributes()})
		const queue = "runs-cli"
		taskTimeout := func(id port.RunID) time.Duration {
			d, err := srv.Client.DescribeWorkflow(context.Background(), temporaladapter.WorkflowID(id), "")
			require.NoError(t, err)
			return d.RawResponse.GetExecutionConfig().GetDefaultWorkflowTaskTimeout().AsDuration()
		}
		return func(reg *port.Registry, pool *pgxpool.Pool) port.TaskEngine {
				e, err := temporaladapter.New(srv.Client, pool, reg, temporaladapter.Config{
					TaskQueue: queue, WorkerStopTimeout: 5 * time.Second, Logger: slog.New(slog.DiscardHandler)})
				require.NoError(t, err)
				return e
			}, []string{"--engine", "temporal", "--temporal-address", srv.HostPort, "--temporal-namespace", srv.Namespace,
				"--task-queue", queue, "--temporal-workflow-task-timeout", cliTaskTimeout.String()}, taskTimeout
	}},
}

// `taskport runs` against a database and an engine that a worker in this
// test serves: a webhook that the receiver refuses (4xx, non-retryable) is
// a dead letter with a pending decision; list finds it, get shows it, retry
// is refused while the decision is open and, once it is abandoned and the
// receiver accepts again, starts one new run that delivers the same event,
// however often it is repeated; cancel records who asked; signal wakes a
// waiter.
// Bad input fails with the flag named, and writes nothing.
func TestRunsCommands(t *testing.T) {
	for _, eng := range runsEngines {
		t.Run(eng.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := pgtest.NewDatabase(t)
			newEngine, engineFlags, taskTimeout := eng.setup(t)
			cfg, err := pgxpool.ParseConfig(db)
			require.NoError(t, err)
			cfg.MaxConns = 8 // the lease worker wants 5
			pool, err := pgxpool.NewWithConfig(ctx, cfg)
			require.NoError(t, err)
			t.Cleanup(pool.Close)
			w := apptest.NewWorld(t, apptest.Options{Pool: pool, NewEngine: newEngine})
			require.NoError(t, w.Engine.Start(ctx, port.StartOptions{}))
			t.Cleanup(func() {
				stop, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				_ = w.Engine.Stop(stop) // the test asserts nothing on the stop
			})
			run := func(args ...string) (string, error) {
				common := append([]string{"--database-url", db, "--log-level", "error", "--engine-db-pool-size", "2"}, engineFlags...)
				return execute(append([]string{"runs"}, args...), common...)
			}
			get := func(id port.RunID) runJSON {
				out, err := run("get", string(id), "--json")
				require.NoError(t, err)
				var v runJSON
				require.NoError(t, json.Unmarshal([]byte(out), &v), out)
				return v
			}
			waitStatus := func(id port.RunID, want port.Status) runJSON {
				var last runJSON
				require.Eventually(t, func() bool { last = get(id); return last.Status == want },
					time.Minute, 50*time.Millisecond, "run %s never reached %s", id, want)
				return last
			}
			rows := func() int {
				var n int
				require.NoError(t, w.Pool.QueryRow(ctx, `SELECT count(*) FROM taskport.run`).Scan(&n))
				return n
			}

			plan := w.CreatePlan(t, apptest.NewAsset("runs.mkv", 10)).ID.String()
			w.Webhooks.FailWith(http.StatusBadRequest)
			event := workflows.NotifyInput{PlanID: plan, Event: "plan.completed", Status: "completed"}
			dead, err := w.Engine.Enqueue(ctx, workflows.KindNotifyWebhook, event, port.EnqueueOptions{IdempotencyKey: "notify-1", BusinessKey: plan})
			require.NoError(t, err)
			failed := waitStatus(dead, port.StatusFailed)
			require.Contains(t, failed.LastError, "status 400")
			require.Equal(t, plan, failed.BusinessKey)

			out, err := run("list", "--status", "failed", "--json")
			require.NoError(t, err)
			var page runPage
			require.NoError(t, json.Unmarshal([]byte(out), &page), out)
			require.Len(t, page.Runs, 1)
			require.Equal(t, dead, page.Runs[0].ID)
			require.Empty(t, page.Next, "a short page is the last")
			out, err = run("list", "--kind", string(workflows.KindNotifyWebhook), "--business-key", plan)
			require.NoError(t, err)
			require.Contains(t, out, "LAST ERROR", "a table with a header")
			require.Contains(t, out, string(dead))

			waiter, err := w.Engine.Enqueue(ctx, workflows.KindApprovalAwait, workflows.WaitInput{PlanID: plan},
				port.EnqueueOptions{IdempotencyKey: "await-1", BusinessKey: plan})
			require.NoError(t, err)
			waitStatus(waiter, port.StatusWaiting)

			// Bad input: the flag or field is named, nothing is written.
			before := rows()
			for _, tt := range []struct {
				args []string
				says string
			}{
				{[]string{"list", "--status", "dead"}, `unknown status "dead"`},
				{[]string{"list", "--kind", "media import"}, `--kind: invalid kind: character ' ' not allowed in "media import"`},
				{[]string{"list", "--limit", "-1"}, "--limit must lie in [1, 1000]"},
				{[]string{"list", "--after", "not-a-cursor"}, "not a run cursor"},
				{[]string{"signal", "approval:" + plan, "--payload", "{not json"}, "not valid JSON"},
				{[]string{"signal", "bad topic"}, "invalid topic"},
				{[]string{"retry", string(waiter)}, "only a failed run can be retried"},
				{[]string{"retry", "0190a5c6-0000-7000-8000-000000000000"}, "not found"},
				{[]string{"retry", "a\x00b"}, "RUN: not a run id"},
				{[]string{"retry", string(dead), "--as", ""}, "--as"},
				{[]string{"get", "nope"}, `RUN: not a run id (a UUID, as runs list prints it), got "nope"`},
			} {
				_, err := run(tt.args...)
				require.ErrorContains(t, err, tt.says, "%v", tt.args)
			}
			_, err = execute([]string{"runs", "list", "--database-url", db, "--engine", "nope"})
			require.ErrorContains(t, err, "--engine must be temporal, lease or both")
			require.Equal(t, before, rows(), "refused commands write nothing")

			out, err = run("signal", "approval:"+plan, "--payload", `{"why":"test"}`, "--json")
			require.NoError(t, err)
			require.JSONEq(t, `{"delivered":1}`, out, "the waiting run took the hint")

			// The failed step opened a pending decision: the decision
			// centre owns the retry until the decision is resolved.
			var decision string
			require.NoError(t, w.Pool.QueryRow(ctx, `SELECT id::text FROM decision WHERE run_id = $1 AND status = 'open'`, string(dead)).Scan(&decision))
			_, err = run("retry", string(dead), "--as", "ann")
			require.ErrorContains(t, err, "decision "+decision+" of plan "+plan+", which is open")
			require.ErrorContains(t, err, "taskport decision resolve "+decision+" retry")
			require.Equal(t, before, rows(), "refused: nothing written")
			_, err = execute([]string{"decision", "resolve", decision, "abandon", "--by", "ann"}, "--database-url", db, "--log-level", "error")
			require.NoError(t, err)

			w.Webhooks.FailWith(0) // the operator fixes the receiver
			out, err = run("retry", string(dead), "--as", "ann", "--json")
			require.NoError(t, err)
			var r retried
			require.NoError(t, json.Unmarshal([]byte(out), &r), out)
			require.Equal(t, retried{RunID: dead, NewRunID: r.NewRunID, By: "ann"}, r)
			require.NotEqual(t, dead, r.NewRunID)
			fresh := waitStatus(r.NewRunID, port.StatusSucceeded)
			require.Equal(t, workflows.KindNotifyWebhook, fresh.Kind)
			require.Equal(t, plan, fresh.BusinessKey)
			keys := w.Webhooks.Keys()
			require.Len(t, keys, 2, "one refused delivery, one accepted")
			require.Equal(t, keys[0], keys[1], "the retry delivered the same event (same input, same idempotency key)")
			if taskTimeout != nil {
				require.Equal(t, temporaladapter.DefaultWorkflowTaskTimeout, taskTimeout(dead), "the worker started the first run")
				require.Equal(t, cliTaskTimeout, taskTimeout(r.NewRunID), "the CLI started the retry with its --temporal-workflow-task-timeout")
			}
			out, err = run("retry", string(dead), "--as", "bob")
			require.NoError(t, err)
			require.Equal(t, "run "+string(dead)+" retried by bob as run "+string(r.NewRunID)+"\n", out, "a repeated retry returns the same run")
			require.Equal(t, before+1, rows())
			require.Equal(t, port.StatusFailed, get(dead).Status, "the dead letter stays failed")

			out, err = run("cancel", string(waiter), "--as", "carol", "--reason", "not needed")
			require.NoError(t, err)
			require.Contains(t, out, "cancel requested by carol")
			waitStatus(waiter, port.StatusCanceled)
			var reason string
			require.NoError(t, w.Pool.QueryRow(ctx, `SELECT cancel_reason FROM taskport.run WHERE id = $1`, string(waiter)).Scan(&reason))
			require.Equal(t, "not needed (by carol)", reason)
			out, err = run("cancel", string(waiter), "--as", "dave", "--reason", "again")
			require.NoError(t, err)
			require.Equal(t, "run "+string(waiter)+" already finished: status canceled; nothing changed\n", out)
			require.NoError(t, w.Pool.QueryRow(ctx, `SELECT cancel_reason FROM taskport.run WHERE id = $1`, string(waiter)).Scan(&reason))
			require.Equal(t, "not needed (by carol)", reason, "a finished run keeps the first cancel's reason")

			// Paging: three runs of the plan, one per page, each once.
			var seen []port.RunID
			after := ""
			for {
				args := []string{"list", "--business-key", plan, "--limit", "1", "--json"}
				if after != "" {
					args = append(args, "--after", after)
				}
				out, err := run(args...)
				require.NoError(t, err)
				var page runPage
				require.NoError(t, json.Unmarshal([]byte(out), &page), out)
				for _, v := range page.Runs {
					seen = append(seen, v.ID)
				}
				if page.Next == "" {
					break
				}
				after = page.Next
			}
			require.Equal(t, []port.RunID{r.NewRunID, waiter, dead}, seen, "newest first, no gap, no duplicate")

			// A decision resolved to retry has started its own run: the
			// run is not retried a second time.
			w.Webhooks.FailWith(http.StatusBadRequest)
			second, err := w.Engine.Enqueue(ctx, workflows.KindNotifyWebhook, workflows.NotifyInput{PlanID: plan, Event: "plan.canceled", Status: "canceled"},
				port.EnqueueOptions{IdempotencyKey: "notify-2", BusinessKey: plan})
			require.NoError(t, err)
			waitStatus(second, port.StatusFailed)
			require.NoError(t, w.Pool.QueryRow(ctx, `SELECT id::text FROM decision WHERE run_id = $1`, string(second)).Scan(&decision))
			_, err = execute([]string{"decision", "resolve", decision, "retry", "--by", "dan"}, "--database-url", db, "--log-level", "error")
			require.NoError(t, err)
			before = rows()
			_, err = run("retry", string(second))
			require.ErrorContains(t, err, "retried already through decision "+decision+" (by dan)")
			require.Equal(t, before, rows())
		})
	}
}

// The runs commands are clients of the engine: their help lists the
// engine's flags, and no worker's.
func TestRunsHelpListsEngineFlagsOnly(t *testing.T) {
	for _, sub := range []string{"list", "get", "cancel", "retry", "signal"} {
		help, err := execute([]string{"runs", sub, "--help"})
		require.NoError(t, err)
		require.Contains(t, help, "--engine", sub)
		require.Contains(t, help, "--temporal-address", sub)
		for _, worker := range []string{"--concurrency", "--lease-active-runs", "--stop-timeout", "qbittorrent", "webhook", "--download-dir", "--library-root"} {
			require.NotContains(t, help, worker, "runs %s lists a worker flag", sub)
		}
	}
}

// A run an evacuation moved shows its replacement: `runs get` in its table
// and as moved_to in its --json, `runs list --json` as well; a run not
// moved has no moved_to key. The rows are an evacuation's as the run store
// writes them (router.Evacuate's end and record, here of a lease run to a
// lease run, so that no Temporal server is needed); test/router_test.go
// evacuates real runs between the engines.
func TestRunsShowTheRunAnEvacuationMovedTo(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDatabase(t)
	pool := pgtest.Connect(t, db)
	run := func(args ...string) string {
		out, err := execute(append([]string{"runs"}, args...), "--database-url", db, "--log-level", "error", "--engine", "lease")
		require.NoError(t, err, "%v", args)
		return out
	}
	insert := func(key string) port.RunID {
		r, _, err := runstore.Insert(ctx, pool, runstore.NewRun{Engine: runstore.EngineLease, Kind: "asset.import", Version: 1,
			Key: key, Input: json.RawMessage(`{}`)})
		require.NoError(t, err)
		return r.ID
	}
	old := insert("old")
	ended, err := runstore.EndAbandoned(ctx, pool, runstore.EngineLease, old,
		runstore.EvacuationReason(runstore.EngineLease, runstore.EngineTemporal, "ops"), true)
	require.NoError(t, err)
	require.True(t, ended)
	to := insert(runstore.EvacuationKey(old))
	require.NoError(t, runstore.EvacuatedTo(ctx, pool, old, to))

	out := run("get", string(old), "--json")
	var v runJSON
	require.NoError(t, json.Unmarshal([]byte(out), &v), out)
	require.Equal(t, port.StatusCanceled, v.Status)
	require.Equal(t, to, v.MovedTo, out)
	require.Contains(t, out, `"moved_to": "`+string(to)+`"`)
	require.Regexp(t, `(?m)^moved to:\s+`+string(to)+` \(an evacuation moved the run there\)$`, run("get", string(old)))

	out = run("get", string(to), "--json")
	require.NotContains(t, out, "moved_to", "a run not moved has no moved_to")
	require.NotContains(t, run("get", string(to)), "moved to")

	out = run("list", "--json")
	var page runPage
	require.NoError(t, json.Unmarshal([]byte(out), &page), out)
	require.Len(t, page.Runs, 2)
	require.Equal(t, []port.RunID{to, old}, []port.RunID{page.Runs[0].ID, page.Runs[1].ID}, "newest first")
	require.Empty(t, page.Runs[0].MovedTo)
	require.Equal(t, to, page.Runs[1].MovedTo)
}
