package main

// `compare enqueue` measures how fast runs get into the queue, which is what
// a backlog import (100k plans) waits on, and prints a table of runs/s:
//
//   - lease EnqueueMany: the lease engine's EnqueueMany, one producer,
//     batches of -batch;
//   - lease Enqueue: the lease engine's Enqueue, one run per call, from
//     -producers goroutines (one producer would only measure the round
//     trip);
//   - river InsertMany: River's Client.InsertMany (riverpgxv5), one
//     producer, batches of -batch, with River's defaults: no uniqueness;
//   - river InsertMany unique: the same with UniqueOpts{ByArgs: true}, so
//     that every job is checked against a unique key as every taskport run
//     is (UNIQUE(kind, idempotency_key));
//   - river InsertManyFast: River's COPY path, which returns a count, not
//     a result per job, and has no uniqueness.
//
// With -ablate, diagnostic modes say what each part of a lease run's
// insert costs (issue 14: EnqueueMany against River's InsertMany). Some
// write to schemas taskport does not ship, so their rates describe the cost
// of a structure, not a supported configuration:
//   - run store columns only: runstore.InsertRunsWith with no engine's
//     columns, those every engine's run has, without the lease state (retry
//     policy, first claim time, trace context) that EnqueueMany also sets;
//   - EnqueueMany without run_status_created, and without both listing
//     indexes (run_status_created and run_kind_version_status_created);
//   - EnqueueMany without the claim's ready index (run_ready);
//   - EnqueueMany with the run's text keys in the database's collation, as
//     before migration 00015.
//
// -only runs one mode alone, to profile it (perf record -a -g -- compare
// enqueue -only 'lease EnqueueMany' -n 300000 -rounds 1).
//
// -separate 'a,b' runs a pair as a user's programs run: per round each mode
// in a process of its own (this binary again, with -only), started cold,
// one after the other, the first alternating by round, each on a fresh
// database; it prints each round's ratio, their median and the goal. make
// bench runs EnqueueMany against River's COPY path so (issue 28).
//
// Nothing is executed: no worker runs. Each mode gets a fresh database on
// the same server per round. Within a round the modes take turns slice by
// slice (-batch runs each, the first mode rotating), so that the swings of
// a shared machine, which last longer than a slice, hit every mode alike;
// a mode's rate is its runs over the time its own slices took, and the
// median round is reported. A lease run writes one row (taskport.run: the
// idempotency authority, the projection and the lease state, migration
// 00014), as a River job does.
//
//	go run ./cmd/compare enqueue -n 20000 -batch 1000 -rounds 5 -db $TEST_DATABASE_URL

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/taskport/taskport/internal/benchkit"
	"github.com/taskport/taskport/internal/enginekit"
	"github.com/taskport/taskport/internal/runstore"
	"github.com/taskport/taskport/leaseadapter"
	"github.com/taskport/taskport/port"
)

// inserter enqueues the runs [lo, hi) of a round.
type inserter func(lo, hi int) error

// enqueueMode opens a mode on the database at dsn: its inserter, and a
// close that releases its pool.
type enqueueMode struct {
	name, perCall string
	open          func(ctx context.Context, dsn string) (inserter, func(), error)
}

func runEnqueue(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("compare enqueue", flag.ContinueOnError)
	var (
		dbURL     = fs.String("db", os.Getenv("TEST_DATABASE_URL"), "Postgres server URL (an admin database: fresh databases are created beside it)")
		runs      = fs.Int("n", 20000, "runs per mode and round")
		batch     = fs.Int("batch", 1000, "items per EnqueueMany / InsertMany call, and the slice the modes take turns by")
		producers = fs.Int("producers", 8, "goroutines calling Enqueue one run at a time")
		rounds    = fs.Int("rounds", 5, "rounds; the median is reported")
		pool      = fs.Int("pool", 20, "connections per mode (pool_max_conns)")
		ablate    = fs.Bool("ablate", false, "add the diagnostic modes: run store columns only, EnqueueMany without one or both run listing indexes, without run_ready, with the database's collation")
		only      = fs.String("only", "", "run this mode alone (its name as the table prints it), e.g. to profile it under perf record")
		separate  = fs.String("separate", "", "two modes, comma-separated: each round runs each in a process of its own (-only), and the first mode's rate is compared with the second's")
		rateOnly  = fs.Bool("rate", false, "with -only: print only the median runs/s (what -separate reads)")
	)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *batch < 1 || *producers < 1 || *runs < 1 {
		return errors.New("-n, -batch and -producers must be at least 1")
	}
	if *separate != "" {
		common := []string{"-db", *dbURL, "-n", strconv.Itoa(*runs), "-batch", strconv.Itoa(*batch),
			"-producers", strconv.Itoa(*producers), "-pool", strconv.Itoa(*pool)}
		return enqueueSeparate(ctx, strings.Split(*separate, ","), common, *runs, max(*rounds, 1))
	}
	perBatch := strconv.Itoa(*batch) + " runs"
	modes := []enqueueMode{
		{"lease EnqueueMany", perBatch, leaseMany()},
		{"lease Enqueue", "1 run, " + strconv.Itoa(*producers) + " prod.", leaseOne(*producers)},
		{"river InsertMany", perBatch, riverMany(false)},
		{"river InsertMany unique", perBatch, riverMany(true)},
		{"river InsertManyFast", perBatch + ", COPY", riverManyFast},
	}
	if *ablate {
		modes = append(modes,
			enqueueMode{"(run store columns only)", perBatch, runStoreColumnsOnly},
			enqueueMode{"(no run_status_created)", perBatch, leaseMany("DROP INDEX taskport.run_status_created")},
			enqueueMode{"(no listing index)", perBatch, leaseMany("DROP INDEX taskport.run_status_created",
				"DROP INDEX taskport.run_kind_version_status_created")},
			enqueueMode{"(no run_ready)", perBatch, leaseMany("DROP INDEX taskport.run_ready")},
			enqueueMode{"(database collation)", perBatch, leaseMany(`ALTER TABLE taskport.run
  ALTER COLUMN kind TYPE text COLLATE "default", ALTER COLUMN idempotency_key TYPE text COLLATE "default",
  ALTER COLUMN engine TYPE text COLLATE "default", ALTER COLUMN status TYPE text COLLATE "default",
  ALTER COLUMN business_key TYPE text COLLATE "default"`)})
	}
	if *only != "" {
		i := slices.IndexFunc(modes, func(m enqueueMode) bool { return m.name == *only })
		if i < 0 {
			return fmt.Errorf("-only %q: no such mode", *only)
		}
		modes = modes[i : i+1]
	}
	admin, err := connectAdmin(ctx, *dbURL)
	if err != nil {
		return err
	}
	defer admin.Close(context.WithoutCancel(ctx))
	got := make([][]result, len(modes))
	for round := range max(*rounds, 1) {
		rs, err := enqueueRound(ctx, admin, *dbURL, *pool, modes, *runs, *batch)
		if err != nil {
			return fmt.Errorf("round %d: %w", round+1, err)
		}
		for i, r := range rs {
			fmt.Fprintf(os.Stderr, "round %d: %s: %.0f runs/s\n", round+1, modes[i].name, r.runsPerSec)
			got[i] = append(got[i], r)
		}
	}
	many := median(got[0]).runsPerSec
	if *rateOnly {
		fmt.Printf("%.1f\n", many)
		return nil
	}
	fmt.Printf("\n%d runs per mode and round, slices of %d taken in turn, median of %d rounds\n", *runs, *batch, max(*rounds, 1))
	fmt.Printf("%-24s %-18s %10s %17s\n", "mode", "per call", "runs/s", "EnqueueMany/this")
	for i, m := range modes {
		r := median(got[i])
		fmt.Printf("%-24s %-18s %10.0f %16.2fx\n", m.name, m.perCall, r.runsPerSec, many/r.runsPerSec)
	}
	fmt.Println("goal: EnqueueMany at or above river InsertManyFast (COPY), each side in its own process: compare enqueue -separate 'lease EnqueueMany,river InsertManyFast'; interleaved here")
	return nil
}

// enqueueSeparate runs modes[0] and modes[1] in processes of their own,
// rounds times each, runs runs a time, and prints their rates, each round's ratio
// (modes[0]/modes[1]), the median ratio and the goal: at least 1.
func enqueueSeparate(ctx context.Context, modes, common []string, runs, rounds int) error {
	if len(modes) != 2 {
		return fmt.Errorf("-separate %q: want two modes, comma-separated", strings.Join(modes, ","))
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	var rates [2][]float64
	var ratios []float64
	for round := range rounds {
		for k := range 2 {
			i := (round + k) % 2 // who goes first alternates
			args := append([]string{"enqueue", "-only", modes[i], "-rounds", "1", "-rate"}, common...)
			cmd := exec.CommandContext(ctx, self, args...)
			cmd.Stderr = os.Stderr
			out, err := cmd.Output()
			if err != nil {
				return fmt.Errorf("round %d: %s: %w", round+1, modes[i], err)
			}
			rate, err := strconv.ParseFloat(strings.TrimSpace(string(out)), 64)
			if err != nil {
				return fmt.Errorf("round %d: %s printed %q: %w", round+1, modes[i], out, err)
			}
			rates[i] = append(rates[i], rate)
		}
		ratios = append(ratios, rates[0][round]/rates[1][round])
	}
	fmt.Printf("\n%d runs per mode and round, each mode in a process of its own, cold, the first alternating, median of %d rounds\n", runs, rounds)
	fmt.Printf("| mode | runs/s (median) | rounds |\n|---|---|---|\n")
	for i, m := range modes {
		fmt.Printf("| %s | %.0f | %s |\n", m, benchkit.Median(rates[i]), joinRates(rates[i], "%.0f"))
	}
	ratio := benchkit.Median(ratios)
	fmt.Printf("| %s / %s | **%.2fx** | %s |\n", modes[0], modes[1], ratio, joinRates(ratios, "%.2f"))
	verdict := "met"
	if ratio < 1 {
		verdict = "missed"
	}
	fmt.Printf("goal: %s at or above %s, each in its own process: %s (%.2fx)\n", modes[0], modes[1], verdict, ratio)
	return nil
}

// joinRates prints xs in format, space-separated.
func joinRates(xs []float64, format string) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprintf(format, x)
	}
	return strings.Join(parts, " ")
}

// enqueueRound gives every mode a fresh database and n runs, the modes
// taking turns by slices of size runs.
func enqueueRound(ctx context.Context, admin *pgx.Conn, server string, poolSize int, modes []enqueueMode, n, size int) ([]result, error) {
	ins := make([]inserter, len(modes))
	for i, m := range modes {
		_, dsn, drop, err := freshDB(ctx, admin, server, "enqueue", poolSize)
		if err != nil {
			return nil, err
		}
		defer drop()
		in, closePool, err := m.open(ctx, dsn)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", m.name, err)
		}
		defer closePool()
		ins[i] = in
	}
	spent := make([]time.Duration, len(modes))
	for s, lo := 0, 0; lo < n; s, lo = s+1, lo+size {
		hi := min(lo+size, n)
		for k := range modes {
			i := (s + k) % len(modes) // each slice starts with the next mode
			start := time.Now()
			if err := ins[i](lo, hi); err != nil {
				return nil, fmt.Errorf("%s: %w", modes[i].name, err)
			}
			spent[i] += time.Since(start)
		}
	}
	out := make([]result, len(modes))
	for i := range modes {
		out[i] = result{engine: modes[i].name, runsPerSec: float64(n) / spent[i].Seconds()}
	}
	return out, nil
}

// openAltered opens the lease engine on a database migrated and then
// altered by ddl (the -ablate modes).
func openAltered(ctx context.Context, dsn string, ddl []string) (*leaseadapter.Engine, *pgxpool.Pool, error) {
	eng, pool, err := openLease(ctx, dsn, nil)
	if err != nil {
		return nil, nil, err
	}
	for _, stmt := range ddl {
		if _, err := pool.Exec(ctx, stmt); err != nil {
			pool.Close()
			return nil, nil, fmt.Errorf("%s: %w", stmt, err)
		}
	}
	return eng, pool, nil
}

// leaseMany enqueues with the lease engine's EnqueueMany, on a database
// altered by ddl.
func leaseMany(ddl ...string) func(ctx context.Context, dsn string) (inserter, func(), error) {
	return func(ctx context.Context, dsn string) (inserter, func(), error) {
		eng, pool, err := openAltered(ctx, dsn, ddl)
		if err != nil {
			return nil, nil, err
		}
		return func(lo, hi int) error {
			_, err := eng.EnqueueMany(ctx, noopItems(lo, hi))
			return err
		}, pool.Close, nil
	}
}

// runStoreColumnsOnly inserts the taskport.run rows of the batch as
// EnqueueMany does, but with the run store's columns only: PrepareBatch,
// then runstore.InsertManyWith with runStoreColumns.
func runStoreColumnsOnly(ctx context.Context, dsn string) (inserter, func(), error) {
	_, pool, err := openLease(ctx, dsn, nil)
	if err != nil {
		return nil, nil, err
	}
	reg, err := noopRegistry()
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return func(lo, hi int) error {
		prep, err := enginekit.PrepareBatch(reg, noopItems(lo, hi))
		if err != nil {
			return err
		}
		_, _, err = runstore.InsertManyWith(ctx, pool, runstore.NewRuns(runstore.EngineLease, prep), runStoreColumns)
		return err
	}, pool.Close, nil
}

// runStoreColumns is the batch insert with the run store's columns only,
// returning ids.
var runStoreColumns = runstore.InsertRunsWith("", "", "", func(insert string) string { return insert + "id" })

// noopItems are the items [lo, hi) of a round, keyed by their number.
func noopItems(lo, hi int) []port.EnqueueItem {
	items := make([]port.EnqueueItem, 0, hi-lo)
	for i := lo; i < hi; i++ {
		items = append(items, port.EnqueueItem{Kind: noopKind, Input: struct{}{},
			Options: port.EnqueueOptions{IdempotencyKey: strconv.Itoa(i)}})
	}
	return items
}

func leaseOne(producers int) func(ctx context.Context, dsn string) (inserter, func(), error) {
	return func(ctx context.Context, dsn string) (inserter, func(), error) {
		eng, pool, err := openLease(ctx, dsn, nil)
		if err != nil {
			return nil, nil, err
		}
		return func(lo, hi int) error {
			return spread(producers, hi-lo, func(i int) error {
				_, err := eng.Enqueue(ctx, noopKind, struct{}{}, port.EnqueueOptions{IdempotencyKey: strconv.Itoa(lo + i)})
				return err
			})
		}, pool.Close, nil
	}
}

// riverNoop is the River job: its argument tells jobs apart, as the
// idempotency key does taskport runs.
type riverNoop struct {
	I int `json:"i"`
}

func (riverNoop) Kind() string { return "compare_noop" }

type riverNoopWorker struct {
	river.WorkerDefaults[riverNoop]
}

func (riverNoopWorker) Work(context.Context, *river.Job[riverNoop]) error { return nil }

// riverManyFast inserts with River's InsertManyFast, its COPY path: no
// result per job (a count), no uniqueness.
func riverManyFast(ctx context.Context, dsn string) (inserter, func(), error) {
	client, closePool, err := riverClient(ctx, dsn)
	if err != nil {
		return nil, nil, err
	}
	return func(lo, hi int) error {
		params := make([]river.InsertManyParams, 0, hi-lo)
		for i := lo; i < hi; i++ {
			params = append(params, river.InsertManyParams{Args: riverNoop{I: i}})
		}
		n, err := client.InsertManyFast(ctx, params)
		if err == nil && n != hi-lo {
			err = fmt.Errorf("InsertManyFast inserted %d of %d", n, hi-lo)
		}
		return err
	}, closePool, nil
}

// riverClient is an insert-only River client (no queues: nothing runs) on
// a freshly migrated database, and the close of its pool.
func riverClient(ctx context.Context, dsn string) (*river.Client[pgx.Tx], func(), error) {
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return nil, nil, fmt.Errorf("open pool: %w", err)
	}
	driver := riverpgxv5.New(pool)
	migrator, err := rivermigrate.New(driver, nil)
	if err == nil {
		_, err = migrator.Migrate(ctx, rivermigrate.DirectionUp, nil)
	}
	var client *river.Client[pgx.Tx]
	if err == nil {
		workers := river.NewWorkers()
		river.AddWorker(workers, riverNoopWorker{})
		client, err = river.NewClient(driver, &river.Config{Workers: workers})
	}
	if err != nil {
		pool.Close()
		return nil, nil, fmt.Errorf("river: %w", err)
	}
	return client, pool.Close, nil
}

// riverMany inserts with River's InsertMany on a migrated database, from
// an insert-only client (no queues: nothing runs).
func riverMany(unique bool) func(ctx context.Context, dsn string) (inserter, func(), error) {
	return func(ctx context.Context, dsn string) (inserter, func(), error) {
		client, closePool, err := riverClient(ctx, dsn)
		if err != nil {
			return nil, nil, err
		}
		var opts *river.InsertOpts
		if unique {
			opts = &river.InsertOpts{UniqueOpts: river.UniqueOpts{ByArgs: true}}
		}
		return func(lo, hi int) error {
			params := make([]river.InsertManyParams, 0, hi-lo)
			for i := lo; i < hi; i++ {
				params = append(params, river.InsertManyParams{Args: riverNoop{I: i}, InsertOpts: opts})
			}
			_, err := client.InsertMany(ctx, params)
			return err
		}, closePool, nil
	}
}
