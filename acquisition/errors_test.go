package acquisition

import (
	"context"
	"encoding/hex"
	"errors"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/internal/testkit/pgtest"
	"github.com/taskport/taskport/port"
)

// rawPlan inserts a plan with plain SQL, bypassing the package's helpers,
// and returns the driver's own error.
func rawPlan(ctx context.Context, pool *pgxpool.Pool, id uuid.UUID, target, hash string) error {
	_, err := pool.Exec(ctx, `INSERT INTO plan (id, title, source_type, source, info_hash, target_path, expected_size, expected_sha256)
		VALUES ($1, 't', 'magnet', 'magnet:?xt=urn:btih:' || $3, $3, $2, 1, repeat('a', 64))`, id, target, hash)
	return err
}

// fresh is a target path and info hash no other plan uses.
func fresh() (target, hash string) {
	id := uuid.New()
	return "/lib/" + id.String(), hex.EncodeToString(id[:]) + "00000000"
}

// The business store's error map, fed with the errors the real Postgres and
// pgx produce (each row provokes one with plain SQL): what a caller handles
// is mapped; anything else passes unchanged.
func TestInterpretError(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	heldTarget, heldHash := fresh()
	holder := uuid.New()
	require.NoError(t, rawPlan(ctx, pool, holder, heldTarget, heldHash))

	for _, tc := range []struct {
		name    string
		provoke func() error
		check   func(t *testing.T, raw, mapped error)
	}{
		{"no row is not found", func() error {
			rows, err := pool.Query(ctx, `SELECT id FROM plan WHERE id = $1`, uuid.New())
			require.NoError(t, err)
			_, err = pgx.CollectExactlyOneRow(rows, pgx.RowTo[uuid.UUID])
			return err
		}, func(t *testing.T, raw, mapped error) {
			require.ErrorIs(t, raw, pgx.ErrNoRows)
			require.ErrorIs(t, mapped, port.ErrNotFound)
		}},
		{"a row for an unknown plan is not found, naming the key", func() error {
			_, err := pool.Exec(ctx, `INSERT INTO approval (id, plan_id, decision, decided_by) VALUES ($1, $2, 'approved', 'ann')`,
				uuid.New(), uuid.New())
			return err
		}, func(t *testing.T, raw, mapped error) {
			require.Equal(t, foreignKeyViolation, pgCode(raw))
			require.ErrorIs(t, mapped, port.ErrNotFound)
			require.ErrorContains(t, mapped, "plan_id")
		}},
		{"a held target path is taken", func() error {
			_, hash := fresh()
			return rawPlan(ctx, pool, uuid.New(), heldTarget, hash)
		}, func(t *testing.T, raw, mapped error) {
			require.Equal(t, uniqueViolation, pgCode(raw))
			var te *TakenError
			require.ErrorAs(t, mapped, &te)
			require.Equal(t, "target_path", te.Field)
			require.ErrorIs(t, mapped, ErrConflict)
		}},
		{"a held info hash is taken", func() error {
			target, _ := fresh()
			return rawPlan(ctx, pool, uuid.New(), target, heldHash)
		}, func(t *testing.T, raw, mapped error) {
			require.Equal(t, uniqueViolation, pgCode(raw))
			var te *TakenError
			require.ErrorAs(t, mapped, &te)
			require.Equal(t, "info_hash", te.Field)
		}},
		{"another unique violation passes unchanged", func() error {
			target, hash := fresh()
			return rawPlan(ctx, pool, holder, target, hash) // the primary key
		}, func(t *testing.T, raw, mapped error) {
			require.Equal(t, uniqueViolation, pgCode(raw))
			require.Same(t, raw, mapped)
		}},
		{"a CHECK violation passes unchanged", func() error {
			target, _ := fresh()
			return rawPlan(ctx, pool, uuid.New(), target, "not-hex")
		}, func(t *testing.T, raw, mapped error) {
			require.Equal(t, "23514", pgCode(raw))
			require.Same(t, raw, mapped)
		}},
		{"a canceled context passes unchanged", func() error {
			canceled, cancel := context.WithCancel(ctx)
			cancel()
			_, err := pool.Exec(canceled, `SELECT 1`)
			return err
		}, func(t *testing.T, raw, mapped error) {
			require.ErrorIs(t, raw, context.Canceled)
			require.Equal(t, raw, mapped)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw := tc.provoke()
			require.Error(t, raw, "the row must provoke a driver error")
			tc.check(t, raw, interpretError(raw))
		})
	}
	require.NoError(t, interpretError(nil))
}

func pgCode(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// A plan that lost the unique index to a concurrent create gets the
// *TakenError naming the winner; when the winner ended meanwhile, the error
// still says which value was lost and unwraps to ErrConflict.
func TestLostRaceNamesTheWinner(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	target, hash := fresh()
	winner := uuid.New()
	require.NoError(t, rawPlan(ctx, pool, winner, target, hash))
	_, otherHash := fresh()
	loser := Plan{ID: uuid.New(), TargetPath: target, InfoHash: otherHash}

	err := lostRace(ctx, pool, &TakenError{Field: "target_path"}, loser)
	var te *TakenError
	require.ErrorAs(t, err, &te)
	require.Equal(t, TakenError{Field: "target_path", Value: target, PlanID: winner, Status: AwaitingApproval}, *te)

	_, err = pool.Exec(ctx, `UPDATE plan SET status = 'canceled' WHERE id = $1`, winner)
	require.NoError(t, err)
	err = lostRace(ctx, pool, &TakenError{Field: "target_path"}, loser)
	require.ErrorAs(t, err, &te)
	require.Equal(t, TakenError{Field: "target_path", Value: target}, *te)
	require.ErrorIs(t, err, ErrConflict)
	require.ErrorContains(t, err, "try again")
}
