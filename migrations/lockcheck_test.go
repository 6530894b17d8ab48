package migrations_test

// The heavy-lock check (issue 26, "a check fails on a new migration that
// takes an exclusive lock on a hot table unless it is marked and
// explained"). It reads each migration's Up section, statement by
// statement, and refuses a statement that would hold a lock blocking the
// running system's reads or writes of a hot table for longer than a
// catalog change, unless the comment line right above it (or the comment
// block that ends right above it) carries
//
//	-- taskport:heavy-lock: <why this is acceptable>
//
// An UPDATE or DELETE of a hot table passes instead with
//
//	-- taskport:batched: <what bounds each batch>
//
// Limits, by design (no SQL parser): statements are split on semicolons
// outside comments, quoted strings and identifiers, and dollar-quoted
// bodies; each statement is then matched with regular expressions. Only
// the statements at the top level and those of a DO block are read, not
// the bodies of functions (a function that updates a hot table is checked
// where a migration calls it: it is not, today). A table named through
// search_path other than public, a view, or dynamic SQL (EXECUTE) is not
// seen. The Down sections are not read: a rollback is an operator's
// deliberate act on a system that is already in trouble.

import (
	"fmt"
	"io/fs"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/migrations"
)

// hotTables are the tables that the running system reads or writes on every
// enqueue, claim, signal or plans API call; every table of taskport_lease
// is hot too (isHot).
var hotTables = map[string]bool{
	"taskport.run": true, "taskport.waiter": true, "taskport.early_signal": true,
	"public.outbox_event": true, "public.plan": true, "public.approval": true,
	"public.download_task": true, "public.asset_operation": true, "public.decision": true,
}

func isHot(table string) bool {
	return hotTables[table] || strings.HasPrefix(table, "taskport_lease.")
}

const (
	heavyMark   = "taskport:heavy-lock:"
	batchedMark = "taskport:batched:"
)

// TestMigrationsTakeNoUnmarkedHeavyLock runs the check on the embedded
// migrations of every set: every heavy statement on a hot table is marked
// and explained. The baselines are not checked: they only ever create
// tables in a database that has none.
func TestMigrationsTakeNoUnmarkedHeavyLock(t *testing.T) {
	t.Parallel()
	var c lockChecker
	checked := 0
	for _, set := range []string{migrations.SetLegacy, migrations.SetEngine, migrations.SetMedia} {
		fsys := migrations.SetFS(set)
		names, err := fs.Glob(fsys, "*.sql")
		require.NoError(t, err)
		for _, name := range names {
			src, err := fs.ReadFile(fsys, name)
			require.NoError(t, err)
			for _, v := range c.check(set+"/"+name, string(src)) {
				t.Error(v)
			}
			checked++
		}
	}
	require.NotZero(t, checked)
}

// TestHeavyLockCheckRefuses feeds the check synthetic migrations: each
// unmarked heavy statement is refused with its file, line and table, and
// the online forms and marked statements pass.
func TestHeavyLockCheckRefuses(t *testing.T) {
	t.Parallel()
	const head = "-- a comment; with a semicolon\n-- +goose Up\n"
	refused := map[string]struct {
		sql   string
		line  int
		table string
	}{
		"column type":   {"ALTER TABLE taskport.run ALTER COLUMN kind TYPE text COLLATE \"C\";", 3, "taskport.run"},
		"set not null":  {"SELECT 1;\nALTER TABLE plan\n  ALTER COLUMN title SET NOT NULL;", 4, "public.plan"},
		"volatile add":  {"ALTER TABLE outbox_event ADD COLUMN token uuid NOT NULL DEFAULT gen_random_uuid();", 3, "public.outbox_event"},
		"identity add":  {"ALTER TABLE taskport.run ADD COLUMN n bigint GENERATED ALWAYS AS IDENTITY;", 3, "taskport.run"},
		"inline check":  {"ALTER TABLE plan ADD COLUMN n int NOT NULL DEFAULT 0 CHECK (n >= 0);", 3, "public.plan"},
		"add check":     {"ALTER TABLE ONLY \"plan\" ADD CONSTRAINT p CHECK (title <> '');", 3, "public.plan"},
		"add unique":    {"ALTER TABLE decision ADD CONSTRAINT d UNIQUE (run_id) NOT VALID;", 3, "public.decision"},
		"second action": {"ALTER TABLE taskport.run DROP CONSTRAINT c, ADD CONSTRAINT c CHECK (version > 0);", 3, "taskport.run"},
		"index":         {"CREATE UNIQUE INDEX i ON taskport_lease.step_result (name);", 3, "taskport_lease.step_result"},
		"update":        {"UPDATE taskport.run SET kind = 'a;b' WHERE kind = $$x;y$$;", 3, "taskport.run"},
		"delete":        {"-- a plain comment\nDELETE FROM approval;", 4, "public.approval"},
		"cte update":    {"WITH x AS (UPDATE download_task SET state = 'removed' RETURNING id) SELECT count(*) FROM x;", 3, "public.download_task"},
		"do block":      {"DO $body$\nBEGIN\n  UPDATE taskport.waiter SET step = '';\nEND\n$body$;", 5, "taskport.waiter"},
		"lock":          {"LOCK TABLE asset_operation IN ACCESS EXCLUSIVE MODE;", 3, "public.asset_operation"},
		"vacuum full":   {"VACUUM (FULL) taskport.early_signal;", 3, "taskport.early_signal"},
		"cluster":       {"CLUSTER taskport.run USING run_pkey;", 3, "taskport.run"},
		"empty reason":  {"-- taskport:heavy-lock:\nALTER TABLE taskport.run ALTER COLUMN kind TYPE text;", 4, "taskport.run"},
		"mark too far":  {"-- taskport:heavy-lock: a reason\n\nALTER TABLE taskport.run ALTER COLUMN kind TYPE text;", 5, "taskport.run"},
		"wrong mark":    {"-- taskport:batched: one statement\nALTER TABLE taskport.run ALTER COLUMN kind TYPE text;", 4, "taskport.run"},
	}
	for name, tc := range refused {
		var c lockChecker
		got := c.check("00099_synthetic.sql", head+tc.sql)
		require.Len(t, got, 1, name)
		require.Equal(t, "00099_synthetic.sql", got[0].file, name)
		require.Equal(t, tc.line, got[0].line, name)
		require.Equal(t, tc.table, got[0].table, name)
		require.Contains(t, got[0].String(), fmt.Sprintf("00099_synthetic.sql:%d: ", tc.line), name)
		require.Contains(t, got[0].String(), tc.table, name)
	}

	passed := map[string]string{
		"nullable column":    "ALTER TABLE taskport.run ADD COLUMN note text;",
		"constant default":   "ALTER TABLE taskport.run ADD COLUMN n int NOT NULL DEFAULT 0, ADD COLUMN t timestamptz DEFAULT now();",
		"not valid":          "ALTER TABLE plan ADD CONSTRAINT p CHECK (title <> '') NOT VALID;\nALTER TABLE plan VALIDATE CONSTRAINT p;",
		"validated not null": "ALTER TABLE plan ADD CONSTRAINT t_nn CHECK (title IS NOT NULL) NOT VALID;\nALTER TABLE plan VALIDATE CONSTRAINT t_nn;\nALTER TABLE plan ALTER COLUMN title SET NOT NULL;",
		"unique using index": "ALTER TABLE plan ADD CONSTRAINT u UNIQUE USING INDEX plan_u;",
		"concurrently":       "CREATE INDEX CONCURRENTLY IF NOT EXISTS i ON taskport.run (kind);",
		"new table":          "CREATE TABLE taskport_lease.fresh (id int);\nCREATE INDEX f ON taskport_lease.fresh (id);\nUPDATE taskport_lease.fresh SET id = 1;",
		"cold table":         "CREATE INDEX i ON taskport_lease_archive (id);\nUPDATE audit SET x = 1;",
		"marked":             "-- taskport:heavy-lock: the table is empty in every deployment\nALTER TABLE taskport.run ALTER COLUMN kind TYPE text;",
		"marked block":       "-- taskport:heavy-lock: why, said\n--   on two lines\nLOCK TABLE plan;",
		"batched":            "-- taskport:batched: 1,000 rows a statement\nUPDATE taskport.run SET kind = 'k' WHERE id IN (SELECT id FROM taskport.run LIMIT 1000);",
		"batched do block": "DO $$\nDECLARE n int;\nBEGIN\n    LOOP\n        -- taskport:batched: 5,000 rows a transaction\n" +
			"        UPDATE taskport.run SET kind = 'k' WHERE id IN (SELECT id FROM taskport.run LIMIT 5000);\n" +
			"        GET DIAGNOSTICS n = ROW_COUNT;\n        EXIT WHEN n = 0;\n        COMMIT;\n    END LOOP;\nEND $$;",
		"function body":        "-- +goose StatementBegin\nCREATE FUNCTION f() RETURNS void LANGUAGE sql AS $$ UPDATE taskport.run SET kind = 'x'; $$;\n-- +goose StatementEnd",
		"string":               "INSERT INTO plan (title) VALUES ('UPDATE plan SET x = 1;'), (E'\\'; DELETE FROM plan;');",
		"quoted identifier":    "CREATE TABLE \"x;y\" (id int);",
		"block comment":        "/* UPDATE plan SET x = 1; /* nested; */ */ SELECT 1;",
		"rename and drop":      "ALTER TABLE taskport.run RENAME COLUMN kind TO k;\nALTER TABLE taskport.run DROP COLUMN k, DROP CONSTRAINT c;",
		"down section ignored": "SELECT 1;\n-- +goose Down\nALTER TABLE taskport.run ALTER COLUMN kind TYPE text;",
	}
	for name, sql := range passed {
		var c lockChecker
		require.Empty(t, c.check("00099_synthetic.sql", head+sql), name)
	}
}

// violation is one refused statement.
type violation struct {
	file  string
	line  int
	table string
	why   string
}

func (v violation) String() string {
	return fmt.Sprintf("%s:%d: %s on hot table %s; mark it with `-- %s <why this is acceptable>` on the line before, "+
		"or use the online pattern (docs/migrations.md)", v.file, v.line, v.why, v.table, heavyMark)
}

// lockChecker carries, from one migration to the next, the CHECK
// constraints added NOT VALID and those since validated: SET NOT NULL is
// cheap once a validated CHECK (col IS NOT NULL) exists.
type lockChecker struct {
	notValid  map[string]string // constraint name -> "table\x00expression"
	validated []string          // "table\x00expression"
}

// statement is one SQL statement of a migration: its text with comments
// blanked out and the line it starts on.
type statement struct {
	text string
	line int
}

func (c *lockChecker) check(file, src string) []violation {
	if c.notValid == nil {
		c.notValid = map[string]string{}
	}
	lines := strings.Split(src, "\n")
	created := map[string]bool{}
	var out []violation
	for _, st := range splitStatements(src, 1) {
		if !inUpSection(lines, st.line) {
			continue
		}
		for _, f := range c.heavy(st, created) {
			// A statement of a DO block has its own mark, above it.
			mark := markAbove(lines, f.line)
			if f.batchable && mark == batchedMark || mark == heavyMark {
				continue
			}
			out = append(out, violation{file: file, line: f.line, table: f.table, why: f.why})
		}
	}
	return out
}

// inUpSection says whether line (1-based) comes after "-- +goose Up" and
// before "-- +goose Down".
func inUpSection(lines []string, line int) bool {
	up := false
	for _, l := range lines[:line-1] {
		switch strings.TrimSpace(l) {
		case "-- +goose Up":
			up = true
		case "-- +goose Down":
			up = false
		}
	}
	return up
}

// markAbove returns the mark of the comment block that ends on the line
// right above line (heavyMark, batchedMark or ""); a mark with no reason
// after it counts as none.
func markAbove(lines []string, line int) string {
	for i := line - 2; i >= 0; i-- {
		l := strings.TrimSpace(lines[i])
		if !strings.HasPrefix(l, "--") {
			return ""
		}
		l = strings.TrimSpace(strings.TrimPrefix(l, "--"))
		for _, m := range []string{heavyMark, batchedMark} {
			if strings.HasPrefix(l, m) {
				if strings.TrimSpace(strings.TrimPrefix(l, m)) == "" {
					return ""
				}
				return m
			}
		}
	}
	return ""
}

// splitStatements splits src on the semicolons outside comments, strings,
// quoted identifiers and dollar-quoted bodies. Comments become spaces (so
// that no rule matches a commented word); line numbers start at first.
func splitStatements(src string, first int) []statement {
	var out []statement
	var cur strings.Builder
	line, start := first, 0
	flush := func() {
		if s := strings.TrimSpace(cur.String()); s != "" {
			out = append(out, statement{text: s, line: start})
		}
		cur.Reset()
		start = 0
	}
	emit := func(s string) {
		if start == 0 && strings.TrimSpace(s) != "" {
			start = line
		}
		cur.WriteString(s)
		line += strings.Count(s, "\n")
	}
	for i := 0; i < len(src); {
		rest := src[i:]
		switch {
		case strings.HasPrefix(rest, "--"):
			n := strings.IndexByte(rest, '\n')
			if n < 0 {
				n = len(rest)
			}
			emit(" ")
			i += n
		case strings.HasPrefix(rest, "/*"):
			n := blockCommentEnd(rest)
			emit(strings.Repeat("\n", strings.Count(rest[:n], "\n")) + " ")
			i += n
		case rest[0] == '\'':
			escapes := i > 0 && (src[i-1] == 'E' || src[i-1] == 'e')
			n := quotedEnd(rest, '\'', escapes)
			emit(rest[:n])
			i += n
		case rest[0] == '"':
			n := quotedEnd(rest, '"', false)
			emit(rest[:n])
			i += n
		case rest[0] == '$' && dollarTag.MatchString(rest):
			tag := dollarTag.FindString(rest)
			n := strings.Index(rest[len(tag):], tag)
			if n < 0 {
				n = len(rest) - len(tag)
			}
			emit(rest[:len(tag)+n+len(tag)])
			i += len(tag) + n + len(tag)
		case rest[0] == ';':
			flush()
			i++
		default:
			emit(rest[:1])
			i++
		}
	}
	flush()
	return out
}

var dollarTag = regexp.MustCompile(`^\$[A-Za-z_][A-Za-z0-9_]*\$|^\$\$`)

// blockCommentEnd is the length of the (nested) block comment s starts with.
func blockCommentEnd(s string) int {
	depth := 0
	for i := 0; i+1 < len(s); i++ {
		switch s[i : i+2] {
		case "/*":
			depth++
			i++
		case "*/":
			depth--
			i++
			if depth == 0 {
				return i + 1
			}
		}
	}
	return len(s)
}

// quotedEnd is the length of the quoted text s starts with; a doubled quote
// is one quote, and with escapes a backslash escapes the next byte.
func quotedEnd(s string, q byte, escapes bool) int {
	for i := 1; i < len(s); i++ {
		switch {
		case escapes && s[i] == '\\':
			i++
		case s[i] == q && i+1 < len(s) && s[i+1] == q:
			i++
		case s[i] == q:
			return i + 1
		}
	}
	return len(s)
}

// finding is one heavy lock a statement takes.
type finding struct {
	line      int
	table     string
	why       string
	batchable bool // an UPDATE or DELETE, which the batched mark also clears
}

const ident = `(?:"[^"]+"|[A-Za-z_][A-Za-z0-9_$]*)`
const name = `(` + ident + `(?:\.` + ident + `)?)`

var (
	spaces       = regexp.MustCompile(`\s+`)
	createTable  = regexp.MustCompile(`(?i)^CREATE (?:UNLOGGED )?TABLE (?:IF NOT EXISTS )?` + name)
	alterTable   = regexp.MustCompile(`(?i)^ALTER TABLE (?:IF EXISTS )?(?:ONLY )?` + name + ` (.*)$`)
	createIndex  = regexp.MustCompile(`(?i)^CREATE (?:UNIQUE )?INDEX (CONCURRENTLY )?.*? ON (?:ONLY )?` + name)
	updateStmt   = regexp.MustCompile(`(?i)^UPDATE (?:ONLY )?` + name)
	deleteStmt   = regexp.MustCompile(`(?i)^DELETE FROM (?:ONLY )?` + name)
	cteWrite     = regexp.MustCompile(`(?i)(?:^|[^A-Za-z_])(?:DO )?(UPDATE (?:ONLY )?|DELETE FROM (?:ONLY )?)` + name)
	lockStmt     = regexp.MustCompile(`(?i)^LOCK (?:TABLE )?(?:ONLY )?(.*?)(?: IN .*)?(?: NOWAIT)?$`)
	vacuumFull   = regexp.MustCompile(`(?i)^VACUUM (?:\([^)]*\bFULL\b[^)]*\)|FULL\b)(.*)$`)
	clusterStmt  = regexp.MustCompile(`(?i)^CLUSTER\b(?: VERBOSE)?(?: \([^)]*\))?(.*?)(?: USING .*)?$`)
	doBlock      = regexp.MustCompile(`(?s)^(?i:DO)\s+(?:(?i:LANGUAGE) \w+ )?(\$[A-Za-z_0-9]*\$)(.*)\$[A-Za-z_0-9]*\$`)
	alterType    = regexp.MustCompile(`(?i)^ALTER (?:COLUMN )?` + ident + ` (?:SET DATA )?TYPE\b`)
	setNotNull   = regexp.MustCompile(`(?i)^ALTER (?:COLUMN )?(` + ident + `) SET NOT NULL\b`)
	addConstr    = regexp.MustCompile(`(?i)^ADD (?:CONSTRAINT (` + ident + `) )?(CHECK|FOREIGN KEY|UNIQUE|PRIMARY KEY|EXCLUDE)\b(.*)$`)
	addColumn    = regexp.MustCompile(`(?i)^ADD (?:COLUMN )?(?:IF NOT EXISTS )?` + ident + ` (.*)$`)
	validate     = regexp.MustCompile(`(?i)^VALIDATE CONSTRAINT (` + ident + `)$`)
	rewriteSet   = regexp.MustCompile(`(?i)^SET (?:LOGGED|UNLOGGED|TABLESPACE)\b`)
	volatile     = regexp.MustCompile(`(?i)\b(?:gen_random_uuid|uuid_generate_v\w+|random|clock_timestamp|timeofday|nextval)\s*\(`)
	rewritingCol = regexp.MustCompile(`(?i)\bGENERATED\b.*\b(?:IDENTITY|STORED)\b|^(?:small|big)?serial\b`)
	inlineConstr = regexp.MustCompile(`(?i)\b(?:CHECK|REFERENCES|UNIQUE|PRIMARY KEY)\b`)
	notValidEnd  = regexp.MustCompile(`(?i)\s*NOT VALID\s*$`)
	beginWord    = regexp.MustCompile(`^(?i:BEGIN|DECLARE|LOOP|THEN|ELSE)\s+`)
	notNullCheck = regexp.MustCompile(`(?i)^\(\s*(` + ident + `) IS NOT NULL\s*\)$`)
)

// heavy returns the heavy locks st takes on hot tables that existed before
// its migration; created collects the tables the migration creates.
func (c *lockChecker) heavy(st statement, created map[string]bool) []finding {
	s := spaces.ReplaceAllString(st.text, " ")
	var out []finding
	add := func(table, why string, batchable bool) {
		t := tableName(table)
		if isHot(t) && !created[t] && !slices.Contains(out, finding{line: st.line, table: t, why: why, batchable: batchable}) {
			out = append(out, finding{line: st.line, table: t, why: why, batchable: batchable})
		}
	}
	if m := createTable.FindStringSubmatch(s); m != nil {
		created[tableName(m[1])] = true
		return nil
	}
	if m := doBlock.FindStringSubmatch(st.text); m != nil {
		bodyLine := st.line + strings.Count(st.text[:strings.Index(st.text, m[1])], "\n")
		for _, inner := range splitStatements(m[2], bodyLine) {
			// A PL/pgSQL block's first statement follows its BEGIN.
			for w := beginWord.FindString(inner.text); w != ""; w = beginWord.FindString(inner.text) {
				inner.line += strings.Count(w, "\n")
				inner.text = inner.text[len(w):]
			}
			out = append(out, c.heavy(inner, created)...)
		}
		return out
	}
	if m := alterTable.FindStringSubmatch(s); m != nil {
		for _, action := range splitTopLevel(m[2]) {
			if why := c.heavyAction(tableName(m[1]), action); why != "" {
				add(m[1], why, false)
			}
		}
		return out
	}
	if m := createIndex.FindStringSubmatch(s); m != nil && m[1] == "" {
		add(m[2], "CREATE INDEX without CONCURRENTLY blocks writes for the whole build", false)
		return out
	}
	if m := updateStmt.FindStringSubmatch(s); m != nil {
		add(m[1], "an UPDATE of every matching row in one statement holds their row locks to the end", true)
		return out
	}
	if m := deleteStmt.FindStringSubmatch(s); m != nil {
		add(m[1], "a DELETE of every matching row in one statement holds their row locks to the end", true)
		return out
	}
	if strings.HasPrefix(strings.ToUpper(s), "WITH ") {
		for _, m := range cteWrite.FindAllStringSubmatch(s, -1) {
			if !strings.HasPrefix(strings.ToUpper(strings.TrimLeft(m[0], " (,")), "DO ") {
				add(m[2], "a data-modifying WITH writes every matching row in one statement", true)
			}
		}
		return out
	}
	if m := lockStmt.FindStringSubmatch(s); m != nil && strings.HasPrefix(strings.ToUpper(s), "LOCK ") {
		for _, t := range strings.Split(m[1], ",") {
			add(strings.TrimSpace(t), "LOCK TABLE", false)
		}
		return out
	}
	if m := vacuumFull.FindStringSubmatch(s); m != nil {
		c.everyOrListed(m[1], "VACUUM FULL rewrites the table under ACCESS EXCLUSIVE", add)
		return out
	}
	if m := clusterStmt.FindStringSubmatch(s); m != nil {
		c.everyOrListed(m[1], "CLUSTER rewrites the table under ACCESS EXCLUSIVE", add)
		return out
	}
	return out
}

// everyOrListed reports why on each table of list, or on every hot table
// when the list is empty (VACUUM FULL and CLUSTER with no table).
func (c *lockChecker) everyOrListed(list, why string, add func(table, why string, batchable bool)) {
	list = strings.TrimSpace(list)
	if list == "" {
		add("taskport.run", why+" (of every table)", false)
		return
	}
	for _, t := range strings.Split(list, ",") {
		add(strings.Fields(t)[0], why, false)
	}
}

// heavyAction says why one action of an ALTER TABLE on table is heavy, or
// "" when it is not, and records the NOT VALID and validated CHECKs.
func (c *lockChecker) heavyAction(table, action string) string {
	action = strings.TrimSpace(action)
	if alterType.MatchString(action) {
		return "ALTER COLUMN ... TYPE (or COLLATE) rewrites the table or rebuilds its indexes under ACCESS EXCLUSIVE"
	}
	if m := setNotNull.FindStringSubmatch(action); m != nil {
		col := strings.ToLower(strings.Trim(m[1], `"`))
		for _, v := range c.validated {
			if v == table+"\x00"+col {
				return ""
			}
		}
		return "SET NOT NULL without a validated CHECK (col IS NOT NULL) scans the table under ACCESS EXCLUSIVE"
	}
	if m := addConstr.FindStringSubmatch(action); m != nil {
		kind, rest := strings.ToUpper(m[2]), strings.ToUpper(m[3])
		switch {
		case (kind == "CHECK" || kind == "FOREIGN KEY") && notValidEnd.MatchString(m[3]):
			n := notNullCheck.FindStringSubmatch(strings.TrimSpace(notValidEnd.ReplaceAllString(m[3], "")))
			if kind == "CHECK" && m[1] != "" && n != nil {
				c.notValid[strings.ToLower(m[1])] = table + "\x00" + strings.ToLower(strings.Trim(n[1], `"`))
			}
			return ""
		case (kind == "UNIQUE" || kind == "PRIMARY KEY") && strings.HasPrefix(strings.TrimSpace(rest), "USING INDEX"):
			return ""
		}
		return "ADD CONSTRAINT without NOT VALID checks every row (or builds an index) under ACCESS EXCLUSIVE"
	}
	if m := validate.FindStringSubmatch(action); m != nil {
		if v, ok := c.notValid[strings.ToLower(m[1])]; ok {
			c.validated = append(c.validated, v)
		}
		return ""
	}
	if rewriteSet.MatchString(action) {
		return "SET LOGGED, UNLOGGED or TABLESPACE rewrites the table under ACCESS EXCLUSIVE"
	}
	if m := addColumn.FindStringSubmatch(action); m != nil && !strings.HasPrefix(strings.ToUpper(action), "ADD CONSTRAINT ") {
		def := m[1]
		switch {
		case rewritingCol.MatchString(def):
			return "ADD COLUMN of an identity, serial or stored generated column rewrites the table under ACCESS EXCLUSIVE"
		case volatile.MatchString(def):
			return "ADD COLUMN with a volatile default rewrites the table under ACCESS EXCLUSIVE"
		case inlineConstr.MatchString(def):
			return "ADD COLUMN with an inline constraint checks every row under ACCESS EXCLUSIVE"
		}
	}
	return ""
}

// splitTopLevel splits an ALTER TABLE's action list on the commas outside
// parentheses and quotes.
func splitTopLevel(s string) []string {
	var out []string
	depth, from := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '(':
			depth++
		case ')':
			depth--
		case '\'', '"':
			i += quotedEnd(s[i:], s[i], false) - 1
		case ',':
			if depth == 0 {
				out = append(out, s[from:i])
				from = i + 1
			}
		}
	}
	return append(out, s[from:])
}

// tableName is a table's schema-qualified name, lower case unless quoted;
// an unqualified name is in public (the business tables' schema).
func tableName(s string) string {
	parts := strings.Split(s, ".")
	for i, p := range parts {
		if strings.HasPrefix(p, `"`) {
			parts[i] = strings.Trim(p, `"`)
		} else {
			parts[i] = strings.ToLower(p)
		}
	}
	if len(parts) == 1 {
		return "public." + parts[0]
	}
	return strings.Join(parts, ".")
}
