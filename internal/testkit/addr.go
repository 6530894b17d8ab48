package testkit

import (
	"net"
	"testing"
)

// FreeAddr is a loopback host:port that was free when it was picked, for a
// server a test configures rather than starts itself (another process may
// take it meanwhile; the server then fails to bind, loudly).
func FreeAddr(tb testing.TB) string {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("pick a free port: %v", err)
	}
	defer l.Close()
	return l.Addr().String()
}
