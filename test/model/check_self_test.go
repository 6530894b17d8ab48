package model

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The checks can fail: a plan forced to completed behind the lifecycle's
// back, with no file, no notification and its first hand-off never
// dispatched, and a temp file left in the library, are all reported.
func TestChecksReportBrokenInvariants(t *testing.T) {
	w := newWorld(t, leaseEngine(t), 0)
	w.createFresh()
	require.Len(t, w.ps, 1)
	p := w.ps[0]
	_, err := w.pool.Exec(w.ctx, `UPDATE plan SET status = 'completed' WHERE id = $1`, p.id)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(w.lib, ".x.mkv.tp-import-1"), []byte("partial"), 0o644))

	w.check()
	all := strings.Join(w.anomalies, "\n")
	for _, want := range []string{
		"library: the file of completed p1 is missing",
		"library: unexpected file .x.mkv.tp-import-1",
		"p1 is completed, but plan:" + p.id + ":plan.completed was never delivered",
		"outbox row pending: enqueue approval.await",
	} {
		require.Contains(t, all, want)
	}
}
