package runstore

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/taskport/taskport/port"
)

// List returns engine's runs matching f, newest first (created_at, then
// id, both descending), after f.After. Each view carries its Cursor.
//
// The engine is a condition on the rows the listing's index seeks yield,
// not a column of their indexes (listRunsSelect): a page also reads the
// runs of the other engine that lie between its own. A database serves one
// engine, save while moving from one to the other, so for that engine it
// costs nothing. While both have runs there, a page of one engine's runs
// also reads the other engine's runs of the same statuses (and kind and
// version) created in the page's span; listing an engine with no runs at
// all reads every run of the statuses asked for, of the other engine, to
// find none.
func List(ctx context.Context, q DBTX, engine Engine, f port.RunFilter) ([]port.RunView, error) {
	sql, args, err := listQuery(ctx, q, engine, f)
	if err != nil || sql == "" {
		return nil, err
	}
	runs, err := collectRuns(q.Query(ctx, sql, args...))
	if err != nil {
		return nil, fmt.Errorf("list runs: %w", err)
	}
	out := make([]port.RunView, len(runs))
	for i, r := range runs {
		out[i] = r.RunView
	}
	return out, nil
}

// allStatuses are the statuses a run can have (the row check of migration
// 00004 refuses others), in the order a listing's branches take them.
var allStatuses = []port.Status{port.StatusPending, port.StatusRunning, port.StatusWaiting,
	port.StatusSucceeded, port.StatusFailed, port.StatusCanceled}

// listQuery builds the listing statement for f from the fixed parts in
// queries.go; every value is a parameter. An empty statement means that no
// run can match (a kind with no run on the versions asked for).
//
// The listing indexes (migration 00012) lead with status, or with kind,
// version and status, then (created_at, id): each yields in the listing's
// order the runs of one status, or of one (kind, version, status). A
// listing that spans several is a UNION ALL of one branch per status, or
// per (version, status), each a seek on its index stopping after the LIMIT;
// Postgres merges them in order (Merge Append), so a page costs its size
// times the branches, never a sort of the table. Every run has one of the
// six statuses, so the branches of all six are every run. A kind's versions
// are read first (kindVersionsSQL, one seek per version).
func listQuery(ctx context.Context, q DBTX, engine Engine, f port.RunFilter) (string, []any, error) {
	limit := f.Limit
	switch {
	case limit == 0:
		limit = port.DefaultRunsPerPage
	case limit < 0 || limit > port.MaxRunsPerPage:
		return "", nil, &port.FieldError{Field: "limit", Reason: fmt.Sprintf("must lie in [1, %d], got %d", port.MaxRunsPerPage, limit)}
	}
	for _, s := range f.Statuses {
		if !s.Valid() {
			return "", nil, &port.FieldError{Field: "status", Reason: fmt.Sprintf("unknown status %q", s)}
		}
	}
	// version is an int4 column: a larger filter would fail to encode.
	for field, v := range map[string]int{"version": f.Version, "below_version": f.BelowVersion} {
		if v < 0 || v > math.MaxInt32 {
			return "", nil, &port.FieldError{Field: field, Reason: fmt.Sprintf("must lie in [0, %d], got %d", math.MaxInt32, v)}
		}
	}
	after := pgtype.Timestamptz{InfinityModifier: pgtype.Infinity, Valid: true}
	var afterID uuid.UUID
	if f.After != "" {
		at, id, err := decodeCursor(f.After)
		if err != nil {
			return "", nil, err
		}
		after, afterID = pgtype.Timestamptz{Time: at, Valid: true}, id
	}
	args := []any{after, afterID, engine.others()}
	param := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	if f.BusinessKey != "" {
		// A business key's runs are few: run_business_key finds them, the
		// other filters sift them and they are sorted.
		conds := []string{
			// The literal lets every plan, generic ones included, prove
			// the predicate of the partial index run_business_key.
			"business_key = " + param(f.BusinessKey) + " AND business_key <> ''",
		}
		if f.Kind != "" {
			conds = append(conds, "kind = "+param(string(f.Kind)))
		}
		conds = append(conds, versionConditions(f, param)...)
		if len(f.Statuses) > 0 {
			conds = append(conds, statusCondition(f.Statuses))
		}
		return branch(conds, param(limit)), args, nil
	}
	statuses := allStatuses
	if len(f.Statuses) > 0 {
		statuses = slices.Compact(slices.Sorted(slices.Values(f.Statuses)))
	}
	var branches []string
	var lim string
	if f.Kind == "" {
		common := versionConditions(f, param)
		lim = param(limit)
		for _, s := range statuses {
			branches = append(branches, branch(append(slices.Clip(common), statusCondition([]port.Status{s})), lim))
		}
	} else {
		versions, err := kindVersions(ctx, q, f)
		if err != nil {
			return "", nil, err
		}
		if len(versions) == 0 {
			return "", nil, nil
		}
		kind := param(string(f.Kind))
		lim = param(limit)
		for _, v := range versions {
			version := param(v)
			for _, s := range statuses {
				branches = append(branches, branch([]string{"kind = " + kind, "version = " + version, statusCondition([]port.Status{s})}, lim))
			}
		}
	}
	if len(branches) == 1 {
		return branches[0], args, nil
	}
	return `SELECT ` + runColumns + ` FROM ((` + strings.Join(branches, ") UNION ALL (") + `)) AS r` + listRunsOrder + lim, args, nil
}

// branch is one listing statement: conds after the keyset condition.
func branch(conds []string, limit string) string {
	return listRunsSelect + " AND " + strings.Join(conds, " AND ") + listRunsOrder + limit
}

// versionConditions are the conditions of f on the version.
func versionConditions(f port.RunFilter, param func(any) string) []string {
	var conds []string
	if f.Version != 0 {
		conds = append(conds, "version = "+param(f.Version))
	}
	if f.BelowVersion != 0 {
		conds = append(conds, "version < "+param(f.BelowVersion))
	}
	return conds
}

// kindVersions are the versions of f.Kind that f lists: f.Version, or
// those the kind has runs on, below f.BelowVersion if set. A version
// recorded after this read is missed by the page being built, as a run
// created after the statement would be.
func kindVersions(ctx context.Context, q DBTX, f port.RunFilter) ([]int, error) {
	below := math.MaxInt32
	if f.BelowVersion != 0 {
		below = f.BelowVersion
	}
	if f.Version != 0 {
		if f.Version >= below {
			return nil, nil
		}
		return []int{f.Version}, nil
	}
	rows, err := q.Query(ctx, kindVersionsSQL, string(f.Kind), below)
	if err != nil {
		return nil, fmt.Errorf("list runs: versions of %s: %w", f.Kind, InterpretError(err))
	}
	versions, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		return nil, fmt.Errorf("list runs: versions of %s: %w", f.Kind, InterpretError(err))
	}
	return versions, nil
}

// statusCondition is the condition on statuses, valid ones (listQuery
// checked), written from the statuses' SQL literals rather than as a
// parameter: a generic plan of "status = $3" is costed for an average
// status and may leave run_status_created for a scan that filters, which is
// slow exactly for the rare statuses operators list (failed). A single
// status is an equality, so that the index also yields the listing's order.
func statusCondition(statuses []port.Status) string {
	lits := make([]string, len(statuses))
	for i, s := range statuses {
		lits[i] = statusLiteral[s]
	}
	if len(lits) == 1 {
		return "status = " + lits[0]
	}
	return "status IN (" + strings.Join(lits, ", ") + ")"
}

// statusLiteral is the SQL literal of each status.
var statusLiteral = map[port.Status]string{
	port.StatusPending:   "'pending'",
	port.StatusRunning:   "'running'",
	port.StatusWaiting:   "'waiting'",
	port.StatusSucceeded: "'succeeded'",
	port.StatusFailed:    "'failed'",
	port.StatusCanceled:  "'canceled'",
}

// A cursor is the run's created_at (Unix microseconds, the precision
// Postgres stores) and id, 24 bytes, in URL-safe base64.
const cursorLen = 8 + 16

func encodeCursor(createdAt time.Time, id uuid.UUID) string {
	var b [cursorLen]byte
	binary.BigEndian.PutUint64(b[:8], uint64(createdAt.UnixMicro()))
	copy(b[8:], id[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

func decodeCursor(s string) (time.Time, uuid.UUID, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) != cursorLen {
		return time.Time{}, uuid.UUID{}, &port.FieldError{Field: "after", Reason: fmt.Sprintf("%q is not a run cursor", s)}
	}
	id, _ := uuid.FromBytes(b[8:]) // 16 bytes: cannot fail
	return time.UnixMicro(int64(binary.BigEndian.Uint64(b[:8]))), id, nil
}
