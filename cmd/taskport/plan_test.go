package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/acquisition"
	"github.com/taskport/taskport/internal/testkit"
	"github.com/taskport/taskport/internal/testkit/pgtest"
	"github.com/taskport/taskport/plans"
	"github.com/taskport/taskport/port"
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
	require.ErrorContains(t, err, `--library-root: must be an absolute path, got "relative"`)
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

// planArgs is the plan create command line that asks for np.
func planArgs(np plans.NewPlan) []string {
	args := []string{"plan", "create", "--title", np.Title, "--size", strconv.FormatInt(np.ExpectedSize, 10), "--sha256", np.ExpectedSHA256,
		"--target", np.TargetPath}
	for flag, v := range map[string]string{"--magnet": np.Magnet, "--torrent-url": np.TorrentURL, "--info-hash": np.InfoHash,
		"--idempotency-key": np.IdempotencyKey} {
		if v != "" {
			args = append(args, flag, v)
		}
	}
	return args
}

// plan create and decision resolve refuse a careless command line before
// anything connects (the database URL leads nowhere), as a usage error
// naming the flag or argument the user typed, not the API's field name.
// The early checks are the API's own (plans.CheckNewPlan,
// plans.CheckResolution), which the API applies again.
func TestPlanCreateFlagsRefusedBeforeConnecting(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDatabase(t)
	lib := t.TempDir()
	pool, err := pgxpool.New(ctx, db)
	require.NoError(t, err)
	defer pool.Close()
	svc, err := plans.New(pool, plans.Config{LibraryRoot: lib})
	require.NoError(t, err)
	const hash = "abcdef0123456789abcdef0123456789abcdef01"
	good := plans.NewPlan{Title: "Film", Magnet: "magnet:?xt=urn:btih:" + hash, InfoHash: hash, TargetPath: lib + "/film.mkv",
		ExpectedSize: 10, ExpectedSHA256: strings.Repeat("c", 64)}
	nowhere := []string{"--database-url", "postgres://nowhere.invalid/x", "--library-root", lib}

	for _, tc := range []struct {
		says string
		bad  func(*plans.NewPlan)
	}{
		{"--idempotency-key: must not contain control characters", func(np *plans.NewPlan) { np.IdempotencyKey = "a\x01b" }},
		{"--idempotency-key: must be at most 200 characters", func(np *plans.NewPlan) { np.IdempotencyKey = strings.Repeat("k", 201) }},
		{"--title: must not be empty", func(np *plans.NewPlan) { np.Title = "  " }},
		{"--title: must not contain control characters", func(np *plans.NewPlan) { np.Title = "a\x1b[2Jb" }},
		{"--title: must be at most 300 characters", func(np *plans.NewPlan) { np.Title = strings.Repeat("t", 301) }},
		{"--magnet, --torrent-url, --torrent-file: exactly one", func(np *plans.NewPlan) { np.TorrentURL = "https://example.com/t.torrent" }},
		{"--magnet, --torrent-url, --torrent-file: exactly one", func(np *plans.NewPlan) { np.Magnet = "" }},
		{"--magnet: must be a magnet: link", func(np *plans.NewPlan) { np.Magnet = "http://example.com/" + hash }},
		{"--torrent-url: must be an http(s) URL", func(np *plans.NewPlan) { np.Magnet, np.TorrentURL = "", "ftp://example.com/t.torrent" }},
		{"--info-hash: must be 40 hex digits", func(np *plans.NewPlan) { np.InfoHash = "xyz" }},
		{"--info-hash: must be given with a torrent URL", func(np *plans.NewPlan) { np.Magnet, np.TorrentURL, np.InfoHash = "", "https://example.com/t", "" }},
		{"--sha256: must be hex digits", func(np *plans.NewPlan) { np.ExpectedSHA256 = strings.Repeat("g", 64) }},
		{"--size: must not be negative", func(np *plans.NewPlan) { np.ExpectedSize = -1 }},
		{"--target: must be an absolute path", func(np *plans.NewPlan) { np.TargetPath = "film.mkv" }},
		{"--target: ", func(np *plans.NewPlan) { np.TargetPath = "/elsewhere/film.mkv" }},
		{"--target: ", func(np *plans.NewPlan) { np.TargetPath = lib + "/../film.mkv" }},
		{"--info-hash: 0" + hash[1:] + " does not match the magnet's", func(np *plans.NewPlan) { np.InfoHash = "0" + hash[1:] }},
	} {
		np := good
		tc.bad(&np)
		_, err := execute(planArgs(np), nowhere...)
		require.ErrorContains(t, err, tc.says, "%+v", np)
		require.NotContains(t, err.Error(), "nowhere.invalid", "%s: refused before connecting", tc.says)
		require.Equal(t, 2, exitCode(err), tc.says)
		_, err = svc.CreatePlan(ctx, np)
		require.ErrorAs(t, err, new(*port.FieldError), "%s: the API refuses it too", tc.says)
	}
	_, err = execute(planArgs(good), nowhere...)
	require.ErrorContains(t, err, "nowhere.invalid", "a good command line goes on to the database")

	const plan = "0190a5c6-0000-7000-8000-000000000001"
	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"approve", "x"}, `PLAN: not a UUID: "x"`},
		{[]string{"reject", plan, "--note", "a\x1bb"}, "--note: must not contain control characters"},
		{[]string{"approve", plan, "--note", strings.Repeat("n", 1001)}, "--note: must be at most 1000 characters"},
		{[]string{"cancel", "x"}, `PLAN: not a UUID: "x"`},
		{[]string{"cancel", plan, "--reason", "a\x07b"}, "--reason: must not contain control characters"},
		{[]string{"cancel", plan, "--as", strings.Repeat("a", 201)}, "--as: must be at most 200 characters"},
	} {
		_, err := execute(append([]string{"plan"}, tc.args...), nowhere...)
		require.ErrorContains(t, err, tc.says, tc.args)
		require.NotContains(t, err.Error(), "nowhere.invalid", "%v: refused before connecting", tc.args)
		require.Equal(t, 2, exitCode(err), tc.args)
	}

	const decision = "0190a5c6-0000-7000-8000-000000000000"
	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"x", "retry"}, `DECISION: not a UUID: "x"`},
		{[]string{decision, "bogus"}, `ACTION: must be retry or abandon, got "bogus"`},
		{[]string{decision, "retry", "--as", "a\x1bb"}, "--as: must not contain control characters"},
		{[]string{decision, "abandon", "--as", strings.Repeat("a", 201)}, "--as: must be at most 200 characters"},
	} {
		_, err := execute(append([]string{"decision", "resolve"}, tc.args...), "--database-url", "postgres://nowhere.invalid/x")
		require.ErrorContains(t, err, tc.says, tc.args)
		require.NotContains(t, err.Error(), "nowhere.invalid", "%v: refused before connecting", tc.args)
		require.Equal(t, 2, exitCode(err), tc.args)
		as := "ann"
		if len(tc.args) > 3 {
			as = tc.args[3]
		}
		_, err = svc.ResolveDecision(ctx, tc.args[0], acquisition.DecisionStatus(tc.args[1]), as)
		require.ErrorAs(t, err, new(*port.FieldError), "%v: the API refuses it too", tc.args)
	}
}

// plan create without --size is refused (exit 2) before anything connects,
// rather than taken for an empty asset: the plan would be downloaded whole
// and then fail its size check. --size 0 (an empty file) is said.
func TestPlanCreateNeedsTheSize(t *testing.T) {
	const hash = "abcdef0123456789abcdef0123456789abcdef01"
	args := []string{"plan", "create", "--title", "Film", "--magnet", "magnet:?xt=urn:btih:" + hash, "--target", "/library/film.mkv",
		"--sha256", strings.Repeat("a", 64), "--database-url", "postgres://nowhere.invalid/x", "--log-level", "error"}
	_, err := execute(args)
	require.ErrorContains(t, err, `required flag(s) "size" not set`)
	require.Equal(t, 2, exitCode(err))
	_, err = execute(append(args, "--size", "0"))
	require.ErrorContains(t, err, "nowhere.invalid", "an empty asset, said, goes on to the database")
}

// A --torrent-file far larger than any .torrent (a payload named by
// mistake, /dev/zero) is refused by its size once the bound is read, not
// read whole into memory first; nothing connects.
func TestPlanCreateBoundsTheTorrentFile(t *testing.T) {
	big := filepath.Join(t.TempDir(), "film.mkv")
	f, err := os.Create(big)
	require.NoError(t, err)
	require.NoError(t, f.Truncate(maxTorrentFile+1)) // sparse: no disk used
	require.NoError(t, f.Close())
	_, err = execute([]string{"plan", "create", "--title", "Film", "--torrent-file", big, "--target", "/library/film.mkv",
		"--size", "10", "--sha256", strings.Repeat("a", 64), "--database-url", "postgres://nowhere.invalid/x", "--log-level", "error"})
	require.ErrorContains(t, err, "--torrent-file: larger than 100 MiB: not a .torrent file")
	require.Equal(t, 2, exitCode(err))
}
