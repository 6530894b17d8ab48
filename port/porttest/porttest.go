// Package porttest is the conformance suite of the port: one test per row of
// the specification in port's documentation (method by run state), run
// against any engine through the port alone, as River's riverdrivertest runs
// every driver:
//
//	porttest.Run(t, func(t *testing.T) porttest.Harness { ... })
//
// The suite brings its own small kinds (porttest.program: a step that can
// block until the test releases it or fail n times first, a signal wait with
// a timeout, a second wait, a sleep, a step whose activity is never bound)
// and its own table, porttest.execution, in the test's database: every step
// body that starts inserts a row there, so the suite asserts on what ran
// (no step started after Cancel returned, no duplicate execution, the
// attempt a body saw), not on what the engine reports.
//
// Run states are produced through the port only: Enqueue, Start with
// Concurrency 1 and a blocking step for "leased but not started", Cancel.
// The suite never writes an engine's rows. To check that a refused call
// wrote nothing it reads the run's row: by default taskport.run, the shared
// run store of this module's engines; an engine of another module passes a
// RowReader over its own storage.
package porttest

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/port"
)

// Harness is one test's engine environment. newHarness is called once per
// test (a subtest per method and state), so each gets a database of its own.
type Harness struct {
	// Pool is a fresh migrated database for this test only; the suite
	// creates its schema porttest in it.
	Pool *pgxpool.Pool
	// New makes an engine serving reg over Pool, not started. The engine
	// must also implement port.Admin. Engines made for one test share the
	// engine state (a worker restarted with the same code).
	New func(t *testing.T, reg *port.Registry) port.TaskEngine
	// Other makes an engine of another kind over Pool, not started, so that
	// the suite can enqueue "a run of another engine" through it. Nil skips
	// the rows of state "other".
	Other func(t *testing.T, reg *port.Registry) port.TaskEngine
	// Rows reads the stored form of a run; nil reads the run table of this
	// module's engines, <RunSchema>.run.
	Rows RowReader
	// RunSchema is the schema of that run table (the engines'
	// Config.Schema); "" is taskport.
	RunSchema string
	// Known lists the rows ("Method/state") this engine is known to fail,
	// each with why. Such a row is skipped with a message that says it
	// fails and why, so that the failure stays in the output and in the
	// engine's harness instead of being dropped; an engine meets the
	// specification only with Known empty.
	Known map[string]string
}

// RowReader reads what an engine stored, to prove that a call wrote nothing.
type RowReader interface {
	// Row is the run's stored row as comparable text; "" when there is none.
	Row(ctx context.Context, id port.RunID) (string, error)
	// Count is the number of runs stored.
	Count(ctx context.Context) (int, error)
}

// runTable reads <schema>.run, where this module's engines keep every run.
type runTable struct {
	pool  *pgxpool.Pool
	table string // quoted
}

func newRunTable(pool *pgxpool.Pool, schema string) runTable {
	if schema == "" {
		schema = "taskport"
	}
	return runTable{pool: pool, table: pgx.Identifier{schema, "run"}.Sanitize()}
}

func (r runTable) Row(ctx context.Context, id port.RunID) (string, error) {
	var row string
	err := r.pool.QueryRow(ctx, `SELECT coalesce((SELECT to_jsonb(r)::text FROM `+r.table+` r WHERE r.id::text = $1), '')`, string(id)).Scan(&row)
	return row, err
}

func (r runTable) Count(ctx context.Context) (int, error) {
	var n int
	err := r.pool.QueryRow(ctx, `SELECT count(*) FROM `+r.table).Scan(&n)
	return n, err
}

// waitFor bounds every poll of the suite; a poll that succeeds returns at
// once, so it only costs time when a row fails.
const (
	waitFor   = 60 * time.Second
	pollEvery = 20 * time.Millisecond
)

// Run runs every row of the specification against the engine newHarness
// builds, as TestX/<method>/<state>, in parallel.
func Run(t *testing.T, newHarness func(t *testing.T) Harness) {
	for _, m := range methods {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			for _, s := range states {
				t.Run(s.name, func(t *testing.T) {
					t.Parallel()
					c := newCell(t, newHarness(t), s)
					if s.other && c.h.Other == nil {
						t.Skip("the harness gives no other engine (Harness.Other is nil)")
					}
					if why := c.h.Known[m.name+"/"+s.name]; why != "" {
						t.Skipf("KNOWN DIVERGENCE: this engine fails %s/%s: %s", m.name, s.name, why)
					}
					c.id = s.make(c)
					m.check(c)
				})
			}
		})
	}
}

// eventually polls cond until it holds, failing the test with msg.
func eventually(t *testing.T, cond func() bool, msg string, args ...any) {
	t.Helper()
	require.Eventuallyf(t, cond, waitFor, pollEvery, msg, args...)
}
