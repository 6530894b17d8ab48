package stack

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Globals is read from the root command's persistent flags, falling back to
// the environment; only cmd reads the environment (libraries take explicit
// config).
type Globals struct {
	DatabaseURL string
	LogLevel    string
	// PoolSize bounds the business pool (and the migration's);
	// EnginePoolSize the engine's own pool (ADR 2.8). Both count against
	// Postgres max_connections: see the README's connection budget.
	PoolSize       int
	EnginePoolSize int
}

// Bind adds the persistent flags to root, and applies DB_POOL_SIZE and
// ENGINE_DB_POOL_SIZE before any command runs.
func (g *Globals) Bind(root *cobra.Command) {
	root.PersistentFlags().StringVar(&g.DatabaseURL, "database-url", EnvOr("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"),
		"Postgres URL for business tables and engine tables (env DATABASE_URL)")
	root.PersistentFlags().StringVar(&g.LogLevel, "log-level", EnvOr("LOG_LEVEL", "info"), "debug, info, warn or error (env LOG_LEVEL)")
	root.PersistentFlags().IntVar(&g.PoolSize, "db-pool-size", defaultPoolSize,
		"connections of the business pool, also the migration's (env DB_POOL_SIZE; pool_max_conns in the URL wins)")
	root.PersistentFlags().IntVar(&g.EnginePoolSize, "engine-db-pool-size", defaultPoolSize,
		"connections of the engine's own pool (env ENGINE_DB_POOL_SIZE; pool_max_conns in the URL wins)")
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error { return g.poolSizesFromEnv(cmd.Flags()) }
}

// poolSizesFromEnv applies DB_POOL_SIZE and ENGINE_DB_POOL_SIZE to the
// pool-size flags not given on the command line, and checks both.
func (g *Globals) poolSizesFromEnv(fs *pflag.FlagSet) error {
	for _, s := range []struct {
		flag, env string
		into      *int
	}{{"db-pool-size", "DB_POOL_SIZE", &g.PoolSize}, {"engine-db-pool-size", "ENGINE_DB_POOL_SIZE", &g.EnginePoolSize}} {
		if v := os.Getenv(s.env); v != "" && !fs.Changed(s.flag) {
			n, err := strconv.Atoi(v)
			if err != nil {
				return fmt.Errorf("%s: %q is not a number", s.env, v)
			}
			*s.into = n
		}
		if *s.into < 1 {
			return fmt.Errorf("--%s must be at least 1, got %d", s.flag, *s.into)
		}
	}
	return nil
}

// EnvOr is the environment variable key, or def when it is unset or empty:
// the default of a flag with an environment fallback.
func EnvOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// Logger is the process's logger at --log-level.
func (g *Globals) Logger() (*slog.Logger, error) {
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

// Pool opens a pool of size connections (defaultPoolSize when size is 0;
// pool_max_conns in the URL wins) and checks the connection, logging the
// URL with its password masked.
func (g *Globals) Pool(ctx context.Context, log *slog.Logger, size int) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(g.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("database url: %w", err)
	}
	if !strings.Contains(g.DatabaseURL, "pool_max_conns") {
		cfg.MaxConns = int32(cmp.Or(size, defaultPoolSize))
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
