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
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
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

// versionTable is goose's record of the applied migrations.
const versionTable = "taskport_schema_migrations"

// Latest is the newest embedded migration: the schema version this binary
// needs.
func Latest() int64 {
	vs, err := embedded()
	if err != nil {
		panic(err) // the embedded names are checked by goose.NewProvider in every test
	}
	return vs[len(vs)-1]
}

func embedded() ([]int64, error) {
	entries, err := fs.ReadDir(FS(), ".")
	if err != nil {
		return nil, err
	}
	var out []int64
	for _, e := range entries {
		v, err := goose.NumericComponent(e.Name())
		if err != nil {
			return nil, fmt.Errorf("migration file %s: %w", e.Name(), err)
		}
		out = append(out, v)
	}
	slices.Sort(out)
	return out, nil
}

// BehindError: the database lacks a migration this binary needs. A
// database ahead of the binary is not an error: during a rolling upgrade
// the previous binary runs on the new schema.
type BehindError struct {
	// Applied is the highest version below which every migration is
	// applied (0: none); Need is Latest.
	Applied, Need int64
}

func (e *BehindError) Error() string {
	return fmt.Sprintf("database schema is at version %d, this binary needs version %d: run `taskport migrate up`", e.Applied, e.Need)
}

// Queryer is what CheckSchema reads through: a pool, a connection or a
// transaction.
type Queryer interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// versionsSQL lists the applied migrations; goose deletes a version's row
// when it rolls it back.
const versionsSQL = `SELECT coalesce(array_agg(version_id), '{}') FROM ` + versionTable + ` WHERE is_applied`

// CheckSchema returns a *BehindError when the database has not applied
// every migration this binary embeds. A database never migrated (no version
// table) is at version 0.
func CheckSchema(ctx context.Context, q Queryer) error {
	var applied []int64
	err := q.QueryRow(ctx, versionsSQL).Scan(&applied)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P01" { // undefined_table
		applied, err = nil, nil
	}
	if err != nil {
		return fmt.Errorf("read schema version: %w", err)
	}
	need, err := embedded()
	if err != nil {
		return err
	}
	done := make(map[int64]bool, len(applied))
	for _, v := range applied {
		done[v] = true
	}
	var at int64
	for _, v := range need {
		if !done[v] {
			return &BehindError{Applied: at, Need: need[len(need)-1]}
		}
		at = v
	}
	return nil
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
	opts := []goose.ProviderOption{goose.WithSessionLocker(locker), goose.WithTableName(versionTable)}
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
