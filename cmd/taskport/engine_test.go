package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/internal/runstore"
	"github.com/taskport/taskport/internal/testkit"
	"github.com/taskport/taskport/internal/testkit/pgtest"
	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/router"
	"github.com/taskport/taskport/workflows"
)

// The engine commands with no Temporal frontend reachable (what an
// operator meets when Temporal is gone): status, a switch to lease, and the
// refusals (an unknown engine, switching to the active one, evacuating the
// active one, no one named), each writing nothing. An evacuation of
// Temporal's open runs is test/router_test.go's and test/model's.
func TestEngineCommands(t *testing.T) {
	t.Parallel()
	run, pool := engineCLI(t)
	switches := func() int {
		var n int
		require.NoError(t, pool.QueryRow(context.Background(), `SELECT count(*) FROM taskport.engine_switch`).Scan(&n))
		return n
	}
	status := func() router.Status {
		out, err := run("status", "--json")
		require.NoError(t, err)
		var st router.Status
		require.NoError(t, json.Unmarshal([]byte(out), &st), out)
		return st
	}
	st := status()
	require.Equal(t, "temporal", st.Active.Engine, "no switch recorded: the primary")
	require.True(t, st.Active.At.IsZero())
	require.Empty(t, st.Open)

	for _, bad := range [][]string{
		{"switch", "--to", "bogus"},
		{"switch", "--to", "temporal"},
		{"switch", "--to", "lease", "--as", ""},
		{"switch", "--to", "lease", "--as", "x\xff"},
		{"switch", "--to", "lease", "--as", "x\x1b[31mRED"},
		{"switch", "--to", "lease", "--as", "ops", "--reason", "bad\xff"},
		{"switch", "--to", "lease", "--as", "ops", "--reason", strings.Repeat("r", router.MaxSwitchReason+1)},
		{"evacuate", "--from", "temporal"},
		{"evacuate", "--from", "bogus"},
	} {
		_, err := run(bad...)
		require.Error(t, err, "%v", bad)
		require.Zero(t, switches(), "%v wrote a switch", bad)
	}
	_, err := run("switch", "--to", "bogus")
	require.ErrorContains(t, err, `got "bogus"`)
	_, err = run("switch", "--to", "lease", "--as", "ops", "--reason", "bad\xff")
	require.ErrorContains(t, err, "--reason: is not valid UTF-8", "refused as the command line's, before connecting")
	require.Equal(t, 2, exitCode(err))
	_, err = run("switch", "--to", "temporal")
	require.ErrorContains(t, err, "already the active engine")
	_, err = run("evacuate", "--from", "temporal")
	require.ErrorContains(t, err, "switch to another engine first")

	out, err := run("switch", "--to", "lease", "--as", "ops", "--reason", "temporal upgrade regressed")
	require.NoError(t, err)
	require.Contains(t, out, "active engine: lease (switched by ops")
	st = status()
	require.Equal(t, "lease", st.Active.Engine)
	require.Equal(t, "ops", st.Active.By)
	require.Equal(t, "temporal upgrade regressed", st.Active.Reason)
	_, err = run("switch", "--to", "lease")
	require.ErrorContains(t, err, "already the active engine")
	_, err = run("evacuate", "--from", "lease")
	require.ErrorContains(t, err, "switch to another engine first")
	require.Equal(t, 1, switches())

	// Temporal is unreachable from here: a switch back to it is refused,
	// and its evacuation (nothing open) ends the runs without it.
	_, err = run("switch", "--to", "temporal")
	require.ErrorContains(t, err, "could not be reached")
	out, err = run("evacuate", "--from", "temporal")
	require.NoError(t, err)
	require.Contains(t, out, "evacuated temporal to lease: 0 moved, 0 skipped, 0 failed")
	require.Equal(t, 1, switches())
}

// A switch without a reason (--reason is optional) is shown without one,
// not with an empty one after a colon.
func TestEngineStatusWithoutReason(t *testing.T) {
	t.Parallel()
	run, _ := engineCLI(t)
	_, err := run("switch", "--to", "lease", "--as", "ops")
	require.NoError(t, err)
	out, err := run("status")
	require.NoError(t, err)
	require.Regexp(t, regexp.MustCompile(`(?m)^active engine: lease \(switched by ops at \S+\)$`), out)
}

// Runs an interrupted evacuation left to move are canceled, not open:
// status names them per engine, with the command that moves them, so that
// the old engine's 0 open runs does not read as the evacuation done.
func TestEngineStatusShowsRunsLeftToMove(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	run, pool := engineCLI(t)
	_, err := run("switch", "--to", "lease", "--as", "ops")
	require.NoError(t, err)
	// An evacuation of temporal that ended the run and was interrupted
	// before it enqueued the replacement.
	abandoned, _, err := runstore.Insert(ctx, pool, runstore.NewRun{Engine: runstore.EngineTemporal, Kind: "asset.import", Version: 1,
		Key: "k", Input: json.RawMessage(`{}`)})
	require.NoError(t, err)
	reason := runstore.EvacuationReason(runstore.EngineTemporal, runstore.EngineLease, "ops")
	ended, err := runstore.EndAbandoned(ctx, pool, runstore.EngineTemporal, abandoned.ID, reason, true)
	require.NoError(t, err)
	require.True(t, ended)

	out, err := run("status")
	require.NoError(t, err)
	require.Regexp(t, regexp.MustCompile(`(?m)^-\s+-\s+0\s+-\s*$`), out, "no open run")
	require.Contains(t, out, "temporal: 1 run left by an interrupted evacuation; run taskport engine evacuate --from temporal again")
	out, err = run("status", "--json")
	require.NoError(t, err)
	var st router.Status
	require.NoError(t, json.Unmarshal([]byte(out), &st), out)
	require.Equal(t, []router.Unmoved{{Engine: "temporal", Count: 1}}, st.Unmoved, out)
}

// Evacuating the active engine, or switching to it, is a command line the
// CLI refuses (exit 2), saying what to do instead, once the router has read
// which engine is active. Nothing is written.
func TestNamingTheActiveEngineIsAUsageError(t *testing.T) {
	t.Parallel()
	run, pool := engineCLI(t)
	for _, asJSON := range []bool{false, true} {
		args := []string{"evacuate", "--from", "temporal", "--as", "ops"}
		if asJSON {
			args = append(args, "--json")
		}
		out, err := run(args...)
		require.ErrorContains(t, err, "--from temporal is the active engine: switch to another engine first (taskport engine switch --to lease)")
		require.Equal(t, 2, exitCode(err), "%v: %v", args, err)
		require.Empty(t, out, "%v: nothing on stdout, the refusal goes to stderr", args)
	}
	out, err := run("switch", "--to", "temporal", "--as", "ops")
	require.ErrorContains(t, err, "--to temporal is already the active engine: nothing to switch (taskport engine status)")
	require.Equal(t, 2, exitCode(err), err)
	require.Empty(t, out)
	var rows int
	require.NoError(t, pool.QueryRow(context.Background(),
		`SELECT (SELECT count(*) FROM taskport.engine_switch) + (SELECT count(*) FROM taskport.run)`).Scan(&rows))
	require.Zero(t, rows, "nothing written")
}

// An evacuation stopped midway (Ctrl-C, here the command's context
// canceled while a move waits on a row lock) still prints what it did, run
// by run, before it fails: the runs it moved, the ones it did not. Two
// pages of runs, so that the stop reaches the read of the next page.
func TestAnInterruptedEvacuationSaysWhatItDid(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDatabase(t)
	pool := pgtest.Connect(t, db)
	temporal := testkit.FreeAddr(t)
	_, err := execute([]string{"engine", "switch", "--to", "lease", "--as", "ops"}, "--database-url", db, "--log-level", "error",
		"--temporal-address", temporal)
	require.NoError(t, err)
	var ids []port.RunID
	for i := range 101 {
		r, _, err := runstore.Insert(ctx, pool, runstore.NewRun{Engine: runstore.EngineTemporal, Kind: workflows.KindApprovalAwait, Version: 1,
			Key: fmt.Sprint("k", i), Input: json.RawMessage(`{"plan_id":"0190a5c6-0000-7000-8000-000000000000"}`)})
		require.NoError(t, err)
		ids = append(ids, r.ID)
	}
	// The second run's row is locked: the evacuation moves the first and
	// waits there.
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	_, err = tx.Exec(ctx, `SELECT 1 FROM taskport.run WHERE id = $1 FOR UPDATE`, string(ids[1]))
	require.NoError(t, err)

	cmdCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var out bytes.Buffer
	done := make(chan error, 1)
	go func() {
		root := newRootCmd()
		root.SetArgs([]string{"engine", "evacuate", "--from", "temporal", "--as", "ops", "--json", "--database-url", db,
			"--log-level", "error", "--temporal-address", temporal})
		root.SetOut(&out)
		done <- root.ExecuteContext(cmdCtx)
	}()
	require.Eventually(t, func() bool {
		var waiting int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting))
		return waiting > 0
	}, time.Minute, 10*time.Millisecond, "the evacuation waits on the locked run")
	cancel()
	err = <-done
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorContains(t, err, "evacuate again")
	require.Equal(t, 1, exitCode(err))

	var rep evacuationJSON
	require.NoError(t, json.Unmarshal(out.Bytes(), &rep), "the report printed before the error: %q", out.String())
	results := map[string][]string{}
	for _, r := range rep.Results {
		results[r.Result] = append(results[r.Result], r.RunID)
	}
	require.Equal(t, []string{string(ids[0])}, results["moved"], "the run moved before the stop")
	require.Len(t, results["failed"], 99, "the rest of the first page, stopped")
}

// engineCLI runs taskport engine against a database of its own and a
// Temporal address nothing answers on, and returns that database's pool.
func engineCLI(t *testing.T) (run func(args ...string) (string, error), pool *pgxpool.Pool) {
	t.Helper()
	db := pgtest.NewDatabase(t)
	return func(args ...string) (string, error) {
		return execute(append([]string{"engine"}, args...), "--database-url", db, "--log-level", "error",
			"--temporal-address", testkit.FreeAddr(t))
	}, pgtest.Connect(t, db)
}
