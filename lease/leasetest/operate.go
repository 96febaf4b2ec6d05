package leasetest

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/proxy-operator/proxy-operator/lease"
)

// testHoldings: the store lists its live leases with their holder, target and session, cut to
// the namespaces asked, bounded by the limit with the total beside; released and expired
// leases are gone from the list.
func testHoldings(t *testing.T, f Factory) {
	ctx := context.Background()
	fx := newFixture(t, f, spec{ns: "a", name: "p1", max: 5, latency: 10}, spec{ns: "b", name: "p2", max: 5, latency: 20})
	hl, ok := fx.h.Store.(lease.HoldingsLister)
	if !ok {
		t.Fatalf("%T does not list its leases (lease.HoldingsLister)", fx.h.Store)
	}
	la := fx.mustAcquire(t, lease.Request{Namespaces: []string{"a"}, Holder: "team-a", Target: "shop.example", SessionKey: "s1", TTL: time.Minute})
	lb := fx.mustAcquire(t, lease.Request{Namespaces: []string{"b"}, Holder: "team-b", TTL: 2 * time.Minute})
	short := fx.mustAcquire(t, lease.Request{Namespaces: []string{"b"}, TTL: time.Second})
	now := fx.clock.Now()
	got, total, err := hl.Holdings(ctx, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := []lease.Holding{
		{ID: la.ID, Proxy: "a/p1", Holder: "team-a", Target: "shop.example", Session: "s1", ExpiresAt: now.Add(time.Minute)},
		{ID: short.ID, Proxy: "b/p2", ExpiresAt: now.Add(time.Second)},
		{ID: lb.ID, Proxy: "b/p2", Holder: "team-b", ExpiresAt: now.Add(2 * time.Minute)},
	}
	if diff := cmp.Diff(want, got); diff != "" || total != 3 {
		t.Errorf("Holdings (total %d, want 3) (-want +got):\n%s", total, diff)
	}
	if got, total, err := hl.Holdings(ctx, []string{"b"}, 1); err != nil || total != 2 || len(got) != 1 || got[0].Proxy != "b/p2" {
		t.Errorf("Holdings of b, limit 1: %+v, total %d, %v; want one lease of b/p2 of 2", got, total, err)
	}
	if got, total, err := hl.Holdings(ctx, []string{}, 0); err != nil || total != 0 || len(got) != 0 {
		t.Errorf("Holdings of no namespace: %+v, total %d, %v; want none", got, total, err)
	}
	if err := fx.h.Store.Release(ctx, la.ID); err != nil {
		t.Fatal(err)
	}
	fx.clock.Advance(2 * time.Second)
	got, total, err = hl.Holdings(ctx, nil, 0)
	if err != nil || total != 1 || len(got) != 1 || got[0].ID != lb.ID {
		t.Errorf("Holdings after a release and an expiry: %+v, total %d, %v; want only %s", got, total, err, lb.ID)
	}
}

// testClearCooldown: clearing a proxy's cooldown for a target makes the proxy leasable for it
// at once and forgets its strikes; other targets' cooldowns stay; clearing one that is not
// there is no error and says so.
func testClearCooldown(t *testing.T, f Factory) {
	ctx := context.Background()
	fx := newFixture(t, f, spec{name: "a", max: 5})
	cl, ok := fx.h.Store.(lease.CooldownClearer)
	if !ok {
		t.Fatalf("%T cannot clear a cooldown (lease.CooldownClearer)", fx.h.Store)
	}
	l := fx.mustAcquire(t, lease.Request{})
	for _, target := range []string{"x.example", "y.example"} {
		if _, err := fx.h.Store.Report(ctx, l.ID, lease.Report{Result: lease.ResultBanned, Target: target}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := fx.acquire(t, lease.Request{Target: "x.example"}); err == nil {
		t.Fatal("a banned target was leased before the clear")
	}
	cleared, err := cl.ClearCooldown(ctx, "ns/a", "x.example")
	if err != nil || !cleared {
		t.Fatalf("ClearCooldown: %v, %v; want true", cleared, err)
	}
	if _, err := fx.acquire(t, lease.Request{Target: "x.example"}); err != nil {
		t.Errorf("after the clear, a lease for the target: %v", err)
	}
	list, err := fx.h.Store.Cooling(ctx, lease.CoolingQuery{})
	if err != nil || list.Total != 1 || len(list.Cooldowns) != 1 || list.Cooldowns[0].Target != "y.example" {
		t.Errorf("Cooling after the clear: %+v, %v; want only y.example", list, err)
	}
	// The strikes went with it: the next ban is a first strike again.
	c, err := fx.h.Store.Report(ctx, l.ID, lease.Report{Result: lease.ResultBanned, Target: "x.example"})
	if err != nil || c.Strikes != 1 {
		t.Errorf("a ban after the clear: %+v, %v; want strike 1", c, err)
	}
	if cleared, err := cl.ClearCooldown(ctx, "ns/a", "never.example"); err != nil || cleared {
		t.Errorf("ClearCooldown of nothing: %v, %v; want false, nil", cleared, err)
	}
}
