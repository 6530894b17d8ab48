package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/internal/devserver"
	"github.com/taskport/taskport/internal/testkit/pgtest"
	"github.com/taskport/taskport/temporaladapter"
)

// wantOutput is what the quickstart prints on either engine: A-1 charged
// on its retry and shipped, B-2 charged and its wait timed out, C-3
// canceled.
const wantOutput = `charged 42 on attempt 2, shipped: true
charged 7 on attempt 2, shipped: false
canceled
`

// The README's quickstart is this directory's main.go, verbatim; built as
// a module of its own outside the repository (which requires only taskport,
// replaced by this checkout), it prints wantOutput on the lease engine (run
// twice: the second run finds the same three runs) and on a Temporal dev
// server, each over a fresh database.
func TestQuickstartFromTheREADME(t *testing.T) {
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	require.NoError(t, err)
	source, err := os.ReadFile("main.go")
	require.NoError(t, err)
	const open = "```go\n"
	start := bytes.Index(readme, []byte(open+"// Command quickstart"))
	require.GreaterOrEqual(t, start, 0, "README.md has no quickstart block (```go // Command quickstart)")
	block := readme[start+len(open):]
	block = block[:bytes.Index(block, []byte("```\n"))]
	require.Equal(t, string(source), string(block), "the README's quickstart must be examples/quickstart/main.go verbatim")

	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), block, 0o644))
	gomod := "module example.com/quickstart\n\ngo 1.26\n\nrequire github.com/taskport/taskport v0.0.0\n\nreplace github.com/taskport/taskport => " + root + "\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte(gomod), 0o644))
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.sum"), sum, 0o644))
	run(t, dir, nil, "go", "mod", "tidy")
	run(t, dir, nil, "go", "build", "-o", "quickstart", ".")
	lines := strings.Count(string(block), "\n")
	t.Logf("built the quickstart (%d lines) as module example.com/quickstart", lines)

	// Each engine gets an empty database, as a new user has: the quickstart
	// migrates the engine's tables alone into its schema, shop.
	t.Run("lease", func(t *testing.T) {
		pool := pgtest.Connect(t, pgtest.NewEmptyDatabase(t))
		env := []string{"DATABASE_URL=" + pool.Config().ConnString()}
		require.Equal(t, wantOutput, run(t, dir, env, "./quickstart", "-engine", "lease"))
		require.Equal(t, wantOutput, run(t, dir, env, "./quickstart", "-engine", "lease"),
			"run again, the same runs come back, finished")
		var n, elsewhere int
		require.NoError(t, pool.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM shop.run),
  (SELECT count(*) FROM pg_class c JOIN pg_namespace s ON s.oid = c.relnamespace WHERE s.nspname IN ('public', 'taskport', 'taskport_lease'))`).Scan(&n, &elsewhere))
		require.Equal(t, 3, n, "three orders, three runs")
		require.Zero(t, elsewhere, "the engine's tables are in shop only")
	})
	t.Run("temporal", func(t *testing.T) {
		s, err := devserver.Launch(context.Background(), devserver.Options{SearchAttributes: temporaladapter.SearchAttributes()})
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Stop() })
		pool := pgtest.Connect(t, pgtest.NewEmptyDatabase(t))
		out := run(t, dir, []string{"DATABASE_URL=" + pool.Config().ConnString(), "TEMPORAL_ADDRESS=" + s.HostPort},
			"./quickstart", "-engine", "temporal")
		require.Equal(t, wantOutput, out)
	})
}

// run runs a command in dir with env added, fails the test with its output
// if it fails, and returns its standard output.
func run(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	require.NoError(t, err, "%s %s: %s%s", name, strings.Join(args, " "), stdout.String(), stderr.String())
	t.Logf("%s %s:\n%s%s", name, strings.Join(args, " "), stdout.String(), stderr.String())
	return stdout.String()
}
