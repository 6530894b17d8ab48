// Package pgtest gives each test its own migrated database on a real
// Postgres server, so tests can run in parallel and see only their own rows.
//
// The server is TEST_DATABASE_URL when set (CI sets it to the local server);
// otherwise a Postgres container started with testcontainers-go when Docker
// answers; otherwise the test fails with a message naming what is missing.
// Each database is created from a template that was migrated once (per
// migration checksum), which takes a few milliseconds instead of a full
// migration per test.
package pgtest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"

	"github.com/taskport/taskport/migrations"
)

// EnvURL names the variable that points the tests at a server.
const EnvURL = "TEST_DATABASE_URL"

var server struct {
	once sync.Once
	url  string
	err  error
}

// ServerURL returns the URL of the server tests use, starting a container
// if needed. The container (if any) lives until the test binary exits;
// testcontainers' reaper removes it.
func ServerURL(tb testing.TB) string {
	tb.Helper()
	u, err := Server()
	if err != nil {
		tb.Fatal(err)
	}
	return u
}

// Server is ServerURL for harnesses that run before any test (TestMain).
func Server() (string, error) {
	server.once.Do(func() {
		if u := os.Getenv(EnvURL); u != "" {
			server.url = u
			return
		}
		server.url, server.err = startContainer()
	})
	if server.err != nil {
		return "", fmt.Errorf("pgtest: no Postgres for the tests: %s is not set and testcontainers could not start one (%w). "+
			"Set %s=postgres://USER@HOST:PORT/DB?sslmode=disable or start Docker", EnvURL, server.err, EnvURL)
	}
	return server.url, nil
}

func startContainer() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := tcpostgres.Run(ctx, "postgres:16-alpine",
		tcpostgres.WithDatabase("test"), tcpostgres.WithUsername("postgres"), tcpostgres.WithPassword("postgres"),
		tcpostgres.BasicWaitStrategies())
	if err != nil {
		return "", fmt.Errorf("start postgres container: %w", err)
	}
	return c.ConnectionString(ctx, "sslmode=disable")
}

// WithDatabase returns url with its database name replaced.
func WithDatabase(rawURL, db string) (string, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", fmt.Errorf("parse database url: %w", err)
	}
	u.Path = "/" + db
	return u.String(), nil
}

// templateName is derived from the migration files, so a changed migration
// gets a fresh template instead of a stale one.
func templateName() (string, error) {
	h := sha256.New()
	err := fs.WalkDir(migrations.FS(), ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(migrations.FS(), path)
		if err != nil {
			return err
		}
		h.Write([]byte(path))
		h.Write(b)
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("hash migrations: %w", err)
	}
	return "tp_template_" + hex.EncodeToString(h.Sum(nil))[:16], nil
}

// lockKey serializes template creation across the test binaries that
// `go test ./...` runs in parallel.
const lockKey = 0x7461736b706f7274 // "taskport"

// NewDatabase creates a migrated database for tb and returns its URL. It is
// dropped when tb ends.
func NewDatabase(tb testing.TB) string {
	tb.Helper()
	tmpl, err := templateName()
	if err != nil {
		tb.Fatal(err)
	}
	return createDatabase(tb, "tp_", func(ctx context.Context, admin *pgx.Conn, base, name string) error {
		if _, err := admin.Exec(ctx, "SELECT pg_advisory_lock($1)", lockKey); err != nil {
			return fmt.Errorf("lock: %w", err)
		}
		defer admin.Exec(context.Background(), "SELECT pg_advisory_unlock($1)", lockKey) //nolint:errcheck // the session ends right after
		if err := ensureTemplate(ctx, admin, base, tmpl); err != nil {
			return err
		}
		_, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()+" TEMPLATE "+pgx.Identifier{tmpl}.Sanitize())
		return err
	})
}

// NewEmptyDatabase creates an unmigrated database (for migration tests),
// dropped when tb ends.
func NewEmptyDatabase(tb testing.TB) string {
	tb.Helper()
	return createDatabase(tb, "tp_empty_", func(ctx context.Context, admin *pgx.Conn, _, name string) error {
		_, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
		return err
	})
}

// createDatabase runs create on an admin connection and drops the database
// when tb ends.
func createDatabase(tb testing.TB, prefix string, create func(ctx context.Context, admin *pgx.Conn, base, name string) error) string {
	tb.Helper()
	base := ServerURL(tb)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		tb.Fatalf("pgtest: connect to %s: %v", redact(base), err)
	}
	defer admin.Close(context.Background())
	name := fmt.Sprintf("%s%s_%s", prefix, sanitize(tb.Name()), strings.ToLower(rand.Text()[:10]))
	if err := create(ctx, admin, base, name); err != nil {
		tb.Fatalf("pgtest: create database %s: %v", name, err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := DropDatabase(ctx, base, name); err != nil {
			tb.Errorf("pgtest: %v", err)
		}
	})
	u, err := WithDatabase(base, name)
	if err != nil {
		tb.Fatal(err)
	}
	return u
}

// DropDatabase drops the database name on the server at base, closing its
// connections.
func DropDatabase(ctx context.Context, base, name string) error {
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		return fmt.Errorf("drop %s: %w", name, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop %s: %w", name, err)
	}
	return nil
}

func ensureTemplate(ctx context.Context, admin *pgx.Conn, base, tmpl string) error {
	var exists bool
	if err := admin.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", tmpl).Scan(&exists); err != nil {
		return fmt.Errorf("look up template: %w", err)
	}
	if exists {
		return nil
	}
	building := tmpl + "_building"
	if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{building}.Sanitize()+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop half-built template: %w", err)
	}
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{building}.Sanitize()); err != nil {
		return fmt.Errorf("create template: %w", err)
	}
	u, err := WithDatabase(base, building)
	if err != nil {
		return err
	}
	pool, err := pgxpool.New(ctx, u)
	if err != nil {
		return fmt.Errorf("open template: %w", err)
	}
	err = migrations.Up(ctx, pool)
	pool.Close()
	if err != nil {
		return fmt.Errorf("migrate template: %w", err)
	}
	// Renaming only after a complete migration means a crash never leaves a
	// half-migrated template under the final name.
	if _, err := admin.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{building}.Sanitize()+" RENAME TO "+pgx.Identifier{tmpl}.Sanitize()); err != nil {
		return fmt.Errorf("publish template: %w", err)
	}
	return nil
}

// NewPool returns a pool on a fresh migrated database, closed when tb ends.
func NewPool(tb testing.TB) *pgxpool.Pool {
	tb.Helper()
	return Connect(tb, NewDatabase(tb))
}

// NewEnginePool returns a pool on a fresh database that holds the engine's
// tables alone, in schema (migrations.UpEngine): what a library user has.
// No taskport schema is there unless schema is "", so a statement that
// still names the default layout fails.
func NewEnginePool(tb testing.TB, schema string) *pgxpool.Pool {
	tb.Helper()
	pool := Connect(tb, NewEmptyDatabase(tb))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := migrations.UpEngine(ctx, pool, schema); err != nil {
		tb.Fatalf("pgtest: migrate the engine into %q: %v", schema, err)
	}
	return pool
}

// Connect opens a pool on url, closed when tb ends.
func Connect(tb testing.TB, url string) *pgxpool.Pool {
	tb.Helper()
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		tb.Fatalf("pgtest: open pool: %v", err)
	}
	tb.Cleanup(pool.Close)
	return pool
}

// UntypedModes are pgx's query exec modes that send no parameter types,
// which every taskport constructor over a pool refuses
// (dbtx.CheckQueryExecMode).
var UntypedModes = []pgx.QueryExecMode{pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol}

// WithExecMode returns a pool like pool in query exec mode m, closed when
// tb ends; it connects when first used.
func WithExecMode(tb testing.TB, pool *pgxpool.Pool, m pgx.QueryExecMode) *pgxpool.Pool {
	tb.Helper()
	cfg := pool.Config().Copy()
	cfg.ConnConfig.DefaultQueryExecMode = m
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		tb.Fatalf("pgtest: open pool: %v", err)
	}
	tb.Cleanup(p.Close)
	return p
}

func sanitize(s string) string {
	s = strings.ToLower(s)
	var b strings.Builder
	for _, r := range s {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	out := b.String()
	if len(out) > 30 {
		out = out[len(out)-30:]
	}
	return out
}

func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparseable url)"
	}
	return u.Redacted()
}
