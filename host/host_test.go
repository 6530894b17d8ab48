package host_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/host"
	"github.com/taskport/taskport/internal/startstop"
	"github.com/taskport/taskport/internal/testkit"
	"github.com/taskport/taskport/internal/testkit/pgcluster"
	"github.com/taskport/taskport/internal/testkit/pgtest"
	"github.com/taskport/taskport/leaseadapter"
	"github.com/taskport/taskport/migrations"
	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/retention"
)

// A user's own registry: one kind of one step, nothing of the media
// application.
var (
	ping     = port.DeclareActivity[string, string]("user.ping")
	pingKind = port.Definition{Kind: "user.ping", Version: 1, Retry: port.NetworkRetry(),
		Handler: port.HandleResult(func(f port.Flow, in string) (string, error) { return ping.Run(f, "ping", in) })}
)

// userEngine is a lease engine of the user's registry; each ping's body
// sends its input on pinged, when it is not nil.
func userEngine(t *testing.T, pool *pgxpool.Pool, pinged chan<- string) port.TaskEngine {
	t.Helper()
	reg := port.NewRegistry()
	require.NoError(t, reg.Register(pingKind))
	require.NoError(t, reg.RegisterActivity(port.Bind(ping, func(_ context.Context, in string) (string, error) {
		if pinged != nil {
			pinged <- in
		}
		return "pong " + in, nil
	})))
	eng, err := leaseadapter.New(pool, reg, leaseadapter.Config{})
	require.NoError(t, err)
	return eng
}

// migratedPool is a pool on a database of the test's own, migrated.
func migratedPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), pgtest.NewDatabase(t))
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// A worker of a user's kinds on a database nobody migrated is not ready,
// and its probe says why; once migrated, it is ready and runs the user's
// kind's step; the retention cleaner the host runs prunes the finished run
// (kept a millisecond here; days by default); on
// SIGTERM (ctx ends) it is not ready before anything stops, its services
// stop while the engine still serves, and Run returns nil.
func TestHostOfAUsersKinds(t *testing.T) {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pgtest.NewEmptyDatabase(t))
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	pinged := make(chan string, 1)
	eng := userEngine(t, pool, pinged)
	readyAtStop := make(chan int, 1)
	engineServingAtStop := make(chan bool, 1)
	addr := testkit.FreeAddr(t)
	h, err := host.New(host.Config{
		Pool: pool, Engine: eng, Addr: addr, StopTimeout: 5 * time.Second,
		Retention: &retention.Policy{Interval: 50 * time.Millisecond, Completed: time.Millisecond},
		Services: []host.Service{{Name: "stop probe",
			Start: func(context.Context) error { return nil },
			Stop: func(context.Context) error {
				code, _ := get(t, "http://"+addr+"/readyz")
				readyAtStop <- code
				engineServingAtStop <- startstop.Serving(eng)
				return nil
			}}},
	})
	require.NoError(t, err)
	run, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- h.Run(run) }()

	require.EventuallyWithT(t, func(c *assert.CollectT) {
		code, body := get(t, "http://"+addr+"/readyz")
		assert.Equal(c, http.StatusServiceUnavailable, code)
		assert.Equal(c, "schema check failed\n", body)
	}, 30*time.Second, 20*time.Millisecond, "an unmigrated database must make the worker unready, naming the schema")

	require.NoError(t, migrations.Up(ctx, pool))
	require.Eventually(t, func() bool {
		code, _ := get(t, "http://"+addr+"/readyz")
		return code == http.StatusOK
	}, 30*time.Second, 20*time.Millisecond, "the worker never became ready once migrated")
	code, body := get(t, "http://"+addr+"/metrics")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "go_goroutines", "the default registry is served")

	id, err := eng.Enqueue(ctx, pingKind.Kind, "a", port.EnqueueOptions{IdempotencyKey: "ping:a"})
	require.NoError(t, err)
	require.Equal(t, "a", <-pinged, "the user's step ran")
	require.Eventually(t, func() bool {
		_, err := eng.Get(ctx, id)
		return errors.Is(err, port.ErrNotFound)
	}, 30*time.Second, 20*time.Millisecond, "the host's retention cleaner never pruned the finished run")

	stop()
	require.NoError(t, <-done)
	require.Equal(t, http.StatusServiceUnavailable, <-readyAtStop, "readiness was still on when the services began to stop")
	require.True(t, <-engineServingAtStop, "the engine stopped before the services beside it (a dispatcher would enqueue into a stopped engine)")
	require.False(t, startstop.Serving(eng), "the engine was stopped")
}

// stateEngine is an engine whose lifecycle a test sets: a fatal error, as
// the Temporal engine reports one (the lease engine has none; stack's
// TestWorkerExitsWhenEngineStopsForGood has the real one).
type stateEngine struct {
	port.TaskEngine
	base *startstop.Base
}

func (e stateEngine) Done() <-chan struct{} { return e.base.Done() }
func (e stateEngine) Err() error            { return e.base.Err() }

// A probe body names what failed and never carries the dependency's own
// error (host names, users, SQL), which goes to the log instead: the probe
// port answers anyone who reaches the pod. An engine stopped for good
// fails both probes; a dependency down fails readiness only.
func TestProbeBodiesNameWhatFailed(t *testing.T) {
	ctx := context.Background()
	pool := migratedPool(t)
	raw := errors.New(`failed to connect to host=db.internal.example user=taskport: password authentication failed`)
	var serving startstop.Base
	require.NoError(t, startstop.Start(ctx, &serving, func(context.Context) error { return nil }))
	var logged strings.Builder
	noop := func(context.Context) error { return nil }
	probe := func(cfg host.Config, path string) (int, string) {
		cfg.Pool = pool
		cfg.Logger = slog.New(slog.NewTextHandler(&logged, nil))
		h, err := host.New(cfg)
		require.NoError(t, err)
		srv := httptest.NewServer(h.Handler())
		defer srv.Close()
		return get(t, srv.URL+path)
	}

	code, body := probe(host.Config{Engine: stateEngine{base: &serving},
		Checks: []host.Check{{Name: "temporal", Func: func(context.Context) error { return raw }}}}, "/readyz")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, "temporal check failed\n", body)
	require.Contains(t, logged.String(), "password authentication failed", "the raw error is logged")
	code, _ = probe(host.Config{Engine: stateEngine{base: &serving},
		Checks: []host.Check{{Name: "temporal", Func: func(context.Context) error { return raw }}}}, "/healthz")
	require.Equal(t, http.StatusOK, code, "a dependency down is not a reason to restart the process")

	code, body = probe(host.Config{Engine: stateEngine{base: &serving},
		Services: []host.Service{{Name: "s", Start: noop, Stop: noop, Ready: func() error { return &host.ProbeError{What: "s: behind", Err: raw} }}}}, "/readyz")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, "s: behind\n", body)

	var failed startstop.Base
	require.NoError(t, startstop.Start(ctx, &failed, func(context.Context) error { return nil }))
	startstop.Fail(&failed, raw)
	for _, path := range []string{"/healthz", "/readyz"} {
		code, body = probe(host.Config{Engine: stateEngine{base: &failed}}, path)
		require.Equal(t, http.StatusServiceUnavailable, code, path)
		require.Equal(t, "engine stopped for good\n", body, path)
	}
	var stopped startstop.Base
	code, body = probe(host.Config{Engine: stateEngine{base: &stopped}}, "/readyz")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, "engine not serving\n", body)
}

func TestNewRefusesABadConfig(t *testing.T) {
	_, err := host.New(host.Config{})
	require.ErrorIs(t, err, port.ErrInvalidInput)
	pool := migratedPool(t)
	// The engine of a New whose error was dropped: a nil pointer in the
	// interface, on which Run would panic.
	var failed *leaseadapter.Engine
	_, err = host.New(host.Config{Pool: pool, Engine: failed})
	require.ErrorIs(t, err, port.ErrInvalidInput, "New accepted a nil *leaseadapter.Engine")
	_, err = host.New(host.Config{Pool: pool, Engine: userEngine(t, pool, nil), StopTimeout: -time.Second})
	var fe *port.FieldError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "stop_timeout", fe.Field)
	// A name no engine takes would keep /readyz failing its schema check
	// for as long as the worker runs.
	_, err = host.New(host.Config{Pool: pool, Engine: userEngine(t, pool, nil), Schema: "Shop"})
	require.ErrorAs(t, err, &fe, "New accepted a schema name no engine takes")
	require.Equal(t, "schema", fe.Field)
}

// A service without a name or anything to do, or a check without a name
// or its function, is refused by New, before a probe panics on it.
func TestNewRefusesIncompleteServicesAndChecks(t *testing.T) {
	pool := migratedPool(t)
	eng := userEngine(t, pool, nil)
	noop := func(context.Context) error { return nil }
	for _, tc := range []struct {
		name  string
		cfg   host.Config
		field string
	}{
		{"service with nothing to do", host.Config{Services: []host.Service{{Name: "s"}}}, "services"},
		{"service without a name", host.Config{Services: []host.Service{{Start: noop, Stop: noop}}}, "services"},
		{"check without Func", host.Config{Checks: []host.Check{{Name: "temporal"}}}, "checks"},
		{"check without a name", host.Config{Checks: []host.Check{{Func: noop}}}, "checks"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Pool, tc.cfg.Engine, tc.cfg.Addr = pool, eng, "127.0.0.1:0"
			h, err := host.New(tc.cfg)
			var fe *port.FieldError
			require.ErrorAs(t, err, &fe, "New accepted it (host %v)", h != nil)
			require.Equal(t, tc.field, fe.Field)
		})
	}
}

// A service with only a readiness check, or only a Stop, runs: the host
// starts and stops what it has.
func TestServicesWithoutStartOrStopRun(t *testing.T) {
	ctx := context.Background()
	pool := migratedPool(t)
	stopped := make(chan struct{})
	h, err := host.New(host.Config{Pool: pool, Engine: userEngine(t, pool, nil), Addr: "127.0.0.1:0", StopTimeout: 5 * time.Second,
		Services: []host.Service{
			{Name: "readiness only", Ready: func() error { return nil }},
			{Name: "stop only", Stop: func(context.Context) error { close(stopped); return nil }},
		}})
	require.NoError(t, err)
	run, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- h.Run(run) }()
	require.Eventually(t, func() bool { return h.Ready(ctx) == nil }, 30*time.Second, 20*time.Millisecond)
	stop()
	require.NoError(t, <-done)
	<-stopped
}

// A Host runs again after Run returned, as the engines and services it
// runs start again after Stop: the second Run is ready once its engine
// serves. A Run while another runs is refused.
func TestRunAgainAfterRunReturned(t *testing.T) {
	ctx := context.Background()
	pool := migratedPool(t)
	h, err := host.New(host.Config{Pool: pool, Engine: userEngine(t, pool, nil), Addr: "127.0.0.1:0", StopTimeout: 5 * time.Second})
	require.NoError(t, err)
	for round := 1; round <= 2; round++ {
		run, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- h.Run(run) }()
		require.Eventually(t, func() bool { return h.Ready(ctx) == nil }, 30*time.Second, 20*time.Millisecond,
			"run %d never became ready (last: %v)", round, h.Ready(ctx))
		require.ErrorIs(t, h.Run(ctx), port.ErrAlreadyStarted, "a second Run beside run %d", round)
		stop()
		require.NoError(t, <-done, "run %d", round)
		require.Empty(t, h.Addr(), "run %d returned, and Addr still names its closed address", round)
	}
}

// When Run returns, its probe server is closed: the address is free for
// the next worker of the process (a supervisor's restart, a test).
func TestRunReturnsWithItsAddressFree(t *testing.T) {
	ctx := context.Background()
	pool := migratedPool(t)
	addr := testkit.FreeAddr(t)
	for round := 1; round <= 10; round++ {
		h, err := host.New(host.Config{Pool: pool, Engine: userEngine(t, pool, nil), Addr: addr, StopTimeout: 5 * time.Second})
		require.NoError(t, err)
		run, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- h.Run(run) }()
		require.Eventually(t, func() bool { return h.Addr() != "" }, 30*time.Second, time.Millisecond, "round %d never listened", round)
		stop()
		require.NoError(t, <-done, "round %d", round)
		l, err := net.Listen("tcp", addr)
		require.NoError(t, err, "round %d: Run returned with its probe address still bound", round)
		require.NoError(t, l.Close())
	}
}

// Postgres going away makes the worker unready and never unlive: the
// kubelet stops sending it traffic but does not restart a process that
// recovers on its own, and it is ready again once Postgres is back.
func TestPostgresAwayFailsReadinessNotLiveness(t *testing.T) {
	ctx := context.Background()
	cluster := pgcluster.New(t)
	pool, err := pgxpool.New(ctx, cluster.URL())
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	require.NoError(t, migrations.UpEngine(ctx, pool, ""))
	h, err := host.New(host.Config{Pool: pool, Engine: userEngine(t, pool, nil), Addr: "127.0.0.1:0", StopTimeout: 5 * time.Second})
	require.NoError(t, err)
	run, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- h.Run(run) }()
	probe := func(path string) (int, string) { return get(t, "http://"+h.Addr()+path) }
	require.Eventually(t, func() bool { code, _ := probe("/readyz"); return code == http.StatusOK }, 30*time.Second, 20*time.Millisecond)

	require.NoError(t, cluster.Stop())
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		code, body := probe("/readyz")
		assert.Equal(c, http.StatusServiceUnavailable, code)
		assert.Equal(c, "postgres check failed\n", body)
	}, 30*time.Second, 20*time.Millisecond, "readiness stayed on with Postgres down")
	code, body := probe("/healthz")
	require.Equal(t, http.StatusOK, code, "liveness failed with Postgres down: %s", body)

	require.NoError(t, cluster.Start())
	require.Eventually(t, func() bool { code, _ := probe("/readyz"); return code == http.StatusOK }, 30*time.Second, 20*time.Millisecond,
		"the worker never became ready again once Postgres was back")
	stop()
	require.NoError(t, <-done)
}

// A host whose Schema is not its engine's (Config.Schema left at its
// default beside an engine in "shop") is unready, and the logged cause
// names the schema it checked, so that migrating "shop" again is not the
// only thing its reader tries.
func TestSchemaCheckNamesTheSchema(t *testing.T) {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pgtest.NewEmptyDatabase(t))
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	require.NoError(t, migrations.UpEngine(ctx, pool, "shop"))
	reg := port.NewRegistry()
	require.NoError(t, reg.Register(pingKind))
	eng, err := leaseadapter.New(pool, reg, leaseadapter.Config{Schema: "shop"})
	require.NoError(t, err)
	require.NoError(t, eng.Start(ctx, port.StartOptions{}))
	t.Cleanup(func() { require.NoError(t, eng.Stop(ctx)) })
	h, err := host.New(host.Config{Pool: pool, Engine: eng})
	require.NoError(t, err)
	err = h.Ready(ctx)
	var pe *host.ProbeError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, "schema check failed", pe.What)
	require.ErrorContains(t, pe.Err, `schema "taskport"`)
	require.ErrorContains(t, pe.Err, "host.Config.Schema")
}

// /readyz answers whoever reaches the probe port, and its checks take
// connections of the pool the engine commits through: requests that
// arrive together share one round of checks instead of each taking its
// own connections.
func TestConcurrentReadinessProbesShareOneRoundOfChecks(t *testing.T) {
	ctx := context.Background()
	pool := migratedPool(t)
	var serving startstop.Base
	require.NoError(t, startstop.Start(ctx, &serving, func(context.Context) error { return nil }))
	var (
		mu                sync.Mutex
		inside, maxInside int
		second            = make(chan struct{})
	)
	h, err := host.New(host.Config{Pool: pool, Engine: stateEngine{base: &serving},
		Checks: []host.Check{{Name: "counted", Func: func(ctx context.Context) error {
			mu.Lock()
			inside++
			maxInside = max(maxInside, inside)
			if inside == 2 {
				close(second)
			}
			mu.Unlock()
			defer func() { mu.Lock(); inside--; mu.Unlock() }()
			select { // the first round waits for a second one, if any comes
			case <-second:
			case <-ctx.Done():
			}
			return nil
		}}}})
	require.NoError(t, err)
	srv := httptest.NewServer(h.Handler())
	t.Cleanup(srv.Close)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() { get(t, srv.URL+"/readyz") })
	}
	wg.Wait()
	require.Equal(t, 1, maxInside, "concurrent /readyz requests ran their checks side by side")
}

// countingEngine counts the Starts of the engine it wraps.
type countingEngine struct {
	port.TaskEngine
	starts *atomic.Int32
}

func (e countingEngine) Start(ctx context.Context, opts port.StartOptions) error {
	e.starts.Add(1)
	return e.TaskEngine.Start(ctx, opts)
}

// A Run whose ctx has already ended (SIGTERM before the worker got going)
// returns nil without starting anything: no engine claims work only to
// hand it back, no service starts only to stop.
func TestRunWithAnEndedContextStartsNothing(t *testing.T) {
	ctx := context.Background()
	pool := migratedPool(t)
	var starts, services atomic.Int32
	h, err := host.New(host.Config{Pool: pool, Engine: countingEngine{userEngine(t, pool, nil), &starts}, Addr: "127.0.0.1:0",
		Services: []host.Service{{Name: "counted", Stop: func(context.Context) error { return nil },
			Start: func(context.Context) error { services.Add(1); return nil }}}})
	require.NoError(t, err)
	ended, cancel := context.WithCancel(ctx)
	cancel()
	require.NoError(t, h.Run(ended))
	require.Zero(t, starts.Load(), "the engine was started")
	require.Zero(t, services.Load(), "a service was started")
}

// A probe address already in use fails Run before the engine starts, and
// the error says which of the process's servers it was.
func TestRunOnAnAddressInUseNamesTheProbeServer(t *testing.T) {
	ctx := context.Background()
	pool := migratedPool(t)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { taken.Close() })
	var starts atomic.Int32
	h, err := host.New(host.Config{Pool: pool, Engine: countingEngine{userEngine(t, pool, nil), &starts}, Addr: taken.Addr().String()})
	require.NoError(t, err)
	err = h.Run(ctx)
	require.ErrorIs(t, err, syscall.EADDRINUSE)
	require.ErrorContains(t, err, "probe and metrics server: listen "+taken.Addr().String())
	require.Zero(t, starts.Load(), "the engine was started")
}

// An engine wrapped by the user's own type (for metrics, say) has no
// retention pruner of its own: New says which type lacks what.
func TestRetentionOfAWrappedEngineNamesTheWrapper(t *testing.T) {
	pool := migratedPool(t)
	var starts atomic.Int32
	_, err := host.New(host.Config{Pool: pool, Engine: countingEngine{userEngine(t, pool, nil), &starts}, Retention: &retention.Policy{}})
	require.ErrorContains(t, err, "host_test.countingEngine")
	require.ErrorContains(t, err, "Pruner() retention.Pruner")
}

// The dependency checks of one /readyz share one CheckTimeout: a round of
// several slow checks answers before the kubelet's 1 s probe timeout, so
// its failure is the host's answer (and log line), not the kubelet's
// timeout.
func TestReadinessChecksShareOneDeadline(t *testing.T) {
	ctx := context.Background()
	pool := migratedPool(t)
	var serving startstop.Base
	require.NoError(t, startstop.Start(ctx, &serving, func(context.Context) error { return nil }))
	deadline := func(into *time.Time) func(context.Context) error {
		return func(ctx context.Context) error {
			d, ok := ctx.Deadline()
			require.True(t, ok, "a check without a deadline")
			*into = d
			return nil
		}
	}
	var first, second time.Time
	h, err := host.New(host.Config{Pool: pool, Engine: stateEngine{base: &serving},
		Checks: []host.Check{{Name: "first", Func: deadline(&first)}, {Name: "second", Func: deadline(&second)}}})
	require.NoError(t, err)
	require.NoError(t, h.Ready(ctx))
	require.Equal(t, first, second, "each check got a CheckTimeout of its own")
}
