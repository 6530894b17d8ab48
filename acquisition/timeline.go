package acquisition

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/taskport/taskport/internal/timeline"
)

// Timeline returns the lines of a plan's business timeline that this
// package's tables hold (the plan, its approval, its download and its
// decisions), oldest first; plans merges them with the ledger's and the
// outbox's. An unknown plan has none.
func Timeline(ctx context.Context, q DBTX, planID uuid.UUID) ([]timeline.Entry, error) {
	out, err := queryAllSQL(ctx, q, pgx.RowToStructByPos[timeline.Entry], timelineSQL, planID)
	if err != nil {
		return nil, fmt.Errorf("timeline of plan %s: %w", planID, err)
	}
	return out, nil
}
