package health

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the prober's series. Per-proxy series are deleted when the proxy leaves the
// view, so cardinality stays bounded by the fleet size.
type metrics struct {
	duration *prometheus.HistogramVec
	failures *prometheus.CounterVec
	lateness prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "proxy_operator_healthcheck_duration_seconds",
			Help:    "Time of each probe through a proxy, to the response headers or the failure.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"proxy"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "proxy_operator_healthcheck_failures_total",
			Help: "Probes through a proxy that failed.",
		}, []string{"proxy"}),
		lateness: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "proxy_operator_healthcheck_lateness_seconds",
			Help:    "How long after its slot a probe started: grows when the worker pool is too small.",
			Buckets: []float64{.001, .005, .01, .05, .1, .5, 1, 5, 10, 30},
		}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.duration, m.failures, m.lateness} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("%w: register metrics: %w", ErrConfig, err)
		}
	}
	return m, nil
}

func (m *metrics) observe(proxy string, r Result) {
	m.duration.WithLabelValues(proxy).Observe(r.Latency.Seconds())
	if !r.OK {
		m.failures.WithLabelValues(proxy).Inc()
	}
}

func (m *metrics) forget(proxy string) {
	m.duration.DeleteLabelValues(proxy)
	m.failures.DeleteLabelValues(proxy)
}
