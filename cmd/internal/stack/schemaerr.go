package stack

import (
	"errors"

	"github.com/jackc/pgx/v5/pgconn"
)

// MissingSchema is err, when a statement failed for want of a table or
// schema (SQLSTATE 42P01 or 3F000), as the message of the worker's schema
// check: the database was never migrated, or is behind this binary. The
// commands that only read or write a few rows (runs, plan, decision,
// engine) run no schema check: it would cost each of them a round trip
// while a missing table already fails their first statement, and this
// names the cure. Other errors are returned as they are.
func MissingSchema(err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || (pgErr.Code != "42P01" && pgErr.Code != "3F000") { // undefined_table, invalid_schema_name
		return err
	}
	return &missingSchemaError{pg: pgErr, err: err}
}

type missingSchemaError struct {
	pg  *pgconn.PgError
	err error
}

func (e *missingSchemaError) Error() string {
	return "schema check: database schema: " + e.pg.Message + " (SQLSTATE " + e.pg.Code + "): " +
		"the database was never migrated, or is behind this binary: run `taskport migrate up`"
}

func (e *missingSchemaError) Unwrap() error { return e.err }
