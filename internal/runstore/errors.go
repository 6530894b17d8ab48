package runstore

import (
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/taskport/taskport/port"
)

// Postgres error codes the engines' tables can raise and callers care about.
const (
	foreignKeyViolation = "23503"
	uniqueViolation     = "23505"
	// The values text and jsonb refuse: a NUL (U+0000) in jsonb
	// (untranslatable_character), bytes that are not UTF-8 or a NUL in text
	// (character_not_in_repertoire), a lone surrogate escape in jsonb
	// (invalid_text_representation).
	untranslatableCharacter   = "22P05"
	characterNotInRepertoire  = "22021"
	invalidTextRepresentation = "22P02"
	// A statement naming a table or schema the database lacks: the engine
	// set was not migrated into the engine's Config.Schema.
	undefinedTable    = "42P01"
	invalidSchemaName = "3F000"
)

// runKeyConstraint is the idempotency authority's constraint,
// UNIQUE(kind, idempotency_key) of taskport.run (Postgres's name for it).
const runKeyConstraint = "run_kind_idempotency_key_key"

// InterpretError is the one map from pgx and Postgres errors onto the port's
// sentinels for the engines' tables: this package's (taskport.run,
// taskport.waiter) and the lease engine's (taskport_lease.*), whose queries
// call it rather than inspecting driver errors (River's interpretError is
// the model):
//
//   - pgx.ErrNoRows (a statement that returns one row found none) is
//     port.ErrNotFound;
//   - a foreign-key violation (a waiter registered for a run that does not
//     exist) wraps port.ErrNotFound, with Postgres's detail;
//   - a value text or jsonb refuses (22P05, 22021, 22P02) wraps
//     port.ErrInvalidInput, with Postgres's message. The engines refuse such
//     values before writing (enginekit.EncodePayload, ValidateText), naming
//     the field; this is the last line of defence, so that one they miss is
//     still a refusal a caller does not retry, not a fault;
//   - a table or schema that does not exist (42P01, 3F000) says to migrate
//     (Unmigrated).
//
// Everything else is returned as it is. Unique violations are not mapped:
// every insert of these tables resolves its conflicts in SQL (ON CONFLICT),
// or, for a batch insert's Fresh form, by running the Idempotent one
// (insertBatch), so one reaching a caller is a fault, not an answer.
func InterpretError(err error) error {
	var pe *pgconn.PgError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, pgx.ErrNoRows):
		return port.ErrNotFound
	case errors.As(err, &pe) && pe.Code == foreignKeyViolation:
		return fmt.Errorf("%w: %s", port.ErrNotFound, pe.Detail)
	case errors.As(err, &pe) && (pe.Code == untranslatableCharacter || pe.Code == characterNotInRepertoire || pe.Code == invalidTextRepresentation):
		return fmt.Errorf("%w: %s (SQLSTATE %s)", port.ErrInvalidInput, pe.Message, pe.Code)
	}
	return Unmigrated(err)
}

// Unmigrated adds to an error from a table or schema the database lacks
// what to do about it: the engine is not wrong, its tables are not there.
// Engines do not migrate, and a worker started before the migration step
// serves once it ran (the host's /readyz reports the schema until then),
// so such an error is a deployment's, said as one. Any other error is
// returned as it is.
func Unmigrated(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && (pe.Code == undefinedTable || pe.Code == invalidSchemaName) {
		return fmt.Errorf("%w: the engine's tables are not in the schema it was configured with: apply them first "+
			"(migrations.UpEngine, or taskport migrate up)", err)
	}
	return err
}

// isRunKeyTaken reports whether err is a unique violation of the run key:
// a batch insert's Fresh form met a run already recorded.
func isRunKeyTaken(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == uniqueViolation && pe.ConstraintName == runKeyConstraint
}
