package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/taskport/taskport/cmd/internal/stack"
	"github.com/taskport/taskport/router"
)

// dialBound is how long `taskport engine` waits for the Temporal frontend
// before going on without it (the engine an operator evacuates may be gone).
const dialBound = 10 * time.Second

func newEngineCmd(g *stack.Globals) *cobra.Command {
	var (
		c      stack.Config
		asJSON bool
	)
	cmd := &cobra.Command{
		Use: "engine",
		Short: "Switch engines with work in flight: the active engine (new runs go to it), the open runs per engine, " +
			"a switch, and the evacuation of an engine that is gone (docs/operations.md, \"Switching engines\")",
	}
	c.BindEngineConnection(cmd.PersistentFlags())
	withRouter := func(cmd *cobra.Command, fn func(*router.Router, *slog.Logger) error) error {
		c.Engine, c.TemporalOptional = "both", true
		ctx, cancel := context.WithTimeout(cmd.Context(), dialBound)
		defer cancel()
		return withClientOpenedIn(ctx, g, &c, func(cl *stack.Client, log *slog.Logger) error {
			return fn(cl.Router(), log)
		})
	}

	status := &cobra.Command{
		Use: "status", Short: "Show the active engine, who switched to it, the open runs per engine and kind, and the runs an interrupted evacuation left to move", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withRouter(cmd, func(r *router.Router, _ *slog.Logger) error {
				st, err := r.Status(cmd.Context())
				if err != nil {
					return err
				}
				if asJSON {
					return writeJSON(cmd.OutOrStdout(), st)
				}
				return printEngineStatus(cmd.OutOrStdout(), st)
			})
		},
	}
	bindJSON(status, &asJSON)

	var to, as, reason string
	switchCmd := &cobra.Command{
		Use: "switch", Args: cobra.NoArgs,
		Short: fmt.Sprintf("Make --to the active engine: new runs go to it (every process running --engine both follows within %s); "+
			"open runs drain where they are", router.DefaultRefresh),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := engineFlag("--to", to); err != nil {
				return err
			}
			if err := checkActor(as); err != nil {
				return err
			}
			if err := fieldFlagError(router.CheckSwitch(as, reason), switchFields); err != nil {
				return err
			}
			return withRouter(cmd, func(r *router.Router, log *slog.Logger) error {
				s, err := r.SwitchTo(cmd.Context(), to, as, reason)
				if errors.Is(err, router.ErrAlreadyActive) {
					return switchingToActive(to)
				}
				if err != nil {
					return err
				}
				log.Info("engine switched", slog.String("to", s.Engine), slog.String("by", s.By), slog.String("reason", s.Reason))
				_, err = fmt.Fprintf(cmd.OutOrStdout(), "active engine: %s (switched by %s at %s); open runs of the other engine drain where they are\n",
					s.Engine, s.By, s.At.UTC().Format(time.RFC3339))
				return err
			})
		},
	}
	switchCmd.Flags().StringVar(&to, "to", "", "the engine to make active: lease or temporal")
	switchCmd.Flags().StringVar(&as, "as", osUser(), "who switches, recorded with the switch")
	switchCmd.Flags().StringVar(&reason, "reason", "", fmt.Sprintf("why, recorded with the switch and shown by status (optional; at most %d characters)", router.MaxSwitchReason))

	var from string
	evacuate := &cobra.Command{
		Use: "evacuate", Args: cobra.NoArgs,
		Short: "Move every open run of --from (an engine that is gone) to the active engine: each is canceled there where it can be reached, " +
			"ended canceled, and enqueued again from its first step with the same kind, input and business key; a run moves at most once",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := engineFlag("--from", from); err != nil {
				return err
			}
			if err := checkActor(as); err != nil {
				return err
			}
			return withRouter(cmd, func(r *router.Router, log *slog.Logger) error {
				rep, stopped := r.Evacuate(cmd.Context(), from, as)
				if errors.Is(stopped, router.ErrAlreadyActive) {
					return evacuatingActive(from)
				}
				if stopped != nil && rep.From == "" {
					return stopped // refused before a run was read
				}
				// Stopped midway (Ctrl-C, the database gone), the report still
				// says what was moved before the command fails.
				msg := "engine evacuated"
				if stopped != nil {
					msg = "engine evacuation stopped"
				}
				log.Info(msg, slog.String("from", rep.From), slog.String("to", rep.To),
					slog.Int("moved", len(rep.Moved)), slog.Int("skipped", len(rep.Skipped)), slog.Int("failed", len(rep.Failed)))
				var err error
				if asJSON {
					err = writeJSON(cmd.OutOrStdout(), jsonEvacuation(rep))
				} else {
					err = printEvacuation(cmd.OutOrStdout(), rep)
				}
				switch {
				case stopped != nil:
					err = errors.Join(fmt.Errorf("the evacuation stopped after %d moved: %w; evacuate again to move the rest", len(rep.Moved), stopped), err)
				case err == nil && len(rep.Failed) > 0:
					err = fmt.Errorf("%d runs were not moved; evacuate again to retry them", len(rep.Failed))
				}
				return err
			})
		},
	}
	evacuate.Flags().StringVar(&from, "from", "", "the engine to evacuate: lease or temporal (not the active one)")
	evacuate.Flags().StringVar(&as, "as", osUser(), "who evacuates, recorded in each moved run's cancel reason")
	bindJSON(evacuate, &asJSON)

	cmd.AddCommand(status, switchCmd, evacuate)
	return cmd
}

// engineFlag refuses a value of --to or --from that names no engine, as a
// command line the CLI refuses (exit 2), before anything is dialed.
func engineFlag(name, value string) error {
	if value != "lease" && value != "temporal" {
		return usageError{Err: fmt.Errorf("%s must be lease or temporal, got %q", name, value)}
	}
	return nil
}

// switchingToActive is the refusal of a switch to the active engine, a
// command line the CLI refuses (exit 2), as evacuatingActive is.
func switchingToActive(to string) error {
	return usageError{Err: fmt.Errorf("--to %s is already the active engine: nothing to switch (taskport engine status)", to)}
}

// evacuatingActive is the refusal of an evacuation of the active engine,
// a command line the CLI refuses (exit 2), saying what to do instead, once
// the router has read which engine is active: after the Temporal frontend
// is dialed (at most dialBound). Read before, with a pool of its own, it
// would come before the check of the Temporal flags, which stack.OpenClient
// makes first and does not export, and a malformed --temporal-address would
// be named only once the database answered.
func evacuatingActive(from string) error {
	other := "lease"
	if from == other {
		other = "temporal"
	}
	return usageError{Err: fmt.Errorf("--from %s is the active engine: switch to another engine first (taskport engine switch --to %s), "+
		"then evacuate %s", from, other, from)}
}

// switchFields names the flag of each field the router refuses of a
// switch (router.CheckSwitch).
var switchFields = map[string]string{"by": "--as", "reason": "--reason"}

func printEngineStatus(w io.Writer, st router.Status) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if st.Active.At.IsZero() {
		fmt.Fprintf(tw, "active engine: %s (the primary; no switch recorded)\n", st.Active.Engine)
	} else {
		// The reason is optional (--reason); none is shown as none, as /admin does.
		why := ""
		if st.Active.Reason != "" {
			why = ": " + st.Active.Reason
		}
		fmt.Fprintf(tw, "active engine: %s (switched by %s at %s%s)\n", st.Active.Engine, st.Active.By,
			st.Active.At.UTC().Format(time.RFC3339), why)
	}
	fmt.Fprintln(tw, "ENGINE\tKIND\tOPEN RUNS\tOLDEST OPEN")
	for _, o := range st.Open {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", o.Engine, o.Kind, o.Count, o.Oldest.UTC().Format(time.RFC3339))
	}
	if len(st.Open) == 0 {
		fmt.Fprintln(tw, "-\t-\t0\t-")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	// Canceled, these runs are in no open count: without this line, an
	// engine an evacuation left them on reads as done.
	for _, u := range st.Unmoved {
		runs := "runs"
		if u.Count == 1 {
			runs = "run"
		}
		fmt.Fprintf(w, "%s: %d %s left by an interrupted evacuation; run taskport engine evacuate --from %s again\n",
			u.Engine, u.Count, runs, u.Engine)
	}
	return nil
}

func printEvacuation(w io.Writer, rep router.Report) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "evacuated %s to %s: %d moved, %d skipped, %d failed\n", rep.From, rep.To, len(rep.Moved), len(rep.Skipped), len(rep.Failed))
	fmt.Fprintln(tw, "RESULT\tRUN\tKIND\tDETAIL")
	for _, m := range rep.Moved {
		detail := "now " + string(m.To) + " (the engine did not take the cancel)"
		if m.Reached {
			detail = "now " + string(m.To) + " (canceled on the engine)"
		}
		fmt.Fprintf(tw, "moved\t%s\t%s\t%s\n", m.ID, m.Kind, detail)
	}
	for _, s := range rep.Skipped {
		fmt.Fprintf(tw, "skipped\t%s\t%s\t%s\n", s.ID, s.Kind, s.Reason)
	}
	for _, f := range rep.Failed {
		fmt.Fprintf(tw, "failed\t%s\t%s\t%s\n", f.ID, f.Kind, f.Error)
	}
	return tw.Flush()
}

type evacuationJSON struct {
	From    string             `json:"from"`
	To      string             `json:"to"`
	Results []evacuatedRunJSON `json:"results"`
}

type evacuatedRunJSON struct {
	Result  string `json:"result"` // moved, skipped or failed
	RunID   string `json:"run_id"`
	Kind    string `json:"kind"`
	NewRun  string `json:"new_run_id,omitempty"`
	Reached bool   `json:"canceled_on_engine,omitempty"`
	Detail  string `json:"detail,omitempty"`
}

func jsonEvacuation(rep router.Report) evacuationJSON {
	out := evacuationJSON{From: rep.From, To: rep.To, Results: []evacuatedRunJSON{}}
	for _, m := range rep.Moved {
		out.Results = append(out.Results, evacuatedRunJSON{Result: "moved", RunID: string(m.ID), Kind: string(m.Kind), NewRun: string(m.To), Reached: m.Reached})
	}
	for _, s := range rep.Skipped {
		out.Results = append(out.Results, evacuatedRunJSON{Result: "skipped", RunID: string(s.ID), Kind: string(s.Kind), Detail: s.Reason})
	}
	for _, f := range rep.Failed {
		out.Results = append(out.Results, evacuatedRunJSON{Result: "failed", RunID: string(f.ID), Kind: string(f.Kind), Detail: f.Error})
	}
	return out
}
