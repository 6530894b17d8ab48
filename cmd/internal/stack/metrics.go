package stack

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/taskport/taskport/port"
)

// newMetricsRegistry is the process's Prometheus registry with the Go
// runtime and process collectors.
func newMetricsRegistry() *prometheus.Registry {
	r := prometheus.NewRegistry()
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return r
}

// leaseMetrics adapts the lease engine's hook (leaseadapter.Metrics) to
// Prometheus; the engine itself does not depend on a metrics library.
type leaseMetrics struct {
	claimed    prometheus.Counter
	finished   *prometheus.CounterVec
	leaseLost  *prometheus.CounterVec
	fenced     *prometheus.CounterVec
	queueDepth prometheus.Gauge
}

func newLeaseMetrics(r prometheus.Registerer) *leaseMetrics {
	m := &leaseMetrics{
		claimed: prometheus.NewCounter(prometheus.CounterOpts{Name: "taskport_lease_claimed_total", Help: "Runs claimed by this worker."}),
		finished: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "taskport_lease_finished_total",
			Help: "Runs that reached a terminal status."}, []string{"kind", "status"}),
		leaseLost: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "taskport_lease_lost_total",
			Help: "Claims this worker learned it had lost."}, []string{"kind"}),
		fenced: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "taskport_lease_fenced_commits_total",
			Help: "Commits refused because their lease_token was stale."}, []string{"kind"}),
		queueDepth: prometheus.NewGauge(prometheus.GaugeOpts{Name: "taskport_lease_queue_depth", Help: "Runs ready to be claimed, of the kinds and versions this worker serves."}),
	}
	r.MustRegister(m.claimed, m.finished, m.leaseLost, m.fenced, m.queueDepth)
	return m
}

func (m *leaseMetrics) Claimed(n int) { m.claimed.Add(float64(n)) }
func (m *leaseMetrics) Finished(kind port.Kind, s port.Status) {
	m.finished.WithLabelValues(string(kind), string(s)).Inc()
}
func (m *leaseMetrics) LeaseLost(kind port.Kind)    { m.leaseLost.WithLabelValues(string(kind)).Inc() }
func (m *leaseMetrics) FencedCommit(kind port.Kind) { m.fenced.WithLabelValues(string(kind)).Inc() }
func (m *leaseMetrics) QueueDepth(n int)            { m.queueDepth.Set(float64(n)) }

// outboxMetrics adapts the outbox dispatcher's hook (outbox.Metrics).
type outboxMetrics struct{ failed prometheus.Gauge }

func newOutboxMetrics(r prometheus.Registerer) *outboxMetrics {
	m := &outboxMetrics{failed: prometheus.NewGauge(prometheus.GaugeOpts{Name: "taskport_outbox_failed_rows",
		Help: "Outbox rows given up as failed (invalid input); each waits for an operator's retry in /admin."})}
	r.MustRegister(m.failed)
	return m
}

func (m *outboxMetrics) FailedRows(n int) { m.failed.Set(float64(n)) }

// retentionMetrics adapts the retention cleaner's hook (retention.Metrics).
type retentionMetrics struct {
	deleted *prometheus.CounterVec
	lag     *prometheus.GaugeVec
}

func newRetentionMetrics(r prometheus.Registerer) *retentionMetrics {
	m := &retentionMetrics{
		deleted: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "taskport_retention_deleted_rows_total",
			Help: "Rows deleted by the retention cleaner."}, []string{"table"}),
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "taskport_retention_lag_seconds",
			Help: "After the last pass: how long ago the oldest row still there became prunable (0: none)."}, []string{"table"}),
	}
	r.MustRegister(m.deleted, m.lag)
	return m
}

func (m *retentionMetrics) Deleted(table string, n int64) {
	m.deleted.WithLabelValues(table).Add(float64(n))
}
func (m *retentionMetrics) Lag(table string, d time.Duration) {
	m.lag.WithLabelValues(table).Set(d.Seconds())
}
