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
	wake   wakeup
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

// startStarter starts the starter's loop; the worker's listener
// (listen) pokes it at each EnqueueTx commit.
func (e *Engine) startStarter(ctx context.Context) *starter {
	ctx, cancel := context.WithCancel(ctx)
	s := &starter{e: e, cancel: cancel, wake: newWakeup()}
	s.done.Add(1)
	go func() { defer s.done.Done(); s.loop(ctx) }()
	return s
}

func (s *starter) stop() {
	s.cancel()
	s.done.Wait()
}

// wakeup is a loop's wake-up call: pokes that arrive while one is pending
// merge into it, and a poke never blocks (a listener's notifications).
type wakeup chan struct{}

func newWakeup() wakeup { return make(wakeup, 1) }

func (w wakeup) poke() {
	select {
	case w <- struct{}{}:
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

// listen holds a connection on LISTEN for each channel of wakes (a
// schema's channel base: startChannel, cancelChannel) and calls the
// channel's wake at each notification, and all of them once listening (what
// was committed while nobody listened). A lost connection is opened again
// after the start poll interval; the wakes' own polls cover the gap.
func (e *Engine) listen(ctx context.Context, wakes map[string]func()) {
	channels := map[string]func(){}
	for base, wake := range wakes {
		channels[e.pool.Schema().Channel(base)] = wake
	}
	for ctx.Err() == nil {
		err := listenOnce(ctx, e.pool, channels)
		if ctx.Err() != nil {
			return
		}
		e.logger.WarnContext(ctx, "listen for transactional enqueues and cancels", slog.String("error", err.Error()))
		select {
		case <-ctx.Done():
		case <-time.After(e.cfg.StartPollInterval):
		}
	}
}

// listenOnce listens on each channel over a connection of its own until an
// error, calling every wake once listening and a channel's at each of its
// notifications.
func listenOnce(ctx context.Context, pool *dbtx.Pool, channels map[string]func()) error {
	conn, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig.Copy())
	if err != nil {
		return fmt.Errorf("listen connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx)) //nolint:errcheck // closing a dead connection
	for channel := range channels {
		if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
			return fmt.Errorf("listen: %w", err)
		}
	}
	for _, wake := range channels {
		wake()
	}
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return fmt.Errorf("wait for notification: %w", err)
		}
		if wake, ok := channels[n.Channel]; ok {
			wake()
		}
	}
}
