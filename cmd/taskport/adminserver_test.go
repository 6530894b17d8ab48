package main

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/admin"
	"github.com/taskport/taskport/internal/testkit"
	"github.com/taskport/taskport/internal/testkit/pgtest"
)

// Authentication is on by default: admin refuses a non-loopback address
// without an auth mode, before it connects to anything (the database URL
// leads nowhere, and the error is not about it).
func TestAdminRefusesToServeOpenlyWithoutAuth(t *testing.T) {
	for _, args := range [][]string{
		{"--addr", ":8080"},
		{"--addr", "0.0.0.0:8080"},
		{"--addr", "192.0.2.1:8080"},
		{"--addr", "127.0.0.1:0", "--auth", "token", "--public-origin", "https://admin.example.com"}, // no tokens
		{"--addr", "127.0.0.1:0", "--auth", "proxy", "--public-origin", "https://admin.example.com"}, // no proxy networks
		{"--addr", "127.0.0.1:0", "--auth", "token"},                                                 // no public origin
		{"--addr", "127.0.0.1:0", "--auth", "proxy", "--auth-proxy-cidrs", "127.0.0.1"},              // no public origin
		{"--addr", "127.0.0.1:0", "--auth", "magic"},
		{"--addr", "127.0.0.1:0", "--auth", "token", "--insecure-no-auth"},
	} {
		_, err := execute(append([]string{"admin", "--database-url", "postgres://nowhere.invalid/x", "--log-level", "error"}, args...))
		require.Error(t, err, args)
		require.NotContains(t, err.Error(), "nowhere.invalid", "%v: refused before connecting", args)
		require.Contains(t, err.Error(), "auth", args)
	}
}

// A malformed listen address is refused before anything connects (exit
// 2), saying what is wrong with it: without a port it is not "not a
// loopback address". The worker's --metrics-addr is held to the same rule.
func TestListenAddressIsChecked(t *testing.T) {
	for addr, says := range map[string]string{
		"127.0.0.1":       `--addr "127.0.0.1" has no port`,
		"localhost":       `--addr "localhost" has no port`,
		"[::1]":           `--addr "[::1]" has no port`,
		"":                `--addr "" has no port`,
		"127.0.0.1:":      `--addr "127.0.0.1:" has an empty port`,
		"::1:8080":        "an IPv6 address goes in brackets",
		"127.0.0.1:99999": `the port must be a number from 0 to 65535, got "99999"`,
		"127.0.0.1:http":  `the port must be a number from 0 to 65535, got "http"`,
	} {
		for _, args := range [][]string{{"admin", "--addr", addr}, {"admin", "--addr", addr, "--auth", "token", "--public-origin", "https://admin.example.com"}} {
			_, err := execute(append(args, "--database-url", "postgres://nowhere.invalid/x", "--log-level", "error"))
			require.ErrorContains(t, err, says, args)
			require.NotContains(t, err.Error(), "loopback", args)
			require.Equal(t, 2, exitCode(err), args)
		}
	}
	_, err := execute([]string{"worker", "--engine", "lease", "--metrics-addr", "9090", "--database-url", "postgres://nowhere.invalid/x"})
	require.ErrorContains(t, err, `--metrics-addr "9090" has no port`)
	require.Equal(t, 2, exitCode(err))
}

// `admin token` prints a token once and appends only its hash to the
// file, which the admin then accepts.
func TestAdminTokenCommand(t *testing.T) {
	file := filepath.Join(t.TempDir(), "tokens")
	out, err := execute([]string{"admin", "token", "--user", "ann", "--role", "operator", "--file", file})
	require.NoError(t, err)
	token := strings.TrimSpace(out)
	require.NotEmpty(t, token)
	data, err := os.ReadFile(file)
	require.NoError(t, err)
	require.NotContains(t, string(data), token, "the file holds the hash")
	require.True(t, strings.HasPrefix(string(data), "ann operator sha256:"), string(data))
	fi, err := os.Stat(file)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	_, err = admin.ParseTokens(data)
	require.NoError(t, err)

	_, err = execute([]string{"admin", "token", "--user", "ann", "--role", "root", "--file", file})
	require.ErrorContains(t, err, "--role")
	after, err := os.ReadFile(file)
	require.NoError(t, err)
	require.Equal(t, data, after, "a refused token writes nothing")
}

// `taskport admin` with only its own flags (no worker flag, no
// environment) builds its wiring on a migrated database, serves /admin and
// stops cleanly when its context ends.
func TestAdminServesWithItsOwnFlags(t *testing.T) {
	db := pgtest.NewDatabase(t)
	addr := testkit.FreeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	root := newRootCmd()
	root.SetArgs([]string{"admin", "--engine", "lease", "--addr", addr, "--database-url", db, "--log-level", "error"})
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	require.Eventually(t, func() bool {
		select {
		case err := <-done:
			done <- err
			return true
		default:
		}
		resp, err := http.Get("http://" + addr + "/admin")
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 30*time.Second, 50*time.Millisecond)
	select {
	case err := <-done:
		require.NoError(t, err, "admin exited before serving")
		t.Fatal("admin exited before serving")
	default:
	}
	cancel()
	require.NoError(t, <-done)
}
