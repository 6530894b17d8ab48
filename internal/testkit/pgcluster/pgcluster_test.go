package pgcluster_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/internal/testkit/pgcluster"
)

func TestClusterKeepsDataAcrossRestartAndCrash(t *testing.T) {
	c := pgcluster.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	conn, err := pgx.Connect(ctx, c.URL())
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "CREATE TABLE kept (v int); INSERT INTO kept VALUES (42)")
	require.NoError(t, err)

	require.NoError(t, c.Restart())
	// The old connection died with the server.
	require.Error(t, conn.Ping(ctx))
	conn.Close(ctx)

	requireKept(ctx, t, c.URL(), 42)

	require.NoError(t, c.Kill())
	_, err = pgx.Connect(ctx, c.URL())
	require.Error(t, err, "a killed cluster must refuse connections")
	require.NoError(t, c.Start())
	requireKept(ctx, t, c.URL(), 42)
}

func requireKept(ctx context.Context, t *testing.T, url string, want int) {
	t.Helper()
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var v int
	require.NoError(t, conn.QueryRow(ctx, "SELECT v FROM kept").Scan(&v))
	require.Equal(t, want, v)
}
