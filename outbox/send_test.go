package outbox_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/internal/testkit/pgtest"
	"github.com/taskport/taskport/outbox"
	"github.com/taskport/taskport/port"
)

// fakeEnqueuer records EnqueueTx calls and answers err.
type fakeEnqueuer struct {
	calls []port.EnqueueOptions
	err   error
}

func (f *fakeEnqueuer) EnqueueTx(_ context.Context, _ pgx.Tx, _ port.Kind, _ any, opts port.EnqueueOptions) (port.RunID, error) {
	f.calls = append(f.calls, opts)
	return "run-1", f.err
}

// Send enqueues through the engine in the transaction, and writes an
// outbox row for what a transaction cannot carry out (a signal, a cancel),
// for every event without an engine, and for a kind or version the engine
// does not know (a newer process may); a key another engine holds is that
// engine's run; any other refusal is returned.
func TestSendEnqueuesInTheTransactionWhereItCan(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	enqueue := outbox.Event{Kind: "k.send", IdempotencyKey: "send-1", BusinessKey: "p1", Payload: map[string]int{"n": 1}, MinVersion: 2}
	signal := outbox.Event{Action: outbox.ActionSignal, Topic: "send:p1", IdempotencyKey: "send-signal", BusinessKey: "p1"}
	rows := func(key string) int {
		var n int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM outbox_event WHERE idempotency_key = $1`, key).Scan(&n))
		return n
	}
	send := func(e outbox.Enqueuer, ev outbox.Event) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return outbox.Send(ctx, tx, e, ev) })
	}

	e := &fakeEnqueuer{}
	require.NoError(t, send(e, enqueue))
	require.Equal(t, []port.EnqueueOptions{{IdempotencyKey: "send-1", BusinessKey: "p1", MinVersion: 2}}, e.calls)
	require.Zero(t, rows("send-1"), "an enqueue through the engine writes no outbox row")
	require.NoError(t, send(e, signal))
	require.Len(t, e.calls, 1, "a signal does not go to EnqueueTx")
	require.Equal(t, 1, rows("send-signal"))

	for _, tc := range []struct {
		err  error
		rows int
	}{
		{port.ErrOtherEngine, 0},
		{port.ErrUnknownKind, 1},
		{port.ErrUnknownVersion, 1},
	} {
		ev := enqueue
		ev.IdempotencyKey = "send-" + tc.err.Error()
		require.NoError(t, send(&fakeEnqueuer{err: tc.err}, ev), tc.err)
		require.Equal(t, tc.rows, rows(ev.IdempotencyKey), tc.err)
	}
	refused := &port.FieldError{Field: "input", Reason: "bad"}
	err := send(&fakeEnqueuer{err: refused}, enqueue)
	require.ErrorIs(t, err, port.ErrInvalidInput)
	require.True(t, errors.As(err, new(*port.FieldError)))

	require.NoError(t, send(nil, outbox.Event{Kind: "k.send", IdempotencyKey: "send-no-engine", BusinessKey: "p1"}))
	require.Equal(t, 1, rows("send-no-engine"), "without an engine, the outbox")
}

// Send refuses what Write refuses whether or not an engine is at hand, and
// hands nothing to the engine then. Before, with an engine, an enqueue with
// fields of another action (a topic) went to EnqueueTx, which ignored them.
func TestSendRefusesWhatWriteRefuses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	e := &fakeEnqueuer{}
	withTopic := outbox.Event{Kind: "k.send", Topic: "t", IdempotencyKey: "send-bad"}
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return outbox.Send(ctx, tx, e, withTopic) })
	require.ErrorIs(t, err, port.ErrInvalidInput, "an enqueue with a topic")
	require.Empty(t, e.calls)
}
