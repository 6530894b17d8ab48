// Package devserver gives a test a real Temporal dev server (headless, free
// ports, the search attributes it asks for), stopped when the test ends.
package devserver

import (
	"context"
	"os"
	"testing"

	"github.com/taskport/taskport/internal/devserver"
	"github.com/taskport/taskport/internal/testkit"
)

// Options and Server are the launcher's; see internal/devserver.
type (
	Options = devserver.Options
	Server  = devserver.Server
)

// ServerDefaultsEnv, set to 1, makes every server this package launches
// (Start, Shared, Main) run with Options.ServerDefaults: none of
// internal/devserver's dynamic configuration. The same variable does it for
// internal/testkit/temporalserver (its ServerDefaultsEnv); the fault soak
// measures recovery on servers nobody tuned with it (docs/testing.md).
const ServerDefaultsEnv = "TASKPORT_SERVER_DEFAULTS"

// fromEnv applies ServerDefaultsEnv to opts.
func fromEnv(opts Options) Options {
	if os.Getenv(ServerDefaultsEnv) == "1" {
		opts.ServerDefaults = true
	}
	return opts
}

// ExtraArgsFor is internal/devserver's ExtraArgs with ServerDefaultsEnv
// applied: the flags a test that runs the CLI itself adds.
func ExtraArgsFor(opts Options) []string { return devserver.ExtraArgs(fromEnv(opts)) }

var harness = testkit.Harness[Options, *Server]{Name: "devserver", Launch: func(ctx context.Context, opts Options) (*Server, error) {
	return devserver.Launch(ctx, fromEnv(opts))
}}

// Start launches a server for tb and stops it when tb ends.
func Start(tb testing.TB, opts Options) *Server { tb.Helper(); return harness.Start(tb, opts) }

// Shared is a server for a whole test binary, launched on its first Get
// and stopped by testkit.Main.
func Shared(opts Options) *testkit.Shared[*Server] { return harness.Shared(opts) }

// Main runs a test binary's tests against one dev server shared by them all
// (tests isolate themselves with a task queue each): use receives it before
// the first test. It returns the exit code for os.Exit.
func Main(m *testing.M, opts Options, use func(*Server)) int { return harness.Main(m, opts, use) }
