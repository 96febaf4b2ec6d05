package console

import (
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestTraffic: each point is how much a counter grew since the last sample, per series
// (the bytes counter split by pool); the ring keeps Points; a counter that restarted counts
// from zero; the chart is drawn within its box.
func TestTraffic(t *testing.T) {
	reg := prometheus.NewRegistry()
	leases := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "proxy_operator_lease_requests_total", Help: "h"}, []string{"outcome"})
	bytes := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "proxy_operator_gateway_bytes_total", Help: "h"}, []string{"direction", "pool", "proxy"})
	reg.MustRegister(leases, bytes)
	tr := &Traffic{Gatherer: reg, Points: 3}
	tr.Sample() // primes
	for i, n := range []float64{2, 0, 5, 1} {
		leases.WithLabelValues("granted").Add(n)
		bytes.WithLabelValues("in", "web", "").Add(100 * float64(i+1))
		bytes.WithLabelValues("out", "web", "").Add(1)
		tr.Sample()
	}
	got := map[string][]float64{}
	tr.mu.Lock()
	for k, r := range tr.series {
		got[k] = r.vals
	}
	tr.mu.Unlock()
	if g := got["Leases granted"]; len(g) != 3 || g[0] != 0 || g[1] != 5 || g[2] != 1 {
		t.Errorf("leases granted points %v, want the last 3 increments [0 5 1]", g)
	}
	if g := got["Gateway bytes, pool web"]; len(g) != 3 || g[2] != 401 {
		t.Errorf("bytes of pool web %v, want the last 3 with 401 last (in and out summed)", g)
	}
	charts := tr.charts()
	if len(charts) != 2 {
		t.Fatalf("%d charts, want 2", len(charts))
	}
	for _, c := range charts {
		for _, pt := range strings.Fields(c.Points) {
			var x, y float64
			if _, err := fmt.Sscanf(pt, "%f,%f", &x, &y); err != nil || x < 0 || x > chartW || y < 0 || y > chartH {
				t.Errorf("%s: point %q outside the %dx%d box", c.Title, pt, chartW, chartH)
			}
		}
	}
}
