package main

import (
	"fmt"
	"strings"

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
	// cobra's help command answers a topic that is no command with the
	// root's help and exit 0: added now too, it refuses one (exit 2).
	root.InitDefaultHelpCmd()
	if help, _, err := root.Find([]string{"help"}); err == nil {
		help.Args = helpTopic
	}
	runscmd.RefuseUsage(root)
	return root
}

// helpTopic refuses the words after `taskport help` unless they name a
// command, all of them.
func helpTopic(cmd *cobra.Command, args []string) error {
	if topic, rest, err := cmd.Root().Find(args); err != nil || topic == nil || len(rest) > 0 {
		return fmt.Errorf("unknown help topic %q: want a command, e.g. taskport help runs list", strings.Join(args, " "))
	}
	return nil
}

// usageError is a command line the CLI refuses; main exits 2 on it. The
// rule is runscmd's, which the runs commands keep: one rule for the tree.
type usageError = runscmd.UsageError
