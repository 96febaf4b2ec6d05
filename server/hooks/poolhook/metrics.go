package poolhook

import (
	"github.com/prometheus/client_golang/prometheus"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
	"github.com/proxy-operator/proxy-operator/internal/pool"
)

// Metrics are the per-pool metrics. The pool label is namespace/name: pools are few.
type Metrics struct {
	members     *prometheus.GaugeVec
	desired     *prometheus.GaugeVec
	utilization *prometheus.GaugeVec
	rotations   *prometheus.CounterVec
	scales      *prometheus.CounterVec
}

// Member states of proxy_operator_pool_members.
var memberStates = []string{"healthy", "unhealthy", "draining"}

// NewMetrics registers the pool metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		members: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "proxy_operator_pool_members",
			Help: "Members of a ProxyPool by state (healthy and unhealthy take part; draining ones are on their way out).",
		}, []string{"pool", "state"}),
		desired: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "proxy_operator_pool_desired_members",
			Help: "The size a ProxyPool aims for (spec.replicas or the autoscaler's choice).",
		}, []string{"pool"}),
		utilization: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "proxy_operator_pool_lease_utilization_ratio",
			Help: "Active leases over the lease capacity of a ProxyPool's healthy members.",
		}, []string{"pool"}),
		rotations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "proxy_operator_pool_rotations_total",
			Help: "Members a ProxyPool decided to drain, by reason (Template, MaxAge, Banned, Failed, ScaleDown).",
		}, []string{"pool", "reason"}),
		scales: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "proxy_operator_pool_scale_events_total",
			Help: "Changes of a ProxyPool's desired size, by direction (up, down).",
		}, []string{"pool", "direction"}),
	}
	reg.MustRegister(m.members, m.desired, m.utilization, m.rotations, m.scales)
	return m
}

func (m *Metrics) record(p *v1.ProxyPool, d pool.Decision) {
	key := p.Key()
	if d.Finalized {
		for _, s := range memberStates {
			m.members.DeleteLabelValues(key, s)
		}
		m.desired.DeleteLabelValues(key)
		m.utilization.DeleteLabelValues(key)
		m.rotations.DeletePartialMatch(prometheus.Labels{"pool": key})
		m.scales.DeletePartialMatch(prometheus.Labels{"pool": key})
		return
	}
	st := d.Status
	m.members.WithLabelValues(key, "healthy").Set(float64(st.HealthyReplicas))
	m.members.WithLabelValues(key, "unhealthy").Set(float64(st.Replicas - st.HealthyReplicas))
	m.members.WithLabelValues(key, "draining").Set(float64(st.DrainingReplicas))
	m.desired.WithLabelValues(key).Set(float64(st.DesiredReplicas))
	util := 0.0
	if st.LeaseCapacity > 0 {
		util = float64(st.ActiveLeases) / float64(st.LeaseCapacity)
	}
	m.utilization.WithLabelValues(key).Set(util)
	for _, c := range d.Changes {
		if c.Kind == pool.ChangeDrain {
			m.rotations.WithLabelValues(key, c.Reason).Inc()
		}
	}
	if s := d.Scale; s != nil {
		dir := "up"
		if s.To < s.From {
			dir = "down"
		}
		m.scales.WithLabelValues(key, dir).Inc()
	}
}
