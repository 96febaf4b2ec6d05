package health

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the prober's series. A proxy's failure counter is born at 0 when the loop
// picks the proxy up (so its first failure shows in rate() and increase()), and its series
// are deleted when it leaves the view, so cardinality stays bounded by the fleet size.
type metrics struct {
	// duration has a proxy label unless byProxy is false (one histogram for the fleet).
	duration *prometheus.HistogramVec
	byProxy  bool
	failures *prometheus.CounterVec
	lateness prometheus.Histogram
	// score is each proxy's quality score (0-1); exitChecks counts exit checks by result.
	score      *prometheus.GaugeVec
	exitChecks *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer, byProxy bool) (*metrics, error) {
	labels := []string{"proxy"}
	if !byProxy {
		labels = nil
	}
	m := &metrics{
		byProxy: byProxy,
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "proxy_operator_healthcheck_duration_seconds",
			Help:    "Time of each probe through a proxy, to the response headers or the failure.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, labels),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "proxy_operator_healthcheck_failures_total",
			Help: "Probes through a proxy that failed.",
		}, []string{"proxy"}),
		lateness: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "proxy_operator_healthcheck_lateness_seconds",
			Help:    "How long after its slot a probe started: grows when the worker pool is too small.",
			Buckets: []float64{.001, .005, .01, .05, .1, .5, 1, 5, 10, 30},
		}),
		score: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "proxy_operator_proxy_quality_score",
			Help: "Quality score of a proxy, 0 (bad) to 1 (good), from probes and crawler reports with decay; status shows its band.",
		}, []string{"proxy"}),
		exitChecks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "proxy_operator_exit_checks_total",
			Help: "Exit checks (echo requests through a proxy) by result: ok or failed.",
		}, []string{"result"}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.duration, m.failures, m.lateness, m.score, m.exitChecks} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("%w: register metrics: %w", ErrConfig, err)
		}
	}
	return m, nil
}

// known starts the proxy's failure counter at 0.
func (m *metrics) known(proxy string) {
	m.failures.WithLabelValues(proxy)
}

func (m *metrics) observe(proxy string, r Result) {
	if m.byProxy {
		m.duration.WithLabelValues(proxy).Observe(r.Latency.Seconds())
	} else {
		m.duration.WithLabelValues().Observe(r.Latency.Seconds())
	}
	if !r.OK {
		m.failures.WithLabelValues(proxy).Inc()
	}
}

func (m *metrics) forget(proxy string) {
	if m.byProxy {
		m.duration.DeleteLabelValues(proxy)
	}
	m.failures.DeleteLabelValues(proxy)
	m.score.DeleteLabelValues(proxy)
}
