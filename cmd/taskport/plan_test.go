package main

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/internal/testkit"
	"github.com/taskport/taskport/internal/testkit/pgtest"
)

// execute runs the command line args (then extra) and returns its output.
func execute(args []string, extra ...string) (string, error) {
	var out bytes.Buffer
	root := newRootCmd()
	root.SetArgs(append(slices.Clone(args), extra...))
	root.SetOut(&out)
	err := root.ExecuteContext(context.Background())
	return out.String(), err
}

// The plan and decision commands drive the business API: bad input is
// refused with the field named and nothing written; a good plan is created,
// approved and shows in its timeline.
func TestPlanCommands(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	lib := t.TempDir()
	run := func(args ...string) (string, error) {
		common := []string{"--database-url", db, "--log-level", "error"}
		if args[0] == "plan" {
			common = append(common, "--library-root", lib)
		}
		return execute(args, common...)
	}
	const hash = "0123456789abcdef0123456789abcdef01234567"
	good := []string{"plan", "create", "--title", "Film", "--magnet", "magnet:?xt=urn:btih:" + hash, "--info-hash", hash,
		"--target", lib + "/film.mkv", "--size", "10", "--sha256", strings.Repeat("a", 64)}

	_, err := run(append(slices.Clone(good[:len(good)-1]), "not-a-hash")...)
	require.ErrorContains(t, err, "sha256")
	_, err = run("plan", "create", "--title", "Film", "--magnet", "magnet:?xt=urn:btih:"+hash, "--info-hash", hash,
		"--target", "/elsewhere/film.mkv", "--size", "10", "--sha256", strings.Repeat("a", 64))
	require.ErrorContains(t, err, "target")
	// A relative library root is the command line's error, as the worker's is.
	_, err = execute(good, "--database-url", db, "--log-level", "error", "--library-root", "relative")
	require.ErrorContains(t, err, `--library-root must be an absolute path, got "relative"`)
	require.Equal(t, 2, exitCode(err))
	pool, err := pgxpool.New(context.Background(), db)
	require.NoError(t, err)
	defer pool.Close()
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT count(*) FROM plan`).Scan(&n))
	require.Zero(t, n, "refused plans write nothing")

	out, err := run(append(slices.Clone(good), "--idempotency-key", "film")...)
	require.NoError(t, err)
	id := strings.TrimSpace(out)
	out, err = run(append(slices.Clone(good), "--idempotency-key", "film")...)
	require.NoError(t, err)
	require.Equal(t, id, strings.TrimSpace(out), "a retried create prints the same plan")
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT count(*) FROM plan`).Scan(&n))
	require.Equal(t, 1, n, "and writes no second one")
	// An --as that names no one is the command line's error: exit 2, the
	// flag named, and the plan left as it was (ann's approval below is the
	// first).
	for _, args := range [][]string{{"plan", "approve", id, "--as", ""}, {"plan", "reject", id, "--as", " "},
		{"plan", "cancel", id, "--as", ""}, {"decision", "resolve", "0190a5c6-0000-7000-8000-000000000000", "retry", "--as", "\t"}} {
		_, err := run(args...)
		require.ErrorContains(t, err, "--as: who acts must not be empty or blank", args)
		require.Equal(t, 2, exitCode(err), args)
	}
	out, err = run("plan", "approve", id, "--as", "ann")
	require.NoError(t, err)
	require.Equal(t, "plan "+id+" approved by ann\n", out, "the CLI says what it did")
	out, err = run("plan", "approve", id, "--by", "bob")
	require.NoError(t, err)
	require.Contains(t, out, "already approved by ann", "a repeated approve says it changed nothing")
	out, err = run("plan", "timeline", id)
	require.NoError(t, err)
	require.Contains(t, out, "approved")
	require.Contains(t, out, "download.submit", "the approval's hand-off is in the plan's outbox")
	require.NotContains(t, out, "signal approval:", "and no wake-up: nothing waits for the approval")

	out, err = run("plan", "cancel", id, "--reason", "changed my mind", "--as", "carol")
	require.NoError(t, err)
	require.Contains(t, out, "canceling")
	out, err = run("plan", "cancel", id)
	require.NoError(t, err)
	require.Contains(t, out, "already canceling", "a repeated cancel says so")
	require.Contains(t, out, "changed my mind")
	out, err = run("plan", "timeline", id)
	require.NoError(t, err)
	require.Contains(t, out, "carol: changed my mind", "the timeline says who asked for the cancel")
	_, err = run("plan", "reject", id, "--by", "ann")
	require.ErrorContains(t, err, "was approved by ann", "a refused call fails with the reason")
	require.ErrorContains(t, err, "reject plan "+id+": ", "naming what was asked, not a rejection that did not happen")
	require.Equal(t, 1, exitCode(err), "a command that ran and failed")
	_, err = run("plan", "approve", "0190a5c6-0000-7000-8000-000000000000", "--by", "ann")
	require.ErrorContains(t, err, "not found")
	out, err = run("decision", "list")
	require.NoError(t, err)
	require.Empty(t, strings.TrimSpace(out))
}

// The business commands need only the database: with the worker's
// environment pointing at a Temporal frontend where nothing listens, a plan
// is created (its row and its first run's outbox row written) and
// decisions are listed; their help lists their own flags, no engine's.
func TestBusinessCommandsNeedOnlyTheDatabase(t *testing.T) {
	t.Setenv("ENGINE", "temporal")
	t.Setenv("TEMPORAL_ADDRESS", testkit.FreeAddr(t)) // nothing listens there
	db := pgtest.NewDatabase(t)
	lib := t.TempDir()
	const hash = "89abcdef0123456789abcdef0123456789abcdef"
	out, err := execute([]string{"plan", "create", "--title", "Film", "--magnet", "magnet:?xt=urn:btih:" + hash, "--info-hash", hash,
		"--target", lib + "/film.mkv", "--size", "10", "--sha256", strings.Repeat("b", 64)},
		"--database-url", db, "--log-level", "error", "--library-root", lib)
	require.NoError(t, err)
	id := strings.TrimSpace(out)
	pool, err := pgxpool.New(context.Background(), db)
	require.NoError(t, err)
	defer pool.Close()
	var status, firstRun string
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT status FROM plan WHERE id = $1`, id).Scan(&status))
	require.Equal(t, "awaiting_approval", status)
	_, err = execute([]string{"plan", "approve", id, "--by", "ann"}, "--database-url", db, "--log-level", "error")
	require.NoError(t, err)
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT kind FROM outbox_event WHERE business_key = $1`, id).Scan(&firstRun))
	require.Equal(t, "download.submit", firstRun, "the approval hands the plan on, with no engine reachable")
	_, err = execute([]string{"decision", "list"}, "--database-url", db, "--log-level", "error")
	require.NoError(t, err)

	for _, args := range [][]string{{"plan", "--help"}, {"plan", "create", "--help"}, {"plan", "approve", "--help"},
		{"decision", "--help"}, {"decision", "resolve", "--help"}} {
		help, err := execute(args)
		require.NoError(t, err)
		require.Contains(t, help, "--database-url", args)
		for _, worker := range []string{"temporal", "--engine", "qbittorrent", "webhook", "--download-dir", "--concurrency", "--lease-active-runs", "--stop-timeout"} {
			require.NotContains(t, help, worker, "%v lists a worker flag", args)
		}
	}
	help, err := execute([]string{"plan", "--help"})
	require.NoError(t, err)
	require.Contains(t, help, "--library-root")
}
