package health

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/proxy-operator/proxy-operator/internal/fleet"
	"github.com/proxy-operator/proxy-operator/internal/verdict"
)

// failures counts failed probe results per proxy, as the loop sees them.
type failures struct {
	mu sync.Mutex
	n  map[string]int
}

func (f *failures) hook(s *Scheduler) {
	f.n = map[string]int{}
	s.onResult = func(key string, _, _ time.Time, r Result) {
		if !r.OK {
			f.mu.Lock()
			f.n[key]++
			f.mu.Unlock()
		}
	}
}

func (f *failures) get(key string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n[key]
}

func TestSchedulerThroughStubProxy(t *testing.T) {
	target := newTLSTarget(t)
	proxy := newStubProxy(t)
	view := fleet.New(time.Now, 0)
	const fail = 2
	// 2 s timeouts (20 test units) for the proxy that must stay healthy until the target goes:
	// with 200 ms, a probe on a busy 2-core machine timed out first and made it Unhealthy for
	// the wrong reason.
	view.Upsert(proxyAt(t, "ns/up", proxy.addr(), target.url(), 20, 20, fail, 1))
	view.Upsert(proxyAt(t, "ns/hole", blackHole(t), target.url(), 3, 3, fail, 1))
	reg := prometheus.NewRegistry()
	var f failures
	s := startScheduler(t, view, NewHTTPProber(trusting(target)), reg, f.hook)

	if got := s.Health("ns/up"); got.State != verdict.Unknown {
		t.Errorf("before any probe: got %+v, want Unknown", got)
	}
	h := waitHealth(t, s, "ns/up", verdict.Healthy)
	if h.Since.IsZero() || h.Reason != "" {
		t.Errorf("healthy verdict: got %+v, want a Since and no reason", h)
	}

	// A proxy that accepts TCP and never answers fails each probe at its timeout.
	h = waitHealth(t, s, "ns/hole", verdict.Unhealthy)
	if h.Reason != KindTimeout {
		t.Errorf("black hole reason: got %q, want %q", h.Reason, KindTimeout)
	}
	if n := f.get("ns/hole"); n < fail {
		t.Errorf("black hole unhealthy after %d failures, want at least %d", n, fail)
	}

	// The target goes away: the proxy cannot open the tunnel and the verdict follows after
	// the threshold.
	before := f.get("ns/up")
	target.srv.Close()
	h = waitHealth(t, s, "ns/up", verdict.Unhealthy)
	if h.Reason != KindUpstream {
		t.Errorf("target down reason: got %q, want %q", h.Reason, KindUpstream)
	}
	if n := f.get("ns/up") - before; n < fail {
		t.Errorf("unhealthy after %d failures, want at least %d", n, fail)
	}

	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	series := map[string]int{}
	for _, mf := range mfs {
		series[mf.GetName()] = len(mf.GetMetric())
	}
	want := map[string]int{
		"proxy_operator_healthcheck_duration_seconds": 2,
		"proxy_operator_healthcheck_failures_total":   2,
		"proxy_operator_healthcheck_lateness_seconds": 1,
		// ns/hole was never Healthy: its probes are not graded (decision 0230), no score yet.
		"proxy_operator_proxy_quality_score": 1,
	}
	if diff := cmp.Diff(want, series); diff != "" {
		t.Errorf("metric series mismatch (-want +got):\n%s", diff)
	}
}

func TestSchedulerStopsProbingWhatLeavesTheView(t *testing.T) {
	target := newTLSTarget(t)
	tests := []struct {
		name   string
		change func(v *fleet.View, p fleet.Proxy)
	}{
		{"removed", func(v *fleet.View, p fleet.Proxy) { v.Remove(p.Key) }},
		{"deleting", func(v *fleet.View, p fleet.Proxy) { p.Deleting = true; v.Upsert(p) }},
		{"lost its IP", func(v *fleet.View, p fleet.Proxy) { p.IP = ""; v.Upsert(p) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			proxy := newStubProxy(t)
			view := fleet.New(time.Now, 0)
			p := proxyAt(t, "ns/p", proxy.addr(), target.url(), 1, 1, 1, 1)
			view.Upsert(p)
			reg := prometheus.NewRegistry()
			s := startScheduler(t, view, NewHTTPProber(trusting(target)), reg)
			waitHealth(t, s, "ns/p", verdict.Healthy)

			tc.change(view, p)
			// Give the loop a moment to see the change, then no further probe may start.
			time.Sleep(3 * testUnit)
			n := proxy.connect.Load()
			time.Sleep(5 * testUnit)
			if got := proxy.connect.Load(); got != n {
				t.Errorf("probes after the proxy left: %d", got-n)
			}
			if got := s.Health("ns/p"); got.State != verdict.Unknown {
				t.Errorf("health after leaving: got %+v, want Unknown", got)
			}
			mfs, err := reg.Gather()
			if err != nil {
				t.Fatal(err)
			}
			for _, mf := range mfs {
				for _, m := range mf.GetMetric() {
					for _, l := range m.GetLabel() {
						if l.GetName() == "proxy" {
							t.Errorf("series %s{proxy=%q} kept after the proxy left", mf.GetName(), l.GetValue())
						}
					}
				}
			}
		})
	}
}

func TestSchedulerStartsFromRecordedHealth(t *testing.T) {
	target := newTLSTarget(t)
	proxy := newStubProxy(t)
	view := fleet.New(time.Now, 0)
	since := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	p := proxyAt(t, "ns/p", proxy.addr(), target.url(), 1, 1, 3, 1)
	p.Recorded = verdict.Health{State: verdict.Healthy, LatencyMillis: 12, Since: since}
	view.Upsert(p)
	s, err := New(Config{View: view, Prober: NewHTTPProber(trusting(target))})
	if err != nil {
		t.Fatal(err)
	}
	// Before the loop runs at all (the first sync after a restart), and after it probes.
	want := verdict.Health{State: verdict.Healthy, LatencyMillis: 12, Since: since}
	if diff := cmp.Diff(want, s.Health("ns/p")); diff != "" {
		t.Errorf("before Run (-want +got):\n%s", diff)
	}
	s.unit = testUnit
	probed := make(chan struct{}, 1)
	s.onResult = func(string, time.Time, time.Time, Result) {
		select {
		case probed <- struct{}{}:
		default:
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = s.Run(ctx) }()
	select {
	case <-probed:
	case <-time.After(10 * time.Second):
		t.Fatal("no probe")
	}
	time.Sleep(testUnit) // let the loop fold the result in
	got := s.Health("ns/p")
	if got.State != verdict.Healthy || !got.Since.Equal(since) {
		t.Errorf("after a probe: got %+v, want Healthy since %v (no transition)", got, since)
	}
}

// gate is a prober that holds every probe until released and tracks concurrency.
type gate struct {
	release          chan struct{}
	running, maxSeen atomic.Int64
}

func (g *gate) Probe(ctx context.Context, _ Target) Result {
	n := g.running.Add(1)
	defer g.running.Add(-1)
	for {
		m := g.maxSeen.Load()
		if n <= m || g.maxSeen.CompareAndSwap(m, n) {
			break
		}
	}
	select {
	case <-g.release:
	case <-ctx.Done():
	}
	return Result{OK: true, Latency: time.Millisecond}
}

func TestSchedulerBoundsConcurrencyAndSpreadsFirstProbes(t *testing.T) {
	view := fleet.New(time.Now, 0)
	const n = 40
	for i := range n {
		view.Upsert(proxyAt(t, "ns/p"+string(rune('a'+i%26))+string(rune('a'+i/26)), "127.0.0.1:9", "https://127.0.0.1:9/", 10, 1, 1, 1))
	}
	g := &gate{release: make(chan struct{})}
	var mu sync.Mutex
	probed := map[string]bool{}
	var offsets []time.Duration // the first-slot offsets the scheduler drew
	s := startScheduler(t, view, g, nil, func(s *Scheduler) {
		real := s.jitter
		s.jitter = func(d time.Duration) time.Duration {
			o := real(d)
			mu.Lock()
			offsets = append(offsets, o)
			mu.Unlock()
			return o
		}
		s.onResult = func(key string, _, _ time.Time, _ Result) {
			mu.Lock()
			probed[key] = true
			mu.Unlock()
		}
	})
	// Hold every probe: the pool fills and no more than the pool may run at once. Waits are
	// for conditions, never for a fixed time, so a loaded machine only makes it slower.
	waitUntil(t, "the pool to fill with held probes", func() bool { return g.running.Load() == int64(s.workers) })
	close(g.release)
	waitUntil(t, "every proxy to be probed once", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(probed) == n
	})
	if got := g.maxSeen.Load(); got > int64(s.workers) {
		t.Errorf("peak concurrent probes %d, want at most %d", got, s.workers)
	}
	// Jitter: each proxy's first slot is drawn once, within its 1 s interval, and the draws
	// spread over it rather than firing together (40 uniform draws all within 300 ms of each
	// other has a probability below 1e-18).
	mu.Lock()
	defer mu.Unlock()
	if len(offsets) != n {
		t.Fatalf("first slots drawn: %d, want one per proxy (%d)", len(offsets), n)
	}
	lo, hi := offsets[0], offsets[0]
	for _, o := range offsets {
		if o < 0 || o >= 10*testUnit {
			t.Errorf("first-slot offset %v outside the %v interval", o, 10*testUnit)
		}
		lo, hi = min(lo, o), max(hi, o)
	}
	if spread := hi - lo; spread < 3*testUnit {
		t.Errorf("first slots spread over %v, want most of the %v interval", spread, 10*testUnit)
	}
}

// waitUntil polls cond until it holds, failing after a generous deadline.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestSchedulerNewAddressStartsAfresh(t *testing.T) {
	target := newTLSTarget(t)
	proxy := newStubProxy(t)
	view := fleet.New(time.Now, 0)
	p := proxyAt(t, "ns/p", proxy.addr(), target.url(), 2, 2, 2, 1)
	view.Upsert(p)
	s := startScheduler(t, view, NewHTTPProber(trusting(target)), nil)
	waitHealth(t, s, "ns/p", verdict.Healthy)

	// A replaced machine: same name, new address. The old verdict says nothing about it.
	moved := proxyAt(t, "ns/p", blackHole(t), target.url(), 2, 2, 2, 1)
	moved.Recorded = verdict.Health{State: verdict.Healthy, Since: time.Now()}
	view.Upsert(moved)
	waitHealth(t, s, "ns/p", verdict.Unknown)
	if h := waitHealth(t, s, "ns/p", verdict.Unhealthy); h.Reason != KindTimeout {
		t.Errorf("reason: got %q, want %q", h.Reason, KindTimeout)
	}
}

// TestOnTransition: every published verdict transition, and only those, reaches OnTransition.
func TestOnTransition(t *testing.T) {
	target := newTLSTarget(t)
	proxy := newStubProxy(t)
	view := fleet.New(time.Now, 0)
	// A 5 s timeout: with 1 s, a first probe slowed past it on a busy machine (-race, load
	// 20) published an Unhealthy before the Healthy this test waits for.
	view.Upsert(proxyAt(t, "ns/up", proxy.addr(), target.url(), 5, 5, 1, 1))
	var mu sync.Mutex
	var seen []verdict.State
	s := startScheduler(t, view, NewHTTPProber(trusting(target)), nil, func(s *Scheduler) {
		s.onTransition = func(key string, h verdict.Health) {
			mu.Lock()
			defer mu.Unlock()
			if key == "ns/up" {
				seen = append(seen, h.State)
			}
		}
	})
	waitHealth(t, s, "ns/up", verdict.Healthy)
	target.srv.Close()
	waitHealth(t, s, "ns/up", verdict.Unhealthy)
	// The callback follows the publication: wait for it rather than race it.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Millisecond) {
		mu.Lock()
		n := len(seen)
		mu.Unlock()
		if n >= 2 || time.Now().After(deadline) {
			break
		}
	}
	mu.Lock()
	defer mu.Unlock()
	// Probes keep running between the transitions; only the two flips count.
	if diff := cmp.Diff([]verdict.State{verdict.Healthy, verdict.Unhealthy}, seen); diff != "" {
		t.Errorf("transitions (-want +got):\n%s", diff)
	}
}
