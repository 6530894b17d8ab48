package leaseadapter

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/taskport/taskport/internal/dbtx"
	"github.com/taskport/taskport/port"
)

// commitReq is one statement waiting to be committed together with others:
// a lease-checked statement of a run (see queries.go) or an enqueue, or,
// in place of a statement, a step starting (start) or a run ending (end).
type commitReq struct {
	sql  string
	args []any
	scan func(pgx.Row) error // reads the statement's one result row
	done chan error
	// start, when set, is a step about to start (startStep) instead of a
	// statement: the group reads the cancel flags of its starting steps'
	// runs in one statement (cancelFlagsSQL) and writes their started
	// markers in another (stepsStartedSQL), after its other statements.
	start *stepStart
	// end, when set, is a run ending (worker.finish) instead of a
	// statement: the group ends its runs in one finishSQL.
	end *runEnd
	// claims, set on an enqueue of a run this worker serves and due now,
	// makes its group claim even when no backlog is known: an idle worker
	// then takes the run in the transaction that inserts it, instead of in
	// a claim transaction of its own after the enqueue's poke.
	claims bool
	// drained is set, before done, on a request that claims when the
	// group's claim took fewer runs than it had places for: it left no
	// ready run it could take, so the enqueue needs no poke or notification.
	drained bool
}

// runEnd is one run of finishSQL: its arguments, one element of each of
// the statement's arrays, and its outcome.
type runEnd struct {
	id, token     dbtx.UUID
	status, err   string
	seq, attempts *int32  // the held step's, or nil
	name, result  *string // the held step's, or nil
	output        *string
	ended         bool // set by the group: the run's claim held, and it ended
}

// stepStart is one step of startStep: a row of cancelFlagsSQL and of
// stepsStartedSQL.
type stepStart struct {
	id, token dbtx.UUID
	seq       int32
	step      string
	// Set by the group's cancelFlagsSQL: the run's row was found, and its
	// cancel requested.
	found, canceled bool
}

type commitRes struct {
	n  int64     // run rows matched: 0 means fenced
	at time.Time // commit time, as the database saw it
}

// commit hands a lease-checked statement to the group committers and waits
// for its outcome. An error means the outcome is unknown.
func (w *worker) commit(ctx context.Context, sql string, args ...any) (commitRes, error) {
	var res commitRes
	err := w.submit(ctx, sql, args, func(row pgx.Row) error { return row.Scan(&res.n, &res.at) })
	return res, err
}

// submit queues a statement for the group committers and waits until its
// group committed (nil: scan has run) or failed.
func (w *worker) submit(ctx context.Context, sql string, args []any, scan func(pgx.Row) error) error {
	return w.submitReq(ctx, &commitReq{sql: sql, args: args, scan: scan, done: make(chan error, 1)})
}

func (w *worker) submitReq(ctx context.Context, req *commitReq) error {
	select {
	case w.commits <- req:
	case <-w.committerDone:
		return errStopped
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	select {
	case err := <-req.done:
		return err
	case <-w.committerDone:
		return errStopped
	}
}

// startStep reads the run's cancel flag and writes the started marker of
// the step body about to start (seq, step) with the next group, and waits
// for that group's commit. The read is a statement of the group's
// transaction, whose snapshot is taken after the call, so it sees every
// cancel committed before it, as a read of its own would; the marker
// (stepsStartedSQL, after the group's statements) is not written for a run
// whose cancel it sees. The body starts only after this commit, so the
// attempt is charged before the body runs: a worker killed while the body
// runs has spent an attempt, and a step that kills its worker runs no more
// often than its retry policy allows. (The marker used to commit beside the
// running body; a kill before it committed charged nothing, which the
// contract scenario worker_dies_on_every_attempt caught in CI as a third
// body on a budget of two.) The marker's own outcome is not read: a fenced
// one belongs to a lost claim, and one the group skipped (the row locked at
// that instant) is written by the next heartbeat while the body runs. A
// missing row is an error of this call, not of the group (whose other
// statements a scan error would send again). The group reads every
// starting step's flag in one statement (cancelFlagsSQL), one round of
// executor work where each read used to be a statement of its own.
//
// held, when set, is the run's step before, recorded (recordStepSQL) in
// the same transaction ahead of the read and the marker; rec is that
// statement's outcome.
func (w *worker) startStep(ctx context.Context, ex *execution, seq int, step string, held *heldStep) (canceled bool, rec commitRes, err error) {
	start := &stepStart{id: ex.id, token: ex.token, seq: int32(seq), step: step}
	req := &commitReq{start: start, done: make(chan error, 1)}
	if held != nil {
		req.sql = recordStepSQL
		req.args = []any{ex.id, ex.token, held.name, held.seq, held.result, held.attempt}
		req.scan = func(row pgx.Row) error { return row.Scan(&rec.n, &rec.at) }
	}
	switch err := w.submitReq(ctx, req); {
	case err != nil:
		return false, rec, fmt.Errorf("read the cancel flag of run %s: %w", ex.id, err)
	case !start.found:
		return false, rec, fmt.Errorf("run %s: %w", ex.id, port.ErrNotFound)
	}
	return start.canceled, rec, nil
}

// committer groups the statements that arrive while the previous group is
// being committed into one pipelined batch: one round trip and one commit
// for the lot, each statement still checking its own lease_token. There is no
// waiting window: under load the groups grow by themselves.
func (w *worker) committer(ctx context.Context) {
	for {
		var group []*commitReq
		select {
		case <-ctx.Done():
			return
		case r := <-w.commits:
			group = append(group, r)
		}
	gather:
		for len(group) < w.e.cfg.BatchSize {
			select {
			case r := <-w.commits:
				group = append(group, r)
			default:
				break gather
			}
		}
		w.commitGroup(ctx, group)
	}
}

// claimsWith reports whether group's transaction should claim too: while
// there may be a backlog, unless it only starts steps; or when it enqueues
// a run this worker serves, due now.
func (w *worker) claimsWith(group []*commitReq) bool {
	if w.backlog.Load() && !onlyStepStarts(group) {
		return true
	}
	return slices.ContainsFunc(group, func(r *commitReq) bool { return r.claims })
}

func onlyStepStarts(group []*commitReq) bool {
	for _, r := range group {
		if r.start == nil {
			return false
		}
	}
	return true
}

func (w *worker) commitGroup(ctx context.Context, group []*commitReq) {
	// A group whose transaction has places to fill in the prefetch queue
	// claims too, while there may be a backlog: the claim rides on a commit
	// that happens anyway. A group of markers and cancel-flag reads only
	// does not: its steps are starting, and their runs, between taking a step slot and the others
	// reaching theirs, look to runsWanted like runs leaving slots idle.
	var claimed []*execution
	var n int
	if w.claimsWith(group) {
		n = w.reserve(w.e.cfg.BatchSize, false)
	}
	sent := time.Now()
	err := w.sendBatch(ctx, group, n, &claimed)
	if n > 0 {
		if err != nil {
			claimed = nil // the transaction did not commit
		}
		drained := err == nil && len(claimed) < n
		for _, r := range group {
			// Only for the runs the claim could take: an enqueue of a kind
			// this worker does not serve still notifies the workers that do.
			r.drained = drained && r.claims
		}
		w.claimed(claimed, n, sent)
	}
	if err == nil || len(group) == 1 {
		for _, r := range group {
			r.done <- err
		}
		return
	}
	// One bad statement aborts the whole implicit transaction, so nothing of
	// the group was written: retry each alone so that the others still land.
	// (After an error at COMMIT the outcome is unknown; a retried run
	// statement then finds its step row present or its status changed and
	// fails or reports fenced, which the run treats like a lost lease; a
	// retried enqueue finds its row and returns it. Runs the claim may have
	// taken are not known; their leases expire.)
	for _, r := range group {
		r.done <- w.sendBatch(ctx, []*commitReq{r}, 0, nil)
	}
}

// sendBatch runs the statements, and a claim of up to claim runs when claim
// > 0, as one pipelined batch, which Postgres executes as one implicit
// transaction.
func (w *worker) sendBatch(ctx context.Context, group []*commitReq, claim int, claimed *[]*execution) error {
	b := &pgx.Batch{}
	var starts []*stepStart
	var ends []*runEnd
	for _, r := range group {
		switch {
		case r.start != nil:
			starts = append(starts, r.start)
			if r.sql != "" { // the run's held step, recorded before its next step's marker
				b.Queue(r.sql, r.args...).QueryRow(r.scan)
			}
		case r.end != nil:
			ends = append(ends, r.end)
		default:
			b.Queue(r.sql, r.args...).QueryRow(r.scan)
		}
	}
	if len(ends) > 0 {
		queueRunEnds(b, ends)
	}
	if len(starts) > 0 {
		queueStepStarts(b, starts)
	}
	if claim > 0 {
		w.queueClaim(b, claim, claimed)
	}
	if err := w.e.pool.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("group commit of %d: %w", len(group), err)
	}
	return nil
}

// queueStepStarts adds to b the read of the starting steps' cancel flags,
// stored in each stepStart when b's results are read, and their started
// markers.
func queueStepStarts(b *pgx.Batch, starts []*stepStart) {
	ids := make(dbtx.UUIDArray, len(starts))
	tokens := make(dbtx.UUIDArray, len(starts))
	seqs := make([]int32, len(starts))
	steps := make([]string, len(starts))
	byID := make(map[dbtx.UUID][]*stepStart, len(starts))
	for i, s := range starts {
		ids[i], tokens[i], seqs[i], steps[i] = s.id, s.token, s.seq, s.step
		s.found, s.canceled = false, false // a group sent again after a failed one
		byID[s.id] = append(byID[s.id], s)
	}
	b.Queue(cancelFlagsSQL, ids).Query(func(rows pgx.Rows) error {
		var id dbtx.UUID
		var canceled bool
		_, err := pgx.ForEachRow(rows, []any{&id, &canceled}, func() error {
			for _, s := range byID[id] {
				s.found, s.canceled = true, canceled
			}
			return nil
		})
		return err
	})
	b.Queue(stepsStartedSQL, ids, tokens, seqs, steps)
}

// queueRunEnds adds to b the end of the runs (finishSQL), each runEnd's
// ended set when b's results are read.
func queueRunEnds(b *pgx.Batch, ends []*runEnd) {
	n := len(ends)
	ids, tokens := make(dbtx.UUIDArray, n), make(dbtx.UUIDArray, n)
	statuses, errs := make([]string, n), make([]string, n)
	seqs, attempts := make([]*int32, n), make([]*int32, n)
	names, results, outputs := make([]*string, n), make([]*string, n), make([]*string, n)
	byID := make(map[dbtx.UUID]*runEnd, n)
	for i, e := range ends {
		ids[i], tokens[i], statuses[i], errs[i] = e.id, e.token, e.status, e.err
		seqs[i], attempts[i], names[i], results[i], outputs[i] = e.seq, e.attempts, e.name, e.result, e.output
		e.ended = false // a group sent again after a failed one
		byID[e.id] = e
	}
	b.Queue(finishSQL, ids, tokens, statuses, errs, seqs, names, results, attempts, outputs).Query(func(rows pgx.Rows) error {
		var id dbtx.UUID
		_, err := pgx.ForEachRow(rows, []any{&id}, func() error {
			if e := byID[id]; e != nil {
				e.ended = true
			}
			return nil
		})
		return err
	})
}
