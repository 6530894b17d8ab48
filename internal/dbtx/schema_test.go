package dbtx

import (
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

func TestParseSchema(t *testing.T) {
	for _, name := range []string{"", "taskport"} {
		s, err := ParseSchema(name)
		require.NoError(t, err)
		require.Nil(t, s, "%q is the default layout", name)
		require.Equal(t, "taskport", s.Name())
		require.Equal(t, "taskport_lease", s.Lease())
		require.Equal(t, "SELECT 1 FROM taskport.run", s.SQL("SELECT 1 FROM taskport.run"))
	}
	for _, bad := range []string{"Jobs", "1jobs", "pg_jobs", "jobs-x", `jo"bs`, "taskport_lease", "a234567890123456789012345678901234567890123456789012345678901234"} {
		_, err := ParseSchema(bad)
		require.ErrorContains(t, err, "a schema name is a lower-case identifier", bad)
	}
}

// Both prefixes of the default layout become the named schema, and nothing
// else changes; an identifier that only starts with taskport is left alone.
func TestSchemaRewritesTheDefaultLayout(t *testing.T) {
	s, err := ParseSchema("jobs")
	require.NoError(t, err)
	require.Equal(t, "jobs", s.Name())
	require.Equal(t, "jobs", s.Lease())
	require.Equal(t,
		`DELETE FROM jobs.step_result s USING jobs.run r WHERE r.kind = 'taskport_x' AND hashtext('jobs.lock') > 0`,
		s.SQL(`DELETE FROM taskport_lease.step_result s USING taskport.run r WHERE r.kind = 'taskport_x' AND hashtext('taskport.lock') > 0`))
	require.Equal(t, pgx.Identifier{"jobs", "run"}, s.Table(pgx.Identifier{"taskport", "run"}))
	require.Equal(t, pgx.Identifier{"jobs", "task_signal"}, s.Table(pgx.Identifier{"taskport_lease", "task_signal"}))
	require.Equal(t, pgx.Identifier{"public", "plan"}, s.Table(pgx.Identifier{"public", "plan"}))
	require.Equal(t, "jobs_lease", s.Channel("taskport_lease"))
	require.Equal(t, "jobs_temporal_start", s.Channel("taskport_temporal_start"))

	b := &pgx.Batch{}
	b.Queue("SELECT * FROM taskport.waiter")
	require.Equal(t, "SELECT * FROM jobs.waiter", s.Batch(b).QueuedQueries[0].SQL)
}
