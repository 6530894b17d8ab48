package timeline_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/internal/timeline"
)

// Merge orders the owners' lists by time, then source, then event, whatever
// order the lists come in, and keeps every entry.
func TestMerge(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	plan := []timeline.Entry{{At: at(0), Source: "plan", Event: "created"}, {At: at(2), Source: "approval", Event: "approved"}}
	ops := []timeline.Entry{{At: at(3), Source: "operation", Event: "download.submit done"},
		{At: at(3), Source: "operation", Event: "download.submit attempt 1"}}
	handoffs := []timeline.Entry{{At: at(0), Source: "handoff", Event: "approval.await"}, {At: at(2), Source: "handoff", Event: "signal x"}}
	want := []string{"handoff approval.await", "plan created", "approval approved", "handoff signal x",
		"operation download.submit attempt 1", "operation download.submit done"}
	for _, lists := range [][][]timeline.Entry{{plan, ops, handoffs}, {handoffs, ops, plan}, {ops, nil, plan, handoffs}} {
		var got []string
		for _, e := range timeline.Merge(lists...) {
			got = append(got, e.Source+" "+e.Event)
		}
		require.Equal(t, want, got)
	}
	require.Empty(t, timeline.Merge())
}
