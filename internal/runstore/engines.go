package runstore

// What switching engines reads and writes (issue 27, package router): the
// active engine's record, the open runs per engine, and the evacuation of
// an engine's open runs to another.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/taskport/taskport/internal/dbtx"
	"github.com/taskport/taskport/internal/enginekit"
	"github.com/taskport/taskport/port"
)

// Primary is the active engine while no switch has been recorded.
const Primary = EngineTemporal

// Switch is one recorded switch of the active engine.
type Switch struct {
	Engine Engine
	By     string
	Reason string
	At     time.Time
}

// ErrAlreadyActive: a switch to the engine that is already active. It
// wraps port.ErrInvalidInput; nothing was written.
var ErrAlreadyActive = fmt.Errorf("already the active engine: %w", port.ErrInvalidInput)

const (
	activeEngineSQL = `SELECT engine, switched_by, reason, switched_at FROM taskport.engine_switch ORDER BY id DESC LIMIT 1`
	// switchLockSQL serializes switches, so that two at once cannot both
	// read the same active engine and both record a switch away from it.
	switchLockSQL = `SELECT pg_advisory_xact_lock(hashtext('taskport.engine_switch'))`
	// enqueueLockSQL is switchLockSQL's shared side, held by a transaction
	// that enqueues on the engine it read (ActiveEngineLocked).
	enqueueLockSQL    = `SELECT pg_advisory_xact_lock_shared(hashtext('taskport.engine_switch'))`
	recordSwitchSQL   = `INSERT INTO taskport.engine_switch (engine, switched_by, reason) VALUES ($1, $2, $3) RETURNING switched_at`
	openRunsByKindSQL = `SELECT engine, kind, count(*), min(created_at) FROM taskport.run
WHERE status IN ('pending', 'running', 'waiting') GROUP BY engine, kind ORDER BY engine, kind`
	// unmovedRunsSQL counts the runs unmovedSQL holds for, all canceled,
	// of each engine of $1 that has any: one count per engine, each a read
	// of the entries of its engine in run_unmoved (engine migration 00005),
	// whose predicate it repeats so that the planner can use it; that index
	// holds only such runs, whatever the canceled runs retention keeps (a
	// GROUP BY or an ORDER BY would sort them; UnmovedRuns orders the
	// engines).
	unmovedRunsSQL = `SELECT engine, n FROM (
  SELECT e.engine, (SELECT count(*) FROM taskport.run
    WHERE engine = e.engine AND status = 'canceled' AND evacuated_to IS NULL
      AND (evacuated_at IS NOT NULL OR starts_with(cancel_reason, '` + evacuationHead + `'))
      AND ` + unmovedSQL + `) AS n
  FROM unnest($1::text[]) AS e(engine)
) c WHERE n > 0`
)

// ActiveEngine returns the newest recorded switch; with none recorded, a
// Switch naming Primary with a zero At.
func ActiveEngine(ctx context.Context, q DBTX) (Switch, error) {
	var s Switch
	err := q.QueryRow(ctx, activeEngineSQL).Scan(&s.Engine, &s.By, &s.Reason, &s.At)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return Switch{Engine: Primary}, nil
	case err != nil:
		return Switch{}, fmt.Errorf("read the active engine: %w", InterpretError(err))
	}
	return s, nil
}

// ActiveEngineLocked is ActiveEngine read in tx under the shared side of
// the switch lock, held until tx ends: a switch waits for the transactions
// that read the engine before it to commit, so the runs they enqueue on
// the engine switched away from exist when the switch does (an evacuation
// after it finds them), and every transaction after it reads the switch.
func ActiveEngineLocked(ctx context.Context, tx DBTX) (Switch, error) {
	if _, err := tx.Exec(ctx, enqueueLockSQL); err != nil {
		return Switch{}, fmt.Errorf("read the active engine: %w", InterpretError(err))
	}
	return ActiveEngine(ctx, tx)
}

// Bounds of a switch's record, in characters: `engine status` and /admin
// show it on one line. They are the plans API's bounds of who acted and of
// a note or reason (plans.MaxActor, plans.MaxNote), which this package
// cannot import.
const (
	MaxSwitchBy     = 200
	MaxSwitchReason = 1000
)

// CheckSwitch refuses, with a *port.FieldError, a switch's by that is empty,
// or either of by and reason that is not text a terminal shows as written:
// not valid UTF-8, a U+0000 (Postgres text stores neither), a control
// character (an escape code where `engine status` prints it; the reason may
// hold line feeds and tabs), or longer than its bound. An empty reason is
// accepted: the flag documents it as optional, and it is shown as none.
func CheckSwitch(by, reason string) error {
	if by == "" {
		return &port.FieldError{Field: "by", Reason: "must name who switches"}
	}
	return cmp.Or(enginekit.ValidateBoundedLine("by", by, "", MaxSwitchBy), enginekit.ValidateBoundedLine("reason", reason, "\n\t", MaxSwitchReason))
}

// RecordSwitch makes to the active engine, recording who switched and why.
// A switch to the active engine is ErrAlreadyActive, an engine that is not
// one, or a by or reason CheckSwitch refuses, a *port.FieldError; none of
// them writes anything.
func RecordSwitch(ctx context.Context, db dbtx.Beginner, to Engine, by, reason string) (Switch, error) {
	if !validEngine(to) {
		return Switch{}, &port.FieldError{Field: "engine", Reason: fmt.Sprintf("must be one of %v, got %q", engines, to)}
	}
	if err := CheckSwitch(by, reason); err != nil {
		return Switch{}, err
	}
	s := Switch{Engine: to, By: by, Reason: reason}
	err := dbtx.InTx(ctx, db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, switchLockSQL); err != nil {
			return err
		}
		cur, err := ActiveEngine(ctx, tx)
		if err != nil {
			return err
		}
		if cur.Engine == to {
			return fmt.Errorf("switch to %s: %w", to, ErrAlreadyActive)
		}
		return tx.QueryRow(ctx, recordSwitchSQL, to, by, reason).Scan(&s.At)
	})
	if err != nil {
		return Switch{}, fmt.Errorf("record the switch: %w", InterpretError(err))
	}
	return s, nil
}

func validEngine(e Engine) bool {
	for _, x := range engines {
		if x == e {
			return true
		}
	}
	return false
}

// ValidEngine refuses a name that is not an engine's with a *port.FieldError
// on field.
func ValidEngine(field string, e Engine) error {
	if !validEngine(e) {
		return &port.FieldError{Field: field, Reason: fmt.Sprintf("must be one of %v, got %q", engines, e)}
	}
	return nil
}

// OpenRuns is one engine's open runs (pending, running, waiting) of one
// kind.
type OpenRuns struct {
	Engine Engine
	Kind   port.Kind
	Count  int
	Oldest time.Time // the oldest one's creation
}

// OpenRunsByKind counts the open runs per engine and kind. It reads the
// open statuses' entries of run_status_created, so its cost follows the
// open runs, not the finished ones.
func OpenRunsByKind(ctx context.Context, q DBTX) ([]OpenRuns, error) {
	rows, err := q.Query(ctx, openRunsByKindSQL)
	if err != nil {
		return nil, fmt.Errorf("count open runs: %w", InterpretError(err))
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (OpenRuns, error) {
		var o OpenRuns
		return o, row.Scan(&o.Engine, &o.Kind, &o.Count, &o.Oldest)
	})
	if err != nil {
		return nil, fmt.Errorf("count open runs: %w", InterpretError(err))
	}
	return out, nil
}

// Unmoved counts one engine's runs that an interrupted evacuation left to
// move: canceled, no longer open, and moved by the next evacuation of the
// engine.
type Unmoved struct {
	Engine Engine
	Count  int
}

// UnmovedRuns counts, per engine, the runs an interrupted evacuation left
// to move (unmovedSQL). It reads run_unmoved, which holds only them.
func UnmovedRuns(ctx context.Context, q DBTX) ([]Unmoved, error) {
	names := make([]string, len(engines))
	for i, e := range engines {
		names[i] = string(e)
	}
	rows, err := q.Query(ctx, unmovedRunsSQL, names)
	if err != nil {
		return nil, fmt.Errorf("count the runs left by an evacuation: %w", InterpretError(err))
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Unmoved, error) {
		var u Unmoved
		return u, row.Scan(&u.Engine, &u.Count)
	})
	if err != nil {
		return nil, fmt.Errorf("count the runs left by an evacuation: %w", InterpretError(err))
	}
	slices.SortFunc(out, func(a, b Unmoved) int { return cmp.Compare(a.Engine, b.Engine) })
	return out, nil
}

// FindByKey returns the run recorded for (kind, key), whichever engine owns
// it, or port.ErrNotFound.
func FindByKey(ctx context.Context, q DBTX, kind port.Kind, key string) (Run, error) {
	run, err := collectRun(q.Query(ctx, selectRunByKeySQL, kind, key))
	if err != nil {
		return Run{}, fmt.Errorf("find run %s/%s: %w", kind, key, err)
	}
	return run, nil
}

// RunKey names a run by its idempotency authority's key.
type RunKey struct {
	Kind port.Kind
	Key  string
}

const keysOfOthersSQL = `SELECT r.kind, r.idempotency_key, r.id FROM taskport.run r
JOIN unnest($1::text[], $2::text[]) AS k(kind, key) ON r.kind = k.kind AND r.idempotency_key = k.key
WHERE r.engine <> $3`

// KeysOfOthers returns, of keys, those a run of an engine other than self
// holds, with that run's id: one lookup per key in the authority's unique
// index.
func KeysOfOthers(ctx context.Context, q DBTX, self Engine, keys []RunKey) (map[RunKey]port.RunID, error) {
	kinds, names := make([]string, len(keys)), make([]string, len(keys))
	for i, k := range keys {
		kinds[i], names[i] = string(k.Kind), k.Key
	}
	rows, err := q.Query(ctx, keysOfOthersSQL, kinds, names, self)
	if err != nil {
		return nil, fmt.Errorf("look up the keys of other engines: %w", InterpretError(err))
	}
	out := map[RunKey]port.RunID{}
	var (
		k  RunKey
		id uuid.UUID
	)
	_, err = pgx.ForEachRow(rows, []any{&k.Kind, &k.Key, &id}, func() error {
		out[k] = port.RunID(id.String())
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("look up the keys of other engines: %w", InterpretError(err))
	}
	return out, nil
}

// Evacuee is an open run of an engine being evacuated, or one whose
// evacuation was interrupted: after the engine took its cancel
// (ByEvacuation, and the engine may have ended it), or after it was ended
// (Ended) and before its replacement was recorded.
type Evacuee struct {
	Run
	Ended bool
	// ByEvacuation: the run's cancel is an evacuation's, marked by
	// MarkEvacuating before it was sent and recorded first (its
	// CancelReason is an EvacuationReason of the run's engine). A cancel
	// requested otherwise, whatever its reason reads, is not.
	ByEvacuation bool
}

// EvacuationKey is the idempotency key of the run that replaces run id on
// the active engine: derived from id, so that a repeated or resumed
// evacuation finds the same replacement instead of starting another.
func EvacuationKey(id port.RunID) string { return "evacuated:" + string(id) }

// EvacuationReason is the cancel reason an evacuation of engine from to
// engine to by by gives the runs it moves. Its cancel goes through the
// engine, which records it as the run's cancel reason (the first one wins)
// and may end the run canceled at once (a pending or waiting run). The
// reason alone does not make a cancel an evacuation's: anyone may cancel
// with any reason. MarkEvacuating's mark, written before the cancel is
// sent, does, with the reason recorded first (Evacuee.ByEvacuation).
func EvacuationReason(from, to Engine, by string) string {
	return evacuationHead + string(from) + evacuationTail + string(to) + " engine by " + by
}

// How every EvacuationReason begins, around the name of the engine
// evacuated (byEvacuationSQL reads it from the row).
const (
	evacuationHead = "evacuated from the "
	evacuationTail = " engine to the "
)

// byEvacuationSQL holds for a run whose cancel is an evacuation's: marked
// by MarkEvacuating before the cancel was sent, with the evacuation's
// reason recorded first (its reason is an EvacuationReason from the run's
// own engine). A run whose cancel is an evacuation's is still to be
// moved, by whichever evacuation comes next.
const byEvacuationSQL = `evacuation_requested_at IS NOT NULL AND starts_with(cancel_reason, '` +
	evacuationHead + `' || engine || '` + evacuationTail + `')`

// unmovedSQL holds for a canceled run that an interrupted evacuation of its
// engine left to move, which evacueesSQL lists with the open runs: ended by
// the evacuation and not yet replaced, or ended canceled by its engine on
// the evacuation's cancel (byEvacuationSQL) before the evacuation ended its
// row. Its work is still to be done and its row is all that remembers it,
// so status reports it (UnmovedRuns) and retention keeps it
// (PrunableRunsCTE) until the next evacuation moves it.
const unmovedSQL = `(evacuated_at IS NOT NULL AND evacuated_to IS NULL
    OR evacuated_at IS NULL AND ` + byEvacuationSQL + `)`

const (
	// evacueesSQL lists, besides the open runs, the runs an interrupted
	// evacuation left to move (unmovedSQL, all canceled: ended by the
	// evacuation and not yet replaced, or by the engine on its cancel):
	// their row is all that remembers them.
	evacueesSQL = `SELECT ` + runColumns + `, evacuated_at IS NOT NULL, coalesce(` + byEvacuationSQL + `, false) FROM taskport.run
WHERE engine = $1 AND (created_at, id) > ($2, $3) AND (
    (status IN ('pending', 'running', 'waiting') AND evacuated_at IS NULL)
    OR (status = 'canceled' AND ` + unmovedSQL + `))
ORDER BY created_at, id LIMIT $4`
	// endAbandonedSQL ends an open run of engine $2 canceled without its
	// engine: its lease (if any) is taken away, so that a worker still
	// running a step of it is fenced from then on, and its waiter rows go,
	// so that no signal is addressed to it. A run the engine already ended
	// canceled for an evacuation (byEvacuationSQL: this evacuation's
	// cancel, or an interrupted one's, reached it) is taken too. $4 marks
	// it evacuated.
	endAbandonedSQL = `
WITH r AS (
  UPDATE taskport.run
  SET status = 'canceled', finished_at = coalesce(finished_at, now()), updated_at = now(), last_error = '',
      cancel_requested_at = coalesce(cancel_requested_at, now()),
      cancel_reason = CASE WHEN cancel_reason = '' THEN $3 ELSE cancel_reason END,
      lease_owner = NULL, lease_until = NULL, lease_token = NULL, started_seq = NULL,
      evacuated_at = CASE WHEN $4 THEN now() END
  WHERE id = $1 AND engine = $2 AND evacuated_at IS NULL
    AND (status IN ('pending', 'running', 'waiting') OR status = 'canceled' AND ` + byEvacuationSQL + `)
  RETURNING id
), w AS (
  DELETE FROM taskport.waiter WHERE run_id IN (SELECT id FROM r)
)
SELECT count(*) FROM r`
	// markEvacuatingSQL marks open run $1 of engine $2 for MarkEvacuating
	// unless its cancel was requested (an interrupted evacuation that marked
	// it and went no further left it open and unrequested: it keeps its
	// mark and is taken).
	markEvacuatingSQL = `UPDATE taskport.run SET evacuation_requested_at = coalesce(evacuation_requested_at, now())
WHERE id = $1 AND engine = $2 AND evacuated_at IS NULL AND status IN ('pending', 'running', 'waiting')
  AND cancel_requested_at IS NULL`
	// evacuatedToSQL records the replacement, which the run's view reads
	// (RunView.MovedTo): updated_at advances with it, as with every change
	// of the view.
	evacuatedToSQL = `UPDATE taskport.run SET evacuated_to = $2, updated_at = now() WHERE id = $1 AND evacuated_at IS NOT NULL`
)

// EvacuationCursor is a position in Evacuees' order (oldest first); the
// zero one is the start.
type EvacuationCursor struct {
	CreatedAt time.Time
	ID        uuid.UUID
}

// Next is the cursor just past run.
func (c EvacuationCursor) Next(run Run) EvacuationCursor {
	u, _ := uuid.Parse(string(run.ID)) // ids come from scanRun, always valid
	return EvacuationCursor{CreatedAt: run.CreatedAt, ID: u}
}

// Evacuees returns up to limit runs of engine to evacuate, oldest first,
// after cursor.
func Evacuees(ctx context.Context, q DBTX, engine Engine, after EvacuationCursor, limit int) ([]Evacuee, error) {
	rows, err := q.Query(ctx, evacueesSQL, engine, after.CreatedAt, after.ID, limit)
	if err != nil {
		return nil, fmt.Errorf("list the runs to evacuate: %w", InterpretError(err))
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Evacuee, error) {
		var e Evacuee
		r, err := scanRunAnd(row, &e.Ended, &e.ByEvacuation)
		e.Run = r
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("list the runs to evacuate: %w", InterpretError(err))
	}
	return out, nil
}

// MarkEvacuating marks open run id of engine as one whose cancel an
// evacuation is about to send (evacuation_requested_at), before it sends
// it: the mark, not the reason, is what tells the next evacuation and
// status that a run the engine then ends canceled is still to be moved.
// marked is false when the run is no longer open, or when its cancel was
// requested (by someone else: a run whose cancel is an evacuation's is
// Evacuee.ByEvacuation and needs no mark): nothing was written, and the
// run is not to be moved.
func MarkEvacuating(ctx context.Context, q DBTX, engine Engine, id port.RunID) (marked bool, err error) {
	u, err := ParseID(id)
	if err != nil {
		return false, err
	}
	tag, err := q.Exec(ctx, markEvacuatingSQL, u, engine)
	if err != nil {
		return false, fmt.Errorf("mark run %s as evacuated: %w", id, InterpretError(err))
	}
	return tag.RowsAffected() == 1, nil
}

// EndAbandoned ends open run id of engine canceled, with reason, without
// the engine (see endAbandonedSQL), as it does a run an evacuation's cancel
// ended; evacuated marks it as moved, to be followed by EvacuatedTo. ended
// is false when the run was no longer open (it finished meanwhile) or
// already evacuated: nothing was written.
func EndAbandoned(ctx context.Context, q DBTX, engine Engine, id port.RunID, reason string, evacuated bool) (ended bool, err error) {
	u, err := ParseID(id)
	if err != nil {
		return false, err
	}
	var n int
	if err := q.QueryRow(ctx, endAbandonedSQL, u, engine, reason, evacuated).Scan(&n); err != nil {
		return false, fmt.Errorf("end run %s: %w", id, InterpretError(err))
	}
	return n == 1, nil
}

// EvacuatedTo records to as the run that replaced evacuated run id: its
// RunView.MovedTo from then on.
func EvacuatedTo(ctx context.Context, q DBTX, id, to port.RunID) error {
	u, err := ParseID(id)
	if err != nil {
		return err
	}
	v, err := ParseID(to)
	if err != nil {
		return err
	}
	if _, err := q.Exec(ctx, evacuatedToSQL, u, v); err != nil {
		return fmt.Errorf("record the replacement of run %s: %w", id, InterpretError(err))
	}
	return nil
}
