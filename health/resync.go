package health

import (
	"math"
	"time"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
)

// DefaultResyncQPS is the share of Metacontroller's client budget (about 5 requests a second
// for the whole controller, --client-go-qps) that steady-state health resyncs may spend: half,
// leaving the rest for status writes, spec changes and provisioning polls.
const DefaultResyncQPS = 2.5

// ResyncPolicy picks the resyncAfterSeconds of a steady proxy: the sync that carries a
// health transition into status. The prober cannot push a transition to Metacontroller, so
// the resync delay is the whole latency from transition to status.
type ResyncPolicy struct {
	// QPS is the resync rate the whole fleet may cost (0: DefaultResyncQPS).
	QPS float64
}

// After returns one probe interval while the fleet's resyncs fit the budget, and beyond
// that fleetSize/QPS, so a large fleet costs QPS reads a second at most and its
// transitions take longer to reach status. The answer is whole seconds: the same inputs
// give the same bytes.
func (p ResyncPolicy) After(fleetSize int, hc v1.HealthCheckSpec) time.Duration {
	qps := p.QPS
	if qps <= 0 {
		qps = DefaultResyncQPS
	}
	interval := float64(max(hc.IntervalSeconds, 1))
	budget := float64(max(fleetSize, 1)) / qps
	return time.Duration(math.Ceil(max(interval, budget))) * time.Second
}
