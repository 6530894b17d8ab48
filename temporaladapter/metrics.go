package temporaladapter

import (
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.temporal.io/sdk/client"
)

// PrometheusMetricsHandler returns an SDK metrics handler that registers the
// SDK's metrics (counters, gauges, and timers as histograms in seconds) with
// reg under the SDK's own names (temporal_request, temporal_activity_...).
// The cmd wires it into ClientConfig.MetricsHandler; core code only sees
// client.MetricsHandler.
//
// It stands in for the SDK's tally contrib, which the module proxy here does
// not serve. Prometheus needs one label set per metric name: the first use
// of a name fixes its labels; later uses fill a missing label with "" and
// drop labels the name was not registered with. A name that cannot be
// registered (taken by another collector) is reported to onError once and
// its values are dropped; onError may be nil.
func PrometheusMetricsHandler(reg prometheus.Registerer, onError func(error)) client.MetricsHandler {
	if onError == nil {
		onError = func(error) {}
	}
	return promHandler{m: &promMetrics{reg: reg, onError: onError, vecs: map[string]*promVec{}}}
}

type promMetrics struct {
	reg     prometheus.Registerer
	onError func(error)
	mu      sync.Mutex
	vecs    map[string]*promVec
}

type promVec struct {
	labels  []string
	counter *prometheus.CounterVec
	gauge   *prometheus.GaugeVec
	hist    *prometheus.HistogramVec
	broken  bool
}

// timerBuckets spans 1 ms to about 65 s.
var timerBuckets = prometheus.ExponentialBuckets(0.001, 2, 17)

type metricKind int

const (
	kindCounter metricKind = iota
	kindGauge
	kindTimer
)

func (m *promMetrics) vec(name string, kind metricKind, tags map[string]string) (*promVec, []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, ok := m.vecs[name]
	if !ok {
		v = &promVec{labels: slices.Sorted(maps.Keys(tags))}
		help := "Temporal SDK metric " + name
		var c prometheus.Collector
		switch kind {
		case kindCounter:
			v.counter = prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, v.labels)
			c = v.counter
		case kindGauge:
			v.gauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, v.labels)
			c = v.gauge
		case kindTimer:
			v.hist = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: timerBuckets}, v.labels)
			c = v.hist
		}
		if err := m.reg.Register(c); err != nil {
			v.broken = true
			m.onError(fmt.Errorf("register temporal metric %s: %w", name, err))
		}
		m.vecs[name] = v
	}
	values := make([]string, len(v.labels))
	for i, l := range v.labels {
		values[i] = tags[l]
	}
	return v, values
}

type promHandler struct {
	m    *promMetrics
	tags map[string]string
}

func (h promHandler) WithTags(tags map[string]string) client.MetricsHandler {
	merged := maps.Clone(h.tags)
	if merged == nil {
		merged = map[string]string{}
	}
	maps.Copy(merged, tags)
	return promHandler{m: h.m, tags: merged}
}

func (h promHandler) Counter(name string) client.MetricsCounter {
	v, values := h.m.vec(name, kindCounter, h.tags)
	return counterFunc(func(d int64) {
		if !v.broken && v.counter != nil {
			v.counter.WithLabelValues(values...).Add(float64(d))
		}
	})
}

func (h promHandler) Gauge(name string) client.MetricsGauge {
	v, values := h.m.vec(name, kindGauge, h.tags)
	return gaugeFunc(func(f float64) {
		if !v.broken && v.gauge != nil {
			v.gauge.WithLabelValues(values...).Set(f)
		}
	})
}

func (h promHandler) Timer(name string) client.MetricsTimer {
	v, values := h.m.vec(name, kindTimer, h.tags)
	return timerFunc(func(d time.Duration) {
		if !v.broken && v.hist != nil {
			v.hist.WithLabelValues(values...).Observe(d.Seconds())
		}
	})
}

type (
	counterFunc func(int64)
	gaugeFunc   func(float64)
	timerFunc   func(time.Duration)
)

func (f counterFunc) Inc(d int64)          { f(d) }
func (f gaugeFunc) Update(v float64)       { f(v) }
func (f timerFunc) Record(d time.Duration) { f(d) }
