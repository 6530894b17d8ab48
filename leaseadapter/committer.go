package leaseadapter

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/taskport/taskport/internal/runstore"
	"github.com/taskport/taskport/port"
)

// commitReq is one statement waiting to be committed together with others:
// a lease-checked statement of a run (see queries.go) or an enqueue.
type commitReq struct {
	sql  string
	args []any
	scan func(pgx.Row) error // reads the statement's one result row
	done chan error
	// marker, when set, is a step's started marker (startStep), sent beside
	// the statement: the group sends its markers as one stepsStartedSQL,
	// after its statements.
	marker *startedMarker
	// stepStart marks the request of a step starting (startStep), which
	// claims nothing (onlyStepStarts).
	stepStart bool
}

// startedMarker is one row of stepsStartedSQL.
type startedMarker struct {
	id, token uuid.UUID
	seq       int32
	step      string
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
// statements a scan error would send again).
func (w *worker) startStep(ctx context.Context, ex *execution, seq int, step string) (canceled bool, err error) {
	var found bool
	err = w.submitReq(ctx, &commitReq{sql: runstore.CancelRequestedSQL, args: []any{ex.id}, stepStart: true, done: make(chan error, 1),
		marker: &startedMarker{id: ex.id, token: ex.token, seq: int32(seq), step: step},
		scan: func(row pgx.Row) error {
			err := row.Scan(&canceled)
			if errors.Is(err, pgx.ErrNoRows) {
				return nil
			}
			found = err == nil
			return err
		}})
	switch {
	case err != nil:
		return false, fmt.Errorf("read the cancel flag of run %s: %w", ex.id, err)
	case !found:
		return false, fmt.Errorf("run %s: %w", ex.id, port.ErrNotFound)
	}
	return canceled, nil
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

func onlyStepStarts(group []*commitReq) bool {
	for _, r := range group {
		if !r.stepStart {
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
	if w.backlog.Load() && !onlyStepStarts(group) {
		n = w.reserve(w.e.cfg.BatchSize, false)
	}
	sent := time.Now()
	err := w.sendBatch(ctx, group, n, &claimed)
	if n > 0 {
		if err != nil {
			claimed = nil // the transaction did not commit
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
	var ids, tokens []uuid.UUID
	var seqs []int32
	var steps []string
	for _, r := range group {
		if m := r.marker; m != nil {
			ids, tokens, seqs, steps = append(ids, m.id), append(tokens, m.token), append(seqs, m.seq), append(steps, m.step)
		}
		b.Queue(r.sql, r.args...).QueryRow(r.scan)
	}
	if len(ids) > 0 {
		b.Queue(stepsStartedSQL, ids, tokens, seqs, steps)
	}
	if claim > 0 {
		w.queueClaim(b, claim, claimed)
	}
	if err := w.e.pool.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("group commit of %d: %w", len(group), err)
	}
	return nil
}
