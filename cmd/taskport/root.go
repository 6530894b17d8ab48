package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"
)

// globalConfig is read from flags, falling back to the environment; only
// cmd reads the environment (libraries take explicit config).
type globalConfig struct {
	DatabaseURL string
	LogLevel    string
}

func newRootCmd() *cobra.Command {
	var g globalConfig
	root := &cobra.Command{
		Use:           "taskport",
		Version:       version,
		Short:         "Durable tasks for the media-acquisition backend, on Temporal or a Postgres lease table",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().StringVar(&g.DatabaseURL, "database-url", envOr("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"),
		"Postgres URL for business tables and engine tables (env DATABASE_URL)")
	root.PersistentFlags().StringVar(&g.LogLevel, "log-level", envOr("LOG_LEVEL", "info"), "debug, info, warn or error (env LOG_LEVEL)")
	root.AddCommand(newMigrateCmd(&g), newWorkerCmd(&g), newAdminCmd(&g), newRunCmd(&g), newPlanCmd(&g), newDecisionCmd(&g))
	return root
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func (g *globalConfig) logger() (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(g.LogLevel)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})), nil
}

// defaultPoolSize is the pool size when the URL sets no pool_max_conns.
// pgxpool's own default (the larger of 4 and the CPU count) starves a lease
// worker, whose group committers, claim loop, heartbeat and reaper each want
// a connection besides the application's own queries.
const defaultPoolSize = 20

// pool opens a pool and checks the connection, logging the URL with its
// password masked.
func (g *globalConfig) pool(ctx context.Context, log *slog.Logger) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(g.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("database url: %w", err)
	}
	if !strings.Contains(g.DatabaseURL, "pool_max_conns") {
		cfg.MaxConns = defaultPoolSize
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("database url: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect to %s: %w", redact(g.DatabaseURL), err)
	}
	log.Info("connected to postgres", slog.String("url", redact(g.DatabaseURL)))
	return pool, nil
}

func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparseable url)"
	}
	return u.Redacted()
}
