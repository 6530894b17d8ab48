// Command adaptervsraw measures what the Temporal adapter costs against the
// same workflow written directly on the Go SDK, as a user's program runs:
// each side is its own process with its own client, started cold, and
// drives an open loop on a saturated machine.
//
// One Temporal server serves both sides: the dev server (-server dev) or
// the Postgres-persisted temporal-server (-server pg), each with the test
// harness's configuration (internal/devserver, internal/testkit/temporalserver).
// Per round and side a child process (this binary with -side) dials its own
// client (adapter: temporaladapter.Dial, what a user's program calls; raw:
// client.DialContext), starts a worker with -slots activity, workflow-task
// and local-activity slots (the raw worker with the adapter's sticky
// schedule-to-start and workflow-task timeouts), then starts -runs runs of a
// 3-step no-op workflow from -producers goroutines without waiting for any
// (adapter: Engine.Enqueue; raw: client.ExecuteWorkflow) while -producers
// more goroutines wait for them in start order (client.GetWorkflow(...).Get
// on both sides), and prints how long that took, from the first start to
// the last end. The adapter side gets a fresh database with the engine's
// schema (migrations.UpEngine) and pgxpool's default pool; the raw side needs
// none.
//
// Charged to a side over its whole child process (start-up and shutdown
// included, alike on both sides): the child's own CPU (its rusage), the
// Temporal server's, and that of every Postgres process (all of them: with
// -server pg they include the Temporal server's persistence). Commits are
// the adapter database's pg_stat_database.xact_commit delta. Rounds
// alternate which side goes first; runs/s is the median of the rounds and
// the ratio the median of the per-round ratios.
//
//	go run ./cmd/adaptervsraw -server dev -runs 320 -rounds 3 -db "$TEST_DATABASE_URL"
//
// -cpuprofile DIR writes each child's CPU profile to DIR/<side>-<round>.pprof.
package main

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"
	"golang.org/x/sync/errgroup"

	"github.com/taskport/taskport/internal/benchkit"
	"github.com/taskport/taskport/internal/devserver"
	"github.com/taskport/taskport/internal/testkit/temporalserver"
	"github.com/taskport/taskport/migrations"
	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/temporaladapter"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var err error
	if len(os.Args) > 1 && os.Args[1] == "-side" {
		err = runSide(ctx, os.Args[1:])
	} else {
		err = run(ctx, os.Args[1:])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "adaptervsraw:", err)
		os.Exit(1)
	}
}

// target is how a side reaches the server, passed to the child as flags.
type target struct {
	hostPort, namespace   string
	ca, cert, key, server string // TLS files and server name (-server pg)
}

func (t target) args() []string {
	return []string{"-hostport", t.hostPort, "-namespace", t.namespace, "-ca", t.ca, "-cert", t.cert, "-key", t.key, "-servername", t.server}
}

// sideResult is what one child reports and what the parent read around it.
type sideResult struct {
	Elapsed time.Duration    `json:"elapsed"`
	cpu     [3]time.Duration // child, Temporal server, Postgres
	commits int64
}

type side struct {
	name    string
	results []sideResult
}

func (s *side) rate(i, runs int) float64 { return float64(runs) / s.results[i].Elapsed.Seconds() }

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("adaptervsraw", flag.ContinueOnError)
	serverKind := fs.String("server", "dev", "Temporal server: dev (the CLI's dev server) or pg (temporal-server on Postgres)")
	db := fs.String("db", os.Getenv("TEST_DATABASE_URL"), "Postgres server URL (a fresh database is made per adapter round)")
	runs := fs.Int("runs", 320, "runs per side and round")
	slots := fs.Int("slots", 8, "worker slots (activity, workflow task, local activity)")
	producers := fs.Int("producers", 8, "goroutines starting runs, and as many waiting for them")
	rounds := fs.Int("rounds", 3, "rounds; the side going first alternates")
	profDir := fs.String("cpuprofile", "", "write each child's CPU profile into this directory")
	poolSize := fs.Int("pool", 0, "the adapter's Postgres pool size (pgxpool MaxConns); 0: pgxpool's default, max(4, cores)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *db == "" {
		return errors.New("-db (or TEST_DATABASE_URL) is required")
	}
	admin, err := pgx.Connect(ctx, *db)
	if err != nil {
		return err
	}
	defer admin.Close(context.Background())

	tgt, serverPID, stop, err := launchServer(ctx, *serverKind, *db)
	if err != nil {
		return err
	}
	defer stop()

	pool := "pgxpool's default"
	if *poolSize > 0 {
		pool = strconv.Itoa(*poolSize)
	}
	fmt.Printf("adapter vs raw SDK, open loop, each side its own cold process; server %s; %d runs x 3 no-op steps per side and round, %d slots, %d producers; adapter pool %s; load average at start %s\n",
		*serverKind, *runs, *slots, *producers, pool, benchkit.LoadAvg())
	adapter, raw := &side{name: "adapter"}, &side{name: "raw SDK"}
	for r := range *rounds {
		order := []*side{adapter, raw}
		if r%2 == 1 {
			slices.Reverse(order)
		}
		for _, s := range order {
			res, err := runChild(ctx, admin, *db, s.name, r, tgt, serverPID, *runs, *slots, *producers, *poolSize, *profDir)
			if err != nil {
				return fmt.Errorf("round %d, %s: %w", r, s.name, err)
			}
			s.results = append(s.results, res)
		}
	}
	fmt.Printf("load average at end %s\n\n", benchkit.LoadAvg())
	printTable(adapter, raw, *runs)
	return nil
}

// launchServer starts the Temporal server with the adapter's search
// attributes and returns how to reach it and its process ID.
func launchServer(ctx context.Context, kind, db string) (target, int, func(), error) {
	attrs := temporaladapter.SearchAttributes()
	switch kind {
	case "dev":
		s, err := devserver.Launch(ctx, devserver.Options{SearchAttributes: attrs})
		if err != nil {
			return target{}, 0, nil, err
		}
		pid, err := benchkit.ChildNamed("temporal")
		return target{hostPort: s.HostPort, namespace: s.Namespace}, pid, func() { _ = s.Stop() }, err
	case "pg":
		s, err := temporalserver.Launch(ctx, temporalserver.Options{SearchAttributes: attrs, DatabaseURL: db})
		if err != nil {
			return target{}, 0, nil, err
		}
		pid, err := benchkit.ChildNamed("temporal-server")
		return target{hostPort: s.HostPort, namespace: s.Namespace, ca: s.CA.CertFile, cert: s.ClientCert.CertFile,
			key: s.ClientCert.KeyFile, server: s.ServerName}, pid, func() { _ = s.Stop() }, err
	}
	return target{}, 0, nil, fmt.Errorf("-server %q: want dev or pg", kind)
}

// runChild runs one side's round in a child process and charges it.
func runChild(ctx context.Context, admin *pgx.Conn, server, name string, round int, tgt target, serverPID, runs, slots, producers, poolSize int, profDir string) (sideResult, error) {
	sideFlag := map[string]string{"adapter": "adapter", "raw SDK": "raw"}[name]
	args := append([]string{"-side", sideFlag}, tgt.args()...)
	args = append(args, "-runs", strconv.Itoa(runs), "-slots", strconv.Itoa(slots), "-producers", strconv.Itoa(producers), "-pool", strconv.Itoa(poolSize))
	if profDir != "" {
		args = append(args, "-cpuprofile", filepath.Join(profDir, fmt.Sprintf("%s-%d.pprof", sideFlag, round)))
	}
	var dbName string
	if sideFlag == "adapter" {
		var err error
		var dsn string
		dbName, dsn, err = freshDB(ctx, admin, server)
		if err != nil {
			return sideResult{}, err
		}
		defer func() {
			_, _ = admin.Exec(context.Background(), "DROP DATABASE "+pgx.Identifier{dbName}.Sanitize()+" WITH (FORCE)")
		}()
		if err := migrate(ctx, dsn); err != nil {
			return sideResult{}, err
		}
		args = append(args, "-db", dsn)
	}
	self, err := os.Executable()
	if err != nil {
		return sideResult{}, err
	}
	commitsBefore, err := commits(ctx, admin, dbName)
	if err != nil {
		return sideResult{}, err
	}
	srv0, pg0 := benchkit.ProcCPU(serverPID, false), benchkit.PostgresCPU()
	cmd := exec.CommandContext(ctx, self, args...)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return sideResult{}, fmt.Errorf("child: %w", err)
	}
	srv1, pg1 := benchkit.ProcCPU(serverPID, false), benchkit.PostgresCPU()
	var res sideResult
	if err := json.Unmarshal(out, &res); err != nil {
		return sideResult{}, fmt.Errorf("child said %q: %w", out, err)
	}
	st := cmd.ProcessState
	res.cpu = [3]time.Duration{st.UserTime() + st.SystemTime(), srv1 - srv0, pg1 - pg0}
	commitsAfter, err := commits(ctx, admin, dbName)
	if err != nil {
		return sideResult{}, err
	}
	res.commits = commitsAfter - commitsBefore
	return res, nil
}

// freshDB creates an empty database on server and returns its name and URL.
func freshDB(ctx context.Context, admin *pgx.Conn, server string) (string, string, error) {
	name := "adaptervsraw_" + strings.ToLower(rand.Text()[:10])
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", "", err
	}
	u, err := url.Parse(server)
	if err != nil {
		return "", "", err
	}
	u.Path = "/" + name
	return name, u.String(), nil
}

// migrate gives the database the engine's schema before the side's
// process starts, as a deployment's migration step does.
func migrate(ctx context.Context, dsn string) error {
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return err
	}
	defer pool.Close()
	return migrations.UpEngine(ctx, pool, "")
}

// commits is the database's committed transactions so far, its backends'
// statistics flushed first by the child's exit; 0 without a database.
func commits(ctx context.Context, admin *pgx.Conn, db string) (int64, error) {
	if db == "" {
		return 0, nil
	}
	if _, err := admin.Exec(ctx, "SELECT pg_stat_clear_snapshot()"); err != nil {
		return 0, err
	}
	var n int64
	err := admin.QueryRow(ctx, "SELECT coalesce(xact_commit, 0) FROM pg_stat_database WHERE datname = $1", db).Scan(&n)
	return n, err
}

func printTable(adapter, raw *side, runs int) {
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "side\truns/s (median)\trounds\tcommits/run\tCPU ms/run: own process\tTemporal server\tPostgres\ttotal\t\n")
	cpuPerRun := func(s *side) [4]float64 {
		var c [4]float64
		for _, r := range s.results {
			for i, d := range r.cpu {
				c[i] += float64(d.Microseconds()) / 1000
				c[3] += float64(d.Microseconds()) / 1000
			}
		}
		for i := range c {
			c[i] /= float64(runs * len(s.results))
		}
		return c
	}
	for _, s := range []*side{adapter, raw} {
		rates := make([]float64, len(s.results))
		each := make([]string, len(s.results))
		var commits int64
		for i, r := range s.results {
			rates[i] = s.rate(i, runs)
			each[i] = fmt.Sprintf("%.1f", rates[i])
			commits += r.commits
		}
		c := cpuPerRun(s)
		fmt.Fprintf(tw, "%s\t%.1f\t%s\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t\n", s.name, benchkit.Median(rates), strings.Join(each, " "),
			float64(commits)/float64(runs*len(s.results)), c[0], c[1], c[2], c[3])
	}
	ratios := make([]float64, len(adapter.results))
	each := make([]string, len(ratios))
	for i := range ratios {
		ratios[i] = adapter.rate(i, runs) / raw.rate(i, runs)
		each[i] = fmt.Sprintf("%.2f", ratios[i])
	}
	a, r := cpuPerRun(adapter), cpuPerRun(raw)
	// On the dev server the raw side uses no Postgres: what it is charged
	// there is the server's background work, and a ratio to it means
	// nothing (on -server pg it holds Temporal's persistence).
	pgRatio := "-"
	if r[2] >= 0.01*r[3] {
		pgRatio = fmt.Sprintf("%.2f", a[2]/r[2])
	}
	fmt.Fprintf(tw, "adapter/raw\t%.3f\t%s\t\t%.2f\t%.2f\t%s\t%.2f\t\n", benchkit.Median(ratios), strings.Join(each, " "), a[0]/r[0], a[1]/r[1], pgRatio, a[3]/r[3])
	tw.Flush()
	fmt.Println("goal: adapter/raw runs/s >= 0.95 and total CPU per run <= 1.05x the raw SDK's")
}

// runSide is the child: one side's round, reported as JSON on stdout.
func runSide(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("side", flag.ContinueOnError)
	which := fs.String("side", "", "adapter or raw")
	var tgt target
	fs.StringVar(&tgt.hostPort, "hostport", "", "frontend")
	fs.StringVar(&tgt.namespace, "namespace", "default", "namespace")
	fs.StringVar(&tgt.ca, "ca", "", "CA file")
	fs.StringVar(&tgt.cert, "cert", "", "client certificate")
	fs.StringVar(&tgt.key, "key", "", "client key")
	fs.StringVar(&tgt.server, "servername", "", "server name")
	db := fs.String("db", "", "the adapter's database")
	runs := fs.Int("runs", 320, "runs")
	slots := fs.Int("slots", 8, "worker slots")
	producers := fs.Int("producers", 8, "producers")
	prof := fs.String("cpuprofile", "", "CPU profile file")
	poolSize := fs.Int("pool", 0, "the adapter's pool size; 0: pgxpool's default")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *prof != "" {
		stop, err := benchkit.StartCPUProfile(*prof)
		if err != nil {
			return err
		}
		defer stop()
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	var (
		c       client.Client
		start   func(ctx context.Context, i int) (string, error)
		stopAll func()
		err     error
	)
	stamp := time.Now().UnixNano()
	switch *which {
	case "adapter":
		c, start, stopAll, err = adapterSide(ctx, tgt, *db, *slots, *poolSize, stamp, logger)
	case "raw":
		c, start, stopAll, err = rawSide(ctx, tgt, *slots, stamp, logger)
	default:
		err = fmt.Errorf("-side %q: want adapter or raw", *which)
	}
	if err != nil {
		return err
	}
	defer stopAll()

	began := time.Now()
	if err := openLoop(ctx, c, *runs, *producers, start); err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(sideResult{Elapsed: time.Since(began)})
}

// openLoop starts n runs from producers goroutines, none waiting for a run
// to end, while as many goroutines wait for the runs in start order.
func openLoop(ctx context.Context, c client.Client, n, producers int, start func(ctx context.Context, i int) (string, error)) error {
	started := make(chan string, n)
	var next atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	var starters errgroup.Group
	for range producers {
		starters.Go(func() error {
			for i := int(next.Add(1)); i <= n; i = int(next.Add(1)) {
				wid, err := start(gctx, i)
				if err != nil {
					return fmt.Errorf("start: %w", err)
				}
				started <- wid
			}
			return nil
		})
	}
	g.Go(func() error {
		defer close(started)
		return starters.Wait()
	})
	for range producers {
		g.Go(func() error {
			for wid := range started {
				if err := c.GetWorkflow(gctx, wid, "").Get(gctx, nil); err != nil {
					return fmt.Errorf("run %s: %w", wid, err)
				}
			}
			return nil
		})
	}
	return g.Wait()
}

var noop = port.DeclareActivity[string, string]("bench.noop")

func adapterSide(ctx context.Context, tgt target, db string, slots, poolSize int, stamp int64, logger *slog.Logger) (client.Client, func(context.Context, int) (string, error), func(), error) {
	c, err := temporaladapter.Dial(ctx, temporaladapter.ClientConfig{HostPort: tgt.hostPort, Namespace: tgt.namespace,
		CAFile: tgt.ca, CertFile: tgt.cert, KeyFile: tgt.key, ServerName: tgt.server, Logger: logger})
	if err != nil {
		return nil, nil, nil, err
	}
	cfg, err := pgxpool.ParseConfig(db)
	if err != nil {
		return nil, nil, nil, err
	}
	if poolSize > 0 {
		cfg.MaxConns = int32(poolSize)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, nil, nil, err
	}
	reg := port.NewRegistry()
	if err := benchkit.ThreeNoopSteps(reg, "bench.three", noop, func(_ context.Context, in string) (string, error) { return in, nil }); err != nil {
		return nil, nil, nil, err
	}
	eng, err := temporaladapter.New(c, pool, reg, temporaladapter.Config{TaskQueue: fmt.Sprintf("adapter-%d", stamp), Logger: logger})
	if err != nil {
		return nil, nil, nil, err
	}
	if err := eng.Start(ctx, port.StartOptions{Concurrency: slots}); err != nil {
		return nil, nil, nil, err
	}
	start := func(ctx context.Context, i int) (string, error) {
		id, err := eng.Enqueue(ctx, "bench.three", "x", port.EnqueueOptions{IdempotencyKey: fmt.Sprintf("bench-%d-%d", stamp, i)})
		return temporaladapter.WorkflowID(id), err
	}
	return c, start, func() { _ = eng.Stop(context.Background()); pool.Close(); c.Close() }, nil
}

func rawSide(ctx context.Context, tgt target, slots int, stamp int64, logger *slog.Logger) (client.Client, func(context.Context, int) (string, error), func(), error) {
	tlsCfg, err := tlsConfig(tgt)
	if err != nil {
		return nil, nil, nil, err
	}
	c, err := client.DialContext(ctx, client.Options{HostPort: tgt.hostPort, Namespace: tgt.namespace,
		Logger: tlog.NewStructuredLogger(logger), ConnectionOptions: client.ConnectionOptions{TLS: tlsCfg}})
	if err != nil {
		return nil, nil, nil, err
	}
	queue := fmt.Sprintf("raw-%d", stamp)
	// The raw worker's options are the ones Engine.Start sets that bear on
	// speed.
	w := benchkit.RawWorker(c, queue, slots, func(_ context.Context, in string) (string, error) { return in, nil })
	if err := w.Start(); err != nil {
		return nil, nil, nil, err
	}
	start := func(ctx context.Context, i int) (string, error) {
		wid := fmt.Sprintf("raw/%d/%d", stamp, i)
		_, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: wid, TaskQueue: queue,
			WorkflowTaskTimeout: temporaladapter.DefaultWorkflowTaskTimeout}, "raw.three", "x")
		return wid, err
	}
	return c, start, func() { w.Stop(); c.Close() }, nil
}

// tlsConfig is the raw side's mTLS from the server's files, as
// temporaladapter.ClientConfig builds it; nil without a CA.
func tlsConfig(tgt target) (*tls.Config, error) {
	if tgt.ca == "" {
		return nil, nil
	}
	pem, err := os.ReadFile(tgt.ca)
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("no certificate in %s", tgt.ca)
	}
	cert, err := tls.LoadX509KeyPair(tgt.cert, tgt.key)
	if err != nil {
		return nil, err
	}
	return &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{cert}, ServerName: tgt.server, MinVersion: tls.VersionTLS12}, nil
}
