package runscmd_test

import (
	"context"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/taskport/taskport/leaseadapter"
	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/runscmd"
)

// A team's own binary mounts the runs commands for its kinds: `shopctl
// runs list --status failed`, `shopctl runs retry <run>`, ... Each command
// opens the engine on the binary's registry, which holds the kinds'
// definitions (what a retry checks its input against) and none of their
// activities: the commands run nothing.
func ExampleNew() {
	var databaseURL string
	root := &cobra.Command{Use: "shopctl", SilenceUsage: true, SilenceErrors: true}
	root.PersistentFlags().StringVar(&databaseURL, "database-url", os.Getenv("DATABASE_URL"), "the shop's database (env DATABASE_URL)")
	root.AddCommand(runscmd.New(runscmd.Config{
		Open: func(ctx context.Context) (runscmd.Client, error) {
			reg := port.NewRegistry()
			if err := reg.Register(invoiceKind); err != nil {
				return runscmd.Client{}, err
			}
			pool, err := pgxpool.New(ctx, databaseURL) // the flags are parsed by now
			if err != nil {
				return runscmd.Client{}, err
			}
			eng, err := leaseadapter.New(pool, reg, leaseadapter.Config{})
			if err != nil {
				pool.Close()
				return runscmd.Client{}, err
			}
			return runscmd.Client{Engine: eng, Close: pool.Close}, nil
		},
	}))
	runscmd.RefuseUsage(root)
	if err := root.ExecuteContext(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "shopctl:", err)
		os.Exit(runscmd.ExitCode(err))
	}
}
