package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/internal/devserver"
	"github.com/taskport/taskport/internal/testkit"
	"github.com/taskport/taskport/internal/testkit/pgtest"
)

// TestRunDemo is `make run` end to end, through the command's flags as the
// Makefile passes them, with --exit-after-demo: a Temporal dev server
// started by the command with the given CLI, a real qbittorrent-nox
// downloading from a loopback web seed, the worker, dispatcher and admin;
// the demo plan must complete with the file in the library, hash intact.
func TestRunDemo(t *testing.T) {
	cli, err := devserver.CLIPath()
	require.NoError(t, err)
	for _, bin := range []string{"qbittorrent-nox", "mktorrent"} {
		if _, err := os.Stat("/usr/bin/" + bin); err != nil {
			t.Fatalf("%s is needed (make tools installs it): %v", bin, err)
		}
	}
	db := pgtest.NewDatabase(t)
	_, uiPort, _ := net.SplitHostPort(testkit.FreeAddr(t))
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := newRootCmd()
	cmd.SetArgs([]string{"--temporal-cli", cli, "--database-url", db, "--engine", "temporal", "--temporal-address", testkit.FreeAddr(t),
		"--state-dir", t.TempDir(), "--ui-port", uiPort, "--admin-addr", "127.0.0.1:0", "--demo-size", strconv.Itoa(3<<20 + 17),
		"--approve-after", "500ms", "--stop-timeout", "10s", "--exit-after-demo"})
	require.NoError(t, cmd.ExecuteContext(ctx))

	pool, err := pgxpool.New(ctx, db)
	require.NoError(t, err)
	defer pool.Close()
	var status, target, want string
	require.NoError(t, pool.QueryRow(ctx, `SELECT status, target_path, expected_sha256 FROM plan`).Scan(&status, &target, &want))
	require.Equal(t, "completed", status)
	require.True(t, filepath.IsAbs(target))
	got, err := os.ReadFile(target)
	require.NoError(t, err)
	sum := sha256.Sum256(got)
	require.Equal(t, want, hex.EncodeToString(sum[:]), "the library file is the seeded file")
	require.Len(t, got, 3<<20+17, "size "+strconv.Itoa(len(got)))
}
