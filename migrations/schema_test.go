package migrations_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/internal/testkit/pgtest"
)

var updateSchema = flag.Bool("update", false, "rewrite testdata/schema.golden from the embedded migrations")

// schemaGolden is the catalog after each migration, as the shipped
// migrations left it. A migration rewritten for a running system (the online
// pattern of docs/migrations.md) must leave exactly the schema its shipped
// form left, at its own version, or databases migrated by earlier releases
// and new ones would differ from then on. The file was generated from the
// migrations as they shipped, before any was rewritten; regenerate it
// (go test -run TestSchemaAfterEachMigration ./migrations/ -update) only for
// a new migration, never to make a rewrite pass.
var schemaGolden = filepath.Join("testdata", "schema.golden")

// TestSchemaAfterEachMigration applies the migrations one by one to an
// empty database and compares the catalog after each with the golden file.
func TestSchemaAfterEachMigration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Connect(t, pgtest.NewEmptyDatabase(t))
	provider := gooseProvider(t, pool)
	var got strings.Builder
	for {
		res, err := provider.UpByOne(ctx)
		if err != nil {
			require.ErrorContains(t, err, "no next version")
			break
		}
		fmt.Fprintf(&got, "== after %05d\n%s", res.Source.Version, dumpSchema(t, ctx, pool))
	}
	if *updateSchema {
		require.NoError(t, os.MkdirAll(filepath.Dir(schemaGolden), 0o755))
		require.NoError(t, os.WriteFile(schemaGolden, []byte(got.String()), 0o644))
		return
	}
	want, err := os.ReadFile(schemaGolden)
	require.NoError(t, err)
	require.Equal(t, string(want), got.String(), "the catalog after a migration differs from the shipped migrations'")
}

// schemaQueries read what a migration defines in the schemas taskport owns:
// columns in their order (type, collation, nullability, default, identity,
// generation), constraints (with whether they are validated), indexes (with
// whether they are valid), functions, triggers, sequences' definitions (not
// their values) and extensions. goose's version tables are left out.
var schemaQueries = []string{
	`SELECT format('column %s.%s %s %s collate=%s notnull=%s default=%s identity=%s generated=%s',
	        n.nspname, c.relname, a.attname, format_type(a.atttypid, a.atttypmod),
	        coalesce(co.collname, '-'), a.attnotnull, coalesce(pg_get_expr(d.adbin, d.adrelid), '-'),
	        nullif(a.attidentity, ''), nullif(a.attgenerated, ''))
	 FROM pg_attribute a
	 JOIN pg_class c ON c.oid = a.attrelid
	 JOIN pg_namespace n ON n.oid = c.relnamespace
	 LEFT JOIN pg_collation co ON co.oid = a.attcollation AND a.attcollation <> 0
	 LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
	 WHERE n.nspname IN ('public', 'taskport', 'taskport_lease') AND c.relkind IN ('r', 'p', 'v', 'm')
	   AND c.relname !~ '^taskport_(schema|engine|media)_migrations$' AND a.attnum > 0 AND NOT a.attisdropped
	 ORDER BY n.nspname, c.relname, a.attnum`,
	`SELECT format('constraint %s.%s %s %s validated=%s', n.nspname, c.relname, k.conname, pg_get_constraintdef(k.oid), k.convalidated)
	 FROM pg_constraint k
	 JOIN pg_class c ON c.oid = k.conrelid
	 JOIN pg_namespace n ON n.oid = c.relnamespace
	 WHERE n.nspname IN ('public', 'taskport', 'taskport_lease') AND c.relname !~ '^taskport_(schema|engine|media)_migrations$'
	 ORDER BY 1`,
	`SELECT format('index %s valid=%s', pg_get_indexdef(i.indexrelid), i.indisvalid)
	 FROM pg_index i
	 JOIN pg_class c ON c.oid = i.indrelid
	 JOIN pg_namespace n ON n.oid = c.relnamespace
	 WHERE n.nspname IN ('public', 'taskport', 'taskport_lease') AND c.relname !~ '^taskport_(schema|engine|media)_migrations$'
	 ORDER BY 1`,
	`SELECT format('function %s', pg_get_functiondef(p.oid))
	 FROM pg_proc p
	 JOIN pg_namespace n ON n.oid = p.pronamespace
	 WHERE n.nspname IN ('public', 'taskport', 'taskport_lease')
	   AND NOT EXISTS (SELECT 1 FROM pg_depend dep WHERE dep.objid = p.oid AND dep.deptype = 'e')
	 ORDER BY 1`,
	`SELECT format('trigger %s', pg_get_triggerdef(t.oid))
	 FROM pg_trigger t
	 JOIN pg_class c ON c.oid = t.tgrelid
	 JOIN pg_namespace n ON n.oid = c.relnamespace
	 WHERE n.nspname IN ('public', 'taskport', 'taskport_lease') AND NOT t.tgisinternal
	 ORDER BY 1`,
	`SELECT format('sequence %s.%s %s start=%s increment=%s min=%s max=%s cache=%s cycle=%s owned_by=%s',
	        schemaname, sequencename, data_type, start_value, increment_by, min_value, max_value, cache_size, cycle,
	        coalesce((SELECT format('%s.%s', dc.relname, a.attname)
	                  FROM pg_depend dep
	                  JOIN pg_class dc ON dc.oid = dep.refobjid
	                  JOIN pg_attribute a ON a.attrelid = dep.refobjid AND a.attnum = dep.refobjsubid
	                  WHERE dep.objid = format('%I.%I', schemaname, sequencename)::regclass
	                    AND dep.classid = 'pg_class'::regclass AND dep.refobjsubid > 0), '-'))
	 FROM pg_sequences
	 WHERE schemaname IN ('public', 'taskport', 'taskport_lease') AND sequencename !~ '^taskport_(schema|engine|media)_migrations_'
	 ORDER BY 1`,
	`SELECT format('extension %s', extname) FROM pg_extension WHERE extname <> 'plpgsql' ORDER BY 1`,
	`SELECT format('schema %s', nspname) FROM pg_namespace WHERE nspname IN ('public', 'taskport', 'taskport_lease') ORDER BY 1`,
}

func dumpSchema(t *testing.T, ctx context.Context, pool *pgxpool.Pool) string {
	t.Helper()
	var b strings.Builder
	for _, q := range schemaQueries {
		rows, err := pool.Query(ctx, q)
		require.NoError(t, err)
		for rows.Next() {
			var line string
			require.NoError(t, rows.Scan(&line))
			b.WriteString(line)
			b.WriteByte('\n')
		}
		require.NoError(t, rows.Err())
	}
	return b.String()
}
