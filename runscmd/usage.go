package runscmd

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
)

// UsageError is a command line a command refuses; ExitCode is 2 on it.
type UsageError struct{ Err error }

func (e UsageError) Error() string { return e.Err.Error() + " (see --help)" }
func (e UsageError) Unwrap() error { return e.Err }

// ExitCode is the exit status for what a command returned: 0 for nil, 2 for
// a command line it refused (a UsageError: an unknown command or flag, a
// missing subcommand, a flag value that does not parse), as most Unix tools
// do, and 1 for a command that ran and failed.
func ExitCode(err error) int {
	switch {
	case err == nil:
		return 0
	case errors.As(err, new(UsageError)):
		return 2
	}
	return 1
}

// RefuseUsage makes every refusal of a command line at or below cmd a
// UsageError: a flag that does not parse, a required flag left out,
// arguments a command does not take, and a group command called without one
// of its subcommands, which cobra would otherwise answer with its help and
// exit 0. New applies it to the runs commands; a binary applies it to its
// root once its tree is built. Applying it again to a tree is harmless.
func RefuseUsage(cmd *cobra.Command) {
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usage(err) })
	if cmd.Runnable() {
		// cobra checks the required flags (and flag groups) after PreRunE
		// and returns its error as is: the same checks run first here, as
		// usage errors, and cobra's then pass.
		pre, preNoErr := cmd.PreRunE, cmd.PreRun
		cmd.PreRunE = func(cmd *cobra.Command, args []string) error {
			if err := errors.Join(cmd.ValidateRequiredFlags(), cmd.ValidateFlagGroups()); err != nil {
				return usage(err)
			}
			if pre != nil {
				return pre(cmd, args)
			}
			if preNoErr != nil {
				preNoErr(cmd, args)
			}
			return nil
		}
	}
	if cmd.HasSubCommands() && cmd.Run == nil && cmd.RunE == nil {
		// The refusal lists the subcommands: for a group such as cobra's
		// completion they are the values the word may take (the shells).
		cmd.Args = func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("unknown command %q for %q: want %s", args[0], cmd.CommandPath(), subcommands(cmd))
			}
			return nil
		}
		cmd.RunE = func(cmd *cobra.Command, _ []string) error {
			return UsageError{fmt.Errorf("%s needs a subcommand: %s", cmd.CommandPath(), subcommands(cmd))}
		}
	}
	if args := cmd.Args; args != nil {
		cmd.Args = func(cmd *cobra.Command, a []string) error { return usage(args(cmd, a)) }
	}
	for _, sub := range cmd.Commands() {
		RefuseUsage(sub)
	}
}

// subcommands names the subcommands of cmd a user may type, as "a, b or c".
func subcommands(cmd *cobra.Command) string {
	var names []string
	for _, sub := range cmd.Commands() {
		if sub.IsAvailableCommand() {
			names = append(names, sub.Name())
		}
	}
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// usage is err as a UsageError, once.
func usage(err error) error {
	if err == nil || errors.As(err, new(UsageError)) {
		return err
	}
	return UsageError{err}
}
