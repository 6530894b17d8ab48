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
//     is (UNIQUE(kind, idempotency_key)).
//
// Nothing is executed: no worker runs. Each measurement gets a fresh
// database on the same server; the modes alternate round by round so that
// all see the same swings of a shared machine, and the median round is
// reported. A taskport run writes two rows (taskport.run, the idempotency
// authority and projection, and the task row); a River job one.
//
//	go run ./cmd/compare enqueue -n 20000 -batch 1000 -rounds 5 -db $TEST_DATABASE_URL

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/taskport/taskport/leaseadapter"
	"github.com/taskport/taskport/port"
)

func runEnqueue(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("compare enqueue", flag.ContinueOnError)
	var (
		dbURL     = fs.String("db", os.Getenv("TEST_DATABASE_URL"), "Postgres server URL (an admin database: fresh databases are created beside it)")
		runs      = fs.Int("n", 20000, "runs per measurement")
		batch     = fs.Int("batch", 1000, "items per EnqueueMany / InsertMany call")
		producers = fs.Int("producers", 8, "goroutines calling Enqueue one run at a time")
		rounds    = fs.Int("rounds", 5, "alternating rounds per mode; the median is reported")
		pool      = fs.Int("pool", 20, "connections per mode (pool_max_conns)")
	)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dbURL == "" {
		return errors.New("-db (or TEST_DATABASE_URL) is required")
	}
	if *batch < 1 || *producers < 1 || *runs < 1 {
		return errors.New("-n, -batch and -producers must be at least 1")
	}
	perBatch := strconv.Itoa(*batch) + " runs"
	modes := []struct {
		name, perCall string
		par           int // the runner's c: the batch size or the producers
		fn            runner
	}{
		{"lease EnqueueMany", perBatch, *batch, enqueueLeaseMany},
		{"lease Enqueue", "1 run, " + strconv.Itoa(*producers) + " prod.", *producers, enqueueLeaseOne},
		{"river InsertMany", perBatch, *batch, insertRiver(false)},
		{"river InsertMany unique", perBatch, *batch, insertRiver(true)},
	}
	got := make([][]result, len(modes))
	for range max(*rounds, 1) {
		for i, m := range modes {
			r, err := measure(ctx, *dbURL, *pool, "enqueue", m.par, *runs, m.fn)
			if err != nil {
				return fmt.Errorf("%s: %w", m.name, err)
			}
			got[i] = append(got[i], r)
		}
	}
	many := median(got[0]).runsPerSec
	fmt.Printf("\n%d runs per round, median of %d rounds\n", *runs, max(*rounds, 1))
	fmt.Printf("%-24s %-18s %10s %12s %17s\n", "mode", "per call", "runs/s", "commits/run", "EnqueueMany/this")
	for i, m := range modes {
		r := median(got[i])
		fmt.Printf("%-24s %-18s %10.0f %12.3f %16.2fx\n", m.name, m.perCall, r.runsPerSec, r.commitsRun, many/r.runsPerSec)
	}
	return nil
}

// inBatches calls fn with [lo, hi) ranges of at most size covering [0, n).
func inBatches(n, size int, fn func(lo, hi int) error) error {
	for lo := 0; lo < n; lo += size {
		if err := fn(lo, min(lo+size, n)); err != nil {
			return err
		}
	}
	return nil
}

// timeLease times fn on a lease engine over the database at dbURL.
func timeLease(ctx context.Context, dbURL string, fn func(*leaseadapter.Engine) error) (time.Duration, error) {
	eng, pool, err := openLease(ctx, dbURL, nil)
	if err != nil {
		return 0, err
	}
	defer pool.Close()
	start := time.Now()
	err = fn(eng)
	return time.Since(start), err
}

func enqueueLeaseMany(ctx context.Context, dbURL string, batch, n int) (time.Duration, error) {
	return timeLease(ctx, dbURL, func(eng *leaseadapter.Engine) error {
		return inBatches(n, batch, func(lo, hi int) error {
			items := make([]port.EnqueueItem, 0, hi-lo)
			for i := lo; i < hi; i++ {
				items = append(items, port.EnqueueItem{Kind: noopKind, Input: struct{}{},
					Options: port.EnqueueOptions{IdempotencyKey: strconv.Itoa(i)}})
			}
			_, err := eng.EnqueueMany(ctx, items)
			return err
		})
	})
}

func enqueueLeaseOne(ctx context.Context, dbURL string, producers, n int) (time.Duration, error) {
	return timeLease(ctx, dbURL, func(eng *leaseadapter.Engine) error {
		return spread(producers, n, func(i int) error {
			_, err := eng.Enqueue(ctx, noopKind, struct{}{}, port.EnqueueOptions{IdempotencyKey: strconv.Itoa(i)})
			return err
		})
	})
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

// insertRiver inserts with River's InsertMany on a migrated database, from
// an insert-only client (no queues: nothing runs).
func insertRiver(unique bool) runner {
	return func(ctx context.Context, dbURL string, batch, n int) (time.Duration, error) {
		pool, err := pgxpool.New(ctx, dbURL)
		if err != nil {
			return 0, fmt.Errorf("open pool: %w", err)
		}
		defer pool.Close()
		driver := riverpgxv5.New(pool)
		migrator, err := rivermigrate.New(driver, nil)
		if err != nil {
			return 0, err
		}
		if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
			return 0, fmt.Errorf("river migrate: %w", err)
		}
		workers := river.NewWorkers()
		river.AddWorker(workers, riverNoopWorker{})
		client, err := river.NewClient[pgx.Tx](driver, &river.Config{Workers: workers})
		if err != nil {
			return 0, err
		}
		var opts *river.InsertOpts
		if unique {
			opts = &river.InsertOpts{UniqueOpts: river.UniqueOpts{ByArgs: true}}
		}
		start := time.Now()
		err = inBatches(n, batch, func(lo, hi int) error {
			params := make([]river.InsertManyParams, 0, hi-lo)
			for i := lo; i < hi; i++ {
				params = append(params, river.InsertManyParams{Args: riverNoop{I: i}, InsertOpts: opts})
			}
			_, err := client.InsertMany(ctx, params)
			return err
		})
		return time.Since(start), err
	}
}
