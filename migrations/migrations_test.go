package migrations_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/internal/testkit/pgtest"
	"github.com/taskport/taskport/migrations"
)

// Up, down to zero, then up again on a fresh database: every down section
// must undo its up section exactly, or the second up fails.
func TestUpDownUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Connect(t, pgtest.NewEmptyDatabase(t))
	m, err := migrations.New(pool, nil)
	require.NoError(t, err)
	defer m.Close()

	applied, err := m.Up(ctx)
	require.NoError(t, err)
	require.NotEmpty(t, applied)
	status, err := m.Status(ctx)
	require.NoError(t, err)
	require.Len(t, status, len(applied))
	for _, s := range status {
		require.True(t, s.Applied, "migration %d %s not applied", s.Version, s.Name)
	}
	requireTables(t, pool, true)

	rolledBack, err := m.DownTo(ctx, 0)
	require.NoError(t, err)
	require.Len(t, rolledBack, len(applied))
	requireTables(t, pool, false)
	status, err = m.Status(ctx)
	require.NoError(t, err)
	for _, s := range status {
		require.False(t, s.Applied, "migration %d still applied after down", s.Version)
	}

	again, err := m.Up(ctx)
	require.NoError(t, err)
	require.Equal(t, applied, again)
	requireTables(t, pool, true)

	none, err := m.Up(ctx)
	require.NoError(t, err)
	require.Empty(t, none, "a second up must be a no-op")
}

// requireTables checks a table from each migration: the shared run store,
// the business ledger and the lease engine.
func requireTables(t *testing.T, pool *pgxpool.Pool, want bool) {
	t.Helper()
	for _, table := range []string{"taskport.run", "taskport.waiter", "public.plan", "public.asset_operation",
		"public.outbox_event", "public.decision", "taskport_lease.task", "taskport_lease.task_signal"} {
		var exists bool
		require.NoError(t, pool.QueryRow(context.Background(), "SELECT to_regclass($1) IS NOT NULL", table).Scan(&exists))
		require.Equal(t, want, exists, "table %s", table)
	}
}
