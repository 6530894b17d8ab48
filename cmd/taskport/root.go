package main

import (
	"fmt"

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
	root.AddCommand(newMigrateCmd(&g), newWorkerCmd(&g), newAdminCmd(&g), newPlanCmd(&g), newDecisionCmd(&g), newRunsCmd(&g), newEngineCmd(&g))
	refuseUsage(root)
	return root
}

// usageError is a command line the CLI refuses; main exits 2 on it.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() + " (see --help)" }
func (e usageError) Unwrap() error { return e.err }

// refuseUsage makes every refusal of a command line below cmd a
// usageError: a flag that does not parse, arguments a command does not
// take, and a group command (plan, runs, ...) called without one of its
// subcommands, which cobra would otherwise answer with its help and exit 0.
func refuseUsage(cmd *cobra.Command) {
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	if cmd.HasSubCommands() && cmd.Run == nil && cmd.RunE == nil {
		cmd.Args = cobra.NoArgs
		cmd.RunE = func(cmd *cobra.Command, _ []string) error {
			return usageError{fmt.Errorf("%s needs a subcommand", cmd.CommandPath())}
		}
	}
	if args := cmd.Args; args != nil {
		cmd.Args = func(cmd *cobra.Command, a []string) error {
			if err := args(cmd, a); err != nil {
				return usageError{err}
			}
			return nil
		}
	}
	for _, sub := range cmd.Commands() {
		refuseUsage(sub)
	}
}
