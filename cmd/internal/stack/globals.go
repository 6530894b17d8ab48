package stack

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/taskport/taskport/internal/tracing"
)

// Globals is read from the root command's persistent flags, falling back to
// the environment; only cmd reads the environment (libraries take explicit
// config).
type Globals struct {
	DatabaseURL string
	LogLevel    string
	// PoolSize bounds the business pool (and the migration's); the engine's
	// own pool is Config.EnginePoolSize. Both count against Postgres
	// max_connections: see the README's connection budget.
	PoolSize int
	// OTLPEndpoint is the OpenTelemetry collector spans are exported to
	// (OTLP/gRPC URL, e.g. http://collector:4317); empty: tracing off.
	OTLPEndpoint string
}

// Bind adds the persistent flags to root. Before any command runs, every
// flag it was not given falls back to the environment variable its help
// names (ApplyEnv), and the pool sizes are checked.
func (g *Globals) Bind(root *cobra.Command) {
	root.PersistentFlags().StringVar(&g.DatabaseURL, "database-url", EnvOr("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"),
		"Postgres URL for business tables and engine tables (env DATABASE_URL)")
	root.PersistentFlags().StringVar(&g.LogLevel, "log-level", EnvOr("LOG_LEVEL", "info"), "debug, info, warn or error (env LOG_LEVEL)")
	root.PersistentFlags().StringVar(&g.OTLPEndpoint, "otlp-endpoint", EnvOr("OTEL_EXPORTER_OTLP_ENDPOINT", ""),
		"OpenTelemetry collector to export traces to over OTLP/gRPC, e.g. http://collector:4317; empty: off (env OTEL_EXPORTER_OTLP_ENDPOINT)")
	root.PersistentFlags().IntVar(&g.PoolSize, "db-pool-size", defaultPoolSize,
		"connections of the business pool, also the migration's (env DB_POOL_SIZE; pool_max_conns in the URL wins)")
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		if err := ApplyEnv(cmd.Flags()); err != nil {
			return err
		}
		return checkPoolSizes(cmd.Flags())
	}
}

// checkPoolSizes refuses a pool size below 1. A command without an engine
// has no --engine-db-pool-size.
func checkPoolSizes(fs *pflag.FlagSet) error {
	for _, name := range []string{"db-pool-size", "engine-db-pool-size"} {
		f := fs.Lookup(name)
		if f == nil {
			continue
		}
		if n, err := strconv.Atoi(f.Value.String()); err != nil || n < 1 {
			return fmt.Errorf("--%s must be at least 1, got %s", name, f.Value)
		}
	}
	return nil
}

// BindLibraryRoot adds --library-root to fs.
func BindLibraryRoot(fs *pflag.FlagSet, into *string) {
	fs.StringVar(into, "library-root", EnvOr("LIBRARY_ROOT", "/library"), "absolute directory every plan's target must lie in (env LIBRARY_ROOT)")
}

// EnvOr is the environment variable key, or def when it is unset or empty:
// the default of a flag with an environment fallback.
func EnvOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// Logger is the process's logger at --log-level. A line logged with a
// context inside a span carries its trace_id and span_id.
func (g *Globals) Logger() (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(g.LogLevel)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	return slog.New(tracing.LogHandler(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))), nil
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
	if strings.TrimSpace(g.DatabaseURL) == "" {
		// pgx would fall back to libpq's defaults (PGHOST, the local
		// socket) and act on whatever database they name.
		return nil, errors.New("--database-url (env DATABASE_URL) is empty: name the database")
	}
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

// WithPool opens the business pool, runs fn with it and the logger, and
// closes the pool: all that a command needing only the database opens.
func (g *Globals) WithPool(ctx context.Context, fn func(*pgxpool.Pool, *slog.Logger) error) error {
	log, err := g.Logger()
	if err != nil {
		return err
	}
	pool, err := g.Pool(ctx, log, g.PoolSize)
	if err != nil {
		return err
	}
	defer pool.Close()
	return fn(pool, log)
}

func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparseable url)"
	}
	return u.Redacted()
}
