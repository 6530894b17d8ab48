package main

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
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

	require.Contains(t, runCLI(t, append([]string{"migrate", "status"}, common...)...), "00001  pending")
	total, err := fs.Glob(migrations.FS(), "*.sql")
	require.NoError(t, err)
	require.Contains(t, runCLI(t, append([]string{"migrate", "up"}, common...)...), fmt.Sprintf("applied %d migration(s)", len(total)))
	require.NotContains(t, runCLI(t, append([]string{"migrate", "status"}, common...)...), "pending")
	require.Contains(t, runCLI(t, append([]string{"migrate", "down", "--to", "1"}, common...)...), fmt.Sprintf("rolled back %d migration(s)", len(total)-1))
	status := runCLI(t, append([]string{"migrate", "status"}, common...)...)
	require.Contains(t, status, "00001  applied")
	require.Contains(t, status, "00003  pending")

	root := newRootCmd()
	root.SetArgs(append([]string{"migrate", "down", "--to", "-1"}, common...))
	require.ErrorContains(t, root.ExecuteContext(context.Background()), "--to must not be negative")
}

// The worker (with and without its dispatcher) and admin refuse to start on
// a database one migration behind the binary, naming both versions.
func TestStartRefusesASchemaBehindTheBinary(t *testing.T) {
	db := pgtest.NewDatabase(t)
	pool := pgtest.Connect(t, db)
	m, err := migrations.New(pool, nil)
	require.NoError(t, err)
	defer m.Close()
	n := migrations.Latest()
	_, err = m.DownTo(context.Background(), n-1)
	require.NoError(t, err)

	want := fmt.Sprintf("database schema is at version %d, this binary needs version %d", n-1, n)
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
