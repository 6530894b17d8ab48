package outbox_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/app/apptest"
	"github.com/taskport/taskport/internal/testkit/pgtest"
	"github.com/taskport/taskport/outbox"
)

// BenchmarkCommitToRunStart measures the outbox hop: from the commit of the
// business transaction that wrote the row to the engine's Enqueue (where a
// run starts), woken by LISTEN/NOTIFY. It reports p50 and p99.
func BenchmarkCommitToRunStart(b *testing.B) {
	pool := pgtest.NewPool(b)
	eng := apptest.NewRecordingEngine(pool, nil)
	d, err := outbox.NewDispatcher(pool, eng, eng, outbox.Config{PollInterval: time.Minute})
	require.NoError(b, err)
	start(b, d)
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		write(b, pool, "bench.kind", fmt.Sprintf("b-%d", i))
		committed := time.Now()
		<-eng.Notify()
		got := eng.Enqueued()
		lat = append(lat, got[len(got)-1].At.Sub(committed))
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}
