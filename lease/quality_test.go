package lease

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
	"github.com/proxy-operator/proxy-operator/internal/fleet"
	"github.com/proxy-operator/proxy-operator/internal/verdict"
)

// TestBandBeforeLoadAndLatency: with PreferBand, a Good proxy is leased before a Fair one
// even when the Fair one is idle and faster; without it, bands are ignored.
func TestBandBeforeLoadAndLatency(t *testing.T) {
	for _, tc := range []struct {
		prefer bool
		want   []string
	}{
		{prefer: true, want: []string{"ns/good", "ns/good", "ns/fair", "ns/poor"}},
		{prefer: false, want: []string{"ns/poor", "ns/fair", "ns/good", "ns/poor"}},
	} {
		f := newFixture(t, spec{name: "good", max: 2, latency: 30}, spec{name: "fair", max: 1, latency: 20}, spec{name: "poor", max: 2, latency: 10})
		f.store = NewMemory(Config{Fleet: f.view, Health: f.health, Now: f.clock.Now, PreferBand: tc.prefer})
		for key, b := range map[string]v1.QualityBand{"ns/good": v1.BandGood, "ns/fair": v1.BandFair, "ns/poor": v1.BandPoor} {
			h := f.health.Health(key)
			h.Band = b
			f.health.Set(key, h)
		}
		var got []string
		for range tc.want {
			got = append(got, f.mustAcquire(t, Request{}).Proxy.Key)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("PreferBand %v: leases on %v, want %v", tc.prefer, got, tc.want)
		}
	}
}

// TestBandChangeFollowsRefresh: a proxy demoted by its score loses its place at the next
// refresh.
func TestBandChangeFollowsRefresh(t *testing.T) {
	f := newFixture(t, spec{name: "a", max: 5, latency: 10}, spec{name: "b", max: 5, latency: 20})
	f.store = NewMemory(Config{Fleet: f.view, Health: f.health, Now: f.clock.Now, PreferBand: true})
	for _, k := range []string{"ns/a", "ns/b"} {
		h := f.health.Health(k)
		h.Band = v1.BandGood
		f.health.Set(k, h)
	}
	if got := f.mustAcquire(t, Request{Target: "x"}).Proxy.Key; got != "ns/a" {
		t.Fatalf("lease on %s, want ns/a (faster)", got)
	}
	h := f.health.Health("ns/a")
	h.Band = v1.BandPoor
	f.health.Set("ns/a", h)
	f.store.RefreshHealth()
	if got := f.mustAcquire(t, Request{Target: "y"}).Proxy.Key; got != "ns/b" {
		t.Errorf("lease on %s, want ns/b (ns/a demoted to Poor)", got)
	}
}

// TestExitMismatchIsNotLeased: an exit that fails an excluding verification keeps the proxy
// out; onMismatch: Report leases it anyway.
func TestExitMismatchIsNotLeased(t *testing.T) {
	for _, tc := range []struct {
		verify *v1.VerifySpec
		leased bool
	}{
		{verify: nil, leased: false},
		{verify: &v1.VerifySpec{OnMismatch: v1.MismatchExclude}, leased: false},
		{verify: &v1.VerifySpec{OnMismatch: v1.MismatchReport}, leased: true},
	} {
		f := newFixture(t)
		p := fleet.Proxy{Key: "ns/ext", UID: "ext", Mode: v1.ModeExternal, IP: "10.0.0.1", Port: 3128, MaxLeases: 5, Verify: tc.verify}
		f.view.Upsert(p)
		f.health.Set(p.Key, verdict.Health{State: verdict.Healthy,
			Exit: verdict.Exit{IP: "198.51.100.7", Mismatch: "exit 198.51.100.7 is outside expectedExit 203.0.113.0/24"}})
		_, err := f.acquire(t, Request{})
		if leased := err == nil; leased != tc.leased {
			t.Errorf("verify %+v: leased %v (%v), want %v", tc.verify, leased, err, tc.leased)
		}
		var nm *NoMatchError
		if !tc.leased && (!errors.As(err, &nm) || nm.Unhealthy != 1) {
			t.Errorf("verify %+v: err %v, want a NoMatchError counting it unhealthy", tc.verify, err)
		}
	}
}

// TestWithOutcomes: every accepted report reaches the observer with its proxy; a refused one
// does not.
func TestWithOutcomes(t *testing.T) {
	f := newFixture(t, spec{name: "a", max: 5})
	type seen struct {
		proxy string
		r     Result
	}
	var got []seen
	s := WithOutcomes(f.store, func(proxy string, r Result) { got = append(got, seen{proxy, r}) })
	l, err := s.Acquire(context.Background(), Request{TTL: time.Minute, Target: "t"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, r := range []Result{ResultOK, ResultBanned, ResultRateLimited} {
		if _, err := s.Report(ctx, l.ID, Report{Result: r, Target: "t"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Report(ctx, "no-such-lease", Report{Result: ResultBanned, Target: "t"}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("report on an unknown lease: %v", err)
	}
	want := []seen{{"ns/a", ResultOK}, {"ns/a", ResultBanned}, {"ns/a", ResultRateLimited}}
	if len(got) != len(want) {
		t.Fatalf("observed %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("observed %v, want %v", got, want)
		}
	}
}

// TestWithOutcomesKeepsCooldownCount: the discovery API's cooldown gauge still finds the
// memory store's count through the wrapper.
func TestWithOutcomesKeepsCooldownCount(t *testing.T) {
	f := newFixture(t, spec{name: "a", max: 5})
	s := WithOutcomes(f.store, func(string, Result) {})
	cc, ok := s.(interface{ CooldownCount() int })
	if !ok {
		t.Fatal("WithOutcomes(Memory) lost CooldownCount")
	}
	l, err := s.Acquire(context.Background(), Request{TTL: time.Minute, Target: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Report(context.Background(), l.ID, Report{Result: ResultBanned, Target: "t"}); err != nil {
		t.Fatal(err)
	}
	if n := cc.CooldownCount(); n != 1 {
		t.Errorf("CooldownCount = %d, want 1", n)
	}
}
