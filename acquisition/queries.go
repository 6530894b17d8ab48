package acquisition

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stephenafamo/bob"
	"github.com/stephenafamo/bob/dialect/psql"
	"github.com/stephenafamo/bob/dialect/psql/im"
	"github.com/stephenafamo/bob/dialect/psql/sm"
	"github.com/stephenafamo/bob/dialect/psql/um"

	"github.com/taskport/taskport/port"
)

// Every statement of the package, in one place, and the helpers that run
// them: each passes its error through interpretError, so the business
// store maps driver errors in one place.
//
// The plain repository statements are built with bob's Postgres dialect:
// every input is a psql.Arg (a $n placeholder, never text), and a clause that
// depends on an argument (an optional filter, an optional column) is added
// only when it applies, instead of SQL tricks like ($1 = '' OR status = $1).
// Fixed values of the schema (a state the statement moves a row to) are
// literals through psql.S, which quotes them, as they were in hand-written SQL.
//
// Statements whose meaning sits in a subtle predicate stay hand-written
// constants, because a builder would hide the rule in method chains: the
// guarded transitions, the holder check, the ON CONFLICT rule of
// UpsertDownload and the timeline union. The status sets of a transition
// come from the transition table as text[] arguments, never spliced into the
// text.
//
// Built statements run through DBTX (pgx), not through bob's pgx driver: that
// driver wraps *pgxpool.Pool and pgx.Tx in its own types, so every caller that
// holds a plain pgx.Tx (ledger.Fenced.Apply, the outbox's transaction) would
// have to convert. Building to (sql, args) keeps DBTX the one seam. The SQL
// text of a built statement depends only on its shape, so pgx's statement
// cache still prepares each shape once per connection.

// execSQL executes sql on q.
func execSQL(ctx context.Context, q DBTX, sql string, args ...any) (pgconn.CommandTag, error) {
	tag, err := q.Exec(ctx, sql, args...)
	return tag, interpretError(err)
}

// queryOneSQL runs sql and scans its one row; no row is port.ErrNotFound.
func queryOneSQL[T any](ctx context.Context, q DBTX, scan pgx.RowToFunc[T], sql string, args ...any) (T, error) {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		var zero T
		return zero, interpretError(err)
	}
	v, err := pgx.CollectExactlyOneRow(rows, scan)
	return v, interpretError(err)
}

// queryAllSQL runs sql and scans every row.
func queryAllSQL[T any](ctx context.Context, q DBTX, scan pgx.RowToFunc[T], sql string, args ...any) ([]T, error) {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, interpretError(err)
	}
	out, err := pgx.CollectRows(rows, scan)
	return out, interpretError(err)
}

// build turns a built statement into its SQL text and arguments.
func build(ctx context.Context, stmt bob.Query) (string, []any, error) {
	sql, args, err := bob.Build(ctx, stmt)
	if err != nil {
		return "", nil, fmt.Errorf("build statement: %w", err)
	}
	return sql, args, nil
}

// execBuilt builds stmt and executes it on q.
func execBuilt(ctx context.Context, q DBTX, stmt bob.Query) (pgconn.CommandTag, error) {
	sql, args, err := build(ctx, stmt)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	return execSQL(ctx, q, sql, args...)
}

// queryOne builds stmt, runs it and scans its one row; no row is
// port.ErrNotFound.
func queryOne[T any](ctx context.Context, q DBTX, stmt bob.Query, scan pgx.RowToFunc[T]) (T, error) {
	sql, args, err := build(ctx, stmt)
	if err != nil {
		var zero T
		return zero, err
	}
	return queryOneSQL(ctx, q, scan, sql, args...)
}

// queryAll builds stmt, runs it and scans every row.
func queryAll[T any](ctx context.Context, q DBTX, stmt bob.Query, scan pgx.RowToFunc[T]) ([]T, error) {
	sql, args, err := build(ctx, stmt)
	if err != nil {
		return nil, err
	}
	return queryAllSQL(ctx, q, scan, sql, args...)
}

// col names a column, quoted.
func col(name string) psql.Expression { return psql.Quote(name) }

// now is the transaction timestamp, for the *_at columns.
func now() psql.Expression { return psql.Raw("now()") }

// ---- plan

const planColumns = `id, title, source_type, source, info_hash, target_path, expected_size, expected_sha256,
	status, cancel_requested_at, cancel_reason, cancel_requested_by, created_at, updated_at`

// insertPlanStmt names create_key only for a plan created with one, so
// that a create without a key also works on a schema before migration 00021
// (this release's API beside a database not yet migrated, as the rolling
// upgrade rehearsal runs it).
func insertPlanStmt(p Plan) bob.Query {
	cols := []string{"id", "title", "source_type", "source", "info_hash", "target_path", "expected_size", "expected_sha256"}
	vals := []any{p.ID, p.Title, p.SourceType, p.Source, p.InfoHash, p.TargetPath, p.ExpectedSize, p.ExpectedSHA256}
	if p.CreateKey != "" {
		cols, vals = append(cols, "create_key"), append(vals, p.CreateKey)
	}
	return psql.Insert(im.Into("plan", cols...), im.Values(psql.Arg(vals...)), im.Returning(planColumns))
}

// selectPlanByCreateKeyStmt reads the plan a create with key recorded.
func selectPlanByCreateKeyStmt(key string) bob.Query {
	return psql.Select(sm.Columns(planColumns), sm.From("plan"), sm.Where(col("create_key").EQ(psql.Arg(key))))
}

// selectPlanStmt reads one plan; lock adds FOR UPDATE.
func selectPlanStmt(id uuid.UUID, lock bool) bob.Query {
	q := psql.Select(sm.Columns(planColumns), sm.From("plan"), sm.Where(col("id").EQ(psql.Arg(id))))
	if lock {
		q.Apply(sm.ForUpdate())
	}
	return q
}

func selectPlansByHashStmt(infoHash string) bob.Query {
	return psql.Select(
		sm.Columns(planColumns), sm.From("plan"),
		sm.Where(col("info_hash").EQ(psql.Arg(infoHash))),
		sm.OrderBy("created_at"), sm.OrderBy("id"),
	)
}

// listPlansStmt reads a page of plans, newest first, each filter applied
// only when set. The page starts after the keyset cursor (created_at, id),
// never at an offset, so a deep page costs what the first one does; the
// indexes of migration 00008 serve the order with and without a status, and
// the title search (a trigram index).
func listPlansStmt(f PlanFilter) bob.Query {
	q := psql.Select(
		sm.Columns(planColumns), sm.From("plan"),
		sm.OrderBy("created_at").Desc(), sm.OrderBy("id").Desc(),
		sm.Limit(psql.Arg(f.Limit)),
	)
	if f.Status != "" {
		q.Apply(sm.Where(col("status").EQ(psql.Arg(f.Status))))
	}
	if f.ID != uuid.Nil {
		q.Apply(sm.Where(col("id").EQ(psql.Arg(f.ID))))
	}
	if f.InfoHash != "" {
		q.Apply(sm.Where(col("info_hash").EQ(psql.Arg(f.InfoHash))))
	}
	if f.TitleContains != "" {
		q.Apply(sm.Where(col("title").OP("ILIKE", psql.Arg("%"+likeEscaper.Replace(f.TitleContains)+"%"))))
	}
	if !f.After.CreatedAt.IsZero() {
		q.Apply(sm.Where(psql.Group(col("created_at"), col("id")).LT(psql.ArgGroup(f.After.CreatedAt, f.After.ID))))
	}
	return q
}

// likeEscaper makes a search text match itself in LIKE: its % and _ are
// no wildcards (backslash is LIKE's default escape).
var likeEscaper = strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`)

// moveSQL is the guarded transition: 0 rows means the plan is unknown or not
// in a status the transition allows.
const moveSQL = `
UPDATE plan SET status = $3, updated_at = now()
WHERE id = $1 AND status = ANY($2)`

const statusSQL = `SELECT status FROM plan WHERE id = $1`

// lockSQL locks the plan row until the transaction ends, so that a hand-off
// and a concurrent cancel request are serialized.
const lockSQL = `SELECT cancel_requested_at IS NOT NULL FROM plan WHERE id = $1 FOR UPDATE`

// requestCancelSQL sets the cancel flag and moves to canceling in one
// guarded update; the first request's time, requester and reason stand.
const requestCancelSQL = `
UPDATE plan
SET cancel_requested_at = coalesce(cancel_requested_at, now()),
    cancel_reason = CASE WHEN cancel_requested_at IS NULL THEN $3 ELSE cancel_reason END,
    cancel_requested_by = CASE WHEN cancel_requested_at IS NULL THEN $4 ELSE cancel_requested_by END,
    status = 'canceling', updated_at = now()
WHERE id = $1 AND status = ANY($2)`

// holderSQL finds a plan that holds the target path ($1, while in one of
// $2) or the info hash ($3, while in one of $4).
const holderSQL = `
SELECT id, status, target_path = $1 AND status = ANY($2) FROM plan
WHERE (target_path = $1 AND status = ANY($2)) OR (info_hash = $3 AND status = ANY($4))
ORDER BY created_at, id
LIMIT 1`

// ---- approval

const approvalColumns = `id, plan_id, decision, decided_by, note, created_at`

// insertApprovalStmt inserts nothing when the plan was already decided.
func insertApprovalStmt(a Approval) bob.Query {
	return psql.Insert(
		im.Into("approval", "id", "plan_id", "decision", "decided_by", "note"),
		im.Values(psql.Arg(a.ID, a.PlanID, a.Decision, a.DecidedBy, a.Note)),
		im.OnConflict("plan_id").DoNothing(),
	)
}

func selectApprovalStmt(planID uuid.UUID) bob.Query {
	return psql.Select(sm.Columns(approvalColumns), sm.From("approval"), sm.Where(col("plan_id").EQ(psql.Arg(planID))))
}

// ---- download_task

const downloadColumns = `id, plan_id, info_hash, tag, save_path, content_path, state, progress, completed_at,
	created_at, updated_at`

// A resubmission (retry decision) keeps the row and its completion.
const upsertDownloadSQL = `
INSERT INTO download_task (id, plan_id, info_hash, tag, save_path, state)
VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (plan_id) DO UPDATE
SET state = CASE WHEN download_task.state = 'completed' THEN download_task.state ELSE EXCLUDED.state END,
    save_path = EXCLUDED.save_path, updated_at = now()
RETURNING ` + downloadColumns

func selectDownloadStmt(planID uuid.UUID) bob.Query {
	return psql.Select(sm.Columns(downloadColumns), sm.From("download_task"), sm.Where(col("plan_id").EQ(psql.Arg(planID))))
}

// completeDownloadStmt records the first completion report only; a later one,
// or one for a removed download, matches no row. An empty contentPath means
// the reporter does not know it, so the column is left out of the SET.
func completeDownloadStmt(planID uuid.UUID, contentPath string) bob.Query {
	q := psql.Update(
		um.Table("download_task"),
		um.SetCol("state").To(psql.S(string(DownloadCompleted))),
		um.SetCol("progress").To(psql.Raw("1")),
		um.SetCol("completed_at").To(now()), um.SetCol("updated_at").To(now()),
		um.Where(col("plan_id").EQ(psql.Arg(planID))),
		um.Where(col("completed_at").IsNull()),
		um.Where(col("state").NE(psql.S(string(DownloadRemoved)))),
	)
	if contentPath != "" {
		q.Apply(um.SetCol("content_path").ToArg(contentPath))
	}
	return q
}

func setDownloadProgressStmt(planID uuid.UUID, progress float64) bob.Query {
	return psql.Update(
		um.Table("download_task"),
		um.SetCol("progress").ToArg(progress), um.SetCol("updated_at").To(now()),
		um.Where(col("plan_id").EQ(psql.Arg(planID))),
		um.Where(col("completed_at").IsNull()),
	)
}

func setDownloadStateStmt(planID uuid.UUID, state DownloadState) bob.Query {
	return psql.Update(
		um.Table("download_task"),
		um.SetCol("state").ToArg(state), um.SetCol("updated_at").To(now()),
		um.Where(col("plan_id").EQ(psql.Arg(planID))),
	)
}

// ---- decision

const decisionColumns = `id, plan_id, kind, run_id, input, reason, status, resolved_by, resolved_at, created_at`

// insertDecisionStmt inserts nothing when the (plan, kind, run) is open already.
func insertDecisionStmt(id, planID uuid.UUID, kind port.Kind, runID port.RunID, input json.RawMessage, reason string) bob.Query {
	return psql.Insert(
		im.Into("decision", "id", "plan_id", "kind", "run_id", "input", "reason"),
		im.Values(psql.Arg(id, planID, kind, runID, input, reason)),
		im.OnConflict("plan_id", "kind", "run_id").DoNothing(),
	)
}

func selectDecisionByRunStmt(planID uuid.UUID, kind port.Kind, runID port.RunID) bob.Query {
	return psql.Select(
		sm.Columns(decisionColumns), sm.From("decision"),
		sm.Where(col("plan_id").EQ(psql.Arg(planID))),
		sm.Where(col("kind").EQ(psql.Arg(kind))),
		sm.Where(col("run_id").EQ(psql.Arg(runID))),
	)
}

func selectDecisionStmt(id uuid.UUID) bob.Query {
	return psql.Select(sm.Columns(decisionColumns), sm.From("decision"), sm.Where(col("id").EQ(psql.Arg(id))))
}

// listDecisionsStmt reads the oldest decisions first; an empty status lists
// every status.
func listDecisionsStmt(status DecisionStatus, limit int) bob.Query {
	q := psql.Select(
		sm.Columns(decisionColumns), sm.From("decision"),
		sm.OrderBy("created_at"), sm.OrderBy("id"),
		sm.Limit(psql.Arg(limit)),
	)
	if status != "" {
		q.Apply(sm.Where(col("status").EQ(psql.Arg(status))))
	}
	return q
}

func openDecisionsOfStmt(planID uuid.UUID) bob.Query {
	return psql.Select(
		sm.Columns(decisionColumns), sm.From("decision"),
		sm.Where(col("plan_id").EQ(psql.Arg(planID))),
		sm.Where(col("status").EQ(psql.S(string(DecisionOpen)))),
		sm.OrderBy("created_at"), sm.OrderBy("id"),
	)
}

// decisionOfRunStmt reads the latest decision a failed run opened, if any
// (index decision_run of migration 00008).
func decisionOfRunStmt(runID port.RunID) bob.Query {
	return psql.Select(
		sm.Columns(decisionColumns), sm.From("decision"),
		sm.Where(col("run_id").EQ(psql.Arg(string(runID)))),
		sm.OrderBy("created_at DESC"), sm.OrderBy("id DESC"), sm.Limit(1),
	)
}

// resolveDecisionStmt matches only an open decision: the first resolution
// stands.
func resolveDecisionStmt(id uuid.UUID, status DecisionStatus, by string) bob.Query {
	return psql.Update(
		um.Table("decision"),
		um.SetCol("status").ToArg(status), um.SetCol("resolved_by").ToArg(by), um.SetCol("resolved_at").To(now()),
		um.Where(col("id").EQ(psql.Arg(id))),
		um.Where(col("status").EQ(psql.S(string(DecisionOpen)))),
	)
}

// ---- timeline

// timelineSQL reads this package's part of a plan's business timeline
// (ADR 2.7), in the column order of timeline.Entry.
const timelineSQL = `
SELECT at, source, event, detail, run_id FROM (
    SELECT created_at AS at, 'plan' AS source, 'created' AS event, title AS detail, '' AS run_id FROM plan WHERE id = $1
    UNION ALL
    SELECT cancel_requested_at, 'plan', 'cancel requested',
           CASE WHEN cancel_requested_by = '' THEN cancel_reason ELSE cancel_requested_by || ': ' || cancel_reason END, '' FROM plan
    WHERE id = $1 AND cancel_requested_at IS NOT NULL
    UNION ALL
    SELECT created_at, 'approval', decision, decided_by || CASE WHEN note = '' THEN '' ELSE ': ' || note END, ''
    FROM approval WHERE plan_id = $1
    UNION ALL
    SELECT created_at, 'download', 'submitted', tag || ' ' || info_hash, '' FROM download_task WHERE plan_id = $1
    UNION ALL
    SELECT completed_at, 'download', 'completed', content_path, '' FROM download_task
    WHERE plan_id = $1 AND completed_at IS NOT NULL
    UNION ALL
    SELECT created_at, 'decision', 'opened for ' || kind, reason, run_id FROM decision WHERE plan_id = $1
    UNION ALL
    SELECT resolved_at, 'decision', 'resolved: ' || status, resolved_by, run_id FROM decision
    WHERE plan_id = $1 AND resolved_at IS NOT NULL
) t
ORDER BY at, source, event`
