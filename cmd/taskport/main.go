// Command taskport runs the taskport processes: schema migrations, workers
// on either engine with the outbox dispatcher, the admin surface, and the
// business commands (plan, decision). It creates no database and starts no
// server of its own: the local all-in-one with a demo is cmd/taskport-dev.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/taskport/taskport/cmd/internal/stack"
	"github.com/taskport/taskport/runscmd"
)

// version is the revision the binary was built from; the image build sets
// it with -ldflags "-X main.version=..." (deploy/image.GoBuildFlags).
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "taskport:", err)
		os.Exit(exitCode(err))
	}
}

// exitCode is 2 for a command line the CLI refuses (an unknown command or
// flag, a missing subcommand, a flag value that does not parse), as most
// Unix tools do, and 1 for a command that ran and failed.
func exitCode(err error) int { return runscmd.ExitCode(err) }

func run(ctx context.Context, args []string) error {
	root := newRootCmd()
	root.SetArgs(args)
	// A command on a database without taskport's tables says so the way
	// the worker's schema check does, whichever statement found them
	// missing.
	return stack.MissingSchema(root.ExecuteContext(ctx))
}
