// Package runstore is the Postgres part both engines share: the idempotency
// authority (taskport.run, UNIQUE(kind, idempotency_key): a key is held
// while its run is recorded, until the retention cleaner deletes the
// finished run), the run projection that stays readable after an engine
// forgets a run, and the waiter table that makes topic-addressed signals
// strongly consistent.
//
// Only the engines (and engine test doubles such as apptest.RecordingEngine)
// import this package; they never import each other. It is internal so that
// business packages reach runs through port.TaskEngine and port.Admin, never
// through the engines' tables.
package runstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/taskport/taskport/internal/dbtx"
	"github.com/taskport/taskport/internal/enginekit"
	"github.com/taskport/taskport/internal/tracing"
	"github.com/taskport/taskport/port"
)

// DBTX is satisfied by *pgxpool.Pool, *pgx.Conn and pgx.Tx, so every write
// also works inside the caller's transaction.
type DBTX = dbtx.DBTX

// Engine names the engine that owns a run.
type Engine string

// The engines.
const (
	EngineLease    Engine = "lease"
	EngineTemporal Engine = "temporal"
)

// engines are the engines that can own a run: those taskport.run_engines()
// admits (TestEnginesAreTheSchemas holds the two lists together).
var engines = []Engine{EngineLease, EngineTemporal}

// others are the engines other than e, as the text[] a statement takes.
func (e Engine) others() []string {
	var out []string
	for _, o := range engines {
		if o != e {
			out = append(out, string(o))
		}
	}
	return out
}

// NewRun is what Insert records.
type NewRun struct {
	Engine      Engine
	Kind        port.Kind
	Version     int
	Key         string // idempotency key
	BusinessKey string
	Priority    int
	Input       json.RawMessage
	AvailableAt time.Time // zero: now
	// StartWanted marks a run whose engine starts it once the inserting
	// transaction commits (StartWanted, StartDone), not in the call.
	StartWanted bool
	// Trace is the enqueuing trace context, kept for a start after the
	// commit to continue (StartWanted).
	Trace tracing.Stored
}

// Run is a stored row: the authority's fields plus the projection.
type Run struct {
	port.RunView
	Engine            Engine
	IdempotencyKey    string
	Priority          int
	Input             json.RawMessage
	AvailableAt       time.Time
	CancelRequestedAt time.Time // zero when no cancel was requested
	CancelReason      string
	// Seq is the run's creation sequence: a run created after another has a
	// larger one. Engines hand it to activities as the Generation of their
	// fencing tokens, so the ledger can refuse a superseded run.
	Seq int64
}

// Insert records a new run, or finds the one already recorded for
// (kind, key). created reports which. The existing run's input is not
// compared (ADR (f)); its id is returned whichever engine owns it.
func Insert(ctx context.Context, q DBTX, r NewRun) (run Run, created bool, err error) {
	id, err := uuid.NewV7()
	if err != nil {
		return Run{}, false, fmt.Errorf("new run id: %w", err)
	}
	var avail any
	if !r.AvailableAt.IsZero() {
		avail = r.AvailableAt
	}
	run, err = collectRun(q.Query(ctx, insertRunSQL, dbtx.UUID(id), r.Engine, r.Kind, r.Version, r.Key, r.BusinessKey, r.Priority, r.Input, avail,
		r.StartWanted, r.Trace.Parent, r.Trace.State))
	if err == nil {
		return run, true, nil
	}
	// No row back: ON CONFLICT found the key taken, so the run exists.
	if !errors.Is(err, port.ErrNotFound) {
		return Run{}, false, fmt.Errorf("insert run %s/%s: %w", r.Kind, r.Key, err)
	}
	run, err = collectRun(q.Query(ctx, selectRunByKeySQL, r.Kind, r.Key))
	if err != nil {
		return Run{}, false, fmt.Errorf("find run %s/%s: %w", r.Kind, r.Key, err)
	}
	if run.Engine != r.Engine {
		return Run{}, false, fmt.Errorf("enqueue %s/%s: %w", r.Kind, r.Key, otherEngine(run.ID, run.Engine, r.Engine))
	}
	return run, false, nil
}

// StartWanted locks and returns up to limit runs inserted with
// NewRun.StartWanted whose start is still wanted, oldest first; q is a
// transaction, which holds them (SKIP LOCKED: another starter takes others)
// until StartDone clears them in it.
func StartWanted(ctx context.Context, q DBTX, limit int) ([]WantedStart, error) {
	rows, err := q.Query(ctx, startWantedSQL, limit)
	if err == nil {
		var out []WantedStart
		out, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (WantedStart, error) {
			var w WantedStart
			var err error
			w.Run, err = scanRunAnd(row, &w.Trace.Parent, &w.Trace.State)
			return w, err
		})
		if err == nil {
			return out, nil
		}
	}
	return nil, fmt.Errorf("read the runs to start: %w", InterpretError(err))
}

// WantedStart is a run to start, with the trace context of its enqueue.
type WantedStart struct {
	Run
	Trace tracing.Stored
}

// StartDone clears the wanted start of the runs ids.
func StartDone(ctx context.Context, q DBTX, ids []port.RunID) error {
	us, err := parseIDs(ids)
	if err != nil {
		return err
	}
	if _, err := q.Exec(ctx, startDoneSQL, us); err != nil {
		return fmt.Errorf("clear the started runs: %w", InterpretError(err))
	}
	return nil
}

// OtherEngineKey is the refusal of an enqueue by engine self whose (kind,
// key) is held by run id of owner: nothing of it was written.
func OtherEngineKey(kind port.Kind, key string, id port.RunID, owner, self Engine) error {
	return fmt.Errorf("enqueue %s/%s: %w", kind, key, otherEngine(id, owner, self))
}

// foreign refuses a batch with an item whose key a run of another engine
// holds, naming the first such item. The batch's other runs are recorded:
// the check rides on the read of the taken keys (taken), which only a batch
// that met one pays for, instead of a read before every batch.
func (b *batch) foreign(existing []Run, rs []NewRun) error {
	if len(existing) == 0 {
		return nil
	}
	self := rs[0].Engine // a batch is one engine's
	first := -1
	var err error
	for _, r := range existing {
		if r.Engine == self {
			continue
		}
		j := b.slot[runKey{r.Kind, r.IdempotencyKey}]
		for i, e := range b.entries {
			if e == j && (first < 0 || i < first) {
				first, err = i, OtherEngineKey(r.Kind, r.IdempotencyKey, r.ID, r.Engine, self)
				break
			}
		}
	}
	if first < 0 {
		return nil
	}
	return &port.ItemError{Index: first, Err: err}
}

// NewRuns are the runs of an EnqueueMany batch that passed
// enginekit.PrepareBatch, for engine.
func NewRuns(engine Engine, prep []enginekit.PreparedEnqueue) []NewRun {
	out := make([]NewRun, len(prep))
	for i, p := range prep {
		out[i] = NewRun{Engine: engine, Kind: p.Definition.Kind, Version: p.Definition.Version,
			Key: p.Options.IdempotencyKey, BusinessKey: p.Options.BusinessKey, Priority: p.Options.Priority,
			Input: p.Input, AvailableAt: p.Options.AvailableAt}
	}
	return out
}

// InsertMany is Insert for a batch, in one statement plus one read of the
// keys already taken: runs[i] is the run of rs[i], created[i] whether rs[i]
// started it. Entries with the same kind and key name one run: the first
// of them is inserted (its input wins), the later ones report created
// false. A batch that fails writes nothing, except on a key another
// engine holds: the statement inserted the batch's other runs before the
// read that finds the key's owner, so the error is that item's
// *port.ItemError and runs and created are still filled in (the other
// engine's run among them), for the caller to start what it recorded.
//
// The statement inserts the rows ordered by (kind, key), so that two
// batches racing on overlapping keys wait on each other's unique-index
// entries in the same order and never deadlock
// (TestInsertManyRacingBatches deadlocks without it).
func InsertMany(ctx context.Context, pool dbtx.PoolDB, rs []NewRun) (runs []Run, created []bool, err error) {
	b, err := newBatch(rs)
	if err != nil {
		return nil, nil, err
	}
	inserted, err := insertBatch(ctx, pool, insertRunsSQL, b.args(), func(rows pgx.Rows) ([]Run, error) {
		return collectRuns(rows, nil)
	})
	if err != nil {
		return nil, nil, fmt.Errorf("insert %d runs: %w", len(b.ids), err)
	}
	got := make([]Run, len(b.ids))
	fresh := make([]bool, len(b.ids))
	for _, r := range inserted {
		j := b.slot[runKey{r.Kind, r.IdempotencyKey}]
		got[j], fresh[j] = r, true
	}
	existing, err := b.taken(ctx, pool, fresh)
	if err != nil {
		return nil, nil, err
	}
	foreign := b.foreign(existing, rs)
	for _, r := range existing {
		got[b.slot[runKey{r.Kind, r.IdempotencyKey}]] = r
	}
	runs = make([]Run, len(rs))
	for i, j := range b.entries {
		if got[j].ID == "" {
			return nil, nil, b.lost(j)
		}
		runs[i] = got[j]
	}
	return runs, b.created(fresh), foreign
}

// InsertManyWith is InsertMany through ins, which returns ids only: a
// batch insert built by InsertRunsWith that embeds the insert of its
// parameters $1-$9 (as a data-modifying WITH query, naming the columns it
// needs of the inserted rows) and returns the id of each run it inserted.
// An engine's own columns and statements read args ($10 on): the lease
// engine sets its retry policy and first claim time so. Reading back only
// ids spares the server writing, and the client decoding, every column of
// every run it already has.
func InsertManyWith(ctx context.Context, pool dbtx.PoolDB, rs []NewRun, ins BatchInsert, args ...any) (ids []port.RunID, created []bool, err error) {
	b, err := newBatch(rs)
	if err != nil {
		return nil, nil, err
	}
	inserted, err := insertBatch(ctx, pool, ins, b.args(args...), func(rows pgx.Rows) ([][16]byte, error) {
		ids, err := pgx.CollectRows(rows, pgx.RowTo[[16]byte])
		return ids, InterpretError(err)
	})
	if err != nil {
		return nil, nil, fmt.Errorf("insert %d runs: %w", len(b.ids), err)
	}
	slotOf := make(map[[16]byte]int, len(b.ids))
	for j, id := range b.ids {
		slotOf[id] = j
	}
	got := make([]port.RunID, len(b.ids))
	fresh := make([]bool, len(b.ids))
	for _, id := range inserted {
		j, ok := slotOf[id]
		if !ok {
			return nil, nil, fmt.Errorf("insert runs: unknown run id %s returned", uuid.UUID(id))
		}
		got[j], fresh[j] = port.RunID(uuid.UUID(id).String()), true
	}
	existing, err := b.taken(ctx, pool, fresh)
	if err != nil {
		return nil, nil, err
	}
	if err := b.foreign(existing, rs); err != nil {
		return nil, nil, err
	}
	for _, r := range existing {
		got[b.slot[runKey{r.Kind, r.IdempotencyKey}]] = r.ID
	}
	ids = make([]port.RunID, len(rs))
	for i, j := range b.entries {
		if got[j] == "" {
			return nil, nil, b.lost(j)
		}
		ids[i] = got[j]
	}
	return ids, b.created(fresh), nil
}

// insertBatch runs a batch insert and collects what it returns: first its
// Fresh form, and only if a key is taken its Idempotent one. A batch of
// new keys (an import, the outbox's first dispatch of its events) is the
// common case, and ON CONFLICT costs it a probe of the unique index per
// run before the insert, which then searches that index again to place
// the entry (issue 14: the probe was 14% of the server's time in
// EnqueueMany's insert, perf). A batch that meets a taken key pays for
// both statements: the first fails as a whole, and its rows are left to
// vacuum. pool runs each statement in a transaction of its own, so that
// the failed one aborts nothing of the caller's; that is why the batch
// inserts take a pool, not a DBTX.
func insertBatch[T any](ctx context.Context, pool dbtx.PoolDB, ins BatchInsert, args []any, collect func(pgx.Rows) ([]T, error)) ([]T, error) {
	rows, err := pool.Query(ctx, ins.Fresh, args...)
	if err != nil {
		return nil, InterpretError(err)
	}
	got, err := collect(rows)
	if !isRunKeyTaken(err) {
		return got, err
	}
	if rows, err = pool.Query(ctx, ins.Idempotent, args...); err != nil {
		return nil, InterpretError(err)
	}
	return collect(rows)
}

type runKey struct {
	kind port.Kind
	key  string
}

// batch is a batch of NewRuns as InsertRunsWith takes them: one slot per
// (kind, key), filled from the first entry that names it, with a fresh id.
type batch struct {
	slot    map[runKey]int // key -> its slot
	entries []int          // entry -> its key's slot
	first   []int          // slot -> its first entry
	// Plain arrays and strings: pgx encodes a uuid.UUID as a driver.Valuer
	// (to a string, parsed back; half the client's time in a batch of
	// 1000), and a slice of a named string type through reflection,
	// element by element.
	ids                                    [][16]byte
	engines, kinds, keys, business, inputs []string
	versions, prios                        []int
	avails                                 []*time.Time
}

func newBatch(rs []NewRun) (*batch, error) {
	b := &batch{slot: make(map[runKey]int, len(rs)), entries: make([]int, len(rs))}
	for i, r := range rs {
		k := runKey{r.Kind, r.Key}
		j, dup := b.slot[k]
		if !dup {
			id, err := uuid.NewV7()
			if err != nil {
				return nil, fmt.Errorf("new run id: %w", err)
			}
			j = len(b.ids)
			b.slot[k] = j
			b.first = append(b.first, i)
			b.ids = append(b.ids, [16]byte(id))
			b.engines, b.kinds, b.keys = append(b.engines, string(r.Engine)), append(b.kinds, string(r.Kind)), append(b.keys, r.Key)
			b.business, b.inputs = append(b.business, r.BusinessKey), append(b.inputs, string(r.Input))
			b.versions, b.prios = append(b.versions, r.Version), append(b.prios, r.Priority)
			var avail *time.Time
			if !r.AvailableAt.IsZero() {
				avail = &r.AvailableAt
			}
			b.avails = append(b.avails, avail)
		}
		b.entries[i] = j
	}
	return b, nil
}

// args are the parameters $1-$9 of InsertRunsWith, then more.
func (b *batch) args(more ...any) []any {
	return append([]any{b.ids, b.engines, b.kinds, b.versions, b.keys, b.business, b.prios, b.inputs, b.avails}, more...)
}

// taken reads the runs of the slots the insert did not fill (fresh[j]
// false: ON CONFLICT found the key taken), in a statement of its own,
// whose snapshot sees the runs committed while the insert waited on them.
func (b *batch) taken(ctx context.Context, q DBTX, fresh []bool) ([]Run, error) {
	var kinds, keys []string
	for j, f := range fresh {
		if !f {
			kinds, keys = append(kinds, b.kinds[j]), append(keys, b.keys[j])
		}
	}
	if len(kinds) == 0 {
		return nil, nil
	}
	runs, err := collectRuns(q.Query(ctx, selectRunsByKeysSQL, kinds, keys))
	if err != nil {
		return nil, fmt.Errorf("find %d existing runs: %w", len(kinds), err)
	}
	return runs, nil
}

// created reports, per entry, whether it started its run: the first entry
// of a slot the insert filled.
func (b *batch) created(fresh []bool) []bool {
	out := make([]bool, len(b.entries))
	for i, j := range b.entries {
		out[i] = fresh[j] && b.first[j] == i
	}
	return out
}

func (b *batch) lost(j int) error {
	return fmt.Errorf("insert runs: run %s/%s neither inserted nor found", b.kinds[j], b.keys[j])
}

// parseIDs is ParseID of each id, as a uuid[] argument.
func parseIDs(ids []port.RunID) (dbtx.UUIDArray, error) {
	us := make(dbtx.UUIDArray, len(ids))
	for i, id := range ids {
		u, err := ParseID(id)
		if err != nil {
			return nil, err
		}
		us[i] = u
	}
	return us, nil
}

// ParseID validates a run id and returns it as the statements' argument
// (dbtx.UUID). A malformed id is reported as ErrNotFound: no run can have
// it. So is another spelling of a run's UUID than the one Enqueue returns
// (uppercase, braced, urn:uuid:): accepted, it reached the run's row but
// not its Temporal workflow, whose id is the string as returned, so a
// Cancel returned nil and canceled nothing, and a Retry keyed on the
// string started a second run per spelling.
func ParseID(id port.RunID) (dbtx.UUID, error) {
	u, err := uuid.Parse(string(id))
	if err != nil {
		return dbtx.UUID{}, fmt.Errorf("run %q: %w", id, port.ErrNotFound)
	}
	if u.String() != string(id) {
		return dbtx.UUID{}, fmt.Errorf("run %q: %w (a run id is the lowercase hyphenated form Enqueue returns, here %s)", id, port.ErrNotFound, u)
	}
	return dbtx.UUID(u), nil
}

// Get returns the stored run, or port.ErrNotFound, whichever engine owns
// it: what an engine reads of its own runs. What an engine answers its
// callers about a run goes through GetOwned.
func Get(ctx context.Context, q DBTX, id port.RunID) (Run, error) {
	u, err := ParseID(id)
	if err != nil {
		return Run{}, err
	}
	run, err := collectRun(q.Query(ctx, selectRunSQL, u))
	if err != nil {
		return Run{}, fmt.Errorf("get run %s: %w", id, err)
	}
	return run, nil
}

// GetOwned is Get for engine's callers (port.TaskEngine.Get): a run
// another engine owns is refused with an error wrapping
// port.ErrOtherEngine.
func GetOwned(ctx context.Context, q DBTX, engine Engine, id port.RunID) (Run, error) {
	run, err := Get(ctx, q, id)
	if err != nil {
		return Run{}, err
	}
	if run.Engine != engine {
		return Run{}, fmt.Errorf("get run %s: %w", id, otherEngine(id, run.Engine, engine))
	}
	return run, nil
}

// otherEngine is the refusal of run id, owned by owner, by engine self.
func otherEngine(id port.RunID, owner, self Engine) error {
	return fmt.Errorf("run %s is owned by the %s engine, not by this %s engine: %w", id, owner, self, port.ErrOtherEngine)
}

// RequestCancel writes the cancel request of run id for engine (ADR 2.4:
// the Postgres flag comes first, then the engine cancel), keeping the first
// request's time and reason. flagged reports whether the run is open and
// now flagged; false means it is finished and was left as it is (no flag,
// no reason, no updated_at): the caller has nothing more to do. A run of
// another engine is refused with an error wrapping port.ErrOtherEngine, an
// unknown one with port.ErrNotFound, and a reason Postgres cannot store
// with a *port.FieldError (checked after the id's form, before the run is
// looked up, as both engines do); none of them writes anything.
func RequestCancel(ctx context.Context, q DBTX, engine Engine, id port.RunID, reason string) (flagged bool, err error) {
	u, err := ParseID(id)
	if err != nil {
		return false, err
	}
	if err := enginekit.ValidateText("reason", reason); err != nil {
		return false, fmt.Errorf("request cancel of run %s: %w", id, err)
	}
	var owner Engine
	err = InterpretError(q.QueryRow(ctx, requestCancelSQL, u, reason, engine).Scan(&flagged, &owner))
	switch {
	case err != nil:
		return false, fmt.Errorf("request cancel of run %s: %w", id, err)
	case owner != engine:
		return false, fmt.Errorf("request cancel of run %s: %w", id, otherEngine(id, owner, engine))
	}
	return flagged, nil
}

// EndCanceledIfIdle ends the Temporal engine's run id canceled, now, when
// its cancel was requested (RequestCancel) and its projection says no step
// body is in it (pending or waiting), and unregisters its waits: what the
// lease engine's Cancel does for such a run, so that the run reads
// canceled whether or not a worker serves it. Its workflow, once a worker
// takes it, cannot run a step (each step's start reads the flag first) and
// ends canceled too; its own terminal projection then writes nothing, as a
// terminal row is never written again. ended reports whether it wrote.
//
// noBody says the caller learned from Temporal, after the flag committed,
// that no step body is in the run (no activity attempt started): a run the
// projection reads running (in a step's retry backoff, or between steps)
// is then ended too, in step with attempts when step is not "": the step
// Temporal says the run was last in, which the projection, written at a
// run's first step and after each wait, may not have recorded.
func EndCanceledIfIdle(ctx context.Context, q DBTX, id port.RunID, noBody bool, step string, attempts int) (ended bool, err error) {
	u, err := ParseID(id)
	if err != nil {
		return false, err
	}
	if !noBody {
		step = ""
	}
	if err := q.QueryRow(ctx, endCanceledIfIdleSQL, u, noBody, step, attempts).Scan(&ended); err != nil {
		return false, fmt.Errorf("end run %s canceled: %w", id, InterpretError(err))
	}
	return ended, nil
}

// CancelRequested reports whether run id's cancel was requested
// (RequestCancel): an engine reads it before a step body starts, so that no
// body starts once Cancel returned, even when the engine itself has not yet
// seen the cancel. An unknown run is port.ErrNotFound.
func CancelRequested(ctx context.Context, q DBTX, id port.RunID) (bool, error) {
	u, err := ParseID(id)
	if err != nil {
		return false, err
	}
	var requested bool
	err = q.QueryRow(ctx, CancelRequestedSQL, u).Scan(&requested)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return false, fmt.Errorf("run %s: %w", id, port.ErrNotFound)
	case err != nil:
		return false, fmt.Errorf("read the cancel flag of run %s: %w", id, InterpretError(err))
	}
	return requested, nil
}

// CanceledAmong returns the runs among ids whose cancel was requested
// (RequestCancel), in one statement: a Temporal worker asks it for the runs
// whose steps it is running, to hand them the cancel (temporaladapter's
// cancelWatch). Unknown ids are not returned.
func CanceledAmong(ctx context.Context, q DBTX, ids []port.RunID) ([]port.RunID, error) {
	us, err := parseIDs(ids)
	if err != nil {
		return nil, err
	}
	rows, err := q.Query(ctx, canceledAmongSQL, us)
	if err != nil {
		return nil, fmt.Errorf("read the cancel flags of %d runs: %w", len(ids), InterpretError(err))
	}
	canceled, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (port.RunID, error) {
		u, err := pgx.RowTo[uuid.UUID](r)
		return port.RunID(u.String()), err
	})
	if err != nil {
		return nil, fmt.Errorf("read the cancel flags of %d runs: %w", len(ids), InterpretError(err))
	}
	return canceled, nil
}

// Projection is the engine-reported state of a run.
type Projection struct {
	Status      port.Status
	Attempts    int
	LastError   string
	CurrentStep string
	// Output is the run's result, written only with StatusSucceeded.
	Output json.RawMessage
}

// Project records what the engine reports about a run. A terminal status
// sets finished_at once; a terminal row is never moved back to an open one.
func Project(ctx context.Context, q DBTX, id port.RunID, p Projection) error {
	args, err := projectArgs(id, p, false)
	if err != nil {
		return err
	}
	if _, err := q.Exec(ctx, projectSQL, args...); err != nil {
		return fmt.Errorf("project run %s: %w", id, InterpretError(err))
	}
	return nil
}

// projectArgs are projectSQL's arguments, once id and p are checked.
func projectArgs(id port.RunID, p Projection, cancelDecides bool) ([]any, error) {
	u, err := ParseID(id)
	if err != nil {
		return nil, err
	}
	if !p.Status.Valid() {
		return nil, fmt.Errorf("project run %s: status %q: %w", id, p.Status, port.ErrInvalidInput)
	}
	return []any{u, p.Status, p.Attempts, p.LastError, p.CurrentStep, cancelDecides, p.Output}, nil
}

// Batcher sends a pgx.Batch: *pgxpool.Pool and *pgx.Conn (and pgx.Tx, which
// ProjectLazily must not be given).
type Batcher interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// lazyCommitSQL lets the rest of its transaction commit without waiting
// for its WAL to reach the disk.
const lazyCommitSQL = `SELECT set_config('synchronous_commit', 'off', true)`

// ProjectLazily is Project committed without waiting for the WAL flush
// (synchronous_commit off for its own transaction only): every reader sees
// the write once it returns, as with Project, but a Postgres crash in the
// next moment (up to three wal_writer_delay, 0.6 s by default) may undo
// it. A commit that waits for the flush costs a disk sync, milliseconds,
// which an engine that projects on its hot path pays on every run; this
// is for the writes whose loss the engine repairs on its own (see
// temporaladapter's reconciler). The two statements go as one batch, one
// round trip, which Postgres runs as one implicit transaction: db must be
// a pool or a connection outside any transaction, or the caller's whole
// transaction would commit lazily.
func ProjectLazily(ctx context.Context, db Batcher, id port.RunID, p Projection) error {
	_, err := projectLazily(ctx, db, id, p, false)
	return err
}

// EndLazily is ProjectLazily for an engine's own terminal write of a run
// (p.Status terminal): a run whose cancel was requested (RequestCancel)
// before this write ends canceled, with no last error, whatever p.Status
// says, as the lease engine's finish does, so that a cancel Cancel
// acknowledged is never outrun by the handler's return. It returns the
// status written, "" when the row was terminal already and nothing was
// written.
func EndLazily(ctx context.Context, db Batcher, id port.RunID, p Projection) (port.Status, error) {
	if !p.Status.Terminal() {
		return "", fmt.Errorf("end run %s: status %q is not terminal: %w", id, p.Status, port.ErrInvalidInput)
	}
	return projectLazily(ctx, db, id, p, true)
}

func projectLazily(ctx context.Context, db Batcher, id port.RunID, p Projection, cancelDecides bool) (port.Status, error) {
	args, err := projectArgs(id, p, cancelDecides)
	if err != nil {
		return "", err
	}
	b := &pgx.Batch{}
	b.Queue(lazyCommitSQL)
	var written port.Status
	b.Queue(projectSQL, args...).QueryRow(func(row pgx.Row) error {
		err := row.Scan(&written)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		return err
	})
	if err := db.SendBatch(ctx, b).Close(); err != nil {
		return "", fmt.Errorf("project run %s: %w", id, InterpretError(err))
	}
	return written, nil
}

// StartStep is CancelRequested and, when the cancel was not requested,
// ProjectLazily of the run as running in step with attempts: one round trip
// and one commit where the two took two, for an engine that does both as a
// step's first attempt begins. The projection commits lazily, as
// ProjectLazily's does (db must not be a transaction); the flag it returns
// is read as CancelRequested reads it.
func StartStep(ctx context.Context, db Batcher, id port.RunID, step string, attempts int) (canceled bool, err error) {
	u, err := ParseID(id)
	if err != nil {
		return false, err
	}
	b := &pgx.Batch{}
	b.Queue(lazyCommitSQL)
	b.Queue(startStepSQL, u, attempts, step).QueryRow(func(row pgx.Row) error { return row.Scan(&canceled) })
	switch err := db.SendBatch(ctx, b).Close(); {
	case errors.Is(err, pgx.ErrNoRows):
		return false, fmt.Errorf("run %s: %w", id, port.ErrNotFound)
	case err != nil:
		return false, fmt.Errorf("start step %s of run %s: %w", step, id, InterpretError(err))
	}
	return canceled, nil
}

// Cursor is a position in StaleTemporal's order; the zero Cursor is the start.
type Cursor struct {
	UpdatedAt time.Time
	ID        uuid.UUID
}

// After returns the cursor just past run.
func After(run Run) Cursor {
	u, _ := uuid.Parse(string(run.ID)) // ids come from scanRun, always valid
	return Cursor{UpdatedAt: run.UpdatedAt, ID: u}
}

// StaleTemporal returns up to limit open runs (pending, running, waiting) of
// the Temporal engine whose projection was not written for at least age,
// oldest write first, after cursor: what a reconciler compares with
// Temporal. It reads the partial index run_open_temporal, so its cost
// follows limit, not the number of runs.
func StaleTemporal(ctx context.Context, q DBTX, age time.Duration, after Cursor, limit int) ([]Run, error) {
	runs, err := collectRuns(q.Query(ctx, staleTemporalSQL, age.Milliseconds(), after.UpdatedAt, after.ID, limit))
	if err != nil {
		return nil, fmt.Errorf("list stale temporal runs: %w", err)
	}
	return runs, nil
}

// AddWaiter registers run as waiting on topic at step. Registering twice is
// harmless.
func AddWaiter(ctx context.Context, q DBTX, topic port.Topic, id port.RunID, step string) error {
	u, err := ParseID(id)
	if err != nil {
		return err
	}
	if _, err := q.Exec(ctx, addWaiterSQL, topic, u, step); err != nil {
		return fmt.Errorf("add waiter %s on %s: %w", id, topic, InterpretError(err))
	}
	return nil
}

// RemoveWaiter unregisters run from topic.
func RemoveWaiter(ctx context.Context, q DBTX, topic port.Topic, id port.RunID) error {
	u, err := ParseID(id)
	if err != nil {
		return err
	}
	if _, err := q.Exec(ctx, removeWaiterSQL, topic, u); err != nil {
		return fmt.Errorf("remove waiter %s on %s: %w", id, topic, InterpretError(err))
	}
	return nil
}

// WaitReturned records that run id's wait on topic returned: the run stays
// registered until it ends, but it is no longer parked there, so
// SignalParked neither counts nor sends to it and keeps the signal for the
// topic's next wait. It reports whether a SignalParked counted this wait
// before: that signal has been sent, or is being sent, to the run, and the
// wait must take it, since its sender counted it.
func WaitReturned(ctx context.Context, q DBTX, topic port.Topic, id port.RunID) (signaled bool, err error) {
	u, err := ParseID(id)
	if err != nil {
		return false, err
	}
	err = q.QueryRow(ctx, waitReturnedSQL, topic, u).Scan(&signaled)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil // unregistered: the run ended
	}
	if err != nil {
		return false, fmt.Errorf("wait of %s on %s returned: %w", id, topic, InterpretError(err))
	}
	return signaled, nil
}

// SignalParked sends a signal on topic, through send, to each of the
// Temporal engine's runs parked in a wait there, oldest wait first, and
// returns how many it reached (send reports false for a run that ended
// meanwhile). When none is parked, it keeps the signal, with the sender's
// trace, for the next wait on the topic (WaitTakingKeptSignal), so that a
// signal sent between a run's check of the business DB and its wait is not
// lost (ADR 2.2). A run registered on the topic but past its wait
// (WaitReturned) is not parked: the signal is kept for whichever wait on
// the topic comes next, as the lease engine keeps it, and not buffered in
// that run, which may end without waiting again. A lease run registered on
// the topic is not parked here and does not stop the keeping, as the lease
// engine's Signal ignores Temporal's waiters.
//
// It reads the parked runs under the topic's lock and records on each
// registration, in the same transaction, that this wait was counted, before
// it sends anything: a wait that times out and marks itself returned after
// that learns that a signal counted for it is on its way
// (WaitReturned). The sends run after the commit, holding no lock: a send
// to an unreachable server blocks nobody's statements. A send that fails
// ends the sending; the runs reached before it are counted, and the error
// is returned. The runs counted but not reached keep their record; their
// waits, if they time out, wait a while for a signal that does not come
// (temporaladapter's WaitSignal bounds that).
func SignalParked(ctx context.Context, db dbtx.Beginner, topic port.Topic, payload json.RawMessage, trace tracing.Stored, send func(port.RunID) (bool, error)) (int, error) {
	var parked []uuid.UUID
	err := dbtx.InTx(ctx, db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, topicLockSQL, topic); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, countParkedSQL, topic)
		if err != nil {
			return err
		}
		if parked, err = pgx.CollectRows(rows, pgx.RowTo[uuid.UUID]); err != nil || len(parked) > 0 {
			return err
		}
		_, err = tx.Exec(ctx, keepEarlySignalSQL, topic, payload, trace.Parent, trace.State)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("signal %s: %w", topic, InterpretError(err))
	}
	reached := 0
	for _, u := range parked {
		ok, err := send(port.RunID(u.String()))
		if err != nil {
			return reached, err
		}
		if ok {
			reached++
		}
	}
	return reached, nil
}

// KeptSignal is a signal SignalParked kept for a topic nobody waited on.
type KeptSignal struct {
	ID      int64
	Payload json.RawMessage
	// Trace is the sender's, for the wait that takes the signal to continue.
	Trace tracing.Stored
}

// WaitTakingKeptSignal registers run id as waiting on topic at step, like
// AddWaiter, and projects it waiting there in the same transaction: a
// Signal that reads the run waiting (Get) finds it parked, and counts it.
// When a signal was kept for the topic (SignalParked), it hands
// the oldest one to the run through send and marks it taken by this wait,
// and the registration past its wait (as WaitReturned does): the run has
// its signal, so a later one is kept for the topic's next wait, not counted
// for this one. One signal per wait, as the lease engine consumes them; the
// rest stay kept for the waits that follow, this run's or another's.
//
// It all happens in one transaction under the topic's lock, send included,
// so a concurrent SignalParked either sees the waiter or kept its signal
// before, and two waits never hand the same signal. If send fails, nothing
// is written and the caller retries. If the commit fails after send
// succeeded, the run holds a signal still marked kept, which a later wait
// receives again: a signal is a hint, a repeat costs one more check, and
// none is lost.
func WaitTakingKeptSignal(ctx context.Context, db dbtx.Beginner, topic port.Topic, id port.RunID, step string, send func(KeptSignal) error) error {
	u, err := ParseID(id)
	if err != nil {
		return err
	}
	err = dbtx.InTx(ctx, db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, topicLockSQL, topic); err != nil {
			return err
		}
		if err := AddWaiter(ctx, tx, topic, id, step); err != nil {
			return err
		}
		if err := Project(ctx, tx, id, Projection{Status: port.StatusWaiting, CurrentStep: step}); err != nil {
			return err
		}
		var k KeptSignal
		err := tx.QueryRow(ctx, oldestKeptSignalSQL, topic).Scan(&k.ID, &k.Payload, &k.Trace.Parent, &k.Trace.State)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		// A run whose cancel was requested takes no kept signal: its
		// workflow's cancel is on its way, and the signal stays for the
		// topic's next wait, as the lease engine's wait refuses it. The
		// projection above holds the run's row, so a Cancel that has not
		// flagged it yet flags it after this commits.
		var canceled bool
		if err := tx.QueryRow(ctx, CancelRequestedSQL, u).Scan(&canceled); err != nil || canceled {
			return err
		}
		if err := send(k); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, takeKeptSignalSQL, k.ID, u, step); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, waitReturnedSQL, topic, u)
		return err
	})
	if err != nil {
		return fmt.Errorf("wait %s on %s: %w", id, topic, InterpretError(err))
	}
	return nil
}

// TakeOneKeptSignal takes the oldest signal kept for topic (SignalParked)
// for run id's wait step, without registering a waiter: a wait that does
// not park (a zero timeout) still receives a signal sent before it, as the
// lease engine's does. ok is false when none is kept, or when the run's
// cancel was requested (the signal stays kept for another wait).
func TakeOneKeptSignal(ctx context.Context, q DBTX, topic port.Topic, id port.RunID, step string) (k KeptSignal, ok bool, err error) {
	u, err := ParseID(id)
	if err != nil {
		return k, false, err
	}
	err = q.QueryRow(ctx, takeOneKeptSignalSQL, topic, u, step).Scan(&k.Payload, &k.Trace.Parent, &k.Trace.State)
	if errors.Is(err, pgx.ErrNoRows) {
		return k, false, nil
	}
	if err != nil {
		return k, false, fmt.Errorf("take a kept signal on %s for %s: %w", topic, id, InterpretError(err))
	}
	return k, true, nil
}

// collectRun reads the one run a statement returns, through InterpretError:
// none is port.ErrNotFound.
func collectRun(rows pgx.Rows, err error) (Run, error) {
	if err != nil {
		return Run{}, InterpretError(err)
	}
	run, err := pgx.CollectExactlyOneRow(rows, scanRun)
	return run, InterpretError(err)
}

// collectRuns reads every run a statement returns, through InterpretError.
func collectRuns(rows pgx.Rows, err error) ([]Run, error) {
	if err != nil {
		return nil, InterpretError(err)
	}
	runs, err := pgx.CollectRows(rows, scanRun)
	return runs, InterpretError(err)
}

func scanRun(row pgx.CollectableRow) (Run, error) { return scanRunAnd(row) }

// scanRunAnd scans runColumns and then more, the columns a statement
// selects after them.
func scanRunAnd(row pgx.CollectableRow, more ...any) (Run, error) {
	var (
		r                   Run
		id                  uuid.UUID
		finished, cancelReq *time.Time
		movedTo             pgtype.UUID
	)
	dest := []any{(*dbtx.UUID)(&id), &r.Engine, &r.Kind, &r.Version, &r.IdempotencyKey, &r.BusinessKey, &r.Priority, &r.Input,
		&r.AvailableAt, &r.Status, &r.Attempts, &r.LastError, &r.CurrentStep, &cancelReq, &r.CancelReason,
		&r.CreatedAt, &r.UpdatedAt, &finished, &r.Seq, &r.Output, &movedTo}
	if err := row.Scan(append(dest, more...)...); err != nil {
		return Run{}, err
	}
	r.ID = port.RunID(id.String())
	r.Cursor = encodeCursor(r.CreatedAt, id)
	if finished != nil {
		r.FinishedAt = *finished
	}
	if cancelReq != nil {
		r.CancelRequestedAt = *cancelReq
	}
	if movedTo.Valid {
		r.MovedTo = port.RunID(uuid.UUID(movedTo.Bytes).String())
	}
	return r, nil
}
