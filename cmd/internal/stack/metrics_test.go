package stack

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/outbox"
)

// The outbox dispatcher's count of failed rows reaches /metrics as a gauge.
func TestOutboxMetrics(t *testing.T) {
	t.Parallel()
	r := newMetricsRegistry()
	var m outbox.Metrics = newOutboxMetrics(r)
	m.FailedRows(3)
	n, err := testutil.GatherAndCount(r, "taskport_outbox_failed_rows")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.InDelta(t, 3, testutil.ToFloat64(m.(*outboxMetrics).failed), 0)
	m.FailedRows(0)
	require.InDelta(t, 0, testutil.ToFloat64(m.(*outboxMetrics).failed), 0)
}
