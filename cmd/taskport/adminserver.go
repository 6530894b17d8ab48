package main

import (
	"log/slog"

	"github.com/spf13/cobra"
)

func newAdminCmd(g *globalConfig) *cobra.Command {
	var (
		c    stackConfig
		addr string
	)
	cmd := &cobra.Command{
		Use:   "admin",
		Short: "Serve /admin: plans and their business timeline, pending decisions, dead letters, runs on old versions",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withStack(cmd, g, &c, func(s *stack) error {
				bound, served, err := s.serve(cmd.Context(), addr)
				if err != nil {
					return err
				}
				s.log.Info("admin serving", slog.String("url", "http://"+bound+"/admin"))
				select {
				case <-cmd.Context().Done():
					return nil
				case err := <-served:
					return err
				}
			})
		},
	}
	c.bind(cmd.Flags())
	cmd.Flags().StringVar(&addr, "addr", envOr("ADMIN_ADDR", ":8080"), "listen address (env ADMIN_ADDR)")
	return cmd
}
