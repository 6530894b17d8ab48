package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/user"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/taskport/taskport/acquisition"
	"github.com/taskport/taskport/cmd/internal/stack"
	"github.com/taskport/taskport/port"
)

// withClient runs fn with the engine as a client (no worker) and the
// process logger, and closes the client.
func withClient(cmd *cobra.Command, g *stack.Globals, c *stack.Config, fn func(*stack.Client, *slog.Logger) error) error {
	return withClientOpenedIn(cmd.Context(), g, c, fn)
}

// withClientOpenedIn is withClient with the client opened under ctx (which
// may bound the dial), not the command's.
func withClientOpenedIn(ctx context.Context, g *stack.Globals, c *stack.Config, fn func(*stack.Client, *slog.Logger) error) error {
	if err := c.SecretsFromEnv(); err != nil {
		return err
	}
	log, err := g.Logger()
	if err != nil {
		return err
	}
	cl, err := stack.OpenClient(ctx, g, *c, log)
	if err != nil {
		return err
	}
	defer cl.Close()
	return fn(cl, log)
}

func newRunsCmd(g *stack.Globals) *cobra.Command {
	var (
		c      stack.Config
		asJSON bool
		as     string
	)
	cmd := &cobra.Command{
		Use: "runs",
		Short: "List, inspect, cancel, retry and signal runs on the chosen engine " +
			"(a client of the engine: needs the database, and the Temporal frontend for --engine temporal; runs no worker)",
	}
	c.BindEngine(cmd.PersistentFlags())
	cmd.PersistentFlags().BoolVar(&asJSON, jsonFlag, false, jsonUsage)

	var (
		f        port.RunFilter
		statuses []string
	)
	list := &cobra.Command{
		Use:   "list",
		Short: "List runs, newest first, one page at a time (--after the cursor the previous page printed)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			for _, s := range statuses {
				f.Statuses = append(f.Statuses, port.Status(s))
			}
			return withClient(cmd, g, &c, func(cl *stack.Client, _ *slog.Logger) error {
				page, err := cl.ListRuns(cmd.Context(), f)
				if err != nil {
					return err
				}
				next := ""
				if len(page) > 0 && len(page) == pageSize(f) {
					next = page[len(page)-1].Cursor
				}
				if asJSON {
					return writeJSON(cmd.OutOrStdout(), runPage{Runs: jsonRuns(page), Next: next})
				}
				return printRuns(cmd.OutOrStdout(), page, next)
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
			return withClient(cmd, g, &c, func(cl *stack.Client, _ *slog.Logger) error {
				v, err := cl.Get(cmd.Context(), port.RunID(args[0]))
				if err != nil {
					return err
				}
				if asJSON {
					return writeJSON(cmd.OutOrStdout(), jsonRun(v))
				}
				return printRun(cmd.OutOrStdout(), v)
			})
		},
	}

	var reason string
	cancel := &cobra.Command{
		Use:   "cancel RUN",
		Short: "Cancel a run: the request is recorded first (with who asked, in the run's cancel reason), then the engine stops the run",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if as == "" {
				return errors.New("--as: who cancels must not be empty")
			}
			id := port.RunID(args[0])
			return withClient(cmd, g, &c, func(cl *stack.Client, log *slog.Logger) error {
				// A finished run never changes again, and the engines' Cancel
				// leaves it as it is: the CLI says so rather than report a
				// cancel it did not request.
				v, err := cl.Get(cmd.Context(), id)
				if err != nil {
					return err
				}
				if v.Status.Terminal() {
					if asJSON {
						return writeJSON(cmd.OutOrStdout(), jsonRun(v))
					}
					_, err = fmt.Fprintf(cmd.OutOrStdout(), "run %s already finished: status %s; nothing changed\n", id, v.Status)
					return err
				}
				if err := cl.Cancel(cmd.Context(), id, cancelReason(reason, as)); err != nil {
					return err
				}
				log.Info("run cancel requested", slog.String("run_id", string(id)), slog.String("by", as), slog.String("reason", reason))
				v, err = cl.Get(cmd.Context(), id)
				if err != nil {
					return err
				}
				if asJSON {
					return writeJSON(cmd.OutOrStdout(), jsonRun(v))
				}
				_, err = fmt.Fprintf(cmd.OutOrStdout(), "run %s: cancel requested by %s; status %s\n", id, as, v.Status)
				return err
			})
		},
	}
	cancel.Flags().StringVar(&reason, "reason", "canceled from the CLI", "why")

	retry := &cobra.Command{
		Use: "retry RUN",
		Short: "Retry a failed run: a new run with its kind, input and business key; retrying the same run again " +
			"returns the same new run, and the failed run stays listed as failed. A run that opened a pending decision " +
			"is retried through the decision (taskport decision resolve)",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if as == "" {
				return errors.New("--as: who retries must not be empty")
			}
			id := port.RunID(args[0])
			return withClient(cmd, g, &c, func(cl *stack.Client, log *slog.Logger) error {
				if err := acquisition.CheckRunRetry(cmd.Context(), cl.Pool(), id); err != nil {
					return err
				}
				next, err := cl.Retry(cmd.Context(), id)
				if err != nil {
					return err
				}
				log.Info("run retried", slog.String("run_id", string(id)), slog.String("new_run_id", string(next)), slog.String("by", as))
				if asJSON {
					return writeJSON(cmd.OutOrStdout(), retried{RunID: id, NewRunID: next, By: as})
				}
				_, err = fmt.Fprintf(cmd.OutOrStdout(), "run %s retried by %s as run %s\n", id, as, next)
				return err
			})
		},
	}
	for _, sub := range []*cobra.Command{cancel, retry} {
		sub.Flags().StringVar(&as, "as", osUser(), "who acts, recorded in the log (and in the cancel reason); default: the OS user")
	}

	var payload string
	signal := &cobra.Command{
		Use: "signal TOPIC", Short: "Send a wake-up hint to the runs waiting on a topic (e.g. approval:<plan id>)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withClient(cmd, g, &c, func(cl *stack.Client, _ *slog.Logger) error {
				var p any
				if payload != "" {
					p = json.RawMessage(payload)
				}
				n, err := cl.Signal(cmd.Context(), port.Topic(args[0]), p)
				if err != nil {
					return err
				}
				if asJSON {
					return writeJSON(cmd.OutOrStdout(), map[string]int{"delivered": n})
				}
				_, err = fmt.Fprintf(cmd.OutOrStdout(), "signal %s delivered to %d run(s)\n", args[0], n)
				return err
			})
		},
	}
	signal.Flags().StringVar(&payload, "payload", "", "JSON payload of the signal")

	cmd.AddCommand(list, get, cancel, retry, signal)
	return cmd
}

// pageSize is the number of runs a full page of f holds.
func pageSize(f port.RunFilter) int {
	if f.Limit == 0 {
		return port.DefaultRunsPerPage
	}
	return f.Limit
}

// cancelReason records who asked in the run's cancel reason, the one place
// the run store keeps about a cancel.
func cancelReason(reason, by string) string { return reason + " (by " + by + ")" }

// osUser is the default actor: the OS user's name, else $USER.
func osUser() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	return os.Getenv("USER")
}

// runJSON is a run as --json prints it.
type runJSON struct {
	ID          port.RunID  `json:"id"`
	Kind        port.Kind   `json:"kind"`
	Version     int         `json:"version"`
	BusinessKey string      `json:"business_key,omitempty"`
	Status      port.Status `json:"status"`
	Attempts    int         `json:"attempts"`
	CurrentStep string      `json:"current_step,omitempty"`
	LastError   string      `json:"last_error,omitempty"`
	CreatedAt   time.Time   `json:"created_at"`
	UpdatedAt   time.Time   `json:"updated_at"`
	FinishedAt  *time.Time  `json:"finished_at,omitempty"`
	Cursor      string      `json:"cursor"`
}

// runPage is a page as `runs list --json` prints it; next is empty on the
// last page.
type runPage struct {
	Runs []runJSON `json:"runs"`
	Next string    `json:"next,omitempty"`
}

type retried struct {
	RunID    port.RunID `json:"run_id"`
	NewRunID port.RunID `json:"new_run_id"`
	By       string     `json:"by"`
}

func jsonRun(v port.RunView) runJSON {
	r := runJSON{ID: v.ID, Kind: v.Kind, Version: v.Version, BusinessKey: v.BusinessKey, Status: v.Status, Attempts: v.Attempts,
		CurrentStep: v.CurrentStep, LastError: v.LastError, CreatedAt: v.CreatedAt, UpdatedAt: v.UpdatedAt, Cursor: v.Cursor}
	if !v.FinishedAt.IsZero() {
		r.FinishedAt = &v.FinishedAt
	}
	return r
}

func jsonRuns(vs []port.RunView) []runJSON {
	out := make([]runJSON, len(vs))
	for i, v := range vs {
		out[i] = jsonRun(v)
	}
	return out
}

// Every read command takes --json (TestEveryReadCommandTakesJSON).
const (
	jsonFlag  = "json"
	jsonUsage = "print JSON instead of a table"
)

// bindJSON adds --json to a read command.
func bindJSON(cmd *cobra.Command, into *bool) {
	cmd.Flags().BoolVar(into, jsonFlag, false, jsonUsage)
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

const timeLayout = "2006-01-02 15:04:05"

func printRuns(out io.Writer, page []port.RunView, next string) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "ID\tKIND\tVERSION\tSTATUS\tATTEMPTS\tSTEP\tBUSINESS KEY\tCREATED\tLAST ERROR")
	for _, v := range page {
		fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%d\t%s\t%s\t%s\t%s\n", v.ID, v.Kind, v.Version, v.Status, v.Attempts, v.CurrentStep,
			v.BusinessKey, v.CreatedAt.UTC().Format(timeLayout), firstLine(v.LastError))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if next != "" {
		_, err := fmt.Fprintf(out, "next page: --after %s\n", next)
		return err
	}
	return nil
}

func printRun(out io.Writer, v port.RunView) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	finished := ""
	if !v.FinishedAt.IsZero() {
		finished = v.FinishedAt.UTC().Format(timeLayout)
	}
	for _, kv := range [][2]string{
		{"id", string(v.ID)}, {"kind", string(v.Kind)}, {"version", strconv.Itoa(v.Version)}, {"business key", v.BusinessKey},
		{"status", string(v.Status)}, {"attempts", strconv.Itoa(v.Attempts)}, {"step", v.CurrentStep}, {"last error", v.LastError},
		{"created", v.CreatedAt.UTC().Format(timeLayout)}, {"updated", v.UpdatedAt.UTC().Format(timeLayout)}, {"finished", finished},
	} {
		fmt.Fprintf(w, "%s:\t%s\n", kv[0], kv[1])
	}
	return w.Flush()
}

// firstLine keeps a table row on one line.
func firstLine(s string) string {
	if line, _, cut := strings.Cut(s, "\n"); cut {
		return line + " …"
	}
	return s
}
