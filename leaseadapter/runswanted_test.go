package leaseadapter

import (
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/internal/dbtx"
)

// runsWanted's policy at concurrency 2 with the default ActiveRuns: a base
// of 4 runs executing, up to 8 while runs leave step slots idle, each
// extension adding at most the idle slots; 2 more prefetched.
func TestRunsWanted(t *testing.T) {
	for _, tc := range []struct {
		name                        string
		running, busySlots, waiters int
		base, active, want          int
	}{
		{"below the base", 3, 0, 0, 4, 8, 4},
		{"base and prefetch claimed, slots idle", 6, 0, 0, 4, 8, 6},
		{"one slot idle", 6, 1, 0, 4, 8, 5},
		{"every slot busy", 6, 2, 0, 4, 8, 4},
		{"a run waits for a slot", 6, 0, 1, 4, 8, 4},
		{"extended, slots idle", 9, 0, 0, 4, 8, 8},
		{"ActiveRuns set: no extension", 6, 0, 0, 4, 4, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := &worker{concurrency: 2, baseRuns: tc.base, activeRuns: tc.active, prefetch: 2,
				steps: make(chan struct{}, 2), running: map[dbtx.UUID]*execution{}}
			for range tc.running {
				w.running[dbtx.UUID(uuid.New())] = &execution{}
			}
			for range tc.busySlots {
				w.steps <- struct{}{}
			}
			w.slotWaiters.Store(int64(tc.waiters))
			require.Equal(t, tc.want, w.runsWanted())
		})
	}
}
