package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/taskport/taskport/admin"
	"github.com/taskport/taskport/cmd/internal/stack"
)

func newAdminCmd(g *stack.Globals) *cobra.Command {
	var (
		c    stack.Config
		auth stack.AdminAuth
		addr string
	)
	cmd := &cobra.Command{
		Use:   "admin",
		Short: "Serve /admin: plans and their business timeline, pending decisions, dead letters, runs on old versions",
		Long: "Serve /admin. Authentication is on by default: --auth token (tokens from `taskport admin token`) or " +
			"--auth proxy (a user header from oauth2-proxy, believed only from the proxy's own addresses, --auth-proxy-cidrs), " +
			"each with --public-origin, the only host it answers to. Without --auth the admin serves a loopback address only " +
			"and answers to loopback names on its port, unless --insecure-no-auth.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// Checked before any connection: a refused configuration
			// fails at once.
			if err := stack.CheckListenAddr("--addr", addr); err != nil {
				return err
			}
			access, err := auth.Resolve(addr)
			if err != nil {
				return err
			}
			return stack.With(cmd, g, &c, func(s *stack.Stack) error { return s.RunAdmin(cmd.Context(), addr, access) })
		},
	}
	c.BindAdmin(cmd.Flags())
	auth.Bind(cmd.Flags())
	cmd.Flags().StringVar(&addr, "addr", stack.EnvOr("ADMIN_ADDR", ":8080"), "listen address (env ADMIN_ADDR)")
	cmd.AddCommand(newAdminTokenCmd())
	return cmd
}

// newAdminTokenCmd creates a token: the token goes to stdout once, and
// only its hash to the token file.
func newAdminTokenCmd() *cobra.Command {
	var user, role, file string
	cmd := &cobra.Command{
		Use:   "token",
		Short: "Create an admin token: prints the token, and appends its hashed line to --file (or prints the line to stderr)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			r, err := admin.ParseRole(role)
			if err != nil {
				return usageError{Err: fmt.Errorf("--role: %w", err)}
			}
			token, line, err := admin.NewToken(user, r)
			if err != nil {
				return usageError{Err: fmt.Errorf("--user: %w", err)}
			}
			if file == "" {
				fmt.Fprintln(cmd.ErrOrStderr(), line)
			} else if err := appendLine(file, line); err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), token)
			return nil
		},
	}
	cmd.Flags().StringVar(&user, "user", "", "who the token authenticates (recorded on what they do)")
	cmd.Flags().StringVar(&role, "role", "viewer", "viewer or operator")
	cmd.Flags().StringVar(&file, "file", "", "token file to append the hashed line to (created 0600)")
	_ = cmd.MarkFlagRequired("user")
	return cmd
}

func appendLine(path, line string) (err error) {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("token file: %w", err)
	}
	defer func() { err = errors.Join(err, f.Close()) }()
	if _, err := fmt.Fprintln(f, line); err != nil {
		return fmt.Errorf("token file: %w", err)
	}
	return nil
}
