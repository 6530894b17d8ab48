package runstore_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/internal/runstore"
	"github.com/taskport/taskport/internal/testkit/pgtest"
	"github.com/taskport/taskport/port"
)

// pageAll lists every page of f with the given size and returns the runs
// in order and the size of each page.
func pageAll(t *testing.T, q runstore.DBTX, f port.RunFilter) (ids []port.RunID, sizes []int) {
	t.Helper()
	for {
		page, err := runstore.List(context.Background(), q, runstore.EngineLease, f)
		require.NoError(t, err)
		sizes = append(sizes, len(page))
		for _, v := range page {
			ids = append(ids, v.ID)
		}
		if len(page) < f.Limit {
			return ids, sizes
		}
		f.After = page[len(page)-1].Cursor
	}
}

// Paging walks every run exactly once, newest first, also through runs
// created in one transaction (one created_at: the id breaks the tie), and
// runs inserted after the first page was read do not shift the later ones.
func TestListPagesWithoutGapsOrDuplicates(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	var want []port.RunID // newest first
	insert := func(q runstore.DBTX, key, kind string, status port.Status) port.RunID {
		r := newRun(key)
		r.Kind = port.Kind(kind)
		run, _, err := runstore.Insert(ctx, q, r)
		require.NoError(t, err)
		if status != port.StatusPending {
			require.NoError(t, runstore.Project(ctx, q, run.ID, runstore.Projection{Status: status}))
		}
		return run.ID
	}
	for i := range 4 {
		want = append([]port.RunID{insert(pool, fmt.Sprintf("solo-%d", i), "a.kind", port.StatusFailed)}, want...)
	}
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	var same []port.RunID
	for i := range 5 {
		same = append(same, insert(tx, fmt.Sprintf("tx-%d", i), "b.kind", port.StatusSucceeded))
	}
	require.NoError(t, tx.Commit(ctx))
	// Same created_at: ordered by id, descending.
	var instants int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(DISTINCT created_at) FROM taskport.run WHERE kind = 'b.kind'`).Scan(&instants))
	require.Equal(t, 1, instants, "one transaction, one created_at")
	tied := make([]port.RunID, 0, len(same))
	rows, err := pool.Query(ctx, `SELECT id::text FROM taskport.run WHERE kind = 'b.kind' ORDER BY id DESC`)
	require.NoError(t, err)
	for _, s := range must(pgx.CollectRows(rows, pgx.RowTo[string])) {
		tied = append(tied, port.RunID(s))
	}
	require.ElementsMatch(t, same, tied)
	want = append(tied, want...)

	ids, sizes := pageAll(t, pool, port.RunFilter{Limit: 3})
	require.Equal(t, want, ids, "every run once, newest first")
	require.Equal(t, []int{3, 3, 3, 0}, sizes, "a full last page is followed by an empty one")

	ids, _ = pageAll(t, pool, port.RunFilter{Limit: 2, Statuses: []port.Status{port.StatusFailed}})
	require.Equal(t, want[5:], ids, "one status, paged")
	ids, _ = pageAll(t, pool, port.RunFilter{Limit: 2, Kind: "b.kind"})
	require.Equal(t, want[:5], ids, "one kind, paged")
	ids, _ = pageAll(t, pool, port.RunFilter{Limit: 4, Statuses: []port.Status{port.StatusFailed, port.StatusSucceeded}, BusinessKey: "plan-1"})
	require.Equal(t, want, ids, "several statuses and a business key, paged")

	first, err := runstore.List(ctx, pool, runstore.EngineLease, port.RunFilter{Limit: 3})
	require.NoError(t, err)
	insert(pool, "newer", "a.kind", port.StatusPending)
	rest, _ := pageAll(t, pool, port.RunFilter{Limit: 3, After: first[2].Cursor})
	require.Equal(t, want[3:], rest, "a run created after the first page does not shift the next ones")
}

// A kind's listing merges its versions and statuses (one branch each) into
// one order: every run of the kind once, newest first, and only the
// versions asked for.
func TestListPagesAKindAcrossVersions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	statuses := []port.Status{port.StatusPending, port.StatusFailed, port.StatusSucceeded, port.StatusWaiting}
	var all, below3, v2 []port.RunID // newest first
	for i := range 12 {
		r := newRun(fmt.Sprintf("v-%d", i))
		r.Kind, r.Version = "v.kind", 1+i%3
		run, _, err := runstore.Insert(ctx, pool, r)
		require.NoError(t, err)
		if s := statuses[i%len(statuses)]; s != port.StatusPending {
			require.NoError(t, runstore.Project(ctx, pool, run.ID, runstore.Projection{Status: s}))
		}
		all = append([]port.RunID{run.ID}, all...)
		if r.Version < 3 {
			below3 = append([]port.RunID{run.ID}, below3...)
		}
		if r.Version == 2 {
			v2 = append([]port.RunID{run.ID}, v2...)
		}
		_, _, err = runstore.Insert(ctx, pool, newRun(fmt.Sprintf("other-%d", i)))
		require.NoError(t, err)
	}
	ids, _ := pageAll(t, pool, port.RunFilter{Limit: 5, Kind: "v.kind"})
	require.Equal(t, all, ids, "every version and status of the kind, paged")
	ids, _ = pageAll(t, pool, port.RunFilter{Limit: 5, Kind: "v.kind", BelowVersion: 3})
	require.Equal(t, below3, ids, "versions below 3")
	ids, _ = pageAll(t, pool, port.RunFilter{Limit: 5, Kind: "v.kind", Version: 2})
	require.Equal(t, v2, ids, "version 2")
	ids, _ = pageAll(t, pool, port.RunFilter{Limit: 5, Kind: "v.kind", Version: 2, BelowVersion: 2})
	require.Empty(t, ids, "no version is both 2 and below 2")
	ids, _ = pageAll(t, pool, port.RunFilter{Limit: 5, Kind: "no.kind"})
	require.Empty(t, ids, "a kind without runs")
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// A listing that cannot be served is refused, naming the field.
func TestListRefusesBadFilters(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	for _, tt := range []struct {
		f     port.RunFilter
		field string
	}{
		{port.RunFilter{Limit: -1}, "limit"},
		{port.RunFilter{Limit: port.MaxRunsPerPage + 1}, "limit"},
		{port.RunFilter{Statuses: []port.Status{"dead"}}, "status"},
		{port.RunFilter{Version: -1}, "version"},
		{port.RunFilter{Version: 1 << 40}, "version"},
		{port.RunFilter{Kind: "k", BelowVersion: 1 << 40}, "below_version"},
		{port.RunFilter{After: "not a cursor"}, "after"},
		{port.RunFilter{After: "AAAA"}, "after"},
	} {
		_, err := runstore.List(context.Background(), pool, runstore.EngineLease, tt.f)
		require.ErrorIs(t, err, port.ErrInvalidInput, "%+v", tt.f)
		var fe *port.FieldError
		require.ErrorAs(t, err, &fe)
		require.Equal(t, tt.field, fe.Field)
	}
}

// Every listing the CLI and the admin ask for is served by an index in the
// listing's order: the plan has no Sort and no sequential scan, with custom
// and with generic plans, over a table shaped like a production one (most
// runs succeeded, one in 500 failed: the dead letters an operator pages
// through are the rare rows).
func TestListIsServedByAnIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	_, err := pool.Exec(ctx, `
INSERT INTO taskport.run (id, engine, kind, version, idempotency_key, business_key, input, status, created_at)
SELECT gen_random_uuid(), 'lease', 'kind.' || (i % 20), 1 + i / 20 % 2, 'k' || i, 'plan-' || (i % 5000), '{}',
       CASE WHEN i % 500 = 0 THEN 'failed' WHEN i % 50 = 0 THEN 'waiting' ELSE 'succeeded' END,
       now() - i * interval '1 second'
FROM generate_series(1, 20000) AS i`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `ANALYZE taskport.run`)
	require.NoError(t, err)
	page, err := runstore.List(ctx, pool, runstore.EngineLease, port.RunFilter{Limit: 10})
	require.NoError(t, err)
	cursor := page[9].Cursor

	for _, tt := range []struct {
		name  string
		f     port.RunFilter
		index string
	}{
		{"every run", port.RunFilter{}, "run_status_created"},
		{"every run, next page", port.RunFilter{After: cursor}, "run_status_created"},
		{"dead letters", port.RunFilter{Statuses: []port.Status{port.StatusFailed}, After: cursor}, "run_status_created"},
		{"two statuses", port.RunFilter{Statuses: []port.Status{port.StatusFailed, port.StatusWaiting}}, "run_status_created"},
		{"one kind", port.RunFilter{Kind: "kind.3", After: cursor}, "run_kind_version_status_created"},
		{"one kind and version", port.RunFilter{Kind: "kind.3", Version: 2}, "run_kind_version_status_created"},
		{"a business key", port.RunFilter{BusinessKey: "plan-7"}, "run_business_key"},
		// /admin's "open runs still on an old version" of each kind.
		{"open runs of a kind on old versions", port.RunFilter{Kind: "kind.3", BelowVersion: 2,
			Statuses: []port.Status{port.StatusPending, port.StatusRunning, port.StatusWaiting}}, "run_kind_version_status_created"},
	} {
		for _, generic := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/generic=%v", tt.name, generic), func(t *testing.T) {
				sql, args, err := runstore.ListQuery(ctx, pool, runstore.EngineLease, tt.f)
				require.NoError(t, err)
				tx, err := pool.Begin(ctx)
				require.NoError(t, err)
				defer tx.Rollback(ctx) //nolint:errcheck // read only
				var rows pgx.Rows
				if generic {
					// A generic plan is what a prepared statement (pgx
					// caches them) may switch to after five runs; it
					// does not depend on the values, so NULLs stand in.
					_, err = tx.Exec(ctx, `SET LOCAL plan_cache_mode = force_generic_plan`)
					require.NoError(t, err)
					_, err = tx.Exec(ctx, `PREPARE listing AS `+sql)
					require.NoError(t, err)
					// Prepared statements outlive the transaction.
					defer tx.Conn().Exec(ctx, `DEALLOCATE listing`) //nolint:errcheck // the test fails on its own if this leaks
					rows, err = tx.Query(ctx, `EXPLAIN EXECUTE listing(`+strings.Repeat("NULL, ", len(args)-1)+`NULL)`)
				} else {
					rows, err = tx.Query(ctx, `EXPLAIN `+sql, args...)
				}
				require.NoError(t, err)
				plan := strings.Join(must(pgx.CollectRows(rows, pgx.RowTo[string])), "\n")
				t.Logf("%s\n%s", sql, plan)
				require.Contains(t, plan, tt.index)
				require.NotContains(t, plan, "Seq Scan")
				// A plan's runs, and a kind's open runs on old versions,
				// are a handful found by key: sorting them is bounded.
				// Merge Append prints a "Sort Key" of its own.
				if tt.index != "run_business_key" && tt.f.BelowVersion == 0 {
					require.NotRegexp(t, `(?m)(^|->  )(Incremental )?Sort  \(`, plan, "the index yields the listing's order")
				}
			})
		}
	}
}
