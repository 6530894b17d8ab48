package migrations

import (
	"io/fs"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskport/taskport/internal/dbtx"
)

// NewEngineWith is NewEngine with later as the engine set's migrations
// after the baseline, for a test of a migration not shipped.
func NewEngineWith(pool *pgxpool.Pool, schema string, later fs.FS) (*Migrator, error) {
	s, err := dbtx.ParseSchema(schema)
	if err != nil {
		return nil, err
	}
	return open(pool, s, nil, false, engineSet(s, later))
}
