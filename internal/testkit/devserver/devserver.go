// Package devserver gives a test a real Temporal dev server (headless, free
// ports, the search attributes it asks for), stopped when the test ends.
package devserver

import (
	"context"
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
