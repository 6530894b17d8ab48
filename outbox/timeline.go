package outbox

import (
	"context"
	"fmt"

	"github.com/taskport/taskport/internal/timeline"
)

// Timeline returns the lines of a plan's business timeline that the outbox
// holds (each row written under businessKey, the plan id), oldest first;
// plans merges them with acquisition's and the ledger's.
func Timeline(ctx context.Context, q DBTX, businessKey string) ([]timeline.Entry, error) {
	out, err := timeline.Read(ctx, q, timelineSQL, businessKey)
	if err != nil {
		return nil, fmt.Errorf("hand-off timeline of %s: %w", businessKey, err)
	}
	return out, nil
}
