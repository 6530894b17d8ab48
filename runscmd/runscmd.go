// Package runscmd is the `runs` command of a binary that administers
// taskport runs: list, get, cancel, retry and signal, on whatever engine the
// binary opens. cmd/taskport mounts it for the media application; a team's
// own binary mounts it for its own kinds (ExampleNew): New takes a function
// that opens the engine, and returns the cobra command to add to the
// binary's root.
//
// The commands are a client of the engine: they never start it, so the
// engine needs no activity, and no handler either except for a retry (see
// Engine). The package imports the task layer only, never the media
// application.
//
// # Conventions
//
// The commands keep cmd/taskport's conventions, which its tests hold every
// command to:
//
//   - the read commands (list, get) take --json (a persistent flag of runs,
//     so every subcommand prints JSON with it), and the JSON shapes are
//     RunJSON, PageJSON and RetryJSON, snake_case keys;
//   - a command line the commands refuse (a flag that does not parse, the
//     wrong arguments, runs without a subcommand, an --as naming no one,
//     a list filter given empty, a RUN that is no run id as the commands
//     print one, a topic the engines would refuse, a --payload that is not
//     JSON, a cancel's --reason with control characters or over its bound)
//     is a UsageError, on which ExitCode is 2, returned before the engine
//     is opened (RefuseUsage applies the same rule to the rest of a
//     binary's tree, CheckActor to its own --as);
//   - the flags are arguments of one invocation (a filter, a reason, who
//     acts), so none falls back to the environment; what chooses and reaches
//     the engine is the binary's, added to the returned command's persistent
//     flags with the fallbacks the binary defines (cmd/taskport: --engine
//     and ENGINE, ...), and read by Config.Open, which runs after the flags
//     are parsed;
//   - each subcommand's help lists its own flags and the ones it inherits,
//     nothing of another subcommand.
//
// Output goes to the command's OutOrStdout: a binary redirects it with
// SetOut on its root. What an operator did (a cancel, a retry, with who
// asked) goes to Client.Log.
package runscmd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"os/user"
	"strings"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"github.com/taskport/taskport/internal/enginekit"
	"github.com/taskport/taskport/port"
)

// Engine is what the commands call: the run operations of a
// port.TaskEngine and the operator's port.Admin. Both adapters and the
// router satisfy it.
//
// Retry needs no definition of the failed run's kind: an engine whose
// registry holds it starts the new run at the kind's current version (its
// input checked again); one whose registry lacks it (a binary that only
// administers runs) starts it at the failed run's version with the stored
// input (port.Admin.Retry).
type Engine interface {
	Get(ctx context.Context, id port.RunID) (port.RunView, error)
	Cancel(ctx context.Context, id port.RunID, reason string) error
	Signal(ctx context.Context, topic port.Topic, payload any) (delivered int, err error)
	port.Admin
}

// Client is an engine opened for one command.
type Client struct {
	// Engine is the engine the command acts on. Required.
	Engine Engine
	// Log records what an operator did (who canceled or retried which
	// run); nil: slog.Default().
	Log *slog.Logger
	// Close, when not nil, is called once the command is done with the
	// engine (closing its pool or its Temporal connection).
	Close func()
	// CheckRetry, when not nil, is asked before a retry and refuses one
	// the binary's own rules forbid, writing nothing; its error is the
	// command's. cmd/taskport refuses a run whose retry belongs to an open
	// business decision.
	CheckRetry func(ctx context.Context, id port.RunID) error
}

// Config is what New needs from the binary.
type Config struct {
	// Open opens the engine for one command, under the command's context,
	// after the command line is parsed (so it may read the flags the binary
	// added to the runs command). Required: without it every command fails.
	Open func(ctx context.Context) (Client, error)
}

// with opens the client, runs fn with it and closes it.
func (c Config) with(cmd *cobra.Command, fn func(Client) error) error {
	if c.Open == nil {
		return errors.New("runs: the binary opens no engine (runscmd.Config.Open is nil)")
	}
	cl, err := c.Open(cmd.Context())
	if err != nil {
		return err
	}
	if cl.Close != nil {
		defer cl.Close()
	}
	if cl.Engine == nil {
		return errors.New("runs: the binary opened no engine (runscmd.Client.Engine is nil)")
	}
	if cl.Log == nil {
		cl.Log = slog.Default()
	}
	return fn(cl)
}

// New returns the `runs` command with its subcommands list, get, cancel,
// retry and signal, each acting on the engine cfg.Open opens. Every refusal
// of its command line is a UsageError (RefuseUsage).
func New(cfg Config) *cobra.Command {
	var (
		asJSON bool
		as     string
	)
	cmd := &cobra.Command{
		Use:   "runs",
		Short: "List, inspect, cancel, retry and signal runs (a client of the engine: runs no worker)",
	}
	cmd.PersistentFlags().BoolVar(&asJSON, JSONFlag, false, jsonUsage)
	out := func(cmd *cobra.Command, v any, text func() error) error {
		if asJSON {
			return WriteJSON(cmd.OutOrStdout(), v)
		}
		return text()
	}

	var (
		f        port.RunFilter
		statuses []string
	)
	list := &cobra.Command{
		Use:   "list",
		Short: "List runs, newest first, one page at a time (--after the cursor the previous page printed)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// What the port defines is checked before the engine is opened;
			// the rest (a cursor's format is the engine's) is the engine's
			// refusal of the filter, which only the flags make. A filter
			// given empty (an unset shell variable) is refused, as an empty
			// --payload is, rather than taken for no filter: the page would
			// hold every run. (An empty --after is the first page.)
			for _, flag := range []string{"kind", "status", "business-key"} {
				if v := cmd.Flags().Lookup(flag).Value; cmd.Flags().Changed(flag) && (v.String() == "" || v.String() == "[]") {
					return UsageError{fmt.Errorf("--%s is empty: leave it out to list the runs of every %s", flag, strings.ReplaceAll(flag, "-", " "))}
				}
			}
			if f.Kind != "" {
				// A kind no run can have: the listing would be empty.
				if err := port.ValidateName("kind", string(f.Kind)); err != nil {
					return UsageError{fmt.Errorf("--kind: %w", err)}
				}
			}
			for _, s := range statuses {
				if !port.Status(s).Valid() {
					return UsageError{fmt.Errorf("--status: unknown status %q", s)}
				}
				f.Statuses = append(f.Statuses, port.Status(s))
			}
			// A version is an int4 of the run store (port.RunFilter).
			for i, v := range []int{f.Version, f.BelowVersion} {
				if v < 0 || v > math.MaxInt32 {
					flag := []string{"version", "below-version"}[i]
					return UsageError{fmt.Errorf("--%s must lie in [0, %d] (0: any version), got %d", flag, math.MaxInt32, v)}
				}
			}
			if f.Limit < 0 || f.Limit > port.MaxRunsPerPage {
				return UsageError{fmt.Errorf("--limit must lie in [1, %d] (0: %d), got %d", port.MaxRunsPerPage, port.DefaultRunsPerPage, f.Limit)}
			}
			return cfg.with(cmd, func(cl Client) error {
				page, next, err := listPage(cmd.Context(), cl.Engine, f)
				if err != nil {
					return filterError(cmd, err)
				}
				return out(cmd, PageJSON{Runs: jsonRuns(page), Next: next}, func() error { return printRuns(cmd.OutOrStdout(), page, next) })
			})
		},
	}
	lf := list.Flags()
	lf.StringVar((*string)(&f.Kind), "kind", "", "only runs of this kind")
	lf.StringSliceVar(&statuses, "status", nil, "only runs in these statuses: pending, running, waiting, succeeded, failed, canceled (repeat or comma-separate)")
	lf.StringVar(&f.BusinessKey, "business-key", "", "only runs enqueued with this business key (a plan id)")
	lf.IntVar(&f.Version, "version", 0, "only runs of this handler version")
	lf.IntVar(&f.BelowVersion, "below-version", 0, "only runs of versions lower than this one")
	lf.StringVar(&f.After, "after", "", "the cursor the previous page printed: list the runs after it")
	lf.IntVar(&f.Limit, "limit", 0, fmt.Sprintf("page size, 1 to %d; 0: %d", port.MaxRunsPerPage, port.DefaultRunsPerPage))

	get := &cobra.Command{
		Use: "get RUN", Short: "Show one run as its engine reports it", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkRun(args[0]); err != nil {
				return err
			}
			return cfg.with(cmd, func(cl Client) error {
				v, err := cl.Engine.Get(cmd.Context(), port.RunID(args[0]))
				if err != nil {
					return err
				}
				return out(cmd, jsonRun(v), func() error { return printRun(cmd.OutOrStdout(), v) })
			})
		},
	}

	var reason string
	cancel := &cobra.Command{
		Use:   "cancel RUN",
		Short: "Cancel a run: the request is recorded first (with who asked, in the run's cancel reason), then the engine stops the run",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := CheckActor(as); err != nil {
				return err
			}
			if err := checkReason(reason); err != nil {
				return err
			}
			if err := checkRun(args[0]); err != nil {
				return err
			}
			id := port.RunID(args[0])
			return cfg.with(cmd, func(cl Client) error {
				// A finished run never changes again, and the engines' Cancel
				// leaves it as it is: the command says so rather than report
				// a cancel it did not request.
				v, err := cl.Engine.Get(cmd.Context(), id)
				if err != nil {
					return err
				}
				if v.Status.Terminal() {
					return out(cmd, jsonRun(v), func() error {
						_, err := fmt.Fprintf(cmd.OutOrStdout(), "run %s already finished: status %s; nothing changed\n", id, v.Status)
						return err
					})
				}
				if err := cl.Engine.Cancel(cmd.Context(), id, cancelReason(reason, as)); err != nil {
					return err
				}
				cl.Log.Info("run cancel requested", slog.String("run_id", string(id)), slog.String("by", as), slog.String("reason", reason))
				if v, err = cl.Engine.Get(cmd.Context(), id); err != nil {
					return err
				}
				return out(cmd, jsonRun(v), func() error {
					_, err := fmt.Fprintf(cmd.OutOrStdout(), "run %s: cancel requested by %s; status %s\n", id, as, v.Status)
					return err
				})
			})
		},
	}
	cancel.Flags().StringVar(&reason, "reason", "canceled from the CLI",
		fmt.Sprintf("why, recorded in the run's cancel reason (at most %d characters; no control characters but line feeds and tabs)", maxReason))

	retry := &cobra.Command{
		Use: "retry RUN",
		Short: "Retry a failed run: a new run with its kind, input and business key; retrying the same run again " +
			"returns the same new run, and the failed run stays listed as failed",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := CheckActor(as); err != nil {
				return err
			}
			if err := checkRun(args[0]); err != nil {
				return err
			}
			id := port.RunID(args[0])
			return cfg.with(cmd, func(cl Client) error {
				if cl.CheckRetry != nil {
					if err := cl.CheckRetry(cmd.Context(), id); err != nil {
						return err
					}
				}
				next, err := cl.Engine.Retry(cmd.Context(), id)
				if err != nil {
					return err
				}
				cl.Log.Info("run retried", slog.String("run_id", string(id)), slog.String("new_run_id", string(next)), slog.String("by", as))
				return out(cmd, RetryJSON{RunID: id, NewRunID: next, By: as}, func() error {
					_, err := fmt.Fprintf(cmd.OutOrStdout(), "run %s retried by %s as run %s\n", id, as, next)
					return err
				})
			})
		},
	}
	cancel.Flags().StringVar(&as, "as", DefaultActor(), "who cancels, recorded in the log and in the run's cancel reason")
	retry.Flags().StringVar(&as, "as", DefaultActor(), "who retries, recorded in the log and printed with the new run")

	var payload string
	signal := &cobra.Command{
		Use: "signal TOPIC", Short: "Send a wake-up hint to the runs waiting on a topic (e.g. approval:<plan id>)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			// The topic (by the rule the engines apply to one) and the
			// payload are the command line's: refused before the engine is
			// opened. A --payload given empty (an unset shell variable) is
			// refused too, rather than sent as no payload.
			if err := port.ValidateName("topic", args[0]); err != nil {
				return UsageError{fmt.Errorf("TOPIC: %w", err)}
			}
			var p any
			if cmd.Flags().Changed("payload") {
				if !json.Valid([]byte(payload)) {
					return UsageError{errors.New("--payload is not valid JSON")}
				}
				p = json.RawMessage(payload)
			}
			return cfg.with(cmd, func(cl Client) error {
				n, err := cl.Engine.Signal(cmd.Context(), port.Topic(args[0]), p)
				if err != nil {
					return err
				}
				return out(cmd, map[string]int{"delivered": n}, func() error {
					_, err := fmt.Fprintf(cmd.OutOrStdout(), "signal %s delivered to %d run(s)\n", args[0], n)
					return err
				})
			})
		},
	}
	signal.Flags().StringVar(&payload, "payload", "", "JSON payload of the signal")

	cmd.AddCommand(list, get, cancel, retry, signal)
	RefuseUsage(cmd)
	return cmd
}

// filterError is err, from ListRuns, as a UsageError naming the flag when
// the engine refused a field of the filter: only the flags make the filter,
// so such a refusal is of the command line (a --after that is no cursor).
func filterError(cmd *cobra.Command, err error) error {
	var fe *port.FieldError
	if !errors.As(err, &fe) {
		return err
	}
	name := strings.ReplaceAll(fe.Field, "_", "-")
	if cmd.Flags().Lookup(name) == nil {
		return err
	}
	return UsageError{fmt.Errorf("--%s: %w", name, err)}
}

// listPage lists f's page and the cursor of the next one, empty when no
// run follows the page: a page exactly full is not taken for one with more
// after it, which would print a cursor to an empty page. It asks for one
// run more than the page holds; at the engines' largest page, which they
// would refuse one more than, it asks for the run after the page instead.
func listPage(ctx context.Context, e Engine, f port.RunFilter) ([]port.RunView, string, error) {
	size := pageSize(f)
	one := f
	one.Limit = min(size+1, port.MaxRunsPerPage)
	page, err := e.ListRuns(ctx, one)
	if err != nil {
		return nil, "", err
	}
	if len(page) > size {
		page = page[:size]
		return page, page[size-1].Cursor, nil
	}
	if len(page) < port.MaxRunsPerPage {
		return page, "", nil // shorter than asked for: the last page
	}
	// A full page of the largest size: is there a run after it?
	after := f
	after.After, after.Limit = page[size-1].Cursor, 1
	rest, err := e.ListRuns(ctx, after)
	if err != nil || len(rest) == 0 {
		return page, "", err
	}
	return page, page[size-1].Cursor, nil
}

// pageSize is the number of runs a full page of f holds.
func pageSize(f port.RunFilter) int {
	if f.Limit == 0 {
		return port.DefaultRunsPerPage
	}
	return f.Limit
}

// checkRun refuses, as a UsageError, a RUN that no run can have. A run's
// id is a UUID in the lowercase hyphenated form Enqueue returns and the
// commands print (port's specification); the engines answer any other
// string with port.ErrNotFound, which reads as a run that is gone, or not
// yet visible, rather than as a mistyped id. Another spelling of a UUID
// (uppercase, braced, urn:uuid:) is refused with the one to type.
func checkRun(id string) error {
	u, err := uuid.Parse(id)
	if err != nil {
		return UsageError{fmt.Errorf("RUN: not a run id (a UUID, as runs list prints it), got %q", id)}
	}
	if u.String() != id {
		return UsageError{fmt.Errorf("RUN: write the run id as runs list prints it, %s, got %q", u, id)}
	}
	return nil
}

// maxReason bounds a cancel's --reason, in characters. The engines bound no
// cancel reason (they refuse only what Postgres cannot store): this is the
// bound the plans API puts on a note or a reason (plans.MaxNote) and the
// router on a switch's reason (router.MaxSwitchReason), for the same
// reason: it is read back by an operator, not stored as a document.
const maxReason = 1000

// checkReason refuses, as a UsageError, a --reason that is not text a
// terminal shows as written (invalid UTF-8, U+0000, a control character
// other than a line feed or a tab: an escape code where the reason is
// printed), or that is longer than maxReason: the rule plans applies to a
// reason, checked before the engine is opened.
func checkReason(reason string) error { return checkText("reason", reason, "\n\t", maxReason) }

// checkText refuses, as a UsageError naming --flag, text that
// enginekit.ValidateLine refuses (keep: the control characters it may hold)
// or that is longer than most characters.
func checkText(flag, s, keep string, most int) error {
	var fe *port.FieldError
	if errors.As(enginekit.ValidateBoundedLine(flag, s, keep, most), &fe) {
		return UsageError{fmt.Errorf("--%s: %s", flag, fe.Reason)}
	}
	return nil
}

// cancelReason records who asked in the run's cancel reason, the one place
// the run store keeps about a cancel.
func cancelReason(reason, by string) string { return reason + " (by " + by + ")" }

// DefaultActor is the default of the commands' --as (who acts): the OS
// user's name, else $USER. A binary's own commands that record who acts
// take the same default.
func DefaultActor() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	return os.Getenv("USER")
}

// maxActor bounds --as, in characters: the bound the plans API puts on who
// acted (plans.MaxActor) and the router on who switched
// (router.MaxSwitchBy).
const maxActor = 200

// CheckActor refuses, as a UsageError, an --as that names no one (empty or
// blank), is not one line of text (a control character would be an escape
// code where it is printed back, and a cancel records it in the run's
// reason), or is longer than maxActor, so a command checks it before it
// opens anything: who acted is what the command records. A binary's own
// commands that take --as refuse it the same way.
func CheckActor(as string) error {
	if strings.TrimSpace(as) == "" {
		return UsageError{fmt.Errorf("--as: who acts must not be empty or blank, got %q", as)}
	}
	return checkText("as", as, "", maxActor)
}
