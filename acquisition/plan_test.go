package acquisition_test

import (
	"context"
	"encoding/hex"
	"slices"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/acquisition"
	"github.com/taskport/taskport/internal/testkit/pgtest"
	"github.com/taskport/taskport/port"
)

const sha64 = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// planIn inserts a plan on target and hash and puts it in status s directly,
// as a fixture (the lifecycle itself never jumps).
func planIn(t *testing.T, pool *pgxpool.Pool, s acquisition.Status, target, hash string) acquisition.Plan {
	t.Helper()
	ctx := context.Background()
	p, err := acquisition.InsertPlan(ctx, pool, acquisition.Plan{ID: uuid.New(), Title: "t", SourceType: "magnet",
		Source: "magnet:?xt=urn:btih:" + hash, InfoHash: hash, TargetPath: target, ExpectedSize: 1, ExpectedSHA256: sha64})
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `UPDATE plan SET status = $2 WHERE id = $1`, p.ID, s)
	require.NoError(t, err)
	p.Status = s
	return p
}

// unique is a target path and info hash no other plan uses.
func unique() (target, hash string) {
	id := uuid.New()
	return "/lib/" + id.String(), hex.EncodeToString(id[:]) + "00000000"
}

func statusOf(t *testing.T, pool *pgxpool.Pool, id uuid.UUID) acquisition.Status {
	t.Helper()
	p, err := acquisition.GetPlan(context.Background(), pool, id)
	require.NoError(t, err)
	return p.Status
}

// Every transition from every status, against the database: an allowed one
// moves the plan; a repeat (the plan is there already, or further along the
// main chain) changes nothing and is not an error; any other is a
// *TransitionError naming the plan and its status, with nothing written. So
// no transition ever leaves a final status.
func TestMoveIsGuarded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	chain := []acquisition.Status{acquisition.AwaitingApproval, acquisition.Approved, acquisition.Downloading,
		acquisition.Downloaded, acquisition.Imported, acquisition.Verified, acquisition.Completed}
	for _, tr := range transitions() {
		for _, s := range allStatuses {
			target, hash := unique()
			p := planIn(t, pool, s, target, hash)
			err := acquisition.Move(ctx, pool, p.ID, tr)
			to, at := slices.Index(chain, tr.To()), slices.Index(chain, s)
			repeat := s == tr.To() || to >= 0 && at > to
			switch {
			case tr.Allows(s):
				require.NoError(t, err, "%s from %s", tr, s)
				require.Equal(t, tr.To(), statusOf(t, pool, p.ID), "%s from %s", tr, s)
			case repeat:
				require.NoError(t, err, "%s from %s is a repeat", tr, s)
				require.Equal(t, s, statusOf(t, pool, p.ID))
			default:
				var te *acquisition.TransitionError
				require.ErrorAs(t, err, &te, "%s from %s", tr, s)
				require.ErrorIs(t, err, acquisition.ErrConflict)
				require.Equal(t, p.ID, te.PlanID)
				require.Equal(t, s, te.Actual)
				require.ErrorContains(t, err, p.ID.String())
				require.Equal(t, s, statusOf(t, pool, p.ID), "nothing written")
			}
			if s.Final() {
				require.Equal(t, s, statusOf(t, pool, p.ID), "%s took %s out of a final status", tr, s)
			}
		}
	}
	require.ErrorIs(t, acquisition.Move(ctx, pool, uuid.New(), acquisition.Approve), port.ErrNotFound)
}

// RequestCancel sets the flag and moves to canceling once; a repeat keeps
// the first reason and requester; a final plan refuses it with the flag left unset.
func TestRequestCancel(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	for _, s := range allStatuses {
		target, hash := unique()
		p := planIn(t, pool, s, target, hash)
		first, err := acquisition.RequestCancel(ctx, pool, p.ID, "ann", "first")
		got, gerr := acquisition.GetPlan(ctx, pool, p.ID)
		require.NoError(t, gerr)
		switch {
		case s.Final():
			var te *acquisition.TransitionError
			require.ErrorAs(t, err, &te, s)
			require.Equal(t, s, got.Status)
			require.False(t, got.CancelRequested(), "a refused cancel writes no flag")
		case s == acquisition.Canceling:
			require.NoError(t, err)
			require.False(t, first, "already canceling")
		default:
			require.NoError(t, err, s)
			require.True(t, first, s)
			require.Equal(t, acquisition.Canceling, got.Status)
			require.Equal(t, "first", got.CancelReason)
			require.Equal(t, "ann", got.CancelRequestedBy)
			again, err := acquisition.RequestCancel(ctx, pool, p.ID, "bob", "second")
			require.NoError(t, err)
			require.False(t, again)
			got, err = acquisition.GetPlan(ctx, pool, p.ID)
			require.NoError(t, err)
			require.Equal(t, "first", got.CancelReason, "the first request's reason stands")
			require.Equal(t, "ann", got.CancelRequestedBy, "and its requester")
		}
	}
}

// The unique indexes of migration 00005 and the Go rules agree, status by
// status: CheckFree refuses exactly what the index refuses, naming the plan
// that holds the target or hash, and an insert past the check (the loser of
// two concurrent creates) is refused by the index as a *TakenError on the
// same field (CreatePlan then names the winner: TestLostRaceNamesTheWinner).
func TestIndexesAndChecksAgree(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	for _, s := range allStatuses {
		for _, field := range []string{"target_path", "info_hash"} {
			target, hash := unique()
			holder := planIn(t, pool, s, target, hash)
			otherTarget, otherHash := unique()
			if field == "target_path" {
				hash = otherHash
			} else {
				target = otherTarget
			}
			held := s.HoldsTarget()
			if field == "info_hash" {
				held = s.HoldsInfoHash()
			}

			checked := acquisition.CheckFree(ctx, pool, target, hash)
			// Insert past the check, as the loser of a race does.
			err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				_, err := acquisition.InsertPlan(ctx, tx, acquisition.Plan{ID: uuid.New(), Title: "b", SourceType: "magnet",
					Source: "magnet:?xt=urn:btih:" + hash, InfoHash: hash, TargetPath: target, ExpectedSize: 1, ExpectedSHA256: sha64})
				return err
			})
			if !held {
				require.NoError(t, checked, "%s of a %s plan is free", field, s)
				require.NoError(t, err, "%s of a %s plan is free", field, s)
				continue
			}
			var te *acquisition.TakenError
			require.ErrorAs(t, checked, &te, "%s held by a %s plan", field, s)
			require.ErrorIs(t, checked, acquisition.ErrConflict)
			require.Equal(t, acquisition.TakenError{Field: field, Value: map[string]string{"target_path": target, "info_hash": hash}[field],
				PlanID: holder.ID, Status: s}, *te)
			require.ErrorContains(t, checked, holder.ID.String())

			var lost *acquisition.TakenError
			require.ErrorAs(t, err, &lost, "the index refuses %s held by a %s plan", field, s)
			require.ErrorIs(t, err, acquisition.ErrConflict)
			require.Equal(t, field, lost.Field)
		}
	}
}
