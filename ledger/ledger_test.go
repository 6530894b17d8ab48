package ledger_test

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/acquisition"
	"github.com/taskport/taskport/internal/dbtx"
	"github.com/taskport/taskport/internal/enginekit"
	"github.com/taskport/taskport/internal/testkit/pgtest"
	"github.com/taskport/taskport/ledger"
	"github.com/taskport/taskport/port"
)

// newPlan inserts a plan with a target path and info hash of its own (no
// two live plans may share either).
func newPlan(t *testing.T, pool *pgxpool.Pool) acquisition.Plan {
	t.Helper()
	id := uuid.New()
	hash := hashOf(id)
	p, err := acquisition.InsertPlan(context.Background(), pool, acquisition.Plan{
		ID: id, Title: "t", SourceType: "magnet", Source: "magnet:?xt=urn:btih:" + hash,
		InfoHash: hash, TargetPath: "/lib/" + id.String(), ExpectedSize: 3, ExpectedSHA256: sha64,
	})
	require.NoError(t, err)
	return p
}

const sha64 = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// hashOf is an info hash (40 hex digits) of its own for plan id.
func hashOf(id uuid.UUID) string { return hex.EncodeToString(id[:]) + "00000000" }

func tok(scope string, epoch int64) port.FencingToken {
	return port.FencingToken{Scope: scope, Epoch: epoch}
}

func TestBeginRefusesOlderEpochOfSameScope(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	p := newPlan(t, pool)

	first, err := ledger.Begin(ctx, pool, p.ID, ledger.OpImport, tok("run1/import", 2))
	require.NoError(t, err)
	require.False(t, first.Interrupted())

	_, err = ledger.Begin(ctx, pool, p.ID, ledger.OpImport, tok("run1/import", 1))
	require.ErrorIs(t, err, port.ErrFenced)
	cur, found, err := ledger.Read(ctx, pool, p.ID, ledger.OpImport)
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, "run1/import#2", cur.Token, "a refused Begin must not change the recorded attempt")
	require.Equal(t, 1, cur.Attempts)

	newer, err := ledger.Begin(ctx, pool, p.ID, ledger.OpImport, tok("run1/import", 3))
	require.NoError(t, err)
	require.True(t, newer.Interrupted(), "the attempt at epoch 2 left no result")
	require.Equal(t, "run1/import#3", newer.Token)

	// A different scope of the same generation takes the operation over
	// (TestBeginOrdersAttempts has the whole order).
	other, err := ledger.Begin(ctx, pool, p.ID, ledger.OpImport, tok("run2/import", 1))
	require.NoError(t, err)
	require.Equal(t, "run2/import#1", other.Token)
}

// The order of attempts across runs (generation), within a run's scope
// (epoch) and across scopes of one run (a Temporal reset): each case begins
// the same operation in turn; a refused Begin returns port.ErrFenced and
// writes nothing.
func TestBeginOrdersAttempts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	type begin struct {
		scope      string
		epoch, gen int64
		fenced     bool // the Begin must be refused
	}
	cases := []struct {
		name        string
		begins      []begin
		wantToken   string
		wantRetired []string
	}{
		{"a later epoch of the same scope takes over",
			[]begin{{"r1/s", 1, 5, false}, {"r1/s", 2, 5, false}}, "r1/s#2", []string{}},
		{"an earlier epoch of the same scope is refused",
			[]begin{{"r1/s", 2, 5, false}, {"r1/s", 1, 5, true}}, "r1/s#2", []string{}},
		{"the same attempt may begin again",
			[]begin{{"r1/s", 2, 5, false}, {"r1/s", 2, 5, false}}, "r1/s#2", []string{}},
		{"a newer generation takes over, whatever its epoch",
			[]begin{{"r1/s", 3, 5, false}, {"r2/s", 1, 6, false}}, "r2/s#1", []string{}},
		{"an older generation is refused, whatever its epoch",
			[]begin{{"r2/s", 1, 6, false}, {"r1/s", 9, 5, true}}, "r2/s#1", []string{}},
		{"a superseded run is refused once its decision retry took over",
			[]begin{{"r1/s", 1, 5, false}, {"r2/s", 1, 6, false}, {"r1/s", 2, 5, true}}, "r2/s#1", []string{}},
		{"generation 0 (begun before generations were recorded) is older than any run",
			[]begin{{"r2/s", 1, 1, false}, {"old/s", 4, 0, true}}, "r2/s#1", []string{}},
		{"a run's new scope takes over (a Temporal reset) and retires the old one",
			[]begin{{"wf/a/s", 2, 5, false}, {"wf/b/s", 1, 5, false}}, "wf/b/s#1", []string{"wf/a/s"}},
		{"a retired scope is refused afterwards, whatever its epoch",
			[]begin{{"wf/a/s", 1, 5, false}, {"wf/b/s", 1, 5, false}, {"wf/a/s", 7, 5, true}}, "wf/b/s#1", []string{"wf/a/s"}},
		{"the live scope goes on after the takeover",
			[]begin{{"wf/a/s", 1, 5, false}, {"wf/b/s", 1, 5, false}, {"wf/b/s", 2, 5, false}}, "wf/b/s#2", []string{"wf/a/s"}},
		{"a second reset retires the first reset's scope too",
			[]begin{{"wf/a/s", 1, 5, false}, {"wf/b/s", 1, 5, false}, {"wf/c/s", 1, 5, false}, {"wf/b/s", 2, 5, true}},
			"wf/c/s#1", []string{"wf/a/s", "wf/b/s"}},
		{"a newer generation starts a fresh list of retired scopes",
			[]begin{{"wf/a/s", 1, 5, false}, {"wf/b/s", 1, 5, false}, {"r9/s", 1, 7, false}}, "r9/s#1", []string{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			p := newPlan(t, pool)
			accepted := 0
			for i, b := range c.begins {
				before, _, err := ledger.Read(ctx, pool, p.ID, ledger.OpImport)
				require.NoError(t, err)
				got, err := ledger.Begin(ctx, pool, p.ID, ledger.OpImport, port.FencingToken{Scope: b.scope, Epoch: b.epoch, Generation: b.gen})
				if b.fenced {
					require.ErrorIsf(t, err, port.ErrFenced, "begin #%d %+v", i, b)
					after, _, err := ledger.Read(ctx, pool, p.ID, ledger.OpImport)
					require.NoError(t, err)
					require.Equal(t, before, after, "a refused Begin writes nothing")
					continue
				}
				require.NoErrorf(t, err, "begin #%d %+v", i, b)
				accepted++
				require.Equal(t, b.gen, got.Generation)
				require.Equal(t, accepted, got.Attempts, "attempts counts the accepted Begins")
			}
			cur, _, err := ledger.Read(ctx, pool, p.ID, ledger.OpImport)
			require.NoError(t, err)
			require.Equal(t, c.wantToken, cur.Token)
			require.Equal(t, c.wantRetired, cur.RetiredScopes)
		})
	}

	// The refusal names why, for the operator reading the error.
	p := newPlan(t, pool)
	_, err := ledger.Begin(ctx, pool, p.ID, ledger.OpImport, port.FencingToken{Scope: "r2/s", Epoch: 1, Generation: 6})
	require.NoError(t, err)
	_, err = ledger.Begin(ctx, pool, p.ID, ledger.OpImport, port.FencingToken{Scope: "r1/s", Epoch: 3, Generation: 5})
	require.ErrorIs(t, err, port.ErrFenced)
	require.ErrorContains(t, err, "a newer run (generation 6, attempt r2/s#1) took the operation over")
}

func TestCommitWithStaleTokenIsFencedAndWritesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	p := newPlan(t, pool)

	stale, err := ledger.Begin(ctx, pool, p.ID, ledger.OpSubmit, tok("run1/submit", 1))
	require.NoError(t, err)
	current, err := ledger.Begin(ctx, pool, p.ID, ledger.OpSubmit, tok("run1/submit", 2))
	require.NoError(t, err)

	// The stale attempt commits together with a business change, in one
	// transaction: the fence must leave both unwritten.
	err = dbtx.InTx(ctx, pool, func(tx pgx.Tx) error {
		if err := ledger.Commit(ctx, tx, stale, map[string]string{"by": "stale"}); err != nil {
			return err
		}
		return acquisition.Move(ctx, tx, p.ID, acquisition.Approve)
	})
	require.ErrorIs(t, err, port.ErrFenced)
	got, err := acquisition.GetPlan(ctx, pool, p.ID)
	require.NoError(t, err)
	require.Equal(t, acquisition.AwaitingApproval, got.Status)
	row, _, err := ledger.Read(ctx, pool, p.ID, ledger.OpSubmit)
	require.NoError(t, err)
	require.False(t, row.Done())

	require.NoError(t, ledger.Commit(ctx, pool, current, map[string]string{"by": "current"}))
	row, _, err = ledger.Read(ctx, pool, p.ID, ledger.OpSubmit)
	require.NoError(t, err)
	require.JSONEq(t, `{"by":"current"}`, string(row.Result))

	// Once a result exists, a Begin returns it and a second commit is fenced.
	again, err := ledger.Begin(ctx, pool, p.ID, ledger.OpSubmit, tok("run1/submit", 9))
	require.NoError(t, err)
	require.True(t, again.Done())
	require.Equal(t, "run1/submit#2", again.Token)
	require.ErrorIs(t, ledger.Commit(ctx, pool, current, "twice"), port.ErrFenced)
}

// stepCtx is the context of an activity running as the step with this
// token, as an engine gives it to the body Run is called from.
func stepCtx(scope string, epoch int64) context.Context {
	return enginekit.WithStep(context.Background(), port.StepInfo{Token: tok(scope, epoch)}, nil)
}

func TestRunReconcilesAfterInterruptedAttemptAndReturnsStoredResult(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	p := newPlan(t, pool)
	effects, reconciles, applies := 0, 0, 0
	step := ledger.Fenced[int]{
		PlanID: p.ID, Op: ledger.OpSubmit,
		Reconcile: func(context.Context, ledger.Operation) (int, bool, error) {
			reconciles++
			return 7, effects > 0, nil
		},
		Do: func(context.Context, ledger.Operation) (int, error) {
			effects++
			if effects == 1 {
				return 0, errors.New("connection dropped after the effect")
			}
			return 42, nil
		},
		Apply: func(ctx context.Context, tx pgx.Tx, r int) error {
			applies++
			return acquisition.Move(ctx, tx, p.ID, acquisition.Approve)
		},
	}
	_, err := ledger.Run(stepCtx("r/s", 1), pool, step)
	require.Error(t, err)
	got, err := ledger.Run(stepCtx("r/s", 2), pool, step)
	require.NoError(t, err)
	require.Equal(t, 7, got, "the reconcile found the effect: no second effect")
	require.Equal(t, 1, effects)
	require.Equal(t, 1, reconciles)

	got, err = ledger.Run(stepCtx("r/s", 3), pool, step)
	require.NoError(t, err)
	require.Equal(t, 7, got, "a committed result is returned as is")
	require.Equal(t, 1, applies)
	plan, err := acquisition.GetPlan(context.Background(), pool, p.ID)
	require.NoError(t, err)
	require.Equal(t, acquisition.Approved, plan.Status)
}

func TestRunOutsideAnActivityWritesNothing(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	p := newPlan(t, pool)
	_, err := ledger.Run(context.Background(), pool, ledger.Fenced[int]{
		PlanID: p.ID, Op: ledger.OpVerify,
		Do: func(context.Context, ledger.Operation) (int, error) { t.Fatal("Do ran without a token"); return 0, nil },
	})
	require.ErrorIs(t, err, ledger.ErrNoFencingToken)
	_, found, err := ledger.Read(context.Background(), pool, p.ID, ledger.OpVerify)
	require.NoError(t, err)
	require.False(t, found)
}

// A stale attempt that began before a newer one and finishes last is fenced
// at Commit: its Apply never runs.
func TestRunStaleAttemptFencedAtCommit(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	p := newPlan(t, pool)
	var applied []string
	mk := func(name string, during func()) ledger.Fenced[string] {
		return ledger.Fenced[string]{
			PlanID: p.ID, Op: ledger.OpImport,
			Do: func(context.Context, ledger.Operation) (string, error) {
				if during != nil {
					during()
				}
				return name, nil
			},
			Apply: func(context.Context, pgx.Tx, string) error { applied = append(applied, name); return nil },
		}
	}
	newer := mk("new", nil)
	_, err := ledger.Run(stepCtx("r/import", 1), pool, mk("old", func() {
		got, err := ledger.Run(stepCtx("r/import", 2), pool, newer)
		require.NoError(t, err)
		require.Equal(t, "new", got)
	}))
	require.ErrorIs(t, err, port.ErrFenced)
	require.Equal(t, []string{"new"}, applied)
	row, _, err := ledger.Read(context.Background(), pool, p.ID, ledger.OpImport)
	require.NoError(t, err)
	require.JSONEq(t, `"new"`, string(row.Result))
}

// The ledger's part of a plan's timeline: each attempt's start and each
// committed result, with the run read from the attempt's fencing scope on
// either engine.
func TestTimelineOfOperations(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	p := newPlan(t, pool)
	op, err := ledger.Begin(ctx, pool, p.ID, ledger.OpSubmit, tok("r/submit", 1))
	require.NoError(t, err)
	require.NoError(t, ledger.Commit(ctx, pool, op, "ok"))
	// A Temporal scope: workflow ID (taskport/<run>), run, activity.
	_, err = ledger.Begin(ctx, pool, p.ID, ledger.OpImport, tok("taskport/r2/t9/import", 1))
	require.NoError(t, err)
	entries, err := ledger.Timeline(ctx, pool, p.ID)
	require.NoError(t, err)
	var events []string
	for _, e := range entries {
		require.Equal(t, "operation", e.Source)
		events = append(events, e.Event+" "+e.Detail+" run="+e.RunID)
	}
	require.ElementsMatch(t, []string{"download.submit attempt 1 r/submit#1 run=r", `download.submit done "ok" run=r`,
		"asset.import attempt 1 taskport/r2/t9/import#1 run=r2"}, events, "each line names its run")
	other, err := ledger.Timeline(ctx, pool, newPlan(t, pool).ID)
	require.NoError(t, err)
	require.Empty(t, other, "another plan's operations are not in it")
}

// A Begin with a plan that does not exist, an operation name that is empty
// or not a name, or a token whose text Postgres cannot store is refused
// with an error saying which, and writes nothing.
func TestBeginRefusesCarelessInputs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	p := newPlan(t, pool)
	for _, c := range []struct {
		name string
		plan uuid.UUID
		op   ledger.Op
		tok  port.FencingToken
		want error
	}{
		{"empty op", p.ID, "", tok("r/s", 1), port.ErrInvalidInput},
		{"op with U+0000", p.ID, "asset.import\x00", tok("r/s", 1), port.ErrInvalidInput},
		{"op that is not a name", p.ID, "asset import; --", tok("r/s", 1), port.ErrInvalidInput},
		{"unknown plan", uuid.New(), ledger.OpImport, tok("r/s", 1), port.ErrNotFound},
		{"nil plan", uuid.Nil, ledger.OpImport, tok("r/s", 1), port.ErrNotFound},
		{"scope with U+0000", p.ID, ledger.OpImport, tok("r/s\x00", 1), port.ErrInvalidInput},
		{"nonce not UTF-8", p.ID, ledger.OpImport, port.FencingToken{Scope: "r/s", Epoch: 1, Nonce: "\xff"}, port.ErrInvalidInput},
	} {
		_, err := ledger.Begin(ctx, pool, c.plan, c.op, c.tok)
		require.ErrorIs(t, err, c.want, c.name)
	}
	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM asset_operation`).Scan(&n))
	require.Zero(t, n, "nothing written")
}

// A result or a note that Postgres's jsonb cannot store (a U+0000) or that
// exceeds port.MaxPayloadBytes is refused before the write: the attempt
// keeps its operation, and the transaction it was given stays usable.
func TestCommitAndNoteRefuseWhatCannotBeStored(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	p := newPlan(t, pool)
	o, err := ledger.Begin(ctx, pool, p.ID, ledger.OpImport, tok("r/import", 1))
	require.NoError(t, err)
	err = dbtx.InTx(ctx, pool, func(tx pgx.Tx) error {
		require.ErrorIs(t, ledger.Note(ctx, tx, o, map[string]string{"path": "/lib/a\x00b"}), port.ErrInvalidInput, "note with U+0000")
		require.ErrorIs(t, ledger.Commit(ctx, tx, o, "a\x00b"), port.ErrInvalidInput, "result with U+0000")
		require.ErrorIs(t, ledger.Commit(ctx, tx, o, strings.Repeat("x", port.MaxPayloadBytes)), port.ErrPayloadTooLarge)
		require.NoError(t, ledger.Note(ctx, tx, o, "ok"))
		return ledger.Commit(ctx, tx, o, "done")
	})
	require.NoError(t, err)
	row, _, err := ledger.Read(ctx, pool, p.ID, ledger.OpImport)
	require.NoError(t, err)
	require.JSONEq(t, `"done"`, string(row.Result))
}

// Two holders of one operation race in real transactions: the newer
// attempt's Begin and the older attempt's commit, each waiting on the
// other's open transaction. Whichever commits first decides, and the other
// sees it once it may proceed: a commit behind a newer Begin is fenced; a
// Begin behind a commit returns that result; a Begin behind a commit that
// rolls back records the newer attempt.
func TestTwoHoldersRaceInConcurrentTransactions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	// blocked runs f on a connection of its own and returns once that
	// connection waits on a lock; wait returns f's error.
	blocked := func(f func(conn *pgxpool.Conn) error) (wait func() error) {
		conn, err := pool.Acquire(ctx)
		require.NoError(t, err)
		var pid uint32
		require.NoError(t, conn.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid))
		done := make(chan error, 1)
		go func() {
			defer conn.Release()
			done <- f(conn)
		}()
		require.Eventually(t, func() bool {
			var waiting bool
			require.NoError(t, pool.QueryRow(ctx, `SELECT coalesce(wait_event_type = 'Lock', false) FROM pg_stat_activity WHERE pid = $1`, pid).Scan(&waiting))
			return waiting
		}, 30*time.Second, 5*time.Millisecond, "the second holder waits on the first's transaction")
		return func() error { return <-done }
	}
	older, newer := tok("r/import", 1), tok("r/import", 2)
	// begun is a new plan whose operation the older attempt began, and an
	// open transaction for the first holder.
	begun := func(t *testing.T) (uuid.UUID, ledger.Operation, pgx.Tx) {
		p := newPlan(t, pool)
		o, err := ledger.Begin(ctx, pool, p.ID, ledger.OpImport, older)
		require.NoError(t, err)
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		t.Cleanup(func() { _ = tx.Rollback(ctx) }) // a no-op once ended
		return p.ID, o, tx
	}

	t.Run("a commit behind a newer Begin is fenced", func(t *testing.T) {
		plan, o, tx := begun(t)
		_, err := ledger.Begin(ctx, tx, plan, ledger.OpImport, newer)
		require.NoError(t, err)
		wait := blocked(func(conn *pgxpool.Conn) error {
			return dbtx.InTx(ctx, conn, func(tx pgx.Tx) error { return ledger.Commit(ctx, tx, o, "older") })
		})
		require.NoError(t, tx.Commit(ctx))
		require.ErrorIs(t, wait(), port.ErrFenced)
		cur, _, err := ledger.Read(ctx, pool, plan, ledger.OpImport)
		require.NoError(t, err)
		require.False(t, cur.Done())
		require.Equal(t, newer.String(), cur.Token)
	})
	for _, commit := range []bool{true, false} {
		t.Run(fmt.Sprintf("a Begin behind a commit that commits=%t", commit), func(t *testing.T) {
			plan, o, tx := begun(t)
			require.NoError(t, ledger.Commit(ctx, tx, o, "older"))
			var got ledger.Operation
			wait := blocked(func(conn *pgxpool.Conn) (err error) {
				got, err = ledger.Begin(ctx, conn, plan, ledger.OpImport, newer)
				return err
			})
			if commit {
				require.NoError(t, tx.Commit(ctx))
			} else {
				require.NoError(t, tx.Rollback(ctx)) // the commit's Apply failed
			}
			require.NoError(t, wait())
			require.Equal(t, commit, got.Done(), "the result, exactly when it was committed")
			want := newer.String()
			if commit {
				want = older.String()
				require.JSONEq(t, `"older"`, string(got.Result))
			}
			require.Equal(t, want, got.Token)
		})
	}
}
