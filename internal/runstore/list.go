package runstore

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/taskport/taskport/port"
)

// List returns the runs matching f, newest first (created_at, then id, both
// descending), after f.After. Each view carries its Cursor.
func List(ctx context.Context, q DBTX, f port.RunFilter) ([]port.RunView, error) {
	sql, args, err := listQuery(f)
	if err != nil {
		return nil, fmt.Errorf("list runs: %w", err)
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

// listQuery builds the listing statement for f from the fixed parts in
// queries.go; every value is a parameter.
func listQuery(f port.RunFilter) (string, []any, error) {
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
	if f.Version < 0 || f.BelowVersion < 0 {
		return "", nil, &port.FieldError{Field: "version", Reason: "must not be negative"}
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
	var sql strings.Builder
	sql.WriteString(listRunsSelect)
	args := []any{after, afterID}
	// where adds a condition whose "$" is the placeholder of arg.
	where := func(cond string, arg any) {
		args = append(args, arg)
		sql.WriteString(" AND " + strings.Replace(cond, "$", "$"+strconv.Itoa(len(args)), 1))
	}
	if f.Kind != "" {
		where("kind = $", string(f.Kind))
	}
	if f.Version != 0 {
		where("version = $", f.Version)
	}
	if f.BelowVersion != 0 {
		where("version < $", f.BelowVersion)
	}
	if len(f.Statuses) > 0 {
		sql.WriteString(" AND " + statusCondition(f.Statuses))
	}
	if f.BusinessKey != "" {
		// The literal lets every plan, generic ones included, prove the
		// predicate of the partial index run_business_key.
		where("business_key = $ AND business_key <> ''", f.BusinessKey)
	}
	args = append(args, limit)
	return sql.String() + listRunsOrder + "$" + strconv.Itoa(len(args)), args, nil
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
