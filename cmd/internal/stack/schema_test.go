package stack

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/internal/testkit"
	"github.com/taskport/taskport/migrations"
)

// runLeaseWorker runs s's lease worker with its dispatcher until stop,
// which checks that it stopped cleanly, and returns its probe address once
// it is ready.
func runLeaseWorker(t *testing.T, s *Stack) (addr string, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	addr = testkit.FreeAddr(t)
	done := make(chan error, 1)
	go func() {
		done <- s.RunWorker(ctx, Config{Engine: "lease", StopTimeout: 5 * time.Second}, addr, true)
	}()
	waitReady(t, addr)
	return addr, func() {
		cancel()
		require.NoError(t, <-done)
	}
}

// A running worker whose database loses its newest migration (a restored
// backup, a migrate down) turns not ready naming the schema, and ready again
// once the schema is back.
func TestWorkerNotReadyWhenTheSchemaRegresses(t *testing.T) {
	s := testStack(t, "lease", "", "")
	ctx := context.Background()
	addr, stop := runLeaseWorker(t, s)
	defer stop()

	readyz := func() (int, string) {
		resp, err := http.Get("http://" + addr + "/readyz")
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(body)
	}
	n := migrations.Latest(migrations.SetMedia)
	_, err := s.bizPool.Exec(ctx, `DELETE FROM taskport_media_migrations WHERE version_id = $1`, n)
	require.NoError(t, err)
	code, body := readyz()
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.True(t, strings.HasPrefix(body, "schema"), body)

	_, err = s.bizPool.Exec(ctx, `INSERT INTO taskport_media_migrations (version_id, is_applied) VALUES ($1, true)`, n)
	require.NoError(t, err)
	code, _ = readyz()
	require.Equal(t, http.StatusOK, code)
}
