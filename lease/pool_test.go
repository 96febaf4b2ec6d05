package lease

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestDrainingProxyIsNeverLeased(t *testing.T) {
	ctx := context.Background()
	pool := map[string]string{"pool": "web"}
	f := newFixture(t, spec{name: "a", attrs: pool, max: 5, latency: 10}, spec{name: "b", attrs: pool, max: 5, latency: 50})
	held := f.mustAcquire(t, Request{Selector: pool, Target: "example.com"})
	if held.Proxy.Key != "ns/a" {
		t.Fatalf("first lease on %s, want ns/a", held.Proxy.Key)
	}

	// The pool drains a: its Proxy's next sync records the mark in the fleet view.
	p, _ := f.view.Get("ns/a")
	p.Draining = true
	f.view.Upsert(p)

	for range 6 {
		l, err := f.acquire(t, Request{Selector: pool})
		if err != nil {
			break
		}
		if l.Proxy.Key == "ns/a" {
			t.Fatalf("lease granted on the draining proxy")
		}
	}
	// The lease held before the drain keeps working until it ends.
	if _, err := f.store.Renew(ctx, held.ID, time.Minute); err != nil {
		t.Errorf("Renew on the draining proxy: %v", err)
	}
	if _, err := f.store.Report(ctx, held.ID, Report{Result: ResultOK, Target: "example.com"}); err != nil {
		t.Errorf("Report on the draining proxy: %v", err)
	}
	if got := f.store.ActiveByProxy()["ns/a"]; got != 1 {
		t.Errorf("leases on the draining proxy = %d, want 1", got)
	}
	if err := f.store.Release(ctx, held.ID); err != nil {
		t.Fatal(err)
	}
	if got := f.store.ActiveByProxy()["ns/a"]; got != 0 {
		t.Errorf("leases on the draining proxy after release = %d, want 0", got)
	}
	// b is full now; a draining proxy does not count as capacity.
	_, err := f.acquire(t, Request{Selector: pool})
	var nm *NoMatchError
	if !errors.As(err, &nm) || nm.AtCapacity != 1 || nm.Unhealthy != 1 {
		t.Fatalf("Acquire with b full and a draining: err %v, want 1 at capacity, 1 not leasable", err)
	}
}

func TestDeniedCountsFullPools(t *testing.T) {
	web := map[string]string{"pool": "web", "geo": "eu"}
	api := map[string]string{"pool": "api", "geo": "eu"}
	f := newFixture(t,
		spec{name: "w1", attrs: web, max: 1}, spec{name: "a1", attrs: api, max: 1},
		spec{name: "x", attrs: map[string]string{"geo": "us"}, max: 1, unhealthy: true})
	f.mustAcquire(t, Request{Selector: map[string]string{"pool": "web"}})
	for range 3 {
		if _, err := f.acquire(t, Request{Selector: map[string]string{"pool": "web"}}); !errors.Is(err, ErrNoMatch) {
			t.Fatalf("Acquire on a full pool: %v", err)
		}
	}
	// Refused by an unhealthy proxy, not a full one: no demand for any pool.
	if _, err := f.acquire(t, Request{Selector: map[string]string{"geo": "us"}}); !errors.Is(err, ErrNoMatch) {
		t.Fatalf("Acquire on an unhealthy proxy: %v", err)
	}
	// geo=eu fills api too; then a refusal over both pools counts once for each.
	f.mustAcquire(t, Request{Selector: map[string]string{"geo": "eu"}})
	if _, err := f.acquire(t, Request{Selector: map[string]string{"geo": "eu"}}); !errors.Is(err, ErrNoMatch) {
		t.Fatalf("Acquire with both pools full: %v", err)
	}
	got := map[string]int64{"web": f.store.Denied("ns", "web"), "api": f.store.Denied("ns", "api"), "none": f.store.Denied("ns", ""),
		"web elsewhere": f.store.Denied("other", "web")}
	if diff := cmp.Diff(map[string]int64{"web": 4, "api": 1, "none": 0, "web elsewhere": 0}, got); diff != "" {
		t.Errorf("denied (-want +got):\n%s", diff)
	}
}

func TestCoolingByProxy(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, spec{name: "a", max: 5, latency: 10}, spec{name: "b", max: 5, latency: 20})
	l := f.mustAcquire(t, Request{})
	for _, target := range []string{"one.example", "two.example", "one.example"} {
		if _, err := f.store.Report(ctx, l.ID, Report{Result: ResultBanned, Target: target}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.store.Report(ctx, l.ID, Report{Result: ResultOK, Target: "three.example"}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]int{l.Proxy.Key: 2}, f.store.CoolingByProxy()); diff != "" {
		t.Errorf("cooling (-want +got):\n%s", diff)
	}
	f.clock.Advance(DefaultMaxCooldown)
	if got := f.store.CoolingByProxy(); len(got) != 0 {
		t.Errorf("cooling after every cooldown ended = %v, want none", got)
	}
}
