// Package porttx is the port's transactional enqueue: a run that starts
// only if the caller's Postgres transaction commits, together with the
// business write that asks for it (the outbox pattern, docs/decisions.md
// 2.1). Both engines of this module and the router implement Enqueuer. It
// is a package of its own because it names pgx's transaction, and package
// port stays on the standard library.
package porttx

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/taskport/taskport/port"
)

// Enqueuer is a TaskEngine that also enqueues inside a transaction.
//
// EnqueueTx answers as Enqueue does (the same validation, idempotency and
// refusals, the specification's Enqueue table), but it writes only through
// tx, which must be a transaction on the engine's database: the run exists
// for every other caller once tx commits, and never if it rolls back. The
// run starts after the commit, as soon as a worker of the engine serves
// (the lease engine's claim; on Temporal, a serving worker starts its
// workflow, the engine's own outbox). A refusal (a *FieldError, an unknown
// kind, ErrOtherEngine) leaves tx usable.
type Enqueuer interface {
	port.TaskEngine
	EnqueueTx(ctx context.Context, tx pgx.Tx, kind port.Kind, input any, opts port.EnqueueOptions) (port.RunID, error)
}
