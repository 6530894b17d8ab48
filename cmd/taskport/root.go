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
	runscmd.RefuseUsage(root)
	return root
}

// usageError is a command line the CLI refuses; main exits 2 on it. The
// rule is runscmd's, which the runs commands keep: one rule for the tree.
type usageError = runscmd.UsageError
