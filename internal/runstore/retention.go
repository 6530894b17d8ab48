package runstore

import (
	"context"
	"fmt"
	"time"

	"github.com/taskport/taskport/internal/dbtx"
)

// The table names the pruners report.
const (
	TableRun         = "taskport.run"
	TableWaiter      = "taskport.waiter"
	TableEarlySignal = "taskport.early_signal"
)

// AgeArg is a retention age as the prune statements take it: milliseconds,
// or NULL for a negative age (keep forever), which selects nothing.
func AgeArg(d time.Duration) any {
	if d < 0 {
		return nil
	}
	return d.Milliseconds()
}

// Ages are how long rows are kept after their run ended, by how it ended
// (package retention's Policy, which this store does not import: the
// cleaner is a user of the store, not the other way round). A negative age
// keeps forever. Completed is also the age of waiters and signals.
type Ages struct {
	Completed, Canceled, Failed time.Duration
}

// RunAgeArgs are the $2, $3, $4 of PrunableRunsCTE and RunLagSQL.
func RunAgeArgs(p Ages) (succeeded, canceled, failed any) {
	return AgeArg(p.Completed), AgeArg(p.Canceled), AgeArg(p.Failed)
}

// PruneRuns deletes up to limit runs of engine per terminal status, each
// finished longer ago than its status's age under p, with their waiters.
func PruneRuns(ctx context.Context, q DBTX, engine Engine, p Ages, limit int) (int64, error) {
	s, c, f := RunAgeArgs(p)
	tag, err := q.Exec(ctx, pruneRunsSQL, engine, s, c, f, limit)
	if err != nil {
		return 0, fmt.Errorf("prune %s runs: %w", engine, InterpretError(err))
	}
	return tag.RowsAffected(), nil
}

// RunLag is how long ago the oldest run of engine still recorded became
// prunable under p; zero when none is.
func RunLag(ctx context.Context, q DBTX, engine Engine, p Ages) (time.Duration, error) {
	s, c, f := RunAgeArgs(p)
	return lag(ctx, q, string(engine)+" run", RunLagSQL, engine, s, c, f)
}

// lag runs a lag statement, which reads the age in milliseconds of the
// oldest prunable row of what.
func lag(ctx context.Context, q DBTX, what, sql string, args ...any) (time.Duration, error) {
	var ms int64
	if err := q.QueryRow(ctx, sql, args...).Scan(&ms); err != nil {
		return 0, fmt.Errorf("%s retention lag: %w", what, InterpretError(err))
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// PruneWaiters deletes up to limit waiters older than p.Completed whose run
// ended, in a transaction of its own (under dbtx.PinIndexScansSQL).
func PruneWaiters(ctx context.Context, db dbtx.PoolDB, p Ages, limit int) (int64, error) {
	return prunePinned(ctx, db, "waiters", pruneWaitersSQL, p, limit)
}

// prunePinned runs a prune statement of what, which takes the completed age
// and the batch limit, in a transaction of its own under
// dbtx.PinIndexScansSQL.
func prunePinned(ctx context.Context, db dbtx.PoolDB, what, sql string, p Ages, limit int) (int64, error) {
	n, err := dbtx.ExecPinned(ctx, db, sql, AgeArg(p.Completed), limit)
	if err != nil {
		return 0, fmt.Errorf("prune %s: %w", what, InterpretError(err))
	}
	return n, nil
}

// WaiterLag is PruneWaiters' lag.
func WaiterLag(ctx context.Context, q DBTX, p Ages) (time.Duration, error) {
	return lag(ctx, q, "waiter", waiterLagSQL, AgeArg(p.Completed))
}

// PruneEarlySignals deletes up to limit kept signals taken longer ago than
// p.Completed and up to limit never taken and sent longer ago than that
// (SignalParked keeps them, a wait takes them), in a transaction
// of its own under dbtx.PinIndexScansSQL: unpinned, the planner deletes the
// batch by hashing the whole table and, without statistics, sorts every old
// signal not taken for the LIMIT.
func PruneEarlySignals(ctx context.Context, db dbtx.PoolDB, p Ages, limit int) (int64, error) {
	return prunePinned(ctx, db, "early signals", pruneEarlySignalsSQL, p, limit)
}

// EarlySignalLag is PruneEarlySignals' lag.
func EarlySignalLag(ctx context.Context, q DBTX, p Ages) (time.Duration, error) {
	return lag(ctx, q, "early signal", earlySignalLagSQL, AgeArg(p.Completed))
}
