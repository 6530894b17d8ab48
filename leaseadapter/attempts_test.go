package leaseadapter_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/leaseadapter"
	"github.com/taskport/taskport/port"
)

// countedKind is a kind of one step, counted.run, which counts its
// executions per run in counted_exec (the business truth of these tests).
// In a killed worker's process (blockEnv set) the step blocks.
const countedKind port.Kind = "test.counted"

const (
	killDBEnv  = "LEASE_TEST_KILLED_WORKER_DB"
	countedDDL = `CREATE TABLE IF NOT EXISTS counted_exec (run_id text, n int NOT NULL DEFAULT 1, cause text,
  before_deadline boolean)`
)

func countedEngine(t testing.TB, pool, direct *pgxpool.Pool, cfg leaseadapter.Config, block bool, maxAttempts int) *leaseadapter.Engine {
	act := port.DeclareActivity[struct{}, int]("test.counted.run")
	reg := port.NewRegistry()
	require.NoError(t, reg.RegisterActivity(port.Bind(act, func(ctx context.Context, _ struct{}) (int, error) {
		info, _ := port.StepInfoFrom(ctx)
		var n int
		if err := direct.QueryRow(ctx, `INSERT INTO counted_exec (run_id) VALUES ($1) RETURNING
  (SELECT count(*) + 1 FROM counted_exec WHERE run_id = $1)`, string(info.RunID)).Scan(&n); err != nil {
			return 0, err
		}
		if block && n == 1 {
			<-ctx.Done()
			// Whether the worker stopped the step before the lease it held
			// ended on the server (the database's clock).
			_, err := direct.Exec(context.Background(), `UPDATE counted_exec SET cause = $2,
  before_deadline = (SELECT now() < lease_until FROM taskport.run WHERE id = $1::uuid)
WHERE run_id = $1 AND cause IS NULL`, string(info.RunID), fmt.Sprint(context.Cause(ctx)))
			if err != nil {
				return 0, err
			}
		}
		return n, nil
	})))
	require.NoError(t, reg.Register(port.Definition{Kind: countedKind, Version: 1, Retry: port.RetryPolicy{MaxAttempts: maxAttempts},
		Handler: port.Handle(func(f port.Flow, _ struct{}) error {
			_, err := act.Run(f, "s", struct{}{})
			return err
		})}))
	eng, err := leaseadapter.New(pool, reg, cfg)
	require.NoError(t, err)
	return eng
}

// TestKilledWorkerProcess is the worker that TestKillChargesOnlyStartedSteps
// kills: it serves countedKind at concurrency 1, its step blocking, until
// SIGKILL. Skipped unless run as that child.
func TestKilledWorkerProcess(t *testing.T) {
	url := os.Getenv(killDBEnv)
	if url == "" {
		t.Skip("the child process of TestKillChargesOnlyStartedSteps")
	}
	pool, err := pgxpool.New(context.Background(), url)
	require.NoError(t, err)
	eng := countedEngine(t, pool, pool, fastConfig(), true, 1)
	require.NoError(t, eng.Start(context.Background(), port.StartOptions{Concurrency: 1}))
	select {} // until killed
}

// A SIGKILLed worker charges an attempt only to the run whose step body it
// had started (issue 24, 1): the runs it held prefetched, queued for an
// executor or waiting for its one step slot go back to pending uncharged. At
// MaxAttempts 1, every run but the one whose step ran ends succeeded, and
// none ends failed without its step having run.
func TestKillChargesOnlyStartedSteps(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newDB(t)
	_, err := pool.Exec(ctx, countedDDL)
	require.NoError(t, err)
	eng := countedEngine(t, pool, pool, fastConfig(), false, 1)
	ids := make([]port.RunID, 8)
	for i := range ids {
		ids[i] = enqueue(t, eng, countedKind, struct{}{}, fmt.Sprint(i))
	}

	child := exec.Command(os.Args[0], "-test.run=^TestKilledWorkerProcess$", "-test.count=1")
	child.Env = append(os.Environ(), killDBEnv+"="+pool.Config().ConnString())
	child.Stderr = os.Stderr
	require.NoError(t, child.Start())
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
	// The child holds several runs and runs the step of one; a heartbeat
	// has reported that step (its attempts column moved to 1).
	count := func(q string) int {
		var n int
		require.NoError(t, pool.QueryRow(ctx, q).Scan(&n))
		return n
	}
	require.Eventually(t, func() bool {
		return count(`SELECT count(*) FROM counted_exec`) == 1 &&
			count(`SELECT count(*) FROM taskport.run WHERE status = 'running' AND attempts = 1`) == 1 &&
			count(`SELECT count(*) FROM taskport.run WHERE status = 'running'`) > 1
	}, 20*time.Second, 20*time.Millisecond)
	held := count(`SELECT count(*) FROM taskport.run WHERE status = 'running'`)
	require.NoError(t, child.Process.Kill())
	_ = child.Wait()
	t.Logf("killed the worker holding %d runs, one of them in its step", held)

	startEngine(t, eng, port.StartOptions{Concurrency: 4})
	require.Eventually(t, func() bool {
		return count(`SELECT count(*) FROM taskport.run WHERE status IN ('succeeded', 'failed')`) == len(ids)
	}, 30*time.Second, 20*time.Millisecond)
	rows, err := pool.Query(ctx, `SELECT r.id::text, r.status, (SELECT count(*) FROM counted_exec e WHERE e.run_id = r.id::text)
FROM taskport.run r`)
	require.NoError(t, err)
	defer rows.Close()
	failed := 0
	for rows.Next() {
		var id, status string
		var execs int
		require.NoError(t, rows.Scan(&id, &status, &execs))
		require.False(t, status == "failed" && execs == 0, "run %s failed without its step ever running", id)
		if status == "failed" {
			failed++
		}
	}
	require.NoError(t, rows.Err())
	require.Equal(t, 1, failed, "the run whose step the killed worker ran is charged its attempt, and only it")
}

// When its lease renewals fail (every connection to the database cut), a
// worker stops the step with port.ErrLeaseLost before the lease it last got
// ends on the server, and commits nothing of that attempt: the run's step
// result, once the database is back, is the next execution's (issue 24, 6).
func TestFailedRenewalsStopTheStepBeforeTheLeaseEnds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	direct := newDB(t)
	_, err := direct.Exec(ctx, countedDDL)
	require.NoError(t, err)
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	dc := direct.Config().ConnConfig
	proxy := toxiproxy.NewProxy(srv, "postgres", "127.0.0.1:0", net.JoinHostPort(dc.Host, strconv.Itoa(int(dc.Port))))
	require.NoError(t, proxy.Start())
	t.Cleanup(proxy.Stop)
	cfg := direct.Config()
	host, listenPort, err := net.SplitHostPort(proxy.Listen)
	require.NoError(t, err)
	p, err := strconv.ParseUint(listenPort, 10, 16)
	require.NoError(t, err)
	cfg.ConnConfig.Host, cfg.ConnConfig.Port = host, uint16(p)
	proxied, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(proxied.Close)

	ec := fastConfig()
	ec.LeaseDuration = 2 * time.Second
	eng := countedEngine(t, proxied, direct, ec, true, 2) // the cut attempt started: it is charged
	id := enqueue(t, eng, countedKind, struct{}{}, "cut")
	startEngine(t, eng, port.StartOptions{Concurrency: 1})
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, direct.QueryRow(ctx, `SELECT count(*) FROM counted_exec`).Scan(&n))
		return n == 1
	}, 10*time.Second, 10*time.Millisecond)

	proxy.Stop() // every engine connection closed, new ones refused
	var cause string
	var before bool
	require.Eventually(t, func() bool {
		err := direct.QueryRow(ctx, `SELECT cause, before_deadline FROM counted_exec WHERE cause IS NOT NULL`).Scan(&cause, &before)
		return err == nil
	}, 3*ec.LeaseDuration, 10*time.Millisecond, "the step is not stopped while its lease lapses")
	require.Equal(t, port.ErrLeaseLost.Error(), cause)
	require.True(t, before, "the step stopped before lease_until")

	require.NoError(t, proxy.Start())
	waitTaskStatus(t, direct, id, "succeeded")
	var result string
	require.NoError(t, direct.QueryRow(ctx, `SELECT result::text FROM taskport_lease.step_result WHERE run_id = $1`, id).Scan(&result))
	require.Equal(t, "2", result, "the recorded result is the second execution's, not the cut one's")
}
