package main

import (
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/taskport/taskport/cmd/internal/stack"
	"github.com/taskport/taskport/migrations"
)

func newMigrateCmd(g *stack.Globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Apply, roll back or list the schema migrations: the engine set (both engines' tables, schema taskport) and the media set (business, ledger, outbox)",
	}
	// withMigrator opens the database, runs fn on a migrator over it and
	// closes both.
	withMigrator := func(cmd *cobra.Command, fn func(*migrations.Migrator) error) error {
		return g.WithMigrationPool(cmd.Context(), func(pool *pgxpool.Pool, log *slog.Logger) error {
			// goose logs every statement it runs: only at --log-level debug.
			var steps *slog.Logger
			if log.Enabled(cmd.Context(), slog.LevelDebug) {
				steps = log
			}
			m, err := migrations.New(pool, steps)
			if err != nil {
				return err
			}
			defer m.Close()
			return fn(m)
		})
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "up",
		Short: "Apply every pending migration",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withMigrator(cmd, func(m *migrations.Migrator) error {
				applied, err := m.Up(cmd.Context())
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "applied %d migration(s): %v\n", len(applied), applied)
				return nil
			})
		},
	})
	var (
		to     int64
		set    string
		asJSON bool
	)
	down := &cobra.Command{
		Use:   "down",
		Short: "Roll back every migration of --set above --to (required; --to 0: the whole set, its tables and their rows)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if to < 0 {
				return usageError{Err: fmt.Errorf("--to must not be negative, got %d", to)}
			}
			if set != migrations.SetEngine && set != migrations.SetMedia {
				return usageError{Err: fmt.Errorf("--set must be %s or %s, got %q", migrations.SetEngine, migrations.SetMedia, set)}
			}
			// A version past the set's last would roll back nothing, which
			// reads as done: a typo, refused before anything connects.
			if last := migrations.Latest(set); to > last {
				return usageError{Err: fmt.Errorf("--to must be at most %d, the last migration of the %s set, got %d", last, set, to)}
			}
			return withMigrator(cmd, func(m *migrations.Migrator) error {
				rolled, err := m.DownTo(cmd.Context(), set, to)
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "rolled back %d migration(s): %v\n", len(rolled), rolled)
				return nil
			})
		},
	}
	// --to has no default: a bare "migrate down" dropped the whole media
	// set (plans, ledger, outbox and their rows) without asking.
	down.Flags().Int64Var(&to, "to", 0, "version to roll back to (0: the whole set)")
	_ = down.MarkFlagRequired("to") // the flag exists: cannot fail
	down.Flags().StringVar(&set, "set", migrations.SetMedia, "the migration set to roll back: media or engine (roll back media before engine)")
	cmd.AddCommand(down)
	status := &cobra.Command{
		Use:   "status",
		Short: "List every migration and whether it is applied",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withMigrator(cmd, func(m *migrations.Migrator) error {
				st, err := m.Status(cmd.Context())
				if err != nil {
					return err
				}
				if asJSON {
					return writeJSON(cmd.OutOrStdout(), jsonMigrations(st))
				}
				for _, s := range st {
					state := "pending"
					if s.Applied {
						state = "applied"
					}
					fmt.Fprintf(cmd.OutOrStdout(), "%-7s %05d  %-8s %s\n", s.Set, s.Version, state, s.Name)
				}
				return nil
			})
		},
	}
	bindJSON(status, &asJSON)
	cmd.AddCommand(status)
	return cmd
}
