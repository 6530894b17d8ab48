// Package dbtx holds the one query interface the Postgres-backed packages
// accept, so that each of their writes also works inside a caller's
// transaction, and the one way they open a transaction of their own.
package dbtx

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskport/taskport/port"
)

// DBTX is satisfied by *pgxpool.Pool, *pgx.Conn and pgx.Tx.
type DBTX interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Beginner opens transactions; *pgxpool.Pool and *pgx.Conn satisfy it.
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Pooled is a pool that sends batches: *pgxpool.Pool, or Pool (the same in
// a named schema). Stat is there only to keep a lone connection out: see
// BatchTx.
type Pooled interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
	Stat() *pgxpool.Stat
}

// PoolDB is a pool to query and to send batches on: *pgxpool.Pool or Pool.
type PoolDB interface {
	DB
	Pooled
}

// DB is a DBTX that also opens transactions of its own: *pgxpool.Pool and
// *pgx.Conn, not a pgx.Tx.
type DB interface {
	DBTX
	Beginner
}

// PinIndexScansSQL turns off sequential and bitmap scans for the rest of
// its transaction. A statement that must walk an index in order and stop
// after its LIMIT runs after it: without statistics (a table never
// analyzed, or one that outgrew its last ANALYZE) the planner otherwise
// prefers to read every matching row and sort them, which costs the size
// of the backlog instead of the LIMIT. It turns JIT off too: the planner
// prices a node it was told not to use at 10^10, so a plan that still needs
// one (the lease claim's sort of its few per-pair rows) is far above
// jit_above_cost, and compiling it took 0.5 s of a 1 ms claim
// (BenchmarkClaimBesideUnserved's first run, docs/benchmarks.md).
const PinIndexScansSQL = `SELECT set_config('enable_bitmapscan', 'off', true), set_config('enable_seqscan', 'off', true),
  set_config('jit', 'off', true)`

// PinOrderedScansSQL is PinIndexScansSQL that also turns off sorts, for a
// statement whose rows two indexes can find: the one in the order it wants,
// and another that finds them in some other order, then sorted. Without
// statistics the planner may price the second as cheaper (it guesses few
// rows), and that too costs the backlog instead of the LIMIT.
const PinOrderedScansSQL = `SELECT set_config('enable_bitmapscan', 'off', true), set_config('enable_seqscan', 'off', true),
  set_config('enable_sort', 'off', true), set_config('jit', 'off', true)`

// InTx runs fn in a transaction on db and commits it when fn returns nil.
// The rollback after a failed fn runs even when ctx is canceled, so the
// connection goes back to its pool clean.
func InTx(ctx context.Context, db Beginner, fn func(tx pgx.Tx) error) error {
	tx, err := db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin transaction: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit transaction: %w", err)
	}
	return nil
}

// QueryRowPinned scans the one row sql returns into dest, after pin
// (PinIndexScansSQL or PinOrderedScansSQL), in a transaction of its own on
// db (pinnedTx).
func QueryRowPinned(ctx context.Context, db Pooled, pin, sql string, args []any, dest ...any) error {
	return pinnedTx(ctx, db, pin, func(b *pgx.Batch) {
		b.Queue(sql, args...).QueryRow(func(row pgx.Row) error { return row.Scan(dest...) })
	})
}

// ExecPinned runs sql with args after PinIndexScansSQL, in a transaction of
// its own on db (pinnedTx), and returns the number of rows it affected: a
// batch that must read its index in order and stop after its LIMIT, e.g. a
// retention delete.
func ExecPinned(ctx context.Context, db Pooled, sql string, args ...any) (int64, error) {
	var n int64
	err := pinnedTx(ctx, db, PinIndexScansSQL, func(b *pgx.Batch) {
		b.Queue(sql, args...).Exec(func(tag pgconn.CommandTag) error {
			n = tag.RowsAffected()
			return nil
		})
	})
	return n, err
}

// pinnedTx is BatchTx with pin run first.
func pinnedTx(ctx context.Context, db Pooled, pin string, queue func(b *pgx.Batch)) error {
	return BatchTx(ctx, db, func(b *pgx.Batch) {
		b.Queue(pin)
		queue(b)
	})
}

// BatchTx runs the statements queue adds between BEGIN and COMMIT, as one
// batch: one round trip, where Begin, each statement and Commit take one
// each. A statement that fails skips the rest, COMMIT included, and leaves
// its connection inside the transaction: db is a pool because a pool
// closes such a connection as it takes it back, which rolls the
// transaction back (a lone connection would stay in it).
func BatchTx(ctx context.Context, db Pooled, queue func(b *pgx.Batch)) error {
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	queue(b)
	b.Queue("COMMIT")
	return db.SendBatch(ctx, b).Close()
}

// CheckQueryExecMode refuses a connection config whose default query exec
// mode leaves the parameters' types unknown to pgx: exec and
// simple_protocol (default_query_exec_mode in a URL, often set for
// PgBouncer's transaction pooling). There pgx encodes each argument as text
// from its Go type alone, and the engines' statements fail at run time,
// long after the pool was handed over: a uuid[] of run ids finds no encode
// plan, and a JSON payload sent as []byte reaches Postgres as bytea text
// ("invalid input syntax for type json"), and the business packages'
// statements fail alike (an outbox row's uuid, the ledger's JSON). A lease
// worker or an outbox dispatcher would log and retry such a failure
// forever, so the engines, plans.New and outbox.NewDispatcher refuse the
// pool instead, and the CLI refuses such a URL. A caller's transaction
// (EnqueueTx) may be in any mode: the statements it runs carry no such
// argument, as the conformance suite checks.
func CheckQueryExecMode(c *pgx.ConnConfig) error {
	switch m := c.DefaultQueryExecMode; m {
	case pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol:
		return fmt.Errorf("pgx query exec mode %q does not send parameter types, which taskport's statements need; "+
			"use cache_statement (pgx's default), cache_describe or describe_exec", m)
	}
	return nil
}

// CheckPool is CheckQueryExecMode for a pool handed to a constructor: a
// *port.FieldError on "pool".
func CheckPool(pool *pgxpool.Pool) error {
	if err := CheckQueryExecMode(pool.Config().ConnConfig); err != nil {
		return &port.FieldError{Field: "pool", Reason: err.Error()}
	}
	return nil
}

// UUIDArray is the Go type of a uuid[] argument. Not []uuid.UUID:
// uuid.UUID implements driver.Valuer, which pgx prefers to its own uuid
// codec, so every element would be formatted as text and parsed back
// (BenchmarkUUIDArray). The lease worker's group commits and heartbeats
// send arrays of every run they touch.
type UUIDArray = []UUID

// UUID is the Go type of a uuid argument or scan target, for the same
// reason: a uuid.UUID argument is formatted as text and parsed back, and a
// *uuid.UUID target (a sql.Scanner) is handed the value as text and parses
// it. The bytes on the wire are the same (TestUUIDEncodesAndScansAsUUID).
// The lease worker keeps its runs' ids and lease tokens as UUIDs, since
// nearly every statement it sends carries them, and every claim and group
// commit reads ids back.
//
// It is a type of its own, not [16]byte: where pgx knows the parameter's
// type (the default, cache_statement, and the describe modes) its uuid
// codec sends the bytes through UUIDValue; where it does not (exec,
// simple_protocol) it has no text form for a bare [16]byte, and falls back
// to Value, the text a uuid.UUID sends. The engines refuse those modes for
// their other arguments (CheckQueryExecMode); Value keeps a UUID a plain
// driver.Valuer for any other caller.
type UUID [16]byte

// String is u in the canonical text form of a uuid.
func (u UUID) String() string { return uuid.UUID(u).String() }

// UUIDValue is u for pgx's uuid codec (pgtype.UUIDValuer).
func (u UUID) UUIDValue() (pgtype.UUID, error) { return pgtype.UUID{Bytes: u, Valid: true}, nil }

// ScanUUID reads a uuid column into u (pgtype.UUIDScanner); the engines'
// ids are never NULL, and a NULL is an error rather than a zero id.
func (u *UUID) ScanUUID(v pgtype.UUID) error {
	if !v.Valid {
		return errors.New("cannot scan NULL into dbtx.UUID")
	}
	*u = v.Bytes
	return nil
}

// Value is u as text, for a parameter whose type pgx does not know (see
// UUID); pgx prefers UUIDValue wherever it does.
func (u UUID) Value() (driver.Value, error) { return uuid.UUID(u).String(), nil }
