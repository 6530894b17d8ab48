package temporaladapter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"

	"github.com/taskport/taskport/internal/dbtx"
	"github.com/taskport/taskport/internal/enginekit"
	"github.com/taskport/taskport/internal/runstore"
	"github.com/taskport/taskport/internal/tracing"
	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/port/porttx"
)

// startChannel is the NOTIFY channel of EnqueueTx: a serving worker's
// starter listens on it.
const startChannel = "taskport_temporal_start"

var _ porttx.Enqueuer = (*Engine)(nil)

// EnqueueTx is Enqueue inside the caller's transaction (porttx.Enqueuer):
// the run is recorded in tx, and its workflow, which a Postgres transaction
// cannot start, is started by a serving worker of this engine once tx
// commits (the engine's outbox: the run's start_wanted_at, migration
// 00020). If tx rolls back, nothing was recorded and nothing starts. Until
// a worker serves, the run reads pending, as any run nobody serves. The
// key of a run already recorded returns that run, as Enqueue does, and
// starts nothing more.
func (e *Engine) EnqueueTx(ctx context.Context, tx pgx.Tx, kind port.Kind, input any, opts port.EnqueueOptions) (port.RunID, error) {
	prep, err := enginekit.PrepareEnqueue(e.reg, kind, input, opts)
	if err != nil {
		return "", err
	}
	r := newRun(kind, prep, opts)
	r.StartWanted, r.Trace = true, tracing.FromContext(ctx)
	tx = e.pool.Schema().Tx(tx)
	run, created, err := runstore.Insert(ctx, tx, r)
	if err != nil {
		return "", err
	}
	if created {
		if _, err := tx.Exec(ctx, `SELECT pg_notify($1, '')`, e.pool.Schema().Channel(startChannel)); err != nil {
			return "", fmt.Errorf("enqueue %s: notify the starter: %w", kind, err)
		}
	}
	return run.ID, nil
}

// starter starts the workflows of the runs EnqueueTx recorded, in a
// serving worker: woken by the NOTIFY of each commit, and every
// Config.StartPollInterval for the commits it did not hear (a lost LISTEN
// connection, a worker that was not serving).
type starter struct {
	e      *Engine
	cancel context.CancelFunc
	done   sync.WaitGroup
	wake   chan struct{}
}

// startBatch is how many wanted starts one transaction of the starter takes.
const startBatch = 100

// startRoundTimeout bounds the starts of one round, and so how long its
// transaction holds the runs' rows: a Cancel, or an evacuation ending the
// runs of a Temporal server that is gone, waits on those rows at most this
// long, well under the pools' lock_timeout (10 s by default). Before it,
// each start waited for its own RPC deadline (10 s) while the rows stayed
// locked, and evacuate's statements failed on the lock timeout
// (TestEngineSwitch, once the media steps enqueued with EnqueueTx). A start
// cut short stays wanted for the next round; one the server received
// meanwhile is found there (USE_EXISTING).
const startRoundTimeout = 2 * time.Second

func (e *Engine) startStarter(ctx context.Context) *starter {
	ctx, cancel := context.WithCancel(ctx)
	s := &starter{e: e, cancel: cancel, wake: make(chan struct{}, 1)}
	s.done.Add(2)
	go func() { defer s.done.Done(); s.listen(ctx) }()
	go func() { defer s.done.Done(); s.loop(ctx) }()
	return s
}

func (s *starter) stop() {
	s.cancel()
	s.done.Wait()
}

func (s *starter) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *starter) loop(ctx context.Context) {
	tick := time.NewTicker(s.e.cfg.StartPollInterval)
	defer tick.Stop()
	for {
		for {
			n, err := s.round(ctx)
			if err != nil && ctx.Err() == nil {
				s.e.logger.WarnContext(ctx, "start workflows of transactional enqueues", slog.String("error", err.Error()))
			}
			if err != nil || n < startBatch {
				break
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-s.wake:
		case <-tick.C:
		}
	}
}

// round starts one batch of wanted runs in a transaction that holds them
// (another worker's starter skips them) and clears the mark of the ones
// started; a start that failed stays wanted for the next round. It
// returns how many runs it read.
func (s *starter) round(ctx context.Context) (int, error) {
	var read int
	var failed []error
	err := pgx.BeginFunc(ctx, s.e.pool, func(tx pgx.Tx) error {
		runs, err := runstore.StartWanted(ctx, tx, startBatch)
		if err != nil {
			return err
		}
		read = len(runs)
		var mu sync.Mutex
		var started []port.RunID
		rctx, cancel := context.WithTimeout(ctx, startRoundTimeout)
		defer cancel()
		g, gctx := errgroup.WithContext(rctx)
		g.SetLimit(startParallelism)
		for _, run := range runs {
			g.Go(func() error {
				if !run.Status.Terminal() {
					// A run canceled before its start was started canceled by
					// Cancel; this start finds that workflow and leaves it.
					// The workflow continues the enqueue's trace.
					if err := s.e.start(run.Trace.Into(gctx), run.Run, runInput{}); err != nil {
						mu.Lock()
						failed = append(failed, err)
						mu.Unlock()
						return nil
					}
				}
				mu.Lock()
				started = append(started, run.ID)
				mu.Unlock()
				return nil
			})
		}
		_ = g.Wait() // each start's error is kept in failed
		return runstore.StartDone(ctx, tx, started)
	})
	return read, errors.Join(append(failed, err)...)
}

// listen holds a connection on LISTEN startChannel and pokes the loop at
// each notification; a lost connection is opened again after the poll
// interval, and the poll covers the gap.
func (s *starter) listen(ctx context.Context) {
	for ctx.Err() == nil {
		err := listenOnce(ctx, s.e.pool, s.e.pool.Schema().Channel(startChannel), s.poke)
		if ctx.Err() != nil {
			return
		}
		s.e.logger.WarnContext(ctx, "listen for transactional enqueues", slog.String("error", err.Error()))
		select {
		case <-ctx.Done():
		case <-time.After(s.e.cfg.StartPollInterval):
		}
	}
}

// listenOnce listens on channel over a connection of its own until an
// error, calling wake once listening and at every notification.
func listenOnce(ctx context.Context, pool *dbtx.Pool, channel string, wake func()) error {
	conn, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig.Copy())
	if err != nil {
		return fmt.Errorf("listen connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx)) //nolint:errcheck // closing a dead connection
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	wake() // what was committed while nobody listened
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			return fmt.Errorf("wait for notification: %w", err)
		}
		wake()
	}
}
