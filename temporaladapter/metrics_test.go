package temporaladapter

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

func TestPrometheusMetricsHandlerExportsSDKMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	var errs []error
	h := PrometheusMetricsHandler(reg, func(err error) { errs = append(errs, err) })
	tagged := h.WithTags(map[string]string{"namespace": "default"}).WithTags(map[string]string{"task_queue": "q"})
	tagged.Counter("temporal_request").Inc(2)
	h.WithTags(map[string]string{"namespace": "other", "operation": "extra"}).Counter("temporal_request").Inc(1)
	tagged.Gauge("temporal_worker_task_slots_available").Update(7)
	tagged.Timer("temporal_activity_execution_latency").Record(30 * time.Millisecond)

	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP temporal_request Temporal SDK metric temporal_request
# TYPE temporal_request counter
temporal_request{namespace="default",task_queue="q"} 2
temporal_request{namespace="other",task_queue=""} 1
# HELP temporal_worker_task_slots_available Temporal SDK metric temporal_worker_task_slots_available
# TYPE temporal_worker_task_slots_available gauge
temporal_worker_task_slots_available{namespace="default",task_queue="q"} 7
`), "temporal_request", "temporal_worker_task_slots_available"))
	n, err := testutil.GatherAndCount(reg, "temporal_activity_execution_latency")
	require.NoError(t, err)
	require.Equal(t, 1, n)

	// A name another collector owns is reported, not a panic.
	other := prometheus.NewRegistry()
	other.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "temporal_taken", Help: "x"}))
	h2 := PrometheusMetricsHandler(other, func(err error) { errs = append(errs, err) })
	h2.Counter("temporal_taken").Inc(1)
	h2.Counter("temporal_taken").Inc(1)
	require.Len(t, errs, 1, "reported once")
	require.ErrorContains(t, errs[0], "register temporal metric temporal_taken")
}
