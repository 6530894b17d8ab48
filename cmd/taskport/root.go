package main

import (
	"github.com/spf13/cobra"

	"github.com/taskport/taskport/cmd/internal/stack"
	"github.com/taskport/taskport/runscmd"
)

func newRootCmd() *cobra.Command {
	var g stack.Globals
	root := &cobra.Command{
		Use:           "taskport",
		Version:       version,
		Short:         "Durable tasks for the media-acquisition backend, on Temporal or a Postgres lease table",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	g.Bind(root)
	root.AddCommand(newMigrateCmd(&g), newWorkerCmd(&g), newAdminCmd(&g), newPlanCmd(&g), newDecisionCmd(&g), newRunsCmd(&g), newEngineCmd(&g))
	// cobra adds its completion command only when the tree executes, after
	// RefuseUsage has run: added now, it keeps the rule too, so that
	// `taskport completion bogus` is refused (exit 2, naming the shells)
	// instead of printing its help and exiting 0. Its scripts go to the
	// root's output as it is now, the process's stdout.
	root.InitDefaultCompletionCmd()
	runscmd.RefuseUsage(root)
	return root
}

// usageError is a command line the CLI refuses; main exits 2 on it. The
// rule is runscmd's, which the runs commands keep: one rule for the tree.
type usageError = runscmd.UsageError
