package pgtest

import (
	"context"
	"fmt"
	"time"
)

// AwaitLockWait polls until a backend of q's database waits for a lock
// while running a statement that contains fragment, and returns nil then;
// or returns an error when ctx ends first. It lets a test hold a lock and
// go on only once the statement it means to block is blocked.
func AwaitLockWait(ctx context.Context, q Querier, fragment string) error {
	for {
		var blocked bool
		err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND strpos(query, $1) > 0)`, fragment).Scan(&blocked)
		switch {
		case err != nil:
			return fmt.Errorf("await a statement blocked on a lock (%q): %w", fragment, err)
		case blocked:
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no statement blocked on a lock (%q): %w", fragment, context.Cause(ctx))
		case <-time.After(10 * time.Millisecond):
		}
	}
}
