package dbtx_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/internal/dbtx"
	"github.com/taskport/taskport/internal/testkit/pgtest"
)

// TestCheckQueryExecModeRefusesTheModesThatFail: the modes the check refuses
// are the ones in which a statement shaped like the engines' (a uuid[] of
// run ids and a JSON payload as []byte) fails on a real server, and the
// modes it accepts run it. Should pgx learn to encode these in exec or
// simple_protocol, this test fails and the check can go.
func TestCheckQueryExecModeRefusesTheModesThatFail(t *testing.T) {
	ctx := context.Background()
	base := pgtest.ServerURL(t)
	ids := dbtx.UUIDArray{dbtx.UUID(uuid.New()), dbtx.UUID(uuid.New())}
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe,
		pgx.QueryExecModeDescribeExec, pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol} {
		t.Run(mode.String(), func(t *testing.T) {
			cfg, err := pgx.ParseConfig(base)
			require.NoError(t, err)
			cfg.DefaultQueryExecMode = mode
			conn, err := pgx.ConnectConfig(ctx, cfg)
			require.NoError(t, err)
			defer conn.Close(ctx)
			var n int
			var doc string
			runErr := conn.QueryRow(ctx, `SELECT cardinality($1::uuid[]), $2::jsonb::text`, ids, []byte(`{"a": 1}`)).Scan(&n, &doc)
			checkErr := dbtx.CheckQueryExecMode(cfg)
			if runErr == nil {
				require.NoError(t, checkErr, "the statement runs in this mode")
				require.Equal(t, 2, n)
				require.Equal(t, `{"a": 1}`, doc)
				return
			}
			require.ErrorContains(t, checkErr, "cache_statement", "the statement failed in this mode: %v", runErr)
		})
	}
}
