package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/taskport/taskport/cmd/internal/stack"
	"github.com/taskport/taskport/port"
)

// newRunsCmd is the engine-level operator CLI: list, inspect, cancel,
// retry and signal runs on either engine, through port.TaskEngine and
// port.Admin. Unlike plan and decision it needs the engine (Temporal is
// dialed on the temporal engine); it starts no worker.
func newRunsCmd(g *stack.Globals) *cobra.Command {
	var (
		c       stack.Config
		asJSON  bool
		filter  port.RunFilter
		status  []string
		reason  string
		payload string
	)
	withRuns := func(cmd *cobra.Command, fn func(*stack.Stack) error) error {
		return stack.With(cmd, g, &c, fn)
	}
	cmd := &cobra.Command{Use: "runs", Short: "List, inspect, cancel, retry and signal runs on either engine (port.Admin)"}
	c.Bind(cmd.PersistentFlags())
	cmd.PersistentFlags().BoolVar(&asJSON, "json", false, "print JSON instead of a table")

	list := &cobra.Command{
		Use: "list", Short: "List runs, newest first", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			for _, s := range status {
				filter.Statuses = append(filter.Statuses, port.Status(s))
			}
			return withRuns(cmd, func(s *stack.Stack) error {
				runs, err := s.Runs().ListRuns(cmd.Context(), filter)
				if err != nil {
					return err
				}
				if asJSON {
					return json.NewEncoder(cmd.OutOrStdout()).Encode(runs)
				}
				return printRuns(cmd.OutOrStdout(), runs...)
			})
		},
	}
	list.Flags().StringVar((*string)(&filter.Kind), "kind", "", "only runs of this kind")
	list.Flags().IntVar(&filter.Version, "version", 0, "only runs of this kind version")
	list.Flags().StringSliceVar(&status, "status", nil, "only runs in these statuses (pending, running, waiting, succeeded, failed, canceled)")
	list.Flags().StringVar(&filter.BusinessKey, "business-key", "", "only runs of this business key (a plan id)")
	list.Flags().IntVar(&filter.Limit, "limit", 100, "at most this many runs")

	get := &cobra.Command{
		Use: "get RUN", Short: "Show a run", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withRuns(cmd, func(s *stack.Stack) error {
				v, err := s.Engine().Get(cmd.Context(), port.RunID(args[0]))
				if err != nil {
					return err
				}
				if asJSON {
					return json.NewEncoder(cmd.OutOrStdout()).Encode(v)
				}
				return printRuns(cmd.OutOrStdout(), v)
			})
		},
	}
	cancel := &cobra.Command{
		Use: "cancel RUN", Short: "Cancel a run (a business plan is canceled with `plan cancel`, which also compensates)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withRuns(cmd, func(s *stack.Stack) error {
				if err := s.Engine().Cancel(cmd.Context(), port.RunID(args[0]), reason); err != nil {
					return err
				}
				return printResult(cmd.OutOrStdout(), asJSON, map[string]string{"canceled": args[0]}, "cancel of run "+args[0]+" requested")
			})
		},
	}
	cancel.Flags().StringVar(&reason, "reason", "canceled from the CLI", "why")
	retry := &cobra.Command{
		Use: "retry RUN", Short: "Retry a failed run as a new run under a derived key; the failed run stays", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withRuns(cmd, func(s *stack.Stack) error {
				next, err := s.Runs().RetryRun(cmd.Context(), port.RunID(args[0]))
				if err != nil {
					return err
				}
				return printResult(cmd.OutOrStdout(), asJSON, map[string]string{"failed": args[0], "retry": string(next)},
					fmt.Sprintf("run %s retried as run %s", args[0], next))
			})
		},
	}
	signal := &cobra.Command{
		Use: "signal TOPIC", Short: "Signal the runs waiting on a topic (e.g. approval:<plan>)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var p any
			if payload != "" {
				if !json.Valid([]byte(payload)) {
					return fmt.Errorf("--payload is not JSON: %q", payload)
				}
				p = json.RawMessage(payload)
			}
			return withRuns(cmd, func(s *stack.Stack) error {
				n, err := s.Engine().Signal(cmd.Context(), port.Topic(args[0]), p)
				if err != nil {
					return err
				}
				return printResult(cmd.OutOrStdout(), asJSON, map[string]any{"topic": args[0], "delivered": n},
					fmt.Sprintf("signal %s delivered to %d run(s)", args[0], n))
			})
		},
	}
	signal.Flags().StringVar(&payload, "payload", "", "JSON payload")
	cmd.AddCommand(list, get, cancel, retry, signal)
	return cmd
}

func printResult(w io.Writer, asJSON bool, v any, text string) error {
	if asJSON {
		return json.NewEncoder(w).Encode(v)
	}
	_, err := fmt.Fprintln(w, text)
	return err
}

// printRuns prints runs as a table.
func printRuns(w io.Writer, runs ...port.RunView) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RUN\tKIND\tSTATUS\tATTEMPTS\tSTEP\tBUSINESS KEY\tUPDATED\tLAST ERROR")
	for _, r := range runs {
		fmt.Fprintf(tw, "%s\t%s@v%d\t%s\t%d\t%s\t%s\t%s\t%s\n", r.ID, r.Kind, r.Version, r.Status, r.Attempts, r.CurrentStep,
			r.BusinessKey, r.UpdatedAt.UTC().Format(time.DateTime), oneLine(r.LastError, 80))
	}
	return tw.Flush()
}

// oneLine is s on one line, cut to n characters.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}
