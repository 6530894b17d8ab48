package leaseadapter

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// commitReq is one statement waiting to be committed together with others:
// a lease-checked statement of a run (see queries.go) or an enqueue.
type commitReq struct {
	sql  string
	args []any
	scan func(pgx.Row) error // reads the statement's one result row
	done chan error
}

type commitRes struct {
	n  int64     // task rows matched: 0 means fenced
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
	req := &commitReq{sql: sql, args: args, scan: scan, done: make(chan error, 1)}
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

func (w *worker) commitGroup(ctx context.Context, group []*commitReq) {
	err := w.sendBatch(ctx, group)
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
	// retried enqueue finds its row and returns it.)
	for _, r := range group {
		r.done <- w.sendBatch(ctx, []*commitReq{r})
	}
}

// sendBatch runs the statements as one pipelined batch, which Postgres
// executes as one implicit transaction.
func (w *worker) sendBatch(ctx context.Context, group []*commitReq) error {
	b := &pgx.Batch{}
	for _, r := range group {
		b.Queue(r.sql, r.args...)
	}
	br := w.e.pool.SendBatch(ctx, b)
	var errs []error
	for _, r := range group {
		if err := r.scan(br.QueryRow()); err != nil {
			errs = append(errs, err)
			break
		}
	}
	if err := br.Close(); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("group commit of %d: %w", len(group), err)
	}
	return nil
}
