package hooks

import (
	"github.com/prometheus/client_golang/prometheus"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
	"github.com/proxy-operator/proxy-operator/internal/fleet"
)

var phases = []v1.ProxyPhase{v1.PhasePending, v1.PhaseProvisioning, v1.PhaseReady, v1.PhaseUnhealthy, v1.PhaseDeleting, v1.PhaseFailed}

// phaseCollector reports proxy_operator_proxies{phase} from the fleet view at scrape time.
type phaseCollector struct {
	fleet *fleet.View
	desc  *prometheus.Desc
}

func newPhaseCollector(f *fleet.View) *phaseCollector {
	return &phaseCollector{fleet: f, desc: prometheus.NewDesc("proxy_operator_proxies", "Proxies in the fleet view by phase.", []string{"phase"}, nil)}
}

func (c *phaseCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *phaseCollector) Collect(ch chan<- prometheus.Metric) {
	counts := map[v1.ProxyPhase]int{}
	if c.fleet != nil {
		for _, p := range c.fleet.List() {
			counts[p.Phase]++
		}
	}
	for _, ph := range phases {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(counts[ph]), string(ph))
	}
}
