// Package migrations owns the schema of everything taskport stores, as
// migration sets applied by goose, each under a Postgres session advisory
// lock (several processes starting at once do not race) and with a version
// table of its own (design decision D-a: engines never migrate themselves
// at start-up).
//
//   - The engine set: the run store both engines share and the lease
//     engine's tables, in a schema the caller names (default "taskport"),
//     with no extension and nothing outside that schema. A library user
//     applies it alone: UpEngine, and CheckEngineSchema for readiness.
//   - The media set: the media application's business tables, ledger and
//     outbox, in the current schema (public), with pg_trgm.
//   - The legacy set (sql/): migrations 00001-00021, which earlier releases
//     applied to engine and media tables alike. It is frozen. The
//     application's flow (New, Up) applies it only to bring a database an
//     earlier release migrated up to 00021; the first migration of the
//     engine and media sets then adopts the tables it made instead of
//     creating them. On a new database those first migrations create the
//     same tables (TestBaselinesEqualTheLegacyMigrations).
//
// A new migration goes into the engine set (engine/, written against the
// default layout: "taskport." and "taskport_lease." are rewritten to the
// named schema) or the media set (media/), numbered from 00002.
package migrations

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/taskport/taskport/internal/dbtx"
)

//go:embed sql/*.sql
var legacyFiles embed.FS

//go:embed baseline/*.sql
var baselineFiles embed.FS

//go:embed engine media
var setFiles embed.FS

// DefaultSchema is the engine's schema unless the caller names another.
const DefaultSchema = dbtx.DefaultSchema

// The sets, by the name Status, BehindError and DownTo use.
const (
	SetEngine = "engine"
	SetMedia  = "media"
	SetLegacy = "legacy"
)

// legacyTable is goose's record of the legacy set (in the current schema).
const legacyTable = "taskport_schema_migrations"

// legacyLast is the legacy set's last migration: the engine and media sets
// begin where it ends.
const legacyLast = 21

// FS returns every embedded migration file (for checksums and tooling).
func FS() fs.FS { return embedded }

var embedded = mergedFS{legacyFiles, baselineFiles, setFiles}

// SetFS returns a set's SQL migration files: the legacy set's (sql/), or
// the engine or media set's after their baselines.
func SetFS(setName string) fs.FS {
	switch setName {
	case SetLegacy:
		return sub(legacyFiles, "sql")
	case SetEngine, SetMedia:
		return sub(setFiles, setName)
	}
	panic("migrations: no set " + setName)
}

func sub(fsys fs.FS, dir string) fs.FS {
	s, err := fs.Sub(fsys, dir)
	if err != nil {
		panic(err) // the embed patterns above guarantee the directories exist
	}
	return s
}

// mergedFS serves the embedded trees as one, for FS.
type mergedFS []embed.FS

func (m mergedFS) Open(name string) (fs.File, error) {
	for _, f := range m {
		if file, err := f.Open(name); err == nil {
			return file, nil
		}
	}
	return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
}

func (m mergedFS) ReadDir(name string) ([]fs.DirEntry, error) {
	var out []fs.DirEntry
	for _, f := range m {
		if es, err := f.ReadDir(name); err == nil {
			out = append(out, es...)
		}
	}
	if out == nil {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: fs.ErrNotExist}
	}
	return out, nil
}

// set is one migration set: its version table, its baseline (version 1, a
// Go migration that creates the tables or adopts the legacy set's) and its
// later SQL migrations.
type set struct {
	name     string
	table    string
	later    fs.FS
	baseline *goose.Migration
}

// engineSet is the engine set in schema, with later as its SQL migrations
// after the baseline (engine/, or a test's).
func engineSet(schema *dbtx.Schema, later fs.FS) set {
	up := readBaseline("engine.sql")
	down := readBaseline("engine_down.sql")
	return set{
		name:  SetEngine,
		table: schema.Name() + ".taskport_engine_migrations",
		later: renderedFS{later, schema},
		baseline: goose.NewGoMigration(1,
			&goose.GoFunc{RunTx: func(ctx context.Context, tx *sql.Tx) error {
				adopted, err := adopt(ctx, tx, schema.Name()+".run")
				if adopted || err != nil {
					return err
				}
				if schema.Lease() != schema.Name() {
					if _, err := tx.ExecContext(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{schema.Lease()}.Sanitize()); err != nil {
						return err
					}
				}
				_, err = tx.ExecContext(ctx, schema.SQL(up))
				return err
			}},
			&goose.GoFunc{RunTx: func(ctx context.Context, tx *sql.Tx) error {
				if _, err := tx.ExecContext(ctx, schema.SQL(down)); err != nil {
					return err
				}
				if schema.Lease() != schema.Name() {
					_, err := tx.ExecContext(ctx, "DROP SCHEMA "+pgx.Identifier{schema.Lease()}.Sanitize())
					return err
				}
				return nil
			}}),
	}
}

// mediaSet is the media application's set, in the current schema.
func mediaSet() set {
	up := readBaseline("media.sql")
	down := readBaseline("media_down.sql")
	return set{
		name:  SetMedia,
		table: "taskport_media_migrations",
		later: SetFS(SetMedia),
		baseline: goose.NewGoMigration(1,
			&goose.GoFunc{RunTx: func(ctx context.Context, tx *sql.Tx) error {
				adopted, err := adopt(ctx, tx, "plan")
				if adopted || err != nil {
					return err
				}
				_, err = tx.ExecContext(ctx, up)
				return err
			}},
			&goose.GoFunc{RunTx: func(ctx context.Context, tx *sql.Tx) error {
				_, err := tx.ExecContext(ctx, down)
				return err
			}}),
	}
}

func readBaseline(name string) string {
	b, err := baselineFiles.ReadFile("baseline/" + name)
	if err != nil {
		panic(err) // embedded above
	}
	return string(b)
}

// adopt tells whether a set's baseline finds its tables already made: table
// exists. They must be the legacy set's, complete; any other table of that
// name is not ours to build on.
func adopt(ctx context.Context, tx *sql.Tx, table string) (bool, error) {
	var exists bool
	if err := tx.QueryRowContext(ctx, `SELECT to_regclass($1) IS NOT NULL`, table).Scan(&exists); err != nil {
		return false, err
	}
	if !exists {
		return false, nil
	}
	at, err := legacyVersion(ctx, txQueryer{tx})
	if err != nil {
		return false, err
	}
	switch {
	case at == 0:
		return false, fmt.Errorf("table %s exists, and taskport's migrations did not create it: migrate the engine into a schema of its own (migrations.UpEngine with another schema)", table)
	case at < legacyLast:
		return false, fmt.Errorf("this database was migrated by an earlier taskport release to version %d: run that release's flow, `taskport migrate up` of this release, first", at)
	}
	return true, nil
}

// txQueryer is a *sql.Tx as a Queryer.
type txQueryer struct{ tx *sql.Tx }

func (q txQueryer) QueryRow(ctx context.Context, query string, args ...any) pgx.Row {
	return q.tx.QueryRowContext(ctx, query, args...)
}

// renderedFS is fsys with every file's "taskport." and "taskport_lease."
// naming schema.
type renderedFS struct {
	fsys   fs.FS
	schema *dbtx.Schema
}

func (r renderedFS) Open(name string) (fs.File, error) {
	f, err := r.fsys.Open(name)
	if err != nil || r.schema == nil {
		return f, err
	}
	st, err := f.Stat()
	if err != nil || st.IsDir() {
		return f, err
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, err
	}
	return &renderedFile{Reader: strings.NewReader(r.schema.SQL(string(b))), info: st}, nil
}

type renderedFile struct {
	*strings.Reader
	info fs.FileInfo
}

func (f *renderedFile) Stat() (fs.FileInfo, error) { return renderedInfo{f.info, f.Size()}, nil }
func (f *renderedFile) Close() error               { return nil }

type renderedInfo struct {
	fs.FileInfo
	size int64
}

func (i renderedInfo) Size() int64 { return i.size }

// Migrator applies migration sets to one database: the engine set alone
// (NewEngine) or the application's flow (New).
type Migrator struct {
	db     *sql.DB
	pool   *pgxpool.Pool
	schema *dbtx.Schema // the engine set's
	legacy *goose.Provider
	sets   []*provider
}

type provider struct {
	set
	*goose.Provider
}

// NewEngine opens a migrator of the engine set alone, into schema ("":
// DefaultSchema). Close it when done; the pool stays open. logger, when
// not nil, gets every statement goose runs.
func NewEngine(pool *pgxpool.Pool, schema string, logger *slog.Logger) (*Migrator, error) {
	s, err := dbtx.ParseSchema(schema)
	if err != nil {
		return nil, fmt.Errorf("migrations: %w", err)
	}
	return open(pool, s, logger, false, engineSet(s, SetFS(SetEngine)))
}

// New opens the application's migrator: the legacy set where an earlier
// release began it, then the engine set in DefaultSchema, then the media
// set.
func New(pool *pgxpool.Pool, logger *slog.Logger) (*Migrator, error) {
	return open(pool, nil, logger, true, engineSet(nil, SetFS(SetEngine)), mediaSet())
}

func open(pool *pgxpool.Pool, schema *dbtx.Schema, logger *slog.Logger, withLegacy bool, sets ...set) (*Migrator, error) {
	db := stdlib.OpenDBFromPool(pool)
	m := &Migrator{db: db, pool: pool, schema: schema}
	newProvider := func(fsys fs.FS, table string, more ...goose.ProviderOption) (*goose.Provider, error) {
		locker, err := lock.NewPostgresSessionLocker()
		if err != nil {
			return nil, fmt.Errorf("migration locker: %w", err)
		}
		opts := append([]goose.ProviderOption{goose.WithSessionLocker(locker), goose.WithTableName(table),
			goose.WithDisableGlobalRegistry(true)}, more...)
		if logger != nil {
			opts = append(opts, goose.WithSlog(logger), goose.WithVerbose(true))
		}
		return goose.NewProvider(goose.DialectPostgres, db, fsys, opts...)
	}
	var err error
	if withLegacy {
		if m.legacy, err = newProvider(SetFS(SetLegacy), legacyTable); err != nil {
			_ = db.Close()
			return nil, fmt.Errorf("legacy migrations: %w", err)
		}
	}
	for _, s := range sets {
		p, err := newProvider(s.later, s.table, goose.WithGoMigrations(s.baseline))
		if err != nil {
			_ = db.Close()
			return nil, fmt.Errorf("%s migrations: %w", s.name, err)
		}
		m.sets = append(m.sets, &provider{set: s, Provider: p})
	}
	return m, nil
}

// Close releases the migrator's database handle.
func (m *Migrator) Close() error { return m.db.Close() }

// Applied is one migration Up applied or DownTo rolled back.
type Applied struct {
	Set     string
	Version int64
}

func (a Applied) String() string { return fmt.Sprintf("%s %d", a.Set, a.Version) }

// Up applies every pending migration and returns those it applied, in
// order.
func (m *Migrator) Up(ctx context.Context) ([]Applied, error) {
	var out []Applied
	if m.legacy != nil {
		at, err := legacyVersion(ctx, m.pool)
		if err != nil {
			return nil, err
		}
		if at > 0 { // begun by an earlier release: finish it first
			res, err := m.legacy.Up(ctx)
			if err != nil {
				return nil, fmt.Errorf("migrate up (legacy set): %w", err)
			}
			out = append(out, applied(SetLegacy, res)...)
		}
	}
	if err := m.createSchema(ctx); err != nil {
		return nil, err
	}
	for _, p := range m.sets {
		res, err := p.Up(ctx)
		if err != nil {
			return nil, fmt.Errorf("migrate up (%s set): %w", p.name, err)
		}
		out = append(out, applied(p.name, res)...)
	}
	return out, nil
}

// createSchema makes the engine's schema, where its version table lives,
// before goose looks for that table. Concurrent CREATE SCHEMA IF NOT EXISTS
// can fail on the catalog's unique index, so it runs under a lock.
func (m *Migrator) createSchema(ctx context.Context) error {
	return dbtx.InTx(ctx, m.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('taskport.migrations.schema'))`); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{m.schema.Name()}.Sanitize())
		return err
	})
}

// DownTo rolls back every migration of the set above version (0 rolls back
// the whole set). The legacy set is never rolled back: its tables are the
// engine and media sets' now. The engine set is not rolled back below its
// baseline while this migrator's media set has a migration applied: the
// media application enqueues its runs into the engine's tables, so the
// media set goes first.
func (m *Migrator) DownTo(ctx context.Context, setName string, version int64) ([]Applied, error) {
	for _, p := range m.sets {
		if p.name != setName {
			continue
		}
		if sources := p.ListSources(); len(sources) > 0 && version > sources[len(sources)-1].Version {
			// goose rolls back nothing, and the caller would read that
			// as done: a version no migration of the set has is a typo.
			return nil, fmt.Errorf("migrate %s set down to %d: the set has no such migration (its last is %d)",
				setName, version, sources[len(sources)-1].Version)
		}
		if err := m.createSchema(ctx); err != nil {
			return nil, err
		}
		if err := m.mediaRolledBack(ctx, setName, version); err != nil {
			return nil, err
		}
		res, err := p.DownTo(ctx, version)
		if err != nil {
			return nil, fmt.Errorf("migrate %s set down to %d: %w", setName, version, err)
		}
		return applied(setName, res), nil
	}
	return nil, fmt.Errorf("no migration set %q here: %s", setName, strings.Join(m.setNames(), ", "))
}

// mediaRolledBack refuses a roll-back of the engine set below its baseline
// (version 0: its tables dropped) while the media set (when this migrator
// has it) has a migration applied. Rolling back a later engine migration
// keeps the tables the media set's runs live in.
func (m *Migrator) mediaRolledBack(ctx context.Context, setName string, version int64) error {
	if setName != SetEngine || version >= 1 {
		return nil
	}
	for _, p := range m.sets {
		if p.name != SetMedia {
			continue
		}
		v, err := p.GetDBVersion(ctx)
		if err != nil {
			return fmt.Errorf("read the media set's version: %w", err)
		}
		if v > 0 {
			return fmt.Errorf("the media set is at version %d and depends on the engine set: roll it back first (taskport migrate down --set media)", v)
		}
	}
	return nil
}

func (m *Migrator) setNames() []string {
	var out []string
	for _, p := range m.sets {
		out = append(out, p.name)
	}
	return out
}

// Status is one migration's state.
type Status struct {
	Set     string
	Version int64
	Name    string
	Applied bool
}

// Status lists every migration of the sets and whether it is applied; the
// legacy set's only where an earlier release began it.
func (m *Migrator) Status(ctx context.Context) ([]Status, error) {
	var out []Status
	add := func(name string, p *goose.Provider) error {
		st, err := p.Status(ctx)
		if err != nil {
			return fmt.Errorf("migration status (%s set): %w", name, err)
		}
		for _, s := range st {
			file := s.Source.Path
			if file == "" {
				file = "baseline"
			}
			out = append(out, Status{Set: name, Version: s.Source.Version, Name: file, Applied: s.State == goose.StateApplied})
		}
		return nil
	}
	if m.legacy != nil {
		at, err := legacyVersion(ctx, m.pool)
		if err != nil {
			return nil, err
		}
		if at > 0 {
			if err := add(SetLegacy, m.legacy); err != nil {
				return nil, err
			}
		}
	}
	var exists bool
	if err := m.pool.QueryRow(ctx, `SELECT to_regnamespace($1) IS NOT NULL`, m.schema.Name()).Scan(&exists); err != nil {
		return nil, fmt.Errorf("migration status: %w", err)
	}
	for _, p := range m.sets {
		if p.name == SetEngine && !exists {
			// goose would create its table in a schema that is not there.
			out = append(out, Status{Set: SetEngine, Version: 1, Name: "baseline"})
			for _, v := range laterVersions(p.later) {
				out = append(out, Status{Set: SetEngine, Version: v.version, Name: v.name})
			}
			continue
		}
		if err := add(p.name, p.Provider); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func applied(set string, res []*goose.MigrationResult) []Applied {
	out := make([]Applied, 0, len(res))
	for _, r := range res {
		out = append(out, Applied{Set: set, Version: r.Source.Version})
	}
	return out
}

type file struct {
	version int64
	name    string
}

// laterVersions lists a set's SQL migrations, by version.
func laterVersions(fsys fs.FS) []file {
	names, err := fs.Glob(fsys, "*.sql")
	if err != nil {
		panic(err) // a constant, valid pattern
	}
	var out []file
	for _, n := range names {
		v, err := goose.NumericComponent(n)
		if err != nil {
			panic(fmt.Sprintf("migration file %s: %v", n, err)) // goose.NewProvider refuses such a name first, in every migration test
		}
		out = append(out, file{v, n})
	}
	slices.SortFunc(out, func(a, b file) int { return int(a.version - b.version) })
	return out
}

// Latest is the newest version of a set this binary embeds.
func Latest(setName string) int64 {
	switch setName {
	case SetLegacy:
		return legacyLast
	case SetEngine, SetMedia:
		vs := laterVersions(SetFS(setName))
		if len(vs) == 0 {
			return 1
		}
		return vs[len(vs)-1].version
	}
	panic("migrations: no set " + setName)
}

// BehindError: the database lacks a migration this binary needs. A
// database ahead of the binary is not an error: during a rolling upgrade
// the previous binary runs on the new schema.
type BehindError struct {
	// Set is the set behind (SetEngine, SetMedia or SetLegacy).
	Set string
	// Applied is the highest version below which every migration of the
	// set is applied (0: none); Need is the set's Latest.
	Applied, Need int64
}

func (e *BehindError) Error() string {
	return fmt.Sprintf("database schema: the %s migrations are at version %d, this binary needs version %d: run `taskport migrate up` (a library: migrations.UpEngine)", e.Set, e.Applied, e.Need)
}

// Queryer is what the checks read through: a pool, a connection or a
// transaction.
type Queryer interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// CheckEngineSchema returns a *BehindError when the engine set in schema
// ("": DefaultSchema) lacks a migration this binary embeds.
func CheckEngineSchema(ctx context.Context, q Queryer, schema string) error {
	s, err := dbtx.ParseSchema(schema)
	if err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	return checkSet(ctx, q, SetEngine, s.Name()+".taskport_engine_migrations")
}

// CheckSchema is the application's check: the legacy set, where an earlier
// release began it, is complete, and so are the engine set in
// DefaultSchema and the media set.
func CheckSchema(ctx context.Context, q Queryer) error {
	at, err := legacyVersion(ctx, q)
	if err != nil {
		return err
	}
	if at > 0 && at < legacyLast {
		return &BehindError{Set: SetLegacy, Applied: at, Need: legacyLast}
	}
	if err := CheckEngineSchema(ctx, q, ""); err != nil {
		return err
	}
	return checkSet(ctx, q, SetMedia, "taskport_media_migrations")
}

func checkSet(ctx context.Context, q Queryer, setName, table string) error {
	done, err := appliedVersions(ctx, q, table)
	if err != nil {
		return err
	}
	need := []int64{1}
	for _, f := range laterVersions(SetFS(setName)) {
		need = append(need, f.version)
	}
	var at int64
	for _, v := range need {
		if !done[v] {
			return &BehindError{Set: setName, Applied: at, Need: need[len(need)-1]}
		}
		at = v
	}
	return nil
}

// legacyVersion is the highest version below which every legacy migration
// is applied (0: the set was never begun here).
func legacyVersion(ctx context.Context, q Queryer) (int64, error) {
	done, err := appliedVersions(ctx, q, legacyTable)
	if err != nil {
		return 0, err
	}
	var at int64
	for v := int64(1); v <= legacyLast && done[v]; v++ {
		at = v
	}
	return at, nil
}

// appliedVersions reads a goose version table; a table (or schema) that is
// not there has none. goose deletes a version's row when it rolls it back.
func appliedVersions(ctx context.Context, q Queryer, table string) (map[int64]bool, error) {
	// Text, not an array: a *sql.Tx (a baseline's adopt) reads it too.
	var list string
	err := q.QueryRow(ctx, `SELECT coalesce(string_agg(version_id::text, ','), '') FROM `+table+` WHERE is_applied`).Scan(&list)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == "42P01" || pgErr.Code == "3F000") { // undefined_table, invalid_schema_name
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read schema version (%s): %w", table, err)
	}
	done := map[int64]bool{}
	for _, f := range strings.FieldsFunc(list, func(r rune) bool { return r == ',' }) {
		v, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("read schema version (%s): %w", table, err)
		}
		done[v] = true
	}
	return done, nil
}

// Up brings pool's database to this binary's schema with the application's
// flow (New).
func Up(ctx context.Context, pool *pgxpool.Pool) error {
	m, err := New(pool, nil)
	return up(ctx, m, err)
}

// UpEngine applies the engine set alone into schema ("": DefaultSchema):
// what a library user's deploy runs before its workers start.
func UpEngine(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	m, err := NewEngine(pool, schema, nil)
	return up(ctx, m, err)
}

func up(ctx context.Context, m *Migrator, err error) error {
	if err != nil {
		return err
	}
	defer m.Close()
	_, err = m.Up(ctx)
	return err
}
