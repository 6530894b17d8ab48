package outbox

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskport/taskport/internal/dbtx"
	"github.com/taskport/taskport/retention"
)

// TableEvent is the table the outbox pruner reports.
const TableEvent = "outbox_event"

// Pruner is the outbox's retention (package retention): rows dispatched
// more than Policy.Completed ago are deleted. Pending rows and failed rows
// (dead letters waiting for an operator) are kept. A Write of the key of a
// pruned row inserts a new row, which is dispatched again: the engine's
// Enqueue then returns the run of that key while taskport.run still records
// it, which is at least as long, for a run that succeeded.
func Pruner(db *pgxpool.Pool) retention.Pruner { return pruner{q: db} }

type pruner struct{ q *pgxpool.Pool }

func (o pruner) Prune(ctx context.Context, p retention.Policy, limit int) (retention.Deleted, error) {
	if p.Completed < 0 {
		return retention.Deleted{TableEvent: 0}, nil
	}
	n, err := dbtx.ExecPinned(ctx, o.q, pruneSQL, p.Completed.Milliseconds(), limit)
	if err != nil {
		return nil, fmt.Errorf("prune outbox: %w", err)
	}
	return retention.Deleted{TableEvent: n}, nil
}

func (o pruner) Lag(ctx context.Context, p retention.Policy) (map[string]time.Duration, error) {
	if p.Completed < 0 {
		return map[string]time.Duration{TableEvent: 0}, nil
	}
	var ms int64
	if err := o.q.QueryRow(ctx, pruneLagSQL, p.Completed.Milliseconds()).Scan(&ms); err != nil {
		return nil, fmt.Errorf("outbox retention lag: %w", err)
	}
	return map[string]time.Duration{TableEvent: time.Duration(ms) * time.Millisecond}, nil
}
