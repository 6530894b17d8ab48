package dbtx

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DefaultSchema is the schema of the engine's tables unless a user names
// another. In it (and only in it) the lease engine's own tables live in a
// schema of their own, DefaultSchema+"_lease", as every database migrated
// before schemas could be named has them.
const DefaultSchema = "taskport"

// defaultLease is the lease engine's schema in the default layout.
const defaultLease = DefaultSchema + "_lease"

// schemaName is what a named schema may be: a lower-case SQL identifier
// that needs no quoting, so that the name is the same in SQL, in psql and in
// a log line. pg_ names are reserved by Postgres.
var schemaName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// Schema is where an engine's tables are. Every statement of the engines is
// written against the default layout (taskport.run, taskport_lease.step_result);
// in a named schema they are rewritten, once per distinct statement, to
// name it instead. The zero of *Schema (nil) is the default layout.
type Schema struct {
	name     string
	replacer *strings.Replacer
	cache    sync.Map // statement as written -> as sent
}

// ParseSchema checks name and returns its Schema; "" and DefaultSchema are
// the default layout (nil).
func ParseSchema(name string) (*Schema, error) {
	if name == "" || name == DefaultSchema {
		return nil, nil
	}
	if !schemaName.MatchString(name) || strings.HasPrefix(name, "pg_") || name == defaultLease {
		return nil, fmt.Errorf("schema %q: a schema name is a lower-case identifier (a-z, 0-9, _; at most 63 bytes; not starting with a digit or pg_; not %s)", name, defaultLease)
	}
	return &Schema{name: name, replacer: strings.NewReplacer(
		// The lease tables join the named schema: their names do not
		// collide with the run store's.
		defaultLease+".", name+".",
		DefaultSchema+".", name+".",
	)}, nil
}

// Name is the schema of the run store's tables.
func (s *Schema) Name() string {
	if s == nil {
		return DefaultSchema
	}
	return s.name
}

// Lease is the schema of the lease engine's tables.
func (s *Schema) Lease() string {
	if s == nil {
		return defaultLease
	}
	return s.name
}

// SQL returns the statement q, written against the default layout, as it
// names this schema. String literals are rewritten too, on purpose: an
// advisory lock keyed by hashtext('taskport.x') becomes the named
// schema's own lock.
func (s *Schema) SQL(q string) string {
	if s == nil {
		return q
	}
	if v, ok := s.cache.Load(q); ok {
		return v.(string)
	}
	out := s.replacer.Replace(q)
	s.cache.Store(q, out)
	return out
}

// Channel is the NOTIFY channel base (named taskport_...) of this schema,
// so that engines in two schemas of one database do not wake each other.
func (s *Schema) Channel(base string) string {
	if s == nil {
		return base
	}
	return s.name + strings.TrimPrefix(base, DefaultSchema)
}

// Pool is the pool an engine works through: a *pgxpool.Pool whose
// statements, batches and transactions name the engine's schema. Acquire
// and the other methods of the embedded pool are unchanged: what an engine
// runs on an acquired connection (LISTEN) names no table.
type Pool struct {
	*pgxpool.Pool
	schema *Schema
}

// NewPool is pool working in schema (nil: the default layout).
func NewPool(pool *pgxpool.Pool, schema *Schema) *Pool {
	return &Pool{Pool: pool, schema: schema}
}

// Schema is where the pool's engine keeps its tables.
func (p *Pool) Schema() *Schema { return p.schema }

// Exec runs sql in the pool's schema.
func (p *Pool) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return p.Pool.Exec(ctx, p.schema.SQL(sql), args...)
}

// Query runs sql in the pool's schema.
func (p *Pool) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return p.Pool.Query(ctx, p.schema.SQL(sql), args...)
}

// QueryRow runs sql in the pool's schema.
func (p *Pool) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return p.Pool.QueryRow(ctx, p.schema.SQL(sql), args...)
}

// SendBatch sends b with every statement in the pool's schema.
func (p *Pool) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	return p.Pool.SendBatch(ctx, p.schema.Batch(b))
}

// Begin opens a transaction whose statements name the pool's schema.
func (p *Pool) Begin(ctx context.Context) (pgx.Tx, error) {
	tx, err := p.Pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return p.schema.Tx(tx), nil
}

// BeginTx is Begin with options.
func (p *Pool) BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error) {
	tx, err := p.Pool.BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	return p.schema.Tx(tx), nil
}

// CopyFrom copies into the table named in the default layout, in the
// pool's schema.
func (p *Pool) CopyFrom(ctx context.Context, table pgx.Identifier, cols []string, src pgx.CopyFromSource) (int64, error) {
	return p.Pool.CopyFrom(ctx, p.schema.Table(table), cols, src)
}

// Batch rewrites b's statements in place and returns it.
func (s *Schema) Batch(b *pgx.Batch) *pgx.Batch {
	if s == nil {
		return b
	}
	for _, q := range b.QueuedQueries {
		q.SQL = s.SQL(q.SQL)
	}
	return b
}

// Table is a table identifier of the default layout in this schema.
func (s *Schema) Table(t pgx.Identifier) pgx.Identifier {
	if s == nil || len(t) != 2 {
		return t
	}
	switch t[0] {
	case DefaultSchema, defaultLease:
		return pgx.Identifier{s.name, t[1]}
	}
	return t
}

// Tx is tx (a caller's, for EnqueueTx) with its statements in this schema.
func (s *Schema) Tx(tx pgx.Tx) pgx.Tx {
	if s == nil {
		return tx
	}
	if t, ok := tx.(schemaTx); ok && t.schema == s {
		return tx
	}
	return schemaTx{Tx: tx, schema: s}
}

// schemaTx is a pgx.Tx whose statements name schema. Conn() still returns
// the raw connection: nothing in the engines queries through it.
type schemaTx struct {
	pgx.Tx
	schema *Schema
}

func (t schemaTx) Begin(ctx context.Context) (pgx.Tx, error) {
	tx, err := t.Tx.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return t.schema.Tx(tx), nil
}

func (t schemaTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return t.Tx.Exec(ctx, t.schema.SQL(sql), args...)
}

func (t schemaTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return t.Tx.Query(ctx, t.schema.SQL(sql), args...)
}

func (t schemaTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return t.Tx.QueryRow(ctx, t.schema.SQL(sql), args...)
}

func (t schemaTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	return t.Tx.SendBatch(ctx, t.schema.Batch(b))
}

func (t schemaTx) CopyFrom(ctx context.Context, table pgx.Identifier, cols []string, src pgx.CopyFromSource) (int64, error) {
	return t.Tx.CopyFrom(ctx, t.schema.Table(table), cols, src)
}

func (t schemaTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	return t.Tx.Prepare(ctx, name, t.schema.SQL(sql))
}
