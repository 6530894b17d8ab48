package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/admin"
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
