package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/internal/testkit/pgtest"
	"github.com/taskport/taskport/migrations"
)

func runCLI(t *testing.T, args ...string) string {
	t.Helper()
	var out bytes.Buffer
	root := newRootCmd()
	root.SetArgs(args)
	root.SetOut(&out)
	require.NoError(t, root.ExecuteContext(context.Background()), "taskport %v", args)
	return out.String()
}

func TestMigrateCommands(t *testing.T) {
	t.Parallel()
	db := pgtest.NewEmptyDatabase(t)
	common := []string{"--database-url", db, "--log-level", "error"}

	status := runCLI(t, append([]string{"migrate", "status"}, common...)...)
	require.Contains(t, status, "engine  00001  pending  baseline")
	require.Contains(t, status, "media   00001  pending  baseline")
	require.NotContains(t, status, "legacy", "a new database never gets the legacy set")
	// Every migration of both sets, in order: the engine set's, then the
	// media set's.
	var all []string
	for _, set := range []string{migrations.SetEngine, migrations.SetMedia} {
		for v := int64(1); v <= migrations.Latest(set); v++ {
			all = append(all, fmt.Sprintf("%s %d", set, v))
		}
	}
	require.Contains(t, runCLI(t, append([]string{"migrate", "up"}, common...)...),
		fmt.Sprintf("applied %d migration(s): [%s]", len(all), strings.Join(all, " ")))
	require.NotContains(t, runCLI(t, append([]string{"migrate", "status"}, common...)...), "pending")
	require.Contains(t, runCLI(t, append([]string{"migrate", "down", "--to", "0"}, common...)...), "rolled back 1 migration(s): [media 1]")
	status = runCLI(t, append([]string{"migrate", "status"}, common...)...)
	require.Contains(t, status, "engine  00001  applied")
	require.Contains(t, status, "media   00001  pending")
	require.Contains(t, runCLI(t, append([]string{"migrate", "status", "--json"}, common...)...), `"set": "media"`)
	// A version the set does not have is a typo, not a roll-back of nothing.
	for args, want := range map[string]string{
		"--to -1":             "--to must not be negative",
		"--set legacy --to 0": `--set must be engine or media, got "legacy"`,
		"--set media":         `required flag(s) "to" not set`,
		"--set engine --to 999": fmt.Sprintf("--to must be at most %d, the last migration of the engine set, got 999",
			migrations.Latest(migrations.SetEngine)),
	} {
		root := newRootCmd()
		root.SetArgs(append(append([]string{"migrate", "down"}, strings.Fields(args)...), common...))
		err := root.ExecuteContext(context.Background())
		require.ErrorContains(t, err, want)
		var u usageError
		require.ErrorAs(t, err, &u, "a usage error exits 2")
	}
}

// The worker (with and without its dispatcher) and admin refuse to start on
// a database one migration behind the binary, naming both versions.
func TestStartRefusesASchemaBehindTheBinary(t *testing.T) {
	db := pgtest.NewDatabase(t)
	pool := pgtest.Connect(t, db)
	m, err := migrations.New(pool, nil)
	require.NoError(t, err)
	defer m.Close()
	n := migrations.Latest(migrations.SetMedia)
	_, err = m.DownTo(context.Background(), migrations.SetMedia, n-1)
	require.NoError(t, err)

	want := fmt.Sprintf("the media migrations are at version %d, this binary needs version %d", n-1, n)
	for _, args := range [][]string{
		{"worker", "--engine", "lease", "--metrics-addr", "127.0.0.1:0"},
		{"worker", "--engine", "lease", "--metrics-addr", "127.0.0.1:0", "--dispatch=false"},
		{"admin", "--engine", "lease", "--addr", "127.0.0.1:0"},
	} {
		// Without the check the process would serve until ctx ends, then
		// return nil: the deadline only keeps such a failure from hanging.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		root := newRootCmd()
		root.SetArgs(append(args, "--database-url", db, "--log-level", "error"))
		require.ErrorContains(t, root.ExecuteContext(ctx), want, args)
		cancel()
	}
}

// The commands that only read or write a few rows run no schema check of
// their own; on a database never migrated they fail (exit 1) with the
// worker's schema-check message, which names the cure, rather than with
// Postgres's missing relation alone.
func TestCommandsOnAnUnmigratedDatabaseSayMigrate(t *testing.T) {
	db := pgtest.NewEmptyDatabase(t)
	for _, args := range [][]string{
		{"runs", "list", "--engine", "lease"},
		{"runs", "get", "0190a0a0-0000-7000-8000-000000000000", "--engine", "lease"},
		{"runs", "signal", "approval:x", "--engine", "lease"},
		{"plan", "approve", "0190a0a0-0000-7000-8000-000000000000"},
		{"decision", "list"},
		{"engine", "status", "--temporal-address", "127.0.0.1:1"},
	} {
		err := run(context.Background(), append(args, "--database-url", db, "--log-level", "error"))
		require.ErrorContains(t, err, "schema check: database schema: relation", args)
		require.ErrorContains(t, err, "run `taskport migrate up`", args)
		require.Equal(t, 1, exitCode(err), args)
	}
}
