package archtest_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/internal/archtest"
)

// moduleRoot is the folder of the go.mod above this package.
func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	require.NoError(t, err)
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		require.NotEqual(t, dir, parent, "no go.mod above the test")
		dir = parent
	}
}

// The module keeps the ownership rules (see the package doc). So that no
// violation is not just nothing read, every table the migrations create
// must also be found in its owner's SQL.
func TestOwnership(t *testing.T) {
	m, err := archtest.Load(moduleRoot(t))
	require.NoError(t, err)
	require.Equal(t, "github.com/taskport/taskport", m.Path)
	for _, v := range m.Check() {
		t.Error(v)
	}

	require.Subset(t, m.Tables, []string{"plan", "approval", "download_task", "decision", "asset_operation", "outbox_event",
		"taskport.run", "taskport.waiter", "taskport_lease.step_result", "taskport_lease.task_signal"})
	require.NotContains(t, m.Tables, "taskport_lease.task", "dropped by migration 00014")
	owners := archtest.Owners()
	for _, table := range m.Tables {
		who := owners[table]
		if schema, _, ok := strings.Cut(table, "."); ok && who == nil {
			who = owners[schema+".*"]
		}
		var seen []string
		for _, p := range m.Packages {
			owned := slices.ContainsFunc(who, func(o string) bool { return p.Rel == o || strings.HasPrefix(p.Rel, o+"/") })
			if owned && slices.ContainsFunc(p.SQL, func(r archtest.TableRef) bool { return r.Table == table }) {
				seen = append(seen, p.Rel)
			}
		}
		require.NotEmpty(t, seen, "no owner (%v) names %s in SQL: the reading of SQL text misses it", who, table)
		t.Logf("%-28s named by %v", table, seen)
	}
	var harnesses []string
	refs := 0
	for _, p := range m.Packages {
		for _, r := range p.SQL {
			if slices.Contains(m.Tables, r.Table) {
				refs++
			}
		}
		if p.Harness {
			harnesses = append(harnesses, p.Rel)
		}
	}
	t.Logf("%d packages read, %d places naming a table in SQL, %d tables; test harnesses exempt: %v",
		len(m.Packages), refs, len(m.Tables), harnesses)
}

// base is a small module that keeps every rule, including the cases the
// rules must not flag: an owner naming its tables (hand-written, built from
// constants, through a query builder), port importing internal/stepctx, the
// engines importing the run store, English prose that mentions a table's
// name, and tests and harnesses reading any table.
var base = map[string]string{
	"go.mod": "module example.com/shop\n\ngo 1.26\n",
	"migrations/sql/00001_init.sql": `-- +goose Up
CREATE TABLE plan (id uuid PRIMARY KEY, status text);
CREATE TABLE approval (plan_id uuid REFERENCES plan (id));
CREATE TABLE download_task (plan_id uuid, state text);
CREATE TABLE decision (plan_id uuid);
CREATE TABLE asset_operation (plan_id uuid);
CREATE TABLE outbox_event (business_key text);
CREATE SCHEMA taskport;
CREATE TABLE taskport.run (id uuid, business_key text);
CREATE TABLE taskport.waiter (run_id uuid);
CREATE TABLE IF NOT EXISTS taskport_lease.task (id uuid);
CREATE TABLE taskport_lease.task_signal (topic text);
`,
	"migrations/migrations.go": "package migrations\n\nconst Doc = `DROP TABLE plan`\n",
	"port/port.go": `package port

import (
	"context"

	"example.com/shop/internal/stepctx"
)

func From(ctx context.Context) any { return stepctx.From(ctx) }
`,
	"internal/stepctx/stepctx.go": "package stepctx\n\nimport \"context\"\n\nfunc From(ctx context.Context) any { return ctx.Value(0) }\n",
	"acquisition/queries.go": `package acquisition

import "github.com/stephenafamo/bob/dialect/psql/sm"

const planColumns = "id, status"

const selectPlanSQL = "SELECT " + planColumns + " FROM plan WHERE id = $1"

const table = "decision"

const resolveSQL = "UPDATE " + table + " SET status = 'retry'"

var selectApproval = sm.From("approval")

const upsertSQL = ` + "`" + `
INSERT INTO download_task (plan_id, state) VALUES ($1, $2)
ON CONFLICT (plan_id) DO UPDATE SET state = CASE WHEN download_task.state = 'completed' THEN download_task.state ELSE EXCLUDED.state END` + "`" + `
`,
	"ledger/queries.go": "package ledger\n\nconst commitSQL = `UPDATE asset_operation SET result = $2 WHERE id = $1`\n",
	"outbox/queries.go": "package outbox\n\nconst claimSQL = `UPDATE outbox_event SET attempts = attempts + 1 WHERE id IN (SELECT id FROM outbox_event FOR UPDATE SKIP LOCKED)`\n",
	"runstore/queries.go": `package runstore

const insertSQL = "INSERT INTO taskport.run (id) VALUES ($1)"

const waitersSQL = "SELECT run_id FROM taskport.waiter WHERE topic = $1"
`,
	"leaseadapter/engine.go": `package leaseadapter

import (
	"example.com/shop/port"
	"example.com/shop/runstore"
)

var _ = port.From
var _ = runstore.Insert

const claimSQL = ` + "`" + `WITH t AS (UPDATE taskport_lease.task SET id = id RETURNING id)
UPDATE taskport.run SET status = 'running' FROM t WHERE taskport.run.id = t.id` + "`" + `

const signalSQL = "DELETE FROM taskport_lease.task_signal WHERE topic = $1"
`,
	"temporaladapter/engine.go": "package temporaladapter\n\nimport _ \"example.com/shop/runstore\"\n",
	"workflows/kinds.go":        "package workflows\n\nimport (\n\t\"time\"\n\n\t\"example.com/shop/port\"\n)\n\nvar _ = port.From\nvar _ = time.Second\n",
	"plans/plans.go": `package plans

import (
	"errors"
	"fmt"
)

var ErrGone = errors.New("remove the download from plan: gone")

func explain(id string) error { return fmt.Errorf("cannot update plan %s: select another", id) }

var Use = "plan"
`,
	"plans/plans_test.go": "package plans\n\nconst countSQL = `SELECT count(*) FROM plan JOIN taskport.run r ON true`\n",
	"app/apptest/world.go": `package apptest

import (
	"testing"

	"example.com/shop/runstore"
)

var _ = runstore.Insert
var _ *testing.T

const outboxSQL = "SELECT kind FROM outbox_event WHERE business_key = $1"
`,
	"test/contract/faults.go":           "package contract\n\nconst runsSQL = `SELECT count(*) FROM taskport.run`\n",
	"internal/testkit/pgtest/pgtest.go": "package pgtest\n\nconst truncateSQL = `TRUNCATE plan, approval`\n",
	"admin/admin.go":                    "package admin\n\nconst catalogSQL = `SELECT 1 FROM pg_database WHERE datname = $1`\n",
}

// violation is what a case expects: the rule, the package, the subject (an
// import path or a table).
type violation struct{ rule, pkg, subject string }

// Each rule catches what breaks it, through the same Load and Check as
// TestOwnership: each case adds files to (or replaces files of) the base
// module and expects exactly its violations; the base alone has none.
func TestRulesCatchViolations(t *testing.T) {
	const mod = "example.com/shop/"
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  []violation
	}{
		{"the base keeps every rule", nil, nil},
		{"port imports a package of the module", map[string]string{
			"port/ledger.go": "package port\n\nimport _ \"example.com/shop/ledger\"\n",
		}, []violation{{archtest.RulePortLeaf, "port", mod + "ledger"}}},
		{"port imports a third-party package", map[string]string{
			"port/id.go": "package port\n\nimport _ \"github.com/google/uuid\"\n",
		}, []violation{{archtest.RulePortLeaf, "port", "github.com/google/uuid"}}},
		{"internal/stepctx imports port", map[string]string{
			"internal/stepctx/port.go": "package stepctx\n\nimport _ \"example.com/shop/port\"\n",
		}, []violation{{archtest.RuleStepctxLeaf, "internal/stepctx", mod + "port"}}},
		{"an adapter imports the other, from a subpackage too", map[string]string{
			"temporaladapter/lease.go":             "package temporaladapter\n\nimport _ \"example.com/shop/leaseadapter\"\n",
			"leaseadapter/internal/x/x.go":         "package x\n\nimport _ \"example.com/shop/temporaladapter\"\n",
			"leaseadapter/internal/testkinds/k.go": "package testkinds\n\nimport _ \"example.com/shop/temporaladapter\"\n",
		}, []violation{
			{archtest.RuleAdapters, "temporaladapter", mod + "leaseadapter"},
			{archtest.RuleAdapters, "leaseadapter/internal/x", mod + "temporaladapter"},
		}},
		{"business packages import the run store, before and after its move", map[string]string{
			"plans/runs.go":  "package plans\n\nimport _ \"example.com/shop/runstore\"\n",
			"admin/runs.go":  "package admin\n\nimport _ \"example.com/shop/internal/runstore\"\n",
			"outbox/runs.go": "package outbox\n\nimport _ \"example.com/shop/runstore/sub\"\n",
		}, []violation{
			{archtest.RuleRunstore, "plans", mod + "runstore"},
			{archtest.RuleRunstore, "admin", mod + "internal/runstore"},
			{archtest.RuleRunstore, "outbox", mod + "runstore/sub"},
		}},
		{"workflows imports a business package and a driver", map[string]string{
			"workflows/biz.go": "package workflows\n\nimport (\n\t_ \"example.com/shop/acquisition\"\n\t_ \"github.com/jackc/pgx/v5\"\n)\n",
		}, []violation{
			{archtest.RuleWorkflows, "workflows", mod + "acquisition"},
			{archtest.RuleWorkflows, "workflows", "github.com/jackc/pgx/v5"},
		}},
		{"plans reads taskport.run", map[string]string{
			"plans/queries.go": "package plans\n\nconst runsSQL = `SELECT id, status FROM taskport.run WHERE business_key = $1`\n",
		}, []violation{{archtest.RuleTableOwner, "plans", "taskport.run"}}},
		{"a table name spliced in from a constant", map[string]string{
			"plans/queries.go": "package plans\n\nconst tbl = \"plan\"\n\nconst deleteSQL = \"DELETE FROM \" + tbl + \" WHERE id = $1\"\n",
		}, []violation{{archtest.RuleTableOwner, "plans", "plan"}}},
		{"a query builder's From", map[string]string{
			"admin/q.go": "package admin\n\nimport \"github.com/stephenafamo/bob/dialect/psql/sm\"\n\nvar q = sm.From(\"decision\")\n",
		}, []violation{{archtest.RuleTableOwner, "admin", "decision"}}},
		{"a qualified column only", map[string]string{
			"ledger/q.go": "package ledger\n\nconst stateSQL = `SELECT download_task.state FROM t WHERE t.id = $1`\n",
		}, []violation{{archtest.RuleTableOwner, "ledger", "download_task"}}},
		{"the second table of a FROM list", map[string]string{
			"outbox/q.go": "package outbox\n\nconst joinSQL = `SELECT o.id FROM outbox_event o, approval AS a WHERE a.plan_id::text = o.business_key`\n",
		}, []violation{{archtest.RuleTableOwner, "outbox", "approval"}}},
		{"a JOIN, an INSERT and lower-case SQL", map[string]string{
			"plans/q.go": "package plans\n\nconst a = `SELECT 1 FROM x JOIN asset_operation o ON true`\n\nconst b = `insert into outbox_event (id) values ($1)`\n",
		}, []violation{
			{archtest.RuleTableOwner, "plans", "asset_operation"},
			{archtest.RuleTableOwner, "plans", "outbox_event"},
		}},
		{"a table of another schema's owner", map[string]string{
			"runstore/lease.go": "package runstore\n\nconst s = `DELETE FROM taskport_lease.task_signal WHERE topic = $1`\n",
		}, []violation{{archtest.RuleTableOwner, "runstore", "taskport_lease.task_signal"}}},
		{"a harness-looking name does not exempt a business package", map[string]string{
			"acquisition/contest/c.go": "package contest\n\nconst s = `SELECT 1 FROM taskport.waiter`\n",
		}, []violation{{archtest.RuleTableOwner, "acquisition/contest", "taskport.waiter"}}},
		{"the production binary reaches the dev server through a shared package", map[string]string{
			"cmd/taskport/main.go":      "package main\n\nimport _ \"example.com/shop/cmd/internal/stack\"\n",
			"cmd/internal/stack/dev.go": "package stack\n\nimport _ \"example.com/shop/internal/devserver\"\n",
			"internal/devserver/d.go":   "package devserver\n",
			"cmd/taskport-dev/main.go":  "package main\n\nimport _ \"example.com/shop/qbittorrent/qbtnox\"\n",
		}, []violation{{archtest.RuleNoDevHarness, "cmd/taskport", mod + "internal/devserver"}}},
		{"a table without an owner", map[string]string{
			"migrations/sql/00002_audit.sql": "-- +goose Up\nCREATE TABLE audit_log (id uuid);\n",
		}, []violation{{archtest.RuleTableOwned, "migrations", "audit_log"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			files := map[string]string{}
			for name, src := range base {
				files[name] = src
			}
			for name, src := range tc.files {
				files[name] = src
			}
			for name, src := range files {
				require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(root, name)), 0o755))
				require.NoError(t, os.WriteFile(filepath.Join(root, name), []byte(src), 0o644))
			}
			m, err := archtest.Load(root)
			require.NoError(t, err)
			var got []violation
			for _, v := range m.Check() {
				got = append(got, violation{v.Rule, v.Package, v.Subject})
				require.NotEmpty(t, v.Detail)
				t.Log(v)
			}
			require.ElementsMatch(t, tc.want, got)
		})
	}
}
