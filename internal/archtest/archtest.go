// Package archtest checks the ownership rules of the house from the module's
// source alone: who may import whom, and which package may name which table
// in SQL. Its test runs the rules over this module; Load and Check are
// exported so that the same test also runs them over synthetic modules that
// break each rule, which proves they can fail. Its tests also hold
// docs/dependencies.md to the modules the repository's go.mod files
// require directly (TestEveryDirectDependencyHasARow).
//
// # What is read
//
// Every package below the module root, except testdata, vendor, hidden and
// underscore folders and nested modules (deploy, tools/flowcheck, bench):
// its non-test Go files for the current platform (go/build), their imports,
// and the value of every constant string expression in them. go/types folds
// constants across the package's files, so "SELECT " + planColumns +
// " FROM plan" is read as one text. The tables are those the migrations
// create (CREATE TABLE in migrations/sql/*.sql).
//
// Test files (_test.go) and test harness packages are exempt from every
// rule: tests assert on business truth with SQL of their own (ledger rows,
// outbox rows, taskport.run), and harnesses fake an engine or a database.
// A harness is a package with a path element "test" or starting with
// "test" (test/..., test/contract/kinds, internal/testkit/...), or whose
// non-test files import "testing" (app/apptest, internal/testkit/pgtest,
// qbittorrent/qbtfake).
//
// # The rules
//
//   - port imports only the standard library, internal/stepctx (the
//     stdlib-only leaf that carries the activity runtime in a context) and
//     port/internal/access (the stdlib-only leaf that carries its
//     engine-facing operations to port/engineapi) (RulePortLeaf,
//     RuleStepctxLeaf);
//   - the adapters (leaseadapter, temporaladapter, with their subpackages)
//     never import each other (RuleAdapters);
//   - only the engines, and the router over them (package router, which
//     reads each run's owner and moves runs between engines), import the
//     run store, runstore or internal/runstore (RuleRunstore);
//   - workflows imports only port and the standard library (RuleWorkflows);
//   - a table is named in SQL only by its owner (RuleTableOwner; the
//     owners are listed in Owners), and every table the migrations create
//     has an owner (RuleTableOwned);
//   - the production binary, cmd/taskport, does not reach the development
//     harness (internal/devserver, qbittorrent/qbtnox, internal/testkit)
//     through any chain of the module's imports (RuleNoDevHarness): that is
//     cmd/taskport-dev's.
//
// # What names a table
//
// A constant string reads as SQL when it starts with a statement keyword
// (SELECT, INSERT, UPDATE, DELETE, WITH, ...) in any case, or holds one of
// SELECT, INSERT, UPDATE, DELETE, FROM, JOIN, INTO in upper case (a
// fragment such as " FROM plan WHERE id = $1"); English prose ("remove the
// download from plan %s") does not. In SQL, a table is named by the name
// after FROM (and every name of its comma list), JOIN, INTO, UPDATE, TABLE,
// REFERENCES or TRUNCATE, and by a qualified column (plan.id,
// taskport.run.id). A constant string that is exactly a table's name also
// names it when it is the first argument of a query builder's From, Into,
// Table or join call (bob's sm.From("plan"), im.Into, um.Table).
// Schema-qualified tables (taskport.run) are matched qualified only.
//
// Not seen: SQL assembled at run time from values that are not constants
// (fmt.Sprintf with a table name argument). That is also how a query would
// splice input into its text, which the house forbids anyway.
package archtest

import (
	"bufio"
	"errors"
	"fmt"
	"go/ast"
	"go/build"
	"go/constant"
	"go/parser"
	"go/token"
	"go/types"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// The rules, as Violation.Rule names them.
const (
	RulePortLeaf     = "port imports only the standard library, internal/stepctx and port/internal/access"
	RuleStepctxLeaf  = "internal/stepctx and port/internal/access import only the standard library"
	RuleAdapters     = "the adapters never import each other"
	RuleRunstore     = "only the engines import the run store"
	RuleWorkflows    = "workflows imports only port and the standard library"
	RuleTableOwner   = "a table is named in SQL only by its owner"
	RuleTableOwned   = "every table the migrations create has an owner"
	RuleNoDevHarness = "the production binary does not reach the development harness"
)

// Owners lists, for each table or each table of a schema ("schema.*"), the
// packages (module-relative paths, subpackages included) that may name it
// in SQL. The migrations package may name every table.
func Owners() map[string][]string {
	// The engines' shared store. The lease engine keeps its runs' lease
	// state in their rows (migration 00014) and writes it with its own
	// statements; the Temporal engine goes through runstore.
	runs := []string{"runstore", "internal/runstore", "leaseadapter"}
	return map[string][]string{
		"plan":            {"acquisition"},
		"approval":        {"acquisition"},
		"download_task":   {"acquisition"},
		"decision":        {"acquisition"},
		"asset_operation": {"ledger"},
		"outbox_event":    {"outbox"},
		"taskport.run":    runs,
		"taskport.waiter": runs,
		// The record of engine switches (package router, through runstore).
		"taskport.engine_switch": runstores,
		// Early signals are the Temporal engine's (the lease engine keeps its
		// own in taskport_lease.task_signal).
		"taskport.early_signal": runstores,
		"taskport_lease.*":      {"leaseadapter"},
	}
}

var (
	adapters       = []string{"leaseadapter", "temporaladapter"}
	runstores      = []string{"runstore", "internal/runstore", "internal/runretention"}
	enginesRouter  = "router"
	migrationsPkg  = "migrations"
	production     = "cmd/taskport"
	devHarness     = []string{"internal/devserver", "qbittorrent/qbtnox", "internal/testkit"}
	stepctx        = "internal/stepctx"
	portAccess     = "port/internal/access"
	builderCalls   = []string{"From", "Into", "Table", "Join", "InnerJoin", "LeftJoin", "RightJoin", "FullJoin", "CrossJoin"}
	tableDDLRE     = regexp.MustCompile(`(?i)\b(create|drop)\s+table\s+(?:if\s+(?:not\s+)?exists\s+)?([a-z_][a-z0-9_]*(?:\.[a-z_][a-z0-9_]*)?)`)
	gooseDown      = "-- +goose Down"
	sqlStatementRE = regexp.MustCompile(`(?i)^\s*(select|insert|update|delete|with|truncate|copy|lock|create|alter|drop)\b`)
	sqlFragmentRE  = regexp.MustCompile(`\b(SELECT|INSERT|UPDATE|DELETE|FROM|JOIN|INTO)\b`)
)

// Module is what the rules read of a module.
type Module struct {
	Path     string    // the module path of go.mod
	Packages []Package // every package below the root, sorted by Rel
	Tables   []string  // the tables the migrations create, lower case
}

// Package is what the rules read of one package.
type Package struct {
	Rel     string   // path below the module root; "." for the root
	Imports []string // import paths of its non-test files
	Harness bool     // a test harness: exempt from every rule
	SQL     []TableRef
}

// TableRef is a table named in SQL.
type TableRef struct {
	Table string // as written, lower case, schema-qualified when it was
	Pos   string // file:line, the file relative to the module root
}

// Violation is one broken rule.
type Violation struct {
	Rule    string
	Package string // module-relative path
	Subject string // the import path or the table
	Detail  string
}

func (v Violation) String() string {
	return fmt.Sprintf("%s: %s: %s", v.Rule, v.Package, v.Detail)
}

// Load reads the module rooted at root.
func Load(root string) (Module, error) {
	modPath, err := modulePath(filepath.Join(root, "go.mod"))
	if err != nil {
		return Module{}, err
	}
	m := Module{Path: modPath}
	if m.Tables, err = createdTables(filepath.Join(root, migrationsPkg, "sql")); err != nil {
		return Module{}, err
	}
	err = filepath.WalkDir(root, func(dir string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		name := d.Name()
		if dir != root {
			if strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "vendor" {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
				return filepath.SkipDir // a module of its own
			}
		}
		p, ok, err := loadPackage(root, dir)
		if ok {
			m.Packages = append(m.Packages, p)
		}
		return err
	})
	if err != nil {
		return Module{}, err
	}
	slices.SortFunc(m.Packages, func(a, b Package) int { return strings.Compare(a.Rel, b.Rel) })
	return m, nil
}

func modulePath(goMod string) (string, error) {
	f, err := os.Open(goMod)
	if err != nil {
		return "", err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if p, ok := strings.CutPrefix(strings.TrimSpace(s.Text()), "module "); ok {
			return strings.Trim(strings.TrimSpace(p), `"`), nil
		}
	}
	if err := s.Err(); err != nil {
		return "", err
	}
	return "", fmt.Errorf("%s: no module line", goMod)
}

// createdTables lists the tables the migration files in dir leave after
// they all ran up: what their up sections create and no later up section
// drops (the lease engine's task table, 00003 to 00014); no such folder
// means no tables. The files run in name order, as goose runs them.
func createdTables(dir string) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.sql"))
	if err != nil {
		return nil, err
	}
	var tables []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		up, _, _ := strings.Cut(string(b), gooseDown)
		for _, m := range tableDDLRE.FindAllStringSubmatch(up, -1) {
			t := strings.ToLower(m[2])
			if strings.EqualFold(m[1], "drop") {
				tables = slices.DeleteFunc(tables, func(x string) bool { return x == t })
			} else if !slices.Contains(tables, t) {
				tables = append(tables, t)
			}
		}
	}
	slices.Sort(tables)
	return tables, nil
}

func loadPackage(root, dir string) (Package, bool, error) {
	bp, err := build.Default.ImportDir(dir, 0)
	var noGo *build.NoGoError
	if errors.As(err, &noGo) {
		return Package{}, false, nil
	}
	if err != nil {
		return Package{}, false, fmt.Errorf("read package %s: %w", dir, err)
	}
	rel, err := filepath.Rel(root, dir)
	if err != nil {
		return Package{}, false, err
	}
	p := Package{Rel: filepath.ToSlash(rel), Imports: bp.Imports}
	p.Harness = slices.Contains(bp.Imports, "testing")
	for _, elem := range strings.Split(p.Rel, "/") {
		p.Harness = p.Harness || strings.HasPrefix(elem, "test")
	}
	fset := token.NewFileSet()
	var files []*ast.File
	for _, name := range bp.GoFiles {
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.SkipObjectResolution)
		if err != nil {
			return Package{}, false, err
		}
		files = append(files, f)
	}
	p.SQL = sqlTables(root, fset, files)
	return p, true, nil
}

// noImports is an importer that knows no package: type-checking a package
// alone still folds its own constants, which is all sqlTables needs; the
// errors about everything imported are ignored.
type noImports struct{}

func (noImports) Import(p string) (*types.Package, error) {
	pkg := types.NewPackage(p, path.Base(p))
	pkg.MarkComplete()
	return pkg, nil
}

// sqlTables returns the tables the files' constant strings name in SQL.
func sqlTables(root string, fset *token.FileSet, files []*ast.File) []TableRef {
	info := &types.Info{Types: map[ast.Expr]types.TypeAndValue{}}
	conf := types.Config{Importer: noImports{}, Error: func(error) {}, FakeImportC: true}
	_, _ = conf.Check("archtest", fset, files, info) // errors expected: see noImports
	text := func(e ast.Expr) (string, bool) {
		tv, ok := info.Types[e]
		if !ok || tv.Value == nil || tv.Value.Kind() != constant.String {
			return "", false
		}
		return constant.StringVal(tv.Value), true
	}
	var refs []TableRef
	add := func(n ast.Node, tables []string) {
		pos := fset.Position(n.Pos())
		file, err := filepath.Rel(root, pos.Filename)
		if err != nil {
			file = pos.Filename
		}
		for _, t := range tables {
			refs = append(refs, TableRef{Table: t, Pos: fmt.Sprintf("%s:%d", filepath.ToSlash(file), pos.Line)})
		}
	}
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CallExpr:
				if name := calleeName(n.Fun); slices.Contains(builderCalls, name) && len(n.Args) > 0 {
					if s, ok := text(n.Args[0]); ok && isIdentifier(s) {
						add(n, []string{strings.ToLower(s)})
					}
				}
			case *ast.Ident:
				return false // a constant's name: its text is read where it is declared
			case ast.Expr:
				if s, ok := text(n); ok {
					add(n, namedInSQL(s))
					return false // its parts are in s already
				}
			}
			return true
		})
	}
	return refs
}

func calleeName(fun ast.Expr) string {
	switch f := fun.(type) {
	case *ast.Ident:
		return f.Name
	case *ast.SelectorExpr:
		return f.Sel.Name
	}
	return ""
}

var identifierRE = regexp.MustCompile(`^"?[A-Za-z_][A-Za-z0-9_]*"?(\."?[A-Za-z_][A-Za-z0-9_]*"?)?$`)

func isIdentifier(s string) bool { return identifierRE.MatchString(s) }

// namedInSQL returns the names s puts in a table's place, when s reads as
// SQL (see the package doc); names that are no table are filtered later.
func namedInSQL(s string) []string {
	if !sqlStatementRE.MatchString(s) && !sqlFragmentRE.MatchString(s) {
		return nil
	}
	toks := tokens(s)
	var names []string
	name := func(i int) (string, bool) {
		if i < len(toks) && toks[i] != "" && isName(toks[i]) {
			return toks[i], true
		}
		return "", false
	}
	for i, t := range toks {
		if strings.Contains(t, ".") && isName(t) {
			parts := strings.Split(t, ".")
			names = append(names, parts[0], parts[0]+"."+parts[1]) // table.column, or schema.table[.column]
		}
		switch t {
		case "from", "join", "into", "update", "table", "references", "truncate":
		default:
			continue
		}
		j := i + 1
		for j < len(toks) && slices.Contains([]string{"only", "if", "not", "exists"}, toks[j]) {
			j++
		}
		n, ok := name(j)
		if !ok {
			continue
		}
		names = append(names, n)
		for t == "from" { // FROM a [AS] x, b y, ...
			j++
			if j < len(toks) && toks[j] == "as" {
				j++
			}
			if _, alias := name(j); alias {
				j++
			}
			if j >= len(toks) || toks[j] != "," {
				break
			}
			if n, ok = name(j + 1); !ok {
				break
			}
			names = append(names, n)
			j++
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// sqlKeywords end a FROM item; they are never an alias.
var sqlKeywords = []string{"where", "group", "order", "limit", "offset", "join", "left", "right", "inner", "outer", "full",
	"cross", "natural", "lateral", "on", "using", "union", "except", "intersect", "for", "returning", "set", "values",
	"select", "having", "window", "fetch", "as", "and", "or", "not", "only", "do", "default"}

func isName(t string) bool {
	c := t[0]
	return (c == '_' || c >= 'a' && c <= 'z') && !slices.Contains(sqlKeywords, t)
}

// tokens splits SQL into lower-case names (dotted names whole, quotes
// dropped) and single punctuation characters, skipping string literals,
// comments, numbers and $n placeholders.
func tokens(s string) []string {
	var out []string
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '\'':
			j := i + 1
			for j < len(s) {
				if s[j] == '\'' {
					if j+1 < len(s) && s[j+1] == '\'' { // '' inside a literal
						j += 2
						continue
					}
					break
				}
				j++
			}
			i = j + 1
		case c == '-' && i+1 < len(s) && s[i+1] == '-':
			for i < len(s) && s[i] != '\n' {
				i++
			}
		case c == '"' || c == '_' || isLetter(c):
			j := i
			for j < len(s) && (s[j] == '"' || s[j] == '_' || s[j] == '.' || isLetter(s[j]) || isDigit(s[j])) {
				j++
			}
			out = append(out, strings.ToLower(strings.Trim(strings.ReplaceAll(s[i:j], `"`, ""), ".")))
			i = j
		case c == '$' || isDigit(c):
			i++
			for i < len(s) && isDigit(s[i]) {
				i++
			}
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		default:
			out = append(out, string(c))
			i++
		}
	}
	return out
}

func isLetter(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
func isDigit(c byte) bool  { return c >= '0' && c <= '9' }

// Check applies every rule to m and returns what breaks them.
func (m Module) Check() []Violation {
	var out []Violation
	owners := Owners()
	for _, t := range m.Tables {
		if _, ok := ownersOf(owners, t); !ok {
			out = append(out, Violation{Rule: RuleTableOwned, Package: migrationsPkg, Subject: t,
				Detail: fmt.Sprintf("table %s has no owner in archtest.Owners", t)})
		}
	}
	for _, p := range m.Packages {
		if p.Harness {
			continue
		}
		for _, imp := range p.Imports {
			out = append(out, m.checkImport(p.Rel, imp)...)
		}
		if p.Rel == migrationsPkg {
			continue
		}
		for _, ref := range p.SQL {
			table := ref.Table
			if !slices.Contains(m.Tables, table) {
				continue // not a table of the migrations: a CTE, an alias, a catalog; unqualified names are the default schema's
			}
			who, _ := ownersOf(owners, table)
			if !slices.ContainsFunc(who, func(o string) bool { return under(p.Rel, o) }) {
				out = append(out, Violation{Rule: RuleTableOwner, Package: p.Rel, Subject: table,
					Detail: fmt.Sprintf("names %s in SQL at %s; its owner is %s", table, ref.Pos, strings.Join(who, " or "))})
			}
		}
	}
	return dedupe(append(out, m.checkProduction()...))
}

// checkProduction follows the module's imports from the production binary
// and reports each development-harness package it reaches, with the chain.
func (m Module) checkProduction() []Violation {
	imports := map[string][]string{}
	for _, p := range m.Packages {
		for _, imp := range p.Imports {
			if rel, ok := strings.CutPrefix(imp, m.Path+"/"); ok {
				imports[p.Rel] = append(imports[p.Rel], rel)
			}
		}
	}
	var out []Violation
	via := map[string]string{production: ""}
	queue := []string{production}
	for len(queue) > 0 {
		pkg := queue[0]
		queue = queue[1:]
		for _, next := range imports[pkg] {
			if _, seen := via[next]; seen {
				continue
			}
			via[next] = pkg
			queue = append(queue, next)
			if slices.ContainsFunc(devHarness, func(d string) bool { return under(next, d) }) {
				chain := []string{next}
				for p := pkg; p != ""; p = via[p] {
					chain = append([]string{p}, chain...)
				}
				out = append(out, Violation{Rule: RuleNoDevHarness, Package: production, Subject: m.Path + "/" + next,
					Detail: "reaches " + next + " through " + strings.Join(chain, " -> ")})
			}
		}
	}
	return out
}

func (m Module) checkImport(pkg, imp string) []Violation {
	rel, internal := strings.CutPrefix(imp, m.Path+"/")
	std := !strings.Contains(strings.Split(imp, "/")[0], ".")
	var out []Violation
	broken := func(rule string) {
		out = append(out, Violation{Rule: rule, Package: pkg, Subject: imp, Detail: "imports " + imp})
	}
	switch {
	case pkg == "port" && !std && !(internal && (rel == stepctx || rel == portAccess)):
		broken(RulePortLeaf)
	case (pkg == stepctx || pkg == portAccess) && !std:
		broken(RuleStepctxLeaf)
	// workflows/flowtest is the deterministic engine double the kinds' unit
	// tests run on: an engine, so it may use the implementer kit.
	case under(pkg, "workflows") && pkg != "workflows/flowtest" && !std &&
		!(internal && (rel == "port" || under(rel, "workflows"))):
		broken(RuleWorkflows)
	}
	if !internal {
		return out
	}
	for _, a := range adapters {
		for _, b := range adapters {
			if a != b && under(pkg, a) && under(rel, b) {
				broken(RuleAdapters)
			}
		}
	}
	if slices.ContainsFunc(runstores, func(r string) bool { return under(rel, r) }) &&
		!slices.ContainsFunc(append(slices.Concat(adapters, runstores), enginesRouter), func(e string) bool { return under(pkg, e) }) {
		broken(RuleRunstore)
	}
	return out
}

// ownersOf returns the owners of table, by name or by its schema.
func ownersOf(owners map[string][]string, table string) ([]string, bool) {
	if who, ok := owners[table]; ok {
		return who, true
	}
	if schema, _, ok := strings.Cut(table, "."); ok {
		who, ok := owners[schema+".*"]
		return who, ok
	}
	return nil, false
}

// under reports whether the package rel is pkg or below it.
func under(rel, pkg string) bool { return rel == pkg || strings.HasPrefix(rel, pkg+"/") }

// dedupe keeps one violation per rule, package and subject: the first
// place is enough to find the others.
func dedupe(vs []Violation) []Violation {
	var out []Violation
	for _, v := range vs {
		if !slices.ContainsFunc(out, func(o Violation) bool {
			return o.Rule == v.Rule && o.Package == v.Package && o.Subject == v.Subject
		}) {
			out = append(out, v)
		}
	}
	return out
}
