package ledger

import (
	"context"
	"fmt"

	"github.com/google/uuid"

	"github.com/taskport/taskport/internal/timeline"
)

// Timeline returns the lines of a plan's business timeline that the ledger
// holds (each attempt's start and each committed result), oldest first;
// plans merges them with acquisition's and the outbox's.
func Timeline(ctx context.Context, q DBTX, planID uuid.UUID) ([]timeline.Entry, error) {
	out, err := timeline.Read(ctx, q, timelineSQL, planID)
	if err != nil {
		return nil, fmt.Errorf("operations timeline of plan %s: %w", planID, err)
	}
	return out, nil
}
