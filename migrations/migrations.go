// Package migrations is the one migration flow for every table taskport
// owns: the shared run store, the business tables and ledger, and the lease
// engine's schema (ADR (a): engines never migrate themselves at start-up).
//
// Migrations are embedded, numbered SQL files with paired up/down sections,
// applied by goose under a Postgres session advisory lock so that several
// processes starting at once do not race.
package migrations

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

//go:embed sql/*.sql
var files embed.FS

// FS returns the embedded migration files (for checksums and tooling).
func FS() fs.FS {
	sub, err := fs.Sub(files, "sql")
	if err != nil {
		panic(err) // the embed pattern above guarantees the directory exists
	}
	return sub
}

// Migrator applies the embedded migrations to one database.
type Migrator struct {
	db       *sql.DB
	provider *goose.Provider
}

// New opens a migrator over pool. Close it when done; the pool stays open.
func New(pool *pgxpool.Pool, logger *slog.Logger) (*Migrator, error) {
	db := stdlib.OpenDBFromPool(pool)
	locker, err := lock.NewPostgresSessionLocker()
	if err != nil {
		return nil, fmt.Errorf("migration locker: %w", err)
	}
	opts := []goose.ProviderOption{goose.WithSessionLocker(locker), goose.WithTableName("taskport_schema_migrations")}
	if logger != nil {
		opts = append(opts, goose.WithSlog(logger), goose.WithVerbose(true))
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, FS(), opts...)
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("migration provider: %w", err)
	}
	return &Migrator{db: db, provider: p}, nil
}

// Close releases the migrator's database handle.
func (m *Migrator) Close() error { return m.db.Close() }

// Up applies every pending migration and returns the versions applied.
func (m *Migrator) Up(ctx context.Context) ([]int64, error) {
	res, err := m.provider.Up(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrate up: %w", err)
	}
	return versions(res), nil
}

// DownTo rolls back every migration above version (0 rolls back everything).
func (m *Migrator) DownTo(ctx context.Context, version int64) ([]int64, error) {
	res, err := m.provider.DownTo(ctx, version)
	if err != nil {
		return nil, fmt.Errorf("migrate down to %d: %w", version, err)
	}
	return versions(res), nil
}

// Status is one migration's state.
type Status struct {
	Version int64
	Name    string
	Applied bool
}

// Status lists every known migration and whether it is applied.
func (m *Migrator) Status(ctx context.Context) ([]Status, error) {
	st, err := m.provider.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("migration status: %w", err)
	}
	out := make([]Status, 0, len(st))
	for _, s := range st {
		out = append(out, Status{Version: s.Source.Version, Name: s.Source.Path, Applied: s.State == goose.StateApplied})
	}
	return out, nil
}

func versions(res []*goose.MigrationResult) []int64 {
	out := make([]int64, 0, len(res))
	for _, r := range res {
		out = append(out, r.Source.Version)
	}
	return out
}

// Up is a convenience for callers that only need to bring pool's database
// to the latest schema.
func Up(ctx context.Context, pool *pgxpool.Pool) error {
	m, err := New(pool, nil)
	if err != nil {
		return err
	}
	defer m.Close()
	_, err = m.Up(ctx)
	return err
}
