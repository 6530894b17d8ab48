package stack

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/taskport/taskport/internal/dbtx"
	"github.com/taskport/taskport/internal/tracing"
	"github.com/taskport/taskport/runscmd"
)

// Globals is read from the root command's persistent flags, falling back to
// the environment; only cmd reads the environment (libraries take explicit
// config).
type Globals struct {
	DatabaseURL string
	LogLevel    string
	// PoolSize bounds the business pool (and the migration's); the engine's
	// own pool is Config.EnginePoolSize. Both count against Postgres
	// max_connections: see docs/deploy.md's connection budget.
	PoolSize int
	// OTLPEndpoint is the OpenTelemetry collector spans are exported to
	// (OTLP/gRPC URL, e.g. http://collector:4317); empty: tracing off.
	OTLPEndpoint string
	// Timeouts are set on every connection of every pool Pool opens
	// (docs/operations.md, "Postgres timeouts"). The zero value sets none.
	Timeouts Timeouts
}

// Timeouts are Postgres session settings; a zero field is left to the
// server's (or role's) setting.
type Timeouts struct {
	// Lock is lock_timeout: the longest a statement waits for a lock, so a
	// session stalled while holding a plan's row lock fails its waiters
	// instead of hanging them. Flag default defaultLockTimeout.
	Lock time.Duration
	// IdleInTransaction is idle_in_transaction_session_timeout: a session
	// idle this long inside a transaction is ended, releasing its locks.
	// Flag default defaultIdleInTransactionTimeout.
	IdleInTransaction time.Duration
	// Statement is statement_timeout: the longest one statement runs.
	// Flag default defaultStatementTimeout.
	Statement time.Duration
}

// The flags' defaults. taskport's transactions are short (a plan change
// with its outbox rows, a claim, a batch of at most a few thousand rows),
// so these bounds sit far above any legitimate wait or statement and only
// stop what is stuck: a lock wait of 10 s is a stalled holder, not load.
const (
	defaultLockTimeout              = 10 * time.Second
	defaultIdleInTransactionTimeout = time.Minute
	defaultStatementTimeout         = 2 * time.Minute
)

// forMigrations keeps only the idle bound: a migration may rewrite a large
// table or wait for running transactions (CREATE INDEX CONCURRENTLY does),
// and failing it half-way serves no one.
func (t Timeouts) forMigrations() Timeouts {
	return Timeouts{IdleInTransaction: t.IdleInTransaction, Lock: disabled, Statement: disabled}
}

// disabled, in a Timeouts field, writes 0 (Postgres: no limit) to the
// session, over the URL's and the role's own setting.
const disabled time.Duration = -1

// apply sets t's runtime parameters, in milliseconds (Postgres's unit for a
// bare number). A positive bound the URL already sets is left as the URL
// says, like pool_max_conns.
func (t Timeouts) apply(params map[string]string) {
	for name, d := range map[string]time.Duration{
		"lock_timeout": t.Lock, "idle_in_transaction_session_timeout": t.IdleInTransaction, "statement_timeout": t.Statement,
	} {
		switch _, set := params[name]; {
		case d == disabled:
			params[name] = "0"
		case d > 0 && !set:
			params[name] = strconv.FormatInt(d.Milliseconds(), 10)
		}
	}
}

// Bind adds the persistent flags to root. Before any command runs, every
// flag it was not given falls back to the environment variable its help
// names (ApplyEnv), and the pool sizes are checked.
func (g *Globals) Bind(root *cobra.Command) {
	root.PersistentFlags().StringVar(&g.DatabaseURL, "database-url", EnvOr("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"),
		"Postgres URL for business tables and engine tables; each connection attempt gives up after its connect_timeout, 10s when it sets none (env DATABASE_URL)")
	root.PersistentFlags().StringVar(&g.LogLevel, "log-level", EnvOr("LOG_LEVEL", "info"), "debug, info, warn or error (env LOG_LEVEL)")
	root.PersistentFlags().StringVar(&g.OTLPEndpoint, "otlp-endpoint", EnvOr("OTEL_EXPORTER_OTLP_ENDPOINT", ""),
		"OpenTelemetry collector to export traces to over OTLP/gRPC, e.g. http://collector:4317; empty: off (env OTEL_EXPORTER_OTLP_ENDPOINT)")
	root.PersistentFlags().IntVar(&g.PoolSize, "db-pool-size", defaultPoolSize,
		"connections of the business pool, also the migration's (env DB_POOL_SIZE; pool_max_conns in the URL wins)")
	pf := root.PersistentFlags()
	pf.DurationVar(&g.Timeouts.Lock, "db-lock-timeout", defaultLockTimeout,
		"Postgres lock_timeout of every pool's sessions; 0: the server's setting (env DB_LOCK_TIMEOUT; the URL's own setting wins)")
	pf.DurationVar(&g.Timeouts.IdleInTransaction, "db-idle-in-transaction-timeout", defaultIdleInTransactionTimeout,
		"Postgres idle_in_transaction_session_timeout of every pool's sessions; 0: the server's setting "+
			"(env DB_IDLE_IN_TRANSACTION_TIMEOUT; the URL's own setting wins)")
	pf.DurationVar(&g.Timeouts.Statement, "db-statement-timeout", defaultStatementTimeout,
		"Postgres statement_timeout of every pool's sessions except the migration's; 0: the server's setting "+
			"(env DB_STATEMENT_TIMEOUT; the URL's own setting wins)")
	// Every refusal here is of a flag's or a variable's value, decided
	// before anything connects: a usage error (exit 2).
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		if err := ApplyEnv(cmd.Flags()); err != nil {
			return err
		}
		return usage(errors.Join(checkPoolSizes(cmd.Flags()), checkTimeouts(cmd.Flags()), checkLogLevel(g.LogLevel)))
	}
}

// maxTimeout is the largest value Postgres takes for the timeouts: they
// are int4 milliseconds, INT_MAX at most.
const maxTimeout = math.MaxInt32 * time.Millisecond

// checkTimeouts refuses a timeout Postgres would not apply as given: a
// negative one; a positive one under a millisecond, which apply would
// truncate to 0, no limit at all; and one above maxTimeout, which the
// server would refuse at connect.
func checkTimeouts(fs *pflag.FlagSet) error {
	var errs []error
	for _, name := range []string{"db-lock-timeout", "db-idle-in-transaction-timeout", "db-statement-timeout"} {
		f := fs.Lookup(name)
		if f == nil {
			continue
		}
		d, err := time.ParseDuration(f.Value.String())
		switch {
		case err != nil:
		case d < 0:
			errs = append(errs, fmt.Errorf("--%s must not be negative, got %s", name, f.Value))
		case d > 0 && d < time.Millisecond:
			errs = append(errs, fmt.Errorf("--%s must be 0 (the server's setting) or at least 1ms (Postgres counts milliseconds), got %s", name, f.Value))
		case d > maxTimeout:
			errs = append(errs, fmt.Errorf("--%s must be at most %s (Postgres's limit, %d ms), got %s", name, maxTimeout, math.MaxInt32, f.Value))
		}
	}
	return errors.Join(errs...)
}

// checkLogLevel refuses a --log-level that Logger could not use.
func checkLogLevel(level string) error {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	return nil
}

// usage is err, when not nil, as a command line the CLI refuses (exit 2):
// the one way this package marks a refused flag or variable value.
func usage(err error) error {
	if err == nil || errors.As(err, new(runscmd.UsageError)) {
		return err
	}
	return runscmd.UsageError{Err: err}
}

// maxPoolSize is the most connections one Postgres server accepts
// (MAX_BACKENDS, 2^18-1): a larger pool is a typo, and pgxpool's int32
// size would wrap a far larger one round to a small pool.
const maxPoolSize = 1<<18 - 1

// checkPoolSizes refuses a pool size outside [1, maxPoolSize]. A command
// without an engine has no --engine-db-pool-size.
func checkPoolSizes(fs *pflag.FlagSet) error {
	for _, name := range []string{"db-pool-size", "engine-db-pool-size"} {
		f := fs.Lookup(name)
		if f == nil {
			continue
		}
		if n, err := strconv.Atoi(f.Value.String()); err != nil || n < 1 || n > maxPoolSize {
			return fmt.Errorf("--%s must lie in [1, %d], got %s", name, maxPoolSize, f.Value)
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
// pool_max_conns in the URL wins) with g.Timeouts and checks the
// connection, logging the URL with its password masked.
func (g *Globals) Pool(ctx context.Context, log *slog.Logger, size int) (*pgxpool.Pool, error) {
	return g.pool(ctx, log, size, g.Timeouts)
}

// MigrationPool is Pool for applying migrations: no statement_timeout and
// no lock_timeout, whatever the flags or the URL say.
func (g *Globals) MigrationPool(ctx context.Context, log *slog.Logger, size int) (*pgxpool.Pool, error) {
	return g.pool(ctx, log, size, g.Timeouts.forMigrations())
}

func (g *Globals) pool(ctx context.Context, log *slog.Logger, size int, t Timeouts) (*pgxpool.Pool, error) {
	// The URL is refused before anything connects, as the flag's (or the
	// variable's) value: a usage error.
	if strings.TrimSpace(g.DatabaseURL) == "" {
		// pgx would fall back to libpq's defaults (PGHOST, the local
		// socket) and act on whatever database they name.
		return nil, usage(errors.New("--database-url (env DATABASE_URL) is empty: name the database"))
	}
	cfg, err := pgxpool.ParseConfig(g.DatabaseURL)
	if err != nil {
		return nil, usage(fmt.Errorf("database url: %w", err))
	}
	if err := dbtx.CheckQueryExecMode(cfg.ConnConfig); err != nil {
		return nil, usage(fmt.Errorf("database url: %w", err))
	}
	if !strings.Contains(g.DatabaseURL, "pool_max_conns") {
		cfg.MaxConns = int32(cmp.Or(size, defaultPoolSize))
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		// A server that accepts the connection and never answers would
		// otherwise hold every command, and a worker's start, for ever.
		// connect_timeout in the URL overrides it.
		cfg.ConnConfig.ConnectTimeout = defaultConnectTimeout
	}
	t.apply(cfg.ConnConfig.RuntimeParams)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("database url: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect to %s: %w", database(cfg.ConnConfig), err)
	}
	log.Info("connected to postgres", slog.String("database", database(cfg.ConnConfig)))
	return pool, nil
}

// defaultConnectTimeout bounds each connection attempt to Postgres when the
// URL sets no connect_timeout.
const defaultConnectTimeout = 10 * time.Second

// database names the database c connects to, for logs and errors: host,
// port, user and database, and never the password, wherever the URL put it
// (user:password@, ?password=, or password= in the keyword form).
func database(c *pgx.ConnConfig) string {
	u := url.URL{Scheme: "postgres", User: url.User(c.User), Host: net.JoinHostPort(c.Host, strconv.Itoa(int(c.Port))), Path: "/" + c.Database}
	return u.String()
}

// WithPool opens the business pool, runs fn with it and the logger, and
// closes the pool: all that a command needing only the database opens.
func (g *Globals) WithPool(ctx context.Context, fn func(*pgxpool.Pool, *slog.Logger) error) error {
	return g.withPool(ctx, g.Timeouts, fn)
}

// WithMigrationPool is WithPool with MigrationPool's timeouts.
func (g *Globals) WithMigrationPool(ctx context.Context, fn func(*pgxpool.Pool, *slog.Logger) error) error {
	return g.withPool(ctx, g.Timeouts.forMigrations(), fn)
}

func (g *Globals) withPool(ctx context.Context, t Timeouts, fn func(*pgxpool.Pool, *slog.Logger) error) error {
	log, err := g.Logger()
	if err != nil {
		return err
	}
	pool, err := g.pool(ctx, log, g.PoolSize, t)
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
