package main

import (
	"github.com/spf13/cobra"

	"github.com/taskport/taskport/cmd/internal/stack"
)

func newAdminCmd(g *stack.Globals) *cobra.Command {
	var (
		c    stack.Config
		addr string
	)
	cmd := &cobra.Command{
		Use:   "admin",
		Short: "Serve /admin: plans and their business timeline, pending decisions, dead letters, runs on old versions",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return stack.With(cmd, g, &c, func(s *stack.Stack) error { return s.RunAdmin(cmd.Context(), addr) })
		},
	}
	c.Bind(cmd.Flags())
	cmd.Flags().StringVar(&addr, "addr", stack.EnvOr("ADMIN_ADDR", ":8080"), "listen address (env ADMIN_ADDR)")
	return cmd
}
