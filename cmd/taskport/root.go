package main

import (
	"github.com/spf13/cobra"

	"github.com/taskport/taskport/cmd/internal/stack"
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
	root.AddCommand(newMigrateCmd(&g), newWorkerCmd(&g), newAdminCmd(&g), newPlanCmd(&g), newDecisionCmd(&g), newRunsCmd(&g))
	return root
}
