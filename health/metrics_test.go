package health

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/proxy-operator/proxy-operator/internal/fleet"
	"github.com/proxy-operator/proxy-operator/internal/verdict"
)

func gather(t *testing.T, reg *prometheus.Registry, name string) []*dto.Metric {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()
		}
	}
	return nil
}

// TestFailureCounterBornAtZero: a proxy the loop knows has a failure series at 0 before its
// first failure, so rate() and increase() see that failure.
func TestFailureCounterBornAtZero(t *testing.T) {
	target := newTLSTarget(t)
	proxy := newStubProxy(t)
	view := fleet.New(time.Now, 0)
	view.Upsert(proxyAt(t, "ns/up", proxy.addr(), target.url(), 1, 1, 1, 1))
	reg := prometheus.NewRegistry()
	s := startScheduler(t, view, NewHTTPProber(trusting(target)), reg)
	waitHealth(t, s, "ns/up", verdict.Healthy)
	ms := gather(t, reg, "proxy_operator_healthcheck_failures_total")
	if len(ms) != 1 || ms[0].GetLabel()[0].GetValue() != "ns/up" || ms[0].GetCounter().GetValue() != 0 {
		t.Fatalf("failure series of a healthy proxy: %v, want one at 0 for ns/up", ms)
	}
}

// TestFleetDurationOnly: with the flag, the probe histogram has no proxy label (one series
// for the fleet) while the failure counter keeps it.
func TestFleetDurationOnly(t *testing.T) {
	target := newTLSTarget(t)
	view := fleet.New(time.Now, 0)
	for _, k := range []string{"ns/a", "ns/b"} {
		view.Upsert(proxyAt(t, k, newStubProxy(t).addr(), target.url(), 1, 1, 1, 1))
	}
	reg := prometheus.NewRegistry()
	m, err := newMetrics(reg, false)
	if err != nil {
		t.Fatal(err)
	}
	s := startScheduler(t, view, NewHTTPProber(trusting(target)), nil, func(s *Scheduler) { s.metrics = m })
	waitHealth(t, s, "ns/a", verdict.Healthy)
	waitHealth(t, s, "ns/b", verdict.Healthy)
	d := gather(t, reg, "proxy_operator_healthcheck_duration_seconds")
	if len(d) != 1 || len(d[0].GetLabel()) != 0 || d[0].GetHistogram().GetSampleCount() < 2 {
		t.Errorf("duration series %v, want one unlabelled histogram holding both proxies' probes", d)
	}
	if f := gather(t, reg, "proxy_operator_healthcheck_failures_total"); len(f) != 2 {
		t.Errorf("failure series %d, want one per proxy", len(f))
	}
	view.Remove("ns/a")
	deadline := time.Now().Add(15 * time.Second)
	for len(gather(t, reg, "proxy_operator_healthcheck_failures_total")) != 1 {
		if time.Now().After(deadline) {
			t.Fatal("ns/a's failure series kept after it left the view")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
