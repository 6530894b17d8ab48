package model

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/plans"
)

// The checks can fail: a plan forced to completed behind the lifecycle's
// back, with no file, no notification and its first hand-off never
// dispatched, and a temp file left in the library, are all reported.
func TestChecksReportBrokenInvariants(t *testing.T) {
	w := newWorld(t, leaseEngine(t), 0)
	w.createFresh()
	require.Len(t, w.ps, 1)
	p := w.ps[0]
	w.approve() // the approval's hand-off to download.submit: an outbox row nobody dispatches here
	_, err := w.pool.Exec(w.ctx, `UPDATE plan SET status = 'completed' WHERE id = $1`, p.id)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(w.lib, ".x.mkv.tp-import-1"), []byte("partial"), 0o644))

	w.check()
	all := strings.Join(w.anomalies, "\n")
	for _, want := range []string{
		"library: the file of completed p1 is missing",
		"library: unexpected file .x.mkv.tp-import-1",
		"p1 is completed, but plan:" + p.id + ":plan.completed was never delivered",
		"outbox row pending: enqueue download.submit",
	} {
		require.Contains(t, all, want)
	}
}

// A call that cannot reach Postgres is told apart from a refusal of the
// business API (it is not an anomaly: it did nothing, and said so).
func TestUnreachableIsNotARefusal(t *testing.T) {
	pool, err := pgxpool.New(t.Context(), "postgres://postgres@127.0.0.1:1/none?sslmode=disable&connect_timeout=5")
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	svc, err := plans.New(pool, plans.Config{})
	require.NoError(t, err)
	_, err = svc.Cancel(t.Context(), "01a2318c-17b0-77f9-bb8d-5c70e6a89c31", "model", "model")
	require.Error(t, err)
	require.True(t, unreachable(err), "%v", err)
	require.False(t, clearRefusal(err))
}
