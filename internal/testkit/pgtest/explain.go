package pgtest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// EnvBacklog names the variable that sets how many finished rows the
// plan tests seed (BacklogRows); unset, a million.
const EnvBacklog = "TASKPORT_EXPLAIN_ROWS"

// BacklogRows is the size of the finished backlog the plan tests seed:
// TASKPORT_EXPLAIN_ROWS, or 1,000,000 (the million-run backlog).
// It is at least 100,000: on smaller tables a sequential scan or a sort is
// the planner's right choice (at 20,000 runs it hashes the run table for a
// batch of 3,000 deletes), and the plans under test are those of a backlog.
func BacklogRows(tb testing.TB) int {
	tb.Helper()
	v := os.Getenv(EnvBacklog)
	if v == "" {
		return 1_000_000
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 100_000 {
		tb.Fatalf("pgtest: %s=%q: want a number of rows, at least 100000", EnvBacklog, v)
	}
	return n
}

// Seed runs the statements that fill a plan test's tables, in order; a
// statement that names $1 gets n, the backlog size, as $1.
func Seed(tb testing.TB, q interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}, n int, statements ...string) {
	tb.Helper()
	for _, sql := range statements {
		var args []any
		if strings.Contains(sql, "$1") {
			args = append(args, n)
		}
		if _, err := q.Exec(context.Background(), sql, args...); err != nil {
			tb.Fatalf("pgtest: seed: %v\n%s", err, sql)
		}
	}
}

// Querier is what Explain needs: a pool, a connection or a transaction.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// PlanNode is one node of an EXPLAIN (FORMAT JSON) plan. The actual rows
// and the buffer counts are set by ExplainAnalyze only; they include the
// node's children and the subplans it ran.
type PlanNode struct {
	NodeType    string     `json:"Node Type"`
	Relation    string     `json:"Relation Name"`
	Index       string     `json:"Index Name"`
	SubplanName string     `json:"Subplan Name"` // e.g. "CTE c"
	Plans       []PlanNode `json:"Plans"`
	ActualRows  float64    `json:"Actual Rows"`
	SharedHit   int64      `json:"Shared Hit Blocks"`
	SharedRead  int64      `json:"Shared Read Blocks"`
}

// Pages is the number of shared buffers (pages of tables and indexes) the
// node and those below it read, from the cache or not, as ExplainAnalyze
// measured it.
func (n PlanNode) Pages() int64 { return n.SharedHit + n.SharedRead }

// Plan is the plan of one statement, as EXPLAIN (FORMAT JSON) returns it.
type Plan struct {
	Root PlanNode
	Raw  string
}

// Explain plans sql with args (a custom plan: the values are known when it
// is planned, as for the first executions of a prepared statement).
func Explain(tb testing.TB, q Querier, sql string, args ...any) Plan {
	tb.Helper()
	return explain(tb, q, "FORMAT JSON", sql, args...)
}

// ExplainAnalyze runs sql with args under EXPLAIN (ANALYZE, BUFFERS) and
// returns its plan with the rows and pages each node read. It executes the
// statement: run it in a transaction that is rolled back.
func ExplainAnalyze(tb testing.TB, q Querier, sql string, args ...any) Plan {
	tb.Helper()
	return explain(tb, q, "ANALYZE, BUFFERS, FORMAT JSON", sql, args...)
}

// ExplainGeneric returns the generic plan of sql: the plan a prepared
// statement runs with whatever arguments once Postgres prefers it to
// custom plans (after five executions, when it is not dearer than they
// were), or at once under plan_cache_mode force_generic_plan. Explain
// never shows it: EXPLAIN plans a statement for the values of its
// arguments. It prepares sql in tx, turns force_generic_plan on for the
// rest of tx, explains an EXECUTE of it with args written as literals of
// the parameters' types (EXECUTE takes no bind parameters), and
// deallocates it.
func ExplainGeneric(tb testing.TB, tx pgx.Tx, sql string, args ...any) Plan {
	tb.Helper()
	return explainGeneric(tb, tx, "FORMAT JSON", sql, args...)
}

// ExplainAnalyzeGeneric is ExplainAnalyze of the generic plan
// (ExplainGeneric). It executes the statement: roll tx back.
func ExplainAnalyzeGeneric(tb testing.TB, tx pgx.Tx, sql string, args ...any) Plan {
	tb.Helper()
	return explainGeneric(tb, tx, "ANALYZE, BUFFERS, FORMAT JSON", sql, args...)
}

func explainGeneric(tb testing.TB, tx pgx.Tx, options, sql string, args ...any) Plan {
	tb.Helper()
	ctx := context.Background()
	const name = "pgtest_generic"
	sd, err := tx.Prepare(ctx, name, sql)
	if err != nil {
		tb.Fatalf("pgtest: prepare: %v\n%s", err, sql)
	}
	defer func() {
		if err := tx.Conn().Deallocate(ctx, name); err != nil {
			tb.Errorf("pgtest: deallocate: %v", err)
		}
	}()
	if len(args) != len(sd.ParamOIDs) {
		tb.Fatalf("pgtest: %d arguments for %d parameters\n%s", len(args), len(sd.ParamOIDs), sql)
	}
	lits := make([]string, len(args))
	for i, arg := range args {
		var typ, lit string
		if err := tx.QueryRow(ctx, `SELECT format_type($1, NULL)`, sd.ParamOIDs[i]).Scan(&typ); err != nil {
			tb.Fatalf("pgtest: type of parameter $%d: %v", i+1, err)
		}
		if err := tx.QueryRow(ctx, `SELECT quote_nullable(($1::`+typ+`)::text)`, arg).Scan(&lit); err != nil {
			tb.Fatalf("pgtest: parameter $%d as %s: %v", i+1, typ, err)
		}
		lits[i] = lit + "::" + typ
	}
	if _, err := tx.Exec(ctx, `SELECT set_config('plan_cache_mode', 'force_generic_plan', true)`); err != nil {
		tb.Fatalf("pgtest: force_generic_plan: %v", err)
	}
	execute := "EXECUTE " + name
	if len(lits) > 0 {
		execute += "(" + strings.Join(lits, ", ") + ")"
	}
	return explain(tb, tx, options, execute)
}

func explain(tb testing.TB, q Querier, options, sql string, args ...any) Plan {
	tb.Helper()
	var raw []byte
	if err := q.QueryRow(context.Background(), "EXPLAIN ("+options+") "+sql, args...).Scan(&raw); err != nil {
		tb.Fatalf("pgtest: explain: %v\n%s", err, sql)
	}
	var out []struct {
		Plan PlanNode `json:"Plan"`
	}
	if err := json.Unmarshal(raw, &out); err != nil || len(out) != 1 {
		tb.Fatalf("pgtest: explain output %q: %v", raw, err)
	}
	return Plan{Root: out[0].Plan, Raw: string(raw)}
}

// Subplan returns the node of the subplan named name (e.g. "CTE c"), or
// fails tb.
func (p Plan) Subplan(tb testing.TB, name string) PlanNode {
	tb.Helper()
	var found *PlanNode
	p.Walk(func(n PlanNode) {
		if n.SubplanName == name && found == nil {
			found = &n
		}
	})
	if found == nil {
		tb.Fatalf("pgtest: no subplan %q in %s", name, p)
	}
	return *found
}

// Walk calls fn for every node, depth first.
func (p Plan) Walk(fn func(PlanNode)) {
	var walk func(PlanNode)
	walk = func(n PlanNode) {
		fn(n)
		for _, c := range n.Plans {
			walk(c)
		}
	}
	walk(p.Root)
}

// String is the plan as one line of nodes, e.g. "Limit > Index Scan
// (run_ready on run)".
func (p Plan) String() string {
	var parts []string
	p.Walk(func(n PlanNode) {
		s := n.NodeType
		if n.Index != "" {
			s += fmt.Sprintf(" (%s on %s)", n.Index, n.Relation)
		} else if n.Relation != "" {
			s += " (" + n.Relation + ")"
		}
		parts = append(parts, s)
	})
	return strings.Join(parts, " > ")
}

// RequireIndexed fails tb unless the plan reads every table through an
// index, with no sequential scan and no sort of table rows (either costs
// the size of the backlog, not the LIMIT), and uses each of indexes. A sort
// of a CTE's rows (already bounded by the CTE's LIMIT, e.g. to dedupe ids
// for a semi-join) is allowed.
func (p Plan) RequireIndexed(tb testing.TB, name string, indexes ...string) {
	tb.Helper()
	used := map[string]bool{}
	var bad []string
	p.Walk(func(n PlanNode) {
		used[n.Index] = true
		switch n.NodeType {
		case "Seq Scan":
			bad = append(bad, "Seq Scan on "+n.Relation)
		case "Sort", "Incremental Sort":
			if readsTable(n) {
				bad = append(bad, n.NodeType+" of table rows")
			}
		}
	})
	if len(bad) > 0 {
		tb.Errorf("%s: %s in the plan: %s", name, strings.Join(bad, ", "), p)
	}
	for _, ix := range indexes {
		if !used[ix] {
			tb.Errorf("%s: index %s not used: %s", name, ix, p)
		}
	}
	tb.Logf("%s: %s", name, p)
}

// readsTable reports whether a node or one below it scans a table, other
// than through a Limit: a sort of what limited scans returned (the lease
// claim's merge of its per-pair scans) sorts a bounded number of rows, not
// the table's.
func readsTable(n PlanNode) bool {
	if n.Relation != "" {
		return true
	}
	if n.NodeType == "Limit" {
		return false
	}
	for _, c := range n.Plans {
		if readsTable(c) {
			return true
		}
	}
	return false
}

// RequireNeverAnalyzed fails tb when one of tables has statistics: the
// plan tests assert what the planner does before the first ANALYZE (a
// fresh table, or autovacuum behind a burst).
func RequireNeverAnalyzed(tb testing.TB, q Querier, tables ...string) {
	tb.Helper()
	for _, t := range tables {
		var reltuples float64
		if err := q.QueryRow(context.Background(), `SELECT reltuples FROM pg_class WHERE oid = $1::regclass`, t).Scan(&reltuples); err != nil {
			tb.Fatalf("pgtest: reltuples of %s: %v", t, err)
		}
		if reltuples >= 0 {
			tb.Fatalf("pgtest: %s was analyzed (reltuples %.0f)", t, reltuples)
		}
	}
}

// ExecutedPlans runs sql with args in a transaction that it rolls back, on
// a connection of its own to url with auto_explain loaded (a superuser's
// LOAD, as the test servers grant), and returns the plan of every statement
// the execution ran, nested ones included: what a trigger or a foreign key
// ran on behalf of sql, which EXPLAIN does not show. The key is each
// statement's text.
func ExecutedPlans(tb testing.TB, url, sql string, args ...any) map[string]Plan {
	tb.Helper()
	ctx := context.Background()
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	var raw []string
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) { raw = append(raw, n.Message) }
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		tb.Fatalf("pgtest: connect: %v", err)
	}
	defer conn.Close(ctx)
	for _, set := range []string{`LOAD 'auto_explain'`, `SET auto_explain.log_min_duration = 0`,
		`SET auto_explain.log_nested_statements = on`, `SET auto_explain.log_format = json`,
		`SET auto_explain.log_level = notice`, `SET client_min_messages = notice`} {
		if _, err := conn.Exec(ctx, set); err != nil {
			tb.Fatalf("pgtest: %s (auto_explain needs a superuser): %v", set, err)
		}
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		tb.Fatalf("pgtest: begin: %v", err)
	}
	if _, err := tx.Exec(ctx, sql, args...); err != nil {
		tb.Fatalf("pgtest: run: %v\n%s", err, sql)
	}
	if err := tx.Rollback(ctx); err != nil {
		tb.Fatalf("pgtest: rollback: %v", err)
	}
	plans := map[string]Plan{}
	for _, m := range raw {
		_, body, ok := strings.Cut(m, "plan:\n")
		if !ok {
			continue
		}
		var p struct {
			Query string   `json:"Query Text"`
			Plan  PlanNode `json:"Plan"`
		}
		if err := json.Unmarshal([]byte(body), &p); err != nil {
			tb.Fatalf("pgtest: auto_explain output %q: %v", body, err)
		}
		plans[p.Query] = Plan{Root: p.Plan, Raw: body}
	}
	return plans
}
