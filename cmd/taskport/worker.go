package main

import (
	"github.com/spf13/cobra"

	"github.com/taskport/taskport/cmd/internal/stack"
)

func newWorkerCmd(g *stack.Globals) *cobra.Command {
	var (
		c           stack.Config
		metricsAddr string
		dispatch    bool
	)
	cmd := &cobra.Command{
		Use:   "worker",
		Short: "Run steps on the chosen engine, and the outbox dispatcher",
		Long: "Runs the task kinds' steps on the chosen engine and, unless --dispatch=false, the outbox dispatcher " +
			"(several dispatchers at once are safe). Serves /metrics, /healthz and /readyz on --metrics-addr. " +
			"The schema must be migrated first (taskport migrate up): workers never migrate.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// Refused before anything connects, as --addr is.
			if err := stack.CheckListenAddr("--metrics-addr", metricsAddr); err != nil {
				return err
			}
			return stack.With(cmd, g, &c, func(s *stack.Stack) error { return s.RunWorker(cmd.Context(), c, metricsAddr, dispatch) })
		},
	}
	c.Bind(cmd.Flags())
	cmd.Flags().StringVar(&metricsAddr, "metrics-addr", stack.EnvOr("METRICS_ADDR", ":9090"), "address for /metrics, /healthz, /readyz (env METRICS_ADDR)")
	cmd.Flags().BoolVar(&dispatch, "dispatch", true, "also run the outbox dispatcher (env DISPATCH)")
	return cmd
}
