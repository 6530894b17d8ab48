package leaseadapter

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskport/taskport/internal/testkit/pgtest"
)

// BenchmarkClaimBesideUnserved is issue 28's "no cliff for work nobody
// serves": the time of a claim and of a queue-depth sample, as a worker
// runs them, beside no ready runs it does not serve and beside a million
// of them (half a retired version of the served kind, half another kind,
// at three priorities, all due). Run it once:
//
//	TASKPORT_UNSERVED_ROWS=1000000 TASKPORT_UNSERVED_SAMPLES=500 TASKPORT_UNSERVED_ROUNDS=3 \
//	go test -run '^$' -bench ClaimBesideUnserved -benchtime 1x -timeout 20m ./leaseadapter
//
// Each side has its own database, seeded once and vacuumed, with as many
// ready runs of the served pair k@1 as the claims take (8 each). Per round,
// the sides in turns (the first one alternating), S claims (pinned plan,
// claim, commit: the served backlog drains as a worker's would) and S
// samples are timed one by one. The goal is p99 within 1.2x of the side
// with none.
func BenchmarkClaimBesideUnserved(b *testing.B) {
	rows := envInt(b, "TASKPORT_UNSERVED_ROWS", 1000000)
	samples := envInt(b, "TASKPORT_UNSERVED_SAMPLES", 500)
	rounds := envInt(b, "TASKPORT_UNSERVED_ROUNDS", 3)
	ctx := context.Background()
	sides := []struct {
		name string
		rows int
		pool *pgxpool.Pool
	}{{name: "none", rows: 0}, {name: strconv.Itoa(rows), rows: rows}}
	for i := range sides {
		pool := pgtest.NewPool(b)
		if sides[i].rows > 0 {
			_, err := pool.Exec(ctx, `
INSERT INTO taskport.run (id, engine, kind, version, idempotency_key, input, available_at, next_run_at, max_attempts,
  backoff_initial, backoff_max, backoff_coefficient, priority)
SELECT gen_random_uuid(), 'lease', CASE WHEN g % 2 = 0 THEN 'k' ELSE 'z' END, CASE WHEN g % 2 = 0 THEN 2 ELSE 1 END,
  'u' || g, '{}', a.at, a.at, 3, '1s', '1m', 2, g % 3 - 1
FROM generate_series(1, $1::int) g, LATERAL (SELECT now() - interval '1 day' + g * interval '1 millisecond' AS at) a`, sides[i].rows)
			if err != nil {
				b.Fatal(err)
			}
		}
		_, err := pool.Exec(ctx, `
INSERT INTO taskport.run (id, engine, kind, version, idempotency_key, input, max_attempts, backoff_initial, backoff_max,
  backoff_coefficient, next_run_at)
SELECT gen_random_uuid(), 'lease', 'k', 1, 's' || g, '{}', 3, '1s', '1m', 2, now() - interval '2 days' + g * interval '1 millisecond'
FROM generate_series(1, $1::int) g`, 8*samples*rounds)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `VACUUM ANALYZE taskport.run`); err != nil {
			b.Fatal(err)
		}
		sides[i].pool = pool
	}
	kinds, versions := []string{"k"}, []int32{1}
	claim := func(pool *pgxpool.Pool) error {
		n := 0
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, claimPlanSQL); err != nil {
				return err
			}
			rows, err := tx.Query(ctx, claimSQL, kinds, 8, "bench", int64(10000), versions)
			if err != nil {
				return err
			}
			for rows.Next() {
				n++
			}
			return rows.Err()
		})
		if err == nil && n != 8 {
			err = fmt.Errorf("claimed %d runs, want 8 of the served backlog", n)
		}
		return err
	}
	sample := func(pool *pgxpool.Pool) error {
		var n int
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, claimPlanSQL); err != nil {
				return err
			}
			return tx.QueryRow(ctx, queueDepthSQL, kinds, versions).Scan(&n)
		})
	}
	type timings struct{ claim, depth []time.Duration }
	got := make([]timings, len(sides))
	b.ResetTimer()
	for r := range rounds {
		for j := range sides {
			i := (j + r) % len(sides)
			for range samples {
				start := time.Now()
				if err := claim(sides[i].pool); err != nil {
					b.Fatal(err)
				}
				got[i].claim = append(got[i].claim, time.Since(start))
				start = time.Now()
				if err := sample(sides[i].pool); err != nil {
					b.Fatal(err)
				}
				got[i].depth = append(got[i].depth, time.Since(start))
			}
		}
	}
	b.StopTimer()
	pct := func(d []time.Duration, p float64) time.Duration {
		s := slices.Clone(d)
		slices.Sort(s)
		return s[min(len(s)-1, int(p*float64(len(s))))]
	}
	base := got[0]
	fmt.Printf("\nclaim and queue-depth sample beside ready runs nobody serves (%d rounds x %d samples; goal: p99 <= 1.2x none)\n", rounds, samples)
	fmt.Printf("%-12s %10s %10s %8s %10s %10s %8s\n", "unserved", "claim p50", "claim p99", "x none", "depth p50", "depth p99", "x none")
	for i, s := range sides {
		g := got[i]
		fmt.Printf("%-12s %10s %10s %8.2f %10s %10s %8.2f\n", s.name,
			pct(g.claim, 0.5).Round(time.Microsecond), pct(g.claim, 0.99).Round(time.Microsecond),
			float64(pct(g.claim, 0.99))/float64(pct(base.claim, 0.99)),
			pct(g.depth, 0.5).Round(time.Microsecond), pct(g.depth, 0.99).Round(time.Microsecond),
			float64(pct(g.depth, 0.99))/float64(pct(base.depth, 0.99)))
	}
}

// envInt reads a positive int from the environment, def when unset.
func envInt(b *testing.B, name string, def int) int {
	b.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		b.Fatalf("%s=%q: want a positive number", name, v)
	}
	return n
}
