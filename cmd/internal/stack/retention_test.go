package stack

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The worker runs the retention cleaner with the flags' defaults: a run
// that succeeded eight days ago goes at once, one of six days stays. The
// deletes reach /metrics, and the admin pages show the setting.
func TestWorkerRunsRetention(t *testing.T) {
	s := testStack(t, "lease", "", "")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, err := s.bizPool.Exec(ctx, `
INSERT INTO taskport.run (id, engine, kind, version, idempotency_key, input, status, finished_at)
VALUES (gen_random_uuid(), 'lease', 'k', 1, 'eight-days', '{}', 'succeeded', now() - interval '8 days'),
       (gen_random_uuid(), 'lease', 'k', 1, 'six-days', '{}', 'succeeded', now() - interval '6 days')`)
	require.NoError(t, err)

	addr, stop := runLeaseWorker(t, s)
	keys := func() []string {
		rows, err := s.bizPool.Query(ctx, `SELECT idempotency_key FROM taskport.run ORDER BY 1`)
		require.NoError(t, err)
		var out []string
		for rows.Next() {
			var k string
			require.NoError(t, rows.Scan(&k))
			out = append(out, k)
		}
		require.NoError(t, rows.Err())
		return out
	}
	require.Eventually(t, func() bool { return len(keys()) == 1 }, 30*time.Second, 20*time.Millisecond)
	require.Equal(t, []string{"six-days"}, keys())

	// The pass reports after its deletes commit: wait for the lag, its last word.
	metrics := func() string {
		resp, err := http.Get("http://" + addr + "/metrics")
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return string(body)
	}
	require.Eventually(t, func() bool {
		return strings.Contains(metrics(), `taskport_retention_lag_seconds{table="taskport.run"} 0`)
	}, 30*time.Second, 20*time.Millisecond, "the pass never reported its lag")
	require.Contains(t, metrics(), `taskport_retention_deleted_rows_total{table="taskport.run"} 1`)

	access, err := AdminAuth{}.Resolve("127.0.0.1:0") // loopback: the local user
	require.NoError(t, err)
	adminAddr, _, err := s.Serve(ctx, "127.0.0.1:0", access)
	require.NoError(t, err)
	page, err := http.Get("http://" + adminAddr + "/admin")
	require.NoError(t, err)
	body, err := io.ReadAll(page.Body)
	require.NoError(t, err)
	require.NoError(t, page.Body.Close())
	require.Equal(t, http.StatusOK, page.StatusCode)
	require.Contains(t, string(body), "Retention: completed 168h0m0s, canceled 168h0m0s, failed 720h0m0s, every 1m0s.")

	stop()
}
