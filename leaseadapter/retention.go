package leaseadapter

import (
	"context"
	"fmt"
	"time"

	"github.com/taskport/taskport/internal/dbtx"
	"github.com/taskport/taskport/internal/runretention"
	"github.com/taskport/taskport/internal/runstore"
	"github.com/taskport/taskport/retention"
)

// The tables the lease engine's pruner reports besides the run store's.
const (
	tableStepResult = "taskport_lease.step_result"
	tableSignal     = "taskport_lease.task_signal"
)

// Pruner is the lease engine's retention (package retention): its finished
// runs with their step results, its signals, and waiters
// whose run ended.
func (e *Engine) Pruner() retention.Pruner { return leasePruner{e: e} }

type leasePruner struct{ e *Engine }

func (l leasePruner) Prune(ctx context.Context, p retention.Policy, limit int) (retention.Deleted, error) {
	a := runretention.Ages(p)
	s, c, f := runstore.RunAgeArgs(a)
	var runs, steps int64
	err := l.e.pool.QueryRow(ctx, pruneRunsSQL, runstore.EngineLease, s, c, f, limit).Scan(&runs, &steps)
	if err != nil {
		return nil, fmt.Errorf("prune lease runs: %w", runstore.InterpretError(err))
	}
	signals, err := dbtx.ExecPinned(ctx, l.e.pool, pruneSignalsSQL, runstore.AgeArg(p.Completed), limit)
	if err != nil {
		return nil, fmt.Errorf("prune signals: %w", runstore.InterpretError(err))
	}
	waiters, err := runstore.PruneWaiters(ctx, l.e.pool, a, limit)
	if err != nil {
		return nil, err
	}
	return retention.Deleted{runstore.TableRun: runs, tableStepResult: steps,
		tableSignal: signals, runstore.TableWaiter: waiters}, nil
}

// Lag reports the run lag for the run and step_result tables alike: a
// run's step results go with it.
func (l leasePruner) Lag(ctx context.Context, p retention.Policy) (map[string]time.Duration, error) {
	a := runretention.Ages(p)
	runs, err := runstore.RunLag(ctx, l.e.pool, runstore.EngineLease, a)
	if err != nil {
		return nil, err
	}
	var ms int64
	if err := l.e.pool.QueryRow(ctx, signalLagSQL, runstore.AgeArg(p.Completed)).Scan(&ms); err != nil {
		return nil, fmt.Errorf("signal retention lag: %w", runstore.InterpretError(err))
	}
	waiters, err := runstore.WaiterLag(ctx, l.e.pool, a)
	if err != nil {
		return nil, err
	}
	return map[string]time.Duration{runstore.TableRun: runs, tableStepResult: runs,
		tableSignal: time.Duration(ms) * time.Millisecond, runstore.TableWaiter: waiters}, nil
}
