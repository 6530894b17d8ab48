package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/internal/devserver"
	"github.com/taskport/taskport/internal/testkit/pgtest"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().String()
}

// TestRunDemo is `make run` end to end with --exit-after-demo: a Temporal
// dev server started by the command, a real qbittorrent-nox downloading from
// a loopback web seed, the worker, dispatcher and admin; the demo plan must
// complete with the file in the library, hash intact.
func TestRunDemo(t *testing.T) {
	if _, err := devserver.CLIPath(); err != nil {
		t.Fatal(err)
	}
	for _, bin := range []string{"qbittorrent-nox", "mktorrent"} {
		if _, err := os.Stat("/usr/bin/" + bin); err != nil {
			t.Fatalf("%s is needed (make tools installs it): %v", bin, err)
		}
	}
	db := pgtest.NewDatabase(t)
	state := t.TempDir()
	_, uiPort, _ := net.SplitHostPort(freeAddr(t))
	g := &globalConfig{DatabaseURL: db, LogLevel: "info"}
	c := stackConfig{Engine: "temporal", TemporalAddress: freeAddr(t), TemporalNamespace: "default", TaskQueue: "taskport",
		StopTimeout: 10 * time.Second, LibraryRoot: "/unused", DownloadDir: "/unused"}
	rc := runConfig{StateDir: state, UIPort: uiPort, AdminAddr: "127.0.0.1:0", Demo: true, DemoSize: 3<<20 + 17,
		ApproveAfter: 500 * time.Millisecond, ExitAfterDemo: true}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	log := slog.New(slog.NewTextHandler(testWriter{t}, nil))
	require.NoError(t, runLocal(ctx, g, c, rc, log))

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

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}
