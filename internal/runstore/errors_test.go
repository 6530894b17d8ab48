package runstore_test

import (
	"context"
	"encoding/json"
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
	_, err = runstore.RequestCancel(ctx, pool, runstore.EngineLease, missing, "r")
	require.ErrorIs(t, err, port.ErrNotFound)
	err = runstore.AddWaiter(ctx, pool, "approval:p1", missing, "wait-0")
	require.ErrorIs(t, err, port.ErrNotFound, "a waiter for a run that does not exist")
	require.ErrorContains(t, err, "is not present")
}

// What text and jsonb refuse is port.ErrInvalidInput when it reaches the
// server anyway (the engines refuse it earlier, naming the field): a
// caller does not retry it forever as a fault.
func TestValuesPostgresRefusesAreInvalidInput(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	for _, tt := range []struct {
		name, code string
		mutate     func(*runstore.NewRun)
	}{
		{"U+0000 in the input", "22P05", func(r *runstore.NewRun) { r.Input = json.RawMessage(`{"a":"\u0000"}`) }},
		{"lone surrogate in the input", "22P02", func(r *runstore.NewRun) { r.Input = json.RawMessage(`{"a":"\ud800"}`) }},
		{"NUL in the key", "22021", func(r *runstore.NewRun) { r.Key = "k\x00" }},
		{"invalid UTF-8 in the business key", "22021", func(r *runstore.NewRun) { r.BusinessKey = "\xff" }},
	} {
		r := newRun("bad")
		tt.mutate(&r)
		_, _, err := runstore.Insert(ctx, pool, r)
		require.ErrorIs(t, err, port.ErrInvalidInput, tt.name)
		require.ErrorContains(t, err, "SQLSTATE "+tt.code, tt.name)
		_, _, err = runstore.InsertMany(ctx, pool, []runstore.NewRun{newRun("fine"), r})
		require.ErrorIs(t, err, port.ErrInvalidInput, "%s, in a batch", tt.name)
	}
	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM taskport.run`).Scan(&n))
	require.Zero(t, n, "nothing written")

	for _, code := range []string{"22P05", "22021", "22P02"} {
		err := runstore.InterpretError(&pgconn.PgError{Code: code, Message: "refused"})
		require.ErrorIs(t, err, port.ErrInvalidInput, code)
		require.False(t, errors.Is(err, port.ErrNotFound), code)
	}
}
