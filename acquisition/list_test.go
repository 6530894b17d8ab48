package acquisition

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/internal/testkit/pgtest"
)

// The plans list stays an index scan at scale: with 50,000 plans (statuses
// mixed, one in a thousand failed; analyzed), the first page, a deep page by
// cursor, a page of the rare status, a title search and a hash search each
// read through their index and never scan the table. The plans are logged
// (go test -v -run TestPlanListUsesIndexes ./acquisition/).
func TestPlanListUsesIndexes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	_, err := pool.Exec(ctx, `
INSERT INTO plan (id, title, source_type, source, info_hash, target_path, expected_size, expected_sha256, status, created_at)
SELECT gen_random_uuid(), 'film ' || i, 'magnet', 'magnet:?xt=urn:btih:' || lpad(to_hex(i), 40, '0'),
       lpad(to_hex(i), 40, '0'), '/lib/film-' || i, i, repeat('a', 64),
       CASE WHEN i % 1000 = 0 THEN 'failed'
            ELSE (ARRAY['awaiting_approval','downloading','completed','canceled','abandoned'])[i % 5 + 1] END,
       now() - i * interval '1 second'
FROM generate_series(1, 50000) AS i`)
	require.NoError(t, err)
	// The title search's estimate comes from the histogram of the sample
	// ANALYZE draws: with the default target (30,000 of the 50,000 rows),
	// whether a histogram entry happens to match '%film 4242%' decides
	// between the trigram index and a walk of plan_newest (CI saw both).
	// A target that samples every row makes the statistics, and the plan,
	// the same on every run.
	_, err = pool.Exec(ctx, `ALTER TABLE plan ALTER COLUMN title SET STATISTICS 10000`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `ANALYZE plan`)
	require.NoError(t, err)
	var mid PlanCursor
	require.NoError(t, pool.QueryRow(ctx, `SELECT created_at, id FROM plan ORDER BY created_at DESC, id DESC OFFSET 30000 LIMIT 1`).
		Scan(&mid.CreatedAt, &mid.ID))

	for name, c := range map[string]struct {
		f     PlanFilter
		index string
	}{
		"first page":       {PlanFilter{Limit: 51}, "plan_newest"},
		"deep page":        {PlanFilter{After: mid, Limit: 51}, "plan_newest"},
		"page of a status": {PlanFilter{Status: Failed, After: mid, Limit: 51}, "plan_status_newest"},
		"title search":     {PlanFilter{TitleContains: "film 4242", Limit: 51}, "plan_title_trgm"},
		"info hash search": {PlanFilter{InfoHash: strings.Repeat("0", 36) + "1092", Limit: 51}, "plan_info_hash"},
	} {
		f := c.f
		sql, args, err := build(ctx, listPlansStmt(f))
		require.NoError(t, err)
		var out []byte
		require.NoError(t, pool.QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+sql, args...).Scan(&out))
		var plan []struct{ Plan json.RawMessage }
		require.NoError(t, json.Unmarshal(out, &plan))
		text := string(plan[0].Plan)
		var pretty strings.Builder
		explain, err := pool.Query(ctx, "EXPLAIN "+sql, args...)
		require.NoError(t, err)
		for explain.Next() {
			var line string
			require.NoError(t, explain.Scan(&line))
			pretty.WriteString("\n  " + line)
		}
		require.NoError(t, explain.Err())
		t.Logf("%s: %s%s", name, sql, pretty.String())
		require.NotContains(t, text, `"Seq Scan"`, name)
		require.Contains(t, text, `"Index Name": "`+c.index+`"`, name)
	}
}

// Filters combine, a search for % or _ matches those characters only, and
// keyset pages cover every plan once even when plans share a creation time.
func TestPlanListFiltersAndPages(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	// Five plans created in one transaction share created_at: the id
	// orders them.
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	var all []uuid.UUID
	for i, title := range []string{"100% real", "100 real", "a_b", "axb", "other"} {
		hash := strings.Repeat("0", 39) + string(rune('1'+i))
		p, err := InsertPlan(ctx, tx, Plan{ID: uuid.Must(uuid.NewV7()), Title: title, SourceType: "magnet", Source: "magnet:?xt=urn:btih:" + hash,
			InfoHash: hash, TargetPath: "/lib/" + title, ExpectedSize: 1, ExpectedSHA256: strings.Repeat("a", 64)})
		require.NoError(t, err)
		all = append(all, p.ID)
	}
	require.NoError(t, tx.Commit(ctx))
	_, err = pool.Exec(ctx, `UPDATE plan SET status = 'canceled' WHERE title IN ('axb', 'other')`)
	require.NoError(t, err)

	titles := func(f PlanFilter) []string {
		f.Limit = 10
		ps, err := ListPlans(ctx, pool, f)
		require.NoError(t, err)
		var out []string
		for _, p := range ps {
			out = append(out, p.Title)
		}
		return out
	}
	require.Equal(t, []string{"100% real"}, titles(PlanFilter{TitleContains: "0%"}))
	require.Equal(t, []string{"a_b"}, titles(PlanFilter{TitleContains: "_"}))
	require.Equal(t, []string{"axb"}, titles(PlanFilter{TitleContains: "X", Status: Canceled}), "case ignored, status combined")
	require.Empty(t, titles(PlanFilter{TitleContains: "a_b", Status: Canceled}))
	require.Equal(t, []string{"a_b"}, titles(PlanFilter{InfoHash: strings.Repeat("0", 39) + "3"}))
	require.Equal(t, []string{"other"}, titles(PlanFilter{ID: all[4]}))

	var seen []uuid.UUID
	f := PlanFilter{Limit: 2}
	for range 10 {
		ps, err := ListPlans(ctx, pool, f)
		require.NoError(t, err)
		for _, p := range ps {
			seen = append(seen, p.ID)
		}
		if len(ps) < f.Limit {
			break
		}
		f.After = ps[len(ps)-1].Cursor()
		require.False(t, f.After.CreatedAt.IsZero())
	}
	require.ElementsMatch(t, all, seen, "every plan once")
	require.Len(t, seen, len(all))
}
