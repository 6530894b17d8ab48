package main

import (
	"context"
	"io"
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/taskport/taskport/acquisition"
	"github.com/taskport/taskport/cmd/internal/stack"
	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/runscmd"
)

// openClient opens the engine c chooses as a client (no worker), with the
// process logger. Close the client.
func openClient(ctx context.Context, g *stack.Globals, c *stack.Config) (*stack.Client, *slog.Logger, error) {
	if err := c.SecretsFromEnv(); err != nil {
		return nil, nil, err
	}
	log, err := g.Logger()
	if err != nil {
		return nil, nil, err
	}
	cl, err := stack.OpenClient(ctx, g, *c, log)
	if err != nil {
		return nil, nil, err
	}
	return cl, log, nil
}

// withClientOpenedIn runs fn with the client opened under ctx (which may
// bound the dial) and the process logger, and closes the client.
func withClientOpenedIn(ctx context.Context, g *stack.Globals, c *stack.Config, fn func(*stack.Client, *slog.Logger) error) error {
	cl, log, err := openClient(ctx, g, c)
	if err != nil {
		return err
	}
	defer cl.Close()
	return fn(cl, log)
}

// newRunsCmd is runscmd's runs command on the engine the flags choose
// (stack.Config.BindEngine, with their environment fallbacks), with the
// media application's one rule on retries: a run that opened a pending
// decision is retried through the decision.
func newRunsCmd(g *stack.Globals) *cobra.Command {
	var c stack.Config
	cmd := runscmd.New(runscmd.Config{Open: func(ctx context.Context) (runscmd.Client, error) {
		cl, log, err := openClient(ctx, g, &c)
		if err != nil {
			return runscmd.Client{}, err
		}
		return runscmd.Client{Engine: cl, Log: log, Close: cl.Close, CheckRetry: func(ctx context.Context, id port.RunID) error {
			return acquisition.CheckRunRetry(ctx, cl.Pool(), id)
		}}, nil
	}})
	cmd.Short = "List, inspect, cancel, retry and signal runs on the chosen engine " +
		"(a client of the engine: needs the database, and the Temporal frontend for --engine temporal; runs no worker)"
	if retry, _, err := cmd.Find([]string{"retry"}); err == nil {
		retry.Short += ". A run that opened a pending decision is retried through the decision (taskport decision resolve)"
	}
	c.BindEngine(cmd.PersistentFlags())
	return cmd
}

// The --json convention and the default actor, with the refusal of an
// --as that names no one, are runscmd's, which the runs commands keep:
// every command of the CLI takes them from there
// (TestEveryReadCommandTakesJSON, TestUsageErrorsExit2).
const jsonFlag = runscmd.JSONFlag

func bindJSON(cmd *cobra.Command, into *bool) { runscmd.BindJSON(cmd, into) }
func writeJSON(w io.Writer, v any) error      { return runscmd.WriteJSON(w, v) }
func osUser() string                          { return runscmd.DefaultActor() }
func checkActor(as string) error              { return runscmd.CheckActor(as) }
