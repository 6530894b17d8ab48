package outbox

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/taskport/taskport/port"
)

// Enqueuer enqueues a run inside the caller's transaction: the EnqueueTx
// of porttx.Enqueuer, which both engines and the router implement.
type Enqueuer interface {
	EnqueueTx(ctx context.Context, tx pgx.Tx, kind port.Kind, input any, opts port.EnqueueOptions) (port.RunID, error)
}

// Send carries ev out in the caller's transaction tx: an enqueue through
// e.EnqueueTx, so that the run is recorded by the engine in tx, exists once
// tx commits and never if it rolls back, and needs no outbox row and no
// dispatch; anything else (a signal, a cancel of a plan's runs, which a
// transaction cannot carry out), and every event when e is nil, as an
// outbox row (Write) that the dispatcher carries out after the commit.
//
// An enqueue answers as the dispatcher would settle its row: a key already
// recorded is the same run (the engine's idempotency); a key held by a run
// of the other engine (a switch of engines, with this process serving one)
// is that run, which drains where it is or is evacuated; a kind or version
// that e does not know is written as an outbox row instead, for a process
// that knows it (a rolling deploy). Any other refusal is returned. An
// event that Write refuses is refused with or without an engine.
func Send(ctx context.Context, tx pgx.Tx, e Enqueuer, ev Event) error {
	if e == nil || (ev.Action != "" && ev.Action != ActionEnqueue) {
		_, err := Write(ctx, tx, ev)
		return err
	}
	ev.Action = ActionEnqueue
	if err := ev.validate(); err != nil {
		return fmt.Errorf("enqueue %s/%q in the transaction: %w", ev.Kind, ev.IdempotencyKey, err)
	}
	_, err := e.EnqueueTx(ctx, tx, ev.Kind, ev.Payload, port.EnqueueOptions{
		IdempotencyKey: ev.IdempotencyKey, BusinessKey: ev.BusinessKey, AvailableAt: ev.AvailableAt, MinVersion: ev.MinVersion,
	})
	switch {
	case err == nil, errors.Is(err, port.ErrOtherEngine):
		return nil
	case errors.Is(err, port.ErrUnknownKind), errors.Is(err, port.ErrUnknownVersion):
		_, werr := Write(ctx, tx, ev)
		return werr
	}
	return fmt.Errorf("enqueue %s/%s in the transaction: %w", ev.Kind, ev.IdempotencyKey, err)
}
