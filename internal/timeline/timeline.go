// Package timeline is one line of a plan's business timeline (ADR 2.7): what
// happened to the plan, read from business tables only, never from an
// engine. Each table's owner reads its own lines for a plan (acquisition:
// the plan, its approval, download and decisions; ledger: its operations;
// outbox: its hand-offs) with a query that selects Entry's columns in its
// field order, and plans merges the lists with Merge.
package timeline

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/taskport/taskport/internal/dbtx"
)

// Entry is one line of the timeline.
type Entry struct {
	At     time.Time
	Source string // plan, approval, download, operation, handoff, decision
	Event  string
	Detail string
	// RunID is the run the line is about (a hand-off's run, an
	// operation's or a decision's), empty when none: the admin links it to
	// the engine's UI.
	RunID string
}

// Merge returns the entries of every list in one list, oldest first; entries
// at the same time are ordered by source, then event, so that a timeline
// read twice reads the same.
func Merge(lists ...[]Entry) []Entry {
	out := slices.Concat(lists...)
	slices.SortStableFunc(out, func(a, b Entry) int {
		return cmp.Or(a.At.Compare(b.At), cmp.Compare(a.Source, b.Source), cmp.Compare(a.Event, b.Event))
	})
	return out
}

// Read runs an owner's timeline query on q and scans its rows, whose
// columns are at, source, event, detail and run id in that order.
func Read(ctx context.Context, q dbtx.DBTX, sql string, args ...any) ([]Entry, error) {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowToStructByPos[Entry])
}
