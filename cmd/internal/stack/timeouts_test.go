package stack

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/acquisition"
	"github.com/taskport/taskport/app/apptest"
	"github.com/taskport/taskport/internal/testkit/pgtest"
	"github.com/taskport/taskport/plans"
)

func show(t *testing.T, pool *pgxpool.Pool, param string) string {
	t.Helper()
	var v string
	require.NoError(t, pool.QueryRow(context.Background(), "SELECT current_setting($1)", param).Scan(&v))
	return v
}

// A session stalled inside a transaction that holds a plan's row lock (a
// worker paused mid-transaction): the plans API waiting on that lock fails
// after lock_timeout with nothing written, instead of hanging, and the
// stalled session is ended by idle_in_transaction_session_timeout, after
// which the same call succeeds.
func TestPoolTimeoutsEndAStalledTransaction(t *testing.T) {
	ctx := context.Background()
	g := &Globals{DatabaseURL: pgtest.NewDatabase(t), Timeouts: Timeouts{
		Lock: 200 * time.Millisecond, IdleInTransaction: 5 * time.Second, Statement: 30 * time.Second}}
	pool, err := g.Pool(ctx, slog.New(slog.DiscardHandler), 4)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	require.Equal(t, "200ms", show(t, pool, "lock_timeout"))
	// Long enough for the Approve below to reach the lock on a loaded
	// machine (a new connection, BEGIN, the lock) while the stalled
	// session lives: 1s was, now and then, not.
	require.Equal(t, "5s", show(t, pool, "idle_in_transaction_session_timeout"))
	require.Equal(t, "30s", show(t, pool, "statement_timeout"))

	root := t.TempDir()
	svc, err := plans.New(pool, plans.Config{LibraryRoot: root})
	require.NoError(t, err)
	a := apptest.NewAsset("a.mkv", 10)
	p, err := svc.CreatePlan(ctx, plans.NewPlan{Title: "stalled", Magnet: a.Magnet(), InfoHash: a.Hash,
		TargetPath: filepath.Join(root, a.Name), ExpectedSize: int64(len(a.Content)), ExpectedSHA256: a.SHA256})
	require.NoError(t, err)
	outboxRows := func() int {
		var n int
		require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM outbox_event").Scan(&n))
		return n
	}
	before := outboxRows()

	stalled, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer stalled.Release()
	tx, err := stalled.Begin(ctx)
	require.NoError(t, err)
	var pid int
	require.NoError(t, tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid))
	_, err = tx.Exec(ctx, "SELECT id FROM plan WHERE id = $1 FOR UPDATE", p.ID)
	require.NoError(t, err)

	// No deadline of the caller's: only the server's bound can end the wait.
	_, err = svc.Approve(ctx, p.ID.String(), "ann", "")
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr, "approve must fail on the lock, got %v", err)
	require.Equal(t, "55P03", pgErr.Code, "lock_not_available")
	got, err := acquisition.GetPlan(ctx, pool, p.ID)
	require.NoError(t, err)
	require.Equal(t, acquisition.AwaitingApproval, got.Status, "nothing written")
	require.Equal(t, before, outboxRows(), "nothing written")

	alive := func() bool {
		var n int
		require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1", pid).Scan(&n))
		return n == 1
	}
	require.Eventually(t, func() bool { return !alive() }, 30*time.Second, 20*time.Millisecond,
		"idle_in_transaction_session_timeout ends the stalled session")
	_, err = tx.Exec(ctx, "SELECT 1")
	require.Error(t, err, "the stalled holder learns its session is gone")

	apptest.Acked(t)(svc.Approve(ctx, p.ID.String(), "ann", ""))
}

// Migrations run with neither statement_timeout nor lock_timeout, even when
// the URL sets them; a URL's own setting wins for the other pools.
func TestMigrationPoolHasNoStatementOrLockTimeout(t *testing.T) {
	ctx := context.Background()
	g := &Globals{DatabaseURL: pgtest.NewEmptyDatabase(t) + "&lock_timeout=1234&statement_timeout=5678",
		Timeouts: Timeouts{Lock: time.Second, IdleInTransaction: time.Minute, Statement: time.Minute}}
	log := slog.New(slog.DiscardHandler)
	for name, tc := range map[string]struct {
		open func(context.Context, *slog.Logger, int) (*pgxpool.Pool, error)
		want [3]string // lock, statement, idle in transaction
	}{
		"pool":           {g.Pool, [3]string{"1234ms", "5678ms", "1min"}},
		"migration pool": {g.MigrationPool, [3]string{"0", "0", "1min"}},
	} {
		pool, err := tc.open(ctx, log, 2)
		require.NoError(t, err)
		got := [3]string{show(t, pool, "lock_timeout"), show(t, pool, "statement_timeout"), show(t, pool, "idle_in_transaction_session_timeout")}
		pool.Close()
		require.Equal(t, tc.want, got, name)
	}
}

// The timeout flags take what Postgres applies as given, from 1ms to its
// limit of INT_MAX milliseconds, and refuse, by the flag's name and before
// anything connects, a value under a millisecond (it would be sent as 0, no
// limit at all) or above the limit (the server refuses it at connect).
func TestTimeoutFlagsStayWithinPostgresRange(t *testing.T) {
	var g Globals
	root := &cobra.Command{Use: "taskport"}
	g.Bind(root)
	fs := root.PersistentFlags()
	names := map[string]string{"db-lock-timeout": "lock_timeout",
		"db-idle-in-transaction-timeout": "idle_in_transaction_session_timeout", "db-statement-timeout": "statement_timeout"}
	for flag := range names {
		for _, bad := range []string{"500us", "1ns", "596h31m23.648s", "1000000h", "-1s"} {
			require.NoError(t, fs.Set(flag, bad))
			err := checkTimeouts(fs)
			require.ErrorContains(t, err, "--"+flag, bad)
			require.NoError(t, fs.Set(flag, "1s"))
		}
	}

	// The smallest is sent as 1 (ms), not truncated to 0; the largest is
	// one Postgres takes (a statement_timeout of 1ms would cancel SHOW).
	for flag := range names {
		require.NoError(t, fs.Set(flag, "1ms"))
	}
	require.NoError(t, checkTimeouts(fs))
	params := map[string]string{}
	g.Timeouts.apply(params)
	for _, param := range names {
		require.Equal(t, "1", params[param], param)
	}
	for flag := range names {
		require.NoError(t, fs.Set(flag, maxTimeout.String()))
	}
	require.NoError(t, checkTimeouts(fs))
	g.DatabaseURL = pgtest.NewEmptyDatabase(t)
	pool, err := g.Pool(context.Background(), slog.New(slog.DiscardHandler), 1)
	require.NoError(t, err)
	defer pool.Close()
	for _, param := range names {
		require.Equal(t, "2147483647ms", show(t, pool, param), param)
	}
}
