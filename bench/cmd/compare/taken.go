package main

// `compare taken` prices EnqueueMany's path for keys already taken
// (runstore.insertBatch: a plain insert first, ON CONFLICT DO NOTHING only
// after it fails). Per batch it times three calls on the lease engine, one
// producer, nothing executed:
//
//   - new keys: the common case, one statement;
//   - the same batch again, every key taken: the plain insert fails at its
//     first row, then the batch runs with ON CONFLICT;
//   - new keys but the last in key order taken: the worst case, the plain
//     insert writes every row before it fails.
//
// Each round gets a fresh database; the table gives the median round's mean
// per batch.
//
//	go run ./cmd/compare taken -batches 20 -batch 1000 -rounds 5 -db $TEST_DATABASE_URL

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/taskport/taskport/port"
)

func runTaken(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("compare taken", flag.ContinueOnError)
	var (
		dbURL   = fs.String("db", os.Getenv("TEST_DATABASE_URL"), "Postgres server URL (an admin database: fresh databases are created beside it)")
		batches = fs.Int("batches", 20, "batches per round")
		size    = fs.Int("batch", 1000, "items per EnqueueMany call")
		rounds  = fs.Int("rounds", 5, "rounds; the median is reported")
	)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *batches < 1 || *size < 2 || *rounds < 1 {
		return errors.New("-batches and -rounds must be at least 1, -batch at least 2")
	}
	admin, err := connectAdmin(ctx, *dbURL)
	if err != nil {
		return err
	}
	defer admin.Close(context.WithoutCancel(ctx))
	names := []string{"new keys", "every key taken", "last key taken"}
	got := make([][]time.Duration, len(names))
	for round := range *rounds {
		per, err := takenRound(ctx, admin, *dbURL, *batches, *size)
		if err != nil {
			return fmt.Errorf("round %d: %w", round+1, err)
		}
		for i, d := range per {
			fmt.Fprintf(os.Stderr, "round %d: %s: %v per batch\n", round+1, names[i], d)
			got[i] = append(got[i], d)
		}
	}
	fmt.Printf("\nlease EnqueueMany, batches of %d, %d per round, median of %d rounds\n", *size, *batches, *rounds)
	fmt.Printf("%-18s %14s %10s\n", "batch", "ms per batch", "vs new")
	base := medianDuration(got[0])
	for i, name := range names {
		m := medianDuration(got[i])
		fmt.Printf("%-18s %14.2f %9.2fx\n", name, float64(m)/float64(time.Millisecond), float64(m)/float64(base))
	}
	return nil
}

// takenRound runs one round on a fresh database and returns the mean time
// per batch of each kind of call.
func takenRound(ctx context.Context, admin *pgx.Conn, server string, batches, size int) ([]time.Duration, error) {
	_, dsn, drop, err := freshDB(ctx, admin, server, "taken", 4)
	if err != nil {
		return nil, err
	}
	defer drop()
	eng, pool, err := openLease(ctx, dsn, nil)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	// Keys of one width sort as their numbers, so the last item is the
	// last key in key order, the order the insert takes them in.
	items := func(lo, hi int) []port.EnqueueItem {
		out := make([]port.EnqueueItem, 0, hi-lo)
		for i := lo; i < hi; i++ {
			out = append(out, port.EnqueueItem{Kind: noopKind, Input: struct{}{},
				Options: port.EnqueueOptions{IdempotencyKey: fmt.Sprintf("%09d", i)}})
		}
		return out
	}
	spent := make([]time.Duration, 3)
	timed := func(i int, batch []port.EnqueueItem) error {
		start := time.Now()
		_, err := eng.EnqueueMany(ctx, batch)
		spent[i] += time.Since(start)
		return err
	}
	for b := range batches {
		lo := 2 * b * size
		next := items(lo+size, lo+2*size)
		err := errors.Join(timed(0, items(lo, lo+size)), timed(1, items(lo, lo+size)))
		if err == nil {
			_, err = eng.EnqueueMany(ctx, next[len(next)-1:]) // untimed: takes the last key
		}
		if err == nil {
			err = timed(2, next)
		}
		if err != nil {
			return nil, err
		}
	}
	for i := range spent {
		spent[i] /= time.Duration(batches)
	}
	return spent, nil
}

func medianDuration(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
