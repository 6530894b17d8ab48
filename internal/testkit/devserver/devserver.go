// Package devserver gives a test a real Temporal dev server (headless, free
// ports, the search attributes it asks for), stopped when the test ends.
package devserver

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/taskport/taskport/internal/devserver"
)

// Options and Server are the launcher's; see internal/devserver.
type (
	Options = devserver.Options
	Server  = devserver.Server
)

// Start launches a server for tb and stops it when tb ends.
func Start(tb testing.TB, opts Options) *Server {
	tb.Helper()
	s, err := devserver.Launch(context.Background(), opts)
	if err != nil {
		tb.Fatalf("devserver: %v", err)
	}
	tb.Cleanup(func() {
		if err := s.Stop(); err != nil {
			tb.Logf("devserver: stop: %v (log %s)", err, s.LogFile)
		}
	})
	return s
}

// Main runs a test binary's tests against one dev server shared by them all
// (tests isolate themselves with a task queue each): use receives it before
// the first test. It returns the exit code for os.Exit.
func Main(m *testing.M, opts Options, use func(*Server)) int {
	s, err := devserver.Launch(context.Background(), opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "devserver:", err)
		return 1
	}
	use(s)
	code := m.Run()
	if err := s.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "devserver: stop: %v (log %s)\n", err, s.LogFile)
	}
	return code
}
