// Package runretention hands package retention's cleaner the pruning of the
// run store (internal/runstore), which knows nothing of the cleaner: the
// store deletes by ages, the cleaner decides when and how much.
package runretention

import (
	"context"
	"time"

	"github.com/taskport/taskport/internal/dbtx"
	"github.com/taskport/taskport/internal/runstore"
	"github.com/taskport/taskport/retention"
)

// Ages are the store's ages of a cleaner's policy.
func Ages(p retention.Policy) runstore.Ages {
	return runstore.Ages{Completed: p.Completed, Canceled: p.Canceled, Failed: p.Failed}
}

// Pruner is the retention of the run store for an engine whose runs keep no
// other rows (Temporal: the projection follows the Policy's ages; the
// namespace's own retention stays Temporal's): its runs, orphaned waiters
// and the early signals runstore.SignalParked kept, taken or expired.
func Pruner(db dbtx.PoolDB, engine runstore.Engine) retention.Pruner {
	return runPruner{q: db, engine: engine}
}

type runPruner struct {
	q      dbtx.PoolDB
	engine runstore.Engine
}

func (r runPruner) Prune(ctx context.Context, p retention.Policy, limit int) (retention.Deleted, error) {
	a := Ages(p)
	runs, err := runstore.PruneRuns(ctx, r.q, r.engine, a, limit)
	if err != nil {
		return nil, err
	}
	waiters, err := runstore.PruneWaiters(ctx, r.q, a, limit)
	if err != nil {
		return nil, err
	}
	signals, err := runstore.PruneEarlySignals(ctx, r.q, a, limit)
	if err != nil {
		return nil, err
	}
	return retention.Deleted{runstore.TableRun: runs, runstore.TableWaiter: waiters, runstore.TableEarlySignal: signals}, nil
}

func (r runPruner) Lag(ctx context.Context, p retention.Policy) (map[string]time.Duration, error) {
	a := Ages(p)
	runs, err := runstore.RunLag(ctx, r.q, r.engine, a)
	if err != nil {
		return nil, err
	}
	waiters, err := runstore.WaiterLag(ctx, r.q, a)
	if err != nil {
		return nil, err
	}
	signals, err := runstore.EarlySignalLag(ctx, r.q, a)
	if err != nil {
		return nil, err
	}
	return map[string]time.Duration{runstore.TableRun: runs, runstore.TableWaiter: waiters, runstore.TableEarlySignal: signals}, nil
}
