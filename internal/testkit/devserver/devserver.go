// Package devserver gives a test a real Temporal dev server (headless, free
// ports, the search attributes it asks for), stopped when the test ends.
package devserver

import (
	"testing"

	"github.com/taskport/taskport/internal/devserver"
	"github.com/taskport/taskport/internal/testkit"
)

// Options and Server are the launcher's; see internal/devserver.
type (
	Options = devserver.Options
	Server  = devserver.Server
)

var harness = testkit.Harness[Options, *Server]{Name: "devserver", Launch: devserver.Launch}

// Start launches a server for tb and stops it when tb ends.
func Start(tb testing.TB, opts Options) *Server { tb.Helper(); return harness.Start(tb, opts) }

// Shared is a server for a whole test binary, launched on its first Get
// and stopped by testkit.Main.
func Shared(opts Options) *testkit.Shared[*Server] { return harness.Shared(opts) }

// Main runs a test binary's tests against one dev server shared by them all
// (tests isolate themselves with a task queue each): use receives it before
// the first test. It returns the exit code for os.Exit.
func Main(m *testing.M, opts Options, use func(*Server)) int { return harness.Main(m, opts, use) }
