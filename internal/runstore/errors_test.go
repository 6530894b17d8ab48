package runstore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/internal/runstore"
	"github.com/taskport/taskport/internal/testkit/pgtest"
	"github.com/taskport/taskport/port"
)

func TestInterpretError(t *testing.T) {
	fk := &pgconn.PgError{Code: "23503", Detail: `Key (run_id)=(r1) is not present in table "run".`}
	unique := &pgconn.PgError{Code: "23505", ConstraintName: "run_kind_idempotency_key_key"}
	tests := []struct {
		name     string
		err      error
		notFound bool
		contains string
	}{
		{"nil", nil, false, ""},
		{"no rows", pgx.ErrNoRows, true, "not found"},
		{"wrapped no rows", fmt.Errorf("scan: %w", pgx.ErrNoRows), true, "not found"},
		{"foreign key", fk, true, `not present in table "run"`},
		{"unique violation passes through", unique, false, ""},
		{"other driver error passes through", errors.New("conn closed"), false, ""},
		{"context passes through", context.Canceled, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := runstore.InterpretError(tt.err)
			require.Equal(t, tt.notFound, errors.Is(got, port.ErrNotFound))
			if !tt.notFound {
				require.Equal(t, tt.err, got, "passed through unchanged")
				return
			}
			require.Contains(t, got.Error(), tt.contains)
		})
	}
}

// The mapping against the real server: each way the engines' tables say
// "no such run" reaches the caller as port.ErrNotFound.
func TestNotFoundFromTheDatabase(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	missing := port.RunID(uuid.NewString())
	_, err := runstore.Get(ctx, pool, missing)
	require.ErrorIs(t, err, port.ErrNotFound)
	_, err = runstore.RequestCancel(ctx, pool, missing, "r")
	require.ErrorIs(t, err, port.ErrNotFound)
	err = runstore.AddWaiter(ctx, pool, "approval:p1", missing, "wait-0")
	require.ErrorIs(t, err, port.ErrNotFound, "a waiter for a run that does not exist")
	require.ErrorContains(t, err, "is not present")
}
