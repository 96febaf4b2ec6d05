package leasetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
	"github.com/proxy-operator/proxy-operator/internal/fleet"
	"github.com/proxy-operator/proxy-operator/lease"
)

// testTenantQuotas is issue 21 (item 4, point 5): team-a filled the store-wide cooldown and
// session tables; team-b's banned report was then refused and its new sessions were not
// sticky. Each namespace has its share; a banned report is always recorded, in place of the
// tenant's own oldest cooldown.
func testTenantQuotas(t *testing.T, f Factory) {
	ctx := context.Background()
	fx := newFixtureWith(t, f, Env{MaxCooldowns: 6, MaxCooldownsPerNamespace: 4, MaxSessions: 5, MaxSessionsPerNamespace: 3},
		spec{ns: "team-a", name: "a1", max: 100, latency: 10}, spec{ns: "team-a", name: "a2", max: 100, latency: 10},
		spec{ns: "team-b", name: "b1", max: 100, latency: 10}, spec{ns: "team-b", name: "b2", max: 100, latency: 10})
	a := fx.mustAcquire(t, lease.Request{Namespaces: []string{"team-a"}})
	b := fx.mustAcquire(t, lease.Request{Namespaces: []string{"team-b"}})

	// team-a floods rate_limited reports: its share is kept, the rest refused with the
	// namespace's bound named.
	refused := 0
	for i := range 10 {
		_, err := fx.h.Store.Report(ctx, a.ID, lease.Report{Result: lease.ResultRateLimited, Target: fmt.Sprintf("t%d.example", i)})
		var tm *lease.TooManyCooldownsError
		switch {
		case errors.As(err, &tm) && tm.Scope == "namespace" && tm.Limit == 4:
			refused++
		case err != nil:
			t.Fatalf("team-a report %d: %v", i, err)
		}
	}
	if refused != 6 {
		t.Errorf("team-a: %d reports refused, want 6 (its share is 4)", refused)
	}
	// team-b is refused nothing, rate_limited or banned, and its ban holds.
	for _, r := range []lease.Result{lease.ResultRateLimited, lease.ResultBanned} {
		if _, err := fx.h.Store.Report(ctx, b.ID, lease.Report{Result: r, Target: "b-" + string(r) + ".example"}); err != nil {
			t.Errorf("team-b %s report beside team-a at its share: %v", r, err)
		}
	}
	// team-a's ban is recorded too, in place of its own oldest cooldown (t0).
	c, err := fx.h.Store.Report(ctx, a.ID, lease.Report{Result: lease.ResultBanned, Target: "banned.example"})
	if err != nil || c.Until.IsZero() {
		t.Fatalf("team-a banned report at its share: %+v %v, want it recorded", c, err)
	}
	other := "team-a/a1"
	if a.Proxy.Key == other {
		other = "team-a/a2"
	}
	for _, tc := range []struct {
		target string
		want   string // a's proxy unless it cools for the target (the other one is avoided)
	}{{"banned.example", other}, {"t1.example", other}, {"t0.example", a.Proxy.Key}} {
		l, err := fx.acquire(t, lease.Request{Namespaces: []string{"team-a"}, Target: tc.target, Avoid: []string{other}})
		if err != nil {
			t.Fatalf("team-a lease for %s: %v", tc.target, err)
		}
		if l.Proxy.Key != tc.want {
			t.Errorf("team-a lease for %s on %s, want %s (t0 was evicted for the ban, t1 and the ban kept)", tc.target, l.Proxy.Key, tc.want)
		}
		if err := fx.h.Store.Release(ctx, l.ID); err != nil {
			t.Fatal(err)
		}
	}
	// team-b's ban is held: its lease for the banned target avoids b's proxy.
	if l := fx.mustAcquire(t, lease.Request{Namespaces: []string{"team-b"}, Target: "b-banned.example"}); l.Proxy.Key == b.Proxy.Key {
		t.Errorf("team-b's banned proxy %s leased for the banned target", l.Proxy.Key)
	}

	// Sessions: team-a mints keys beyond its share; team-b's new key is still bound.
	for i := range 6 {
		fx.mustAcquire(t, lease.Request{Namespaces: []string{"team-a"}, SessionKey: fmt.Sprintf("a-%d", i)})
	}
	if sticky(t, fx, "team-a", "a-5") {
		t.Errorf("team-a's key beyond its share of 3 was bound")
	}
	if !sticky(t, fx, "team-a", "a-0") {
		t.Errorf("team-a's first key (within its share) is not sticky")
	}
	if !sticky(t, fx, "team-b", "b-1") {
		t.Errorf("team-b's new session key was not bound beside team-a at its share")
	}
}

// sticky leases twice with key in ns and reports whether both landed on one proxy (the
// namespace has two proxies of equal latency, so an unbound key alternates by load).
func sticky(t *testing.T, fx *fixture, ns, key string) bool {
	t.Helper()
	r := lease.Request{Namespaces: []string{ns}, SessionKey: key}
	first := fx.mustAcquire(t, r)
	return fx.mustAcquire(t, r).Proxy.Key == first.Proxy.Key
}

// testLeasesPerHolder: one holder (a discovery token) takes at most its share of live leases
// in a namespace; another holder and the first one in another namespace still lease there.
func testLeasesPerHolder(t *testing.T, f Factory) {
	ctx := context.Background()
	fx := newFixtureWith(t, f, Env{MaxLeasesPerHolder: 2},
		spec{ns: "shared", name: "p1", max: 10, latency: 10}, spec{ns: "shared", name: "p2", max: 10, latency: 20},
		spec{ns: "own", name: "p1", max: 10, latency: 30})
	greedy := lease.Request{Holder: "greedy", Namespaces: []string{"shared"}}
	l1 := fx.mustAcquire(t, greedy)
	fx.mustAcquire(t, greedy)
	_, err := fx.acquire(t, greedy)
	var tm *lease.TooManyLeasesError
	if !errors.As(err, &tm) || tm.Holder != "greedy" || tm.Limit != 2 || !tm.FreeAt.Equal(l1.ExpiresAt) {
		t.Fatalf("third lease of greedy in shared: %v, want its share of 2 named, free at %s", err, l1.ExpiresAt)
	}
	if !errors.Is(err, lease.ErrTooManyLeases) {
		t.Errorf("%v does not wrap ErrTooManyLeases", err)
	}
	// Others still lease in shared; greedy still leases where it holds less.
	fx.mustAcquire(t, lease.Request{Holder: "polite", Namespaces: []string{"shared"}})
	fx.mustAcquire(t, lease.Request{Namespaces: []string{"shared"}}) // no holder: never bounded
	if got := fx.mustAcquire(t, lease.Request{Holder: "greedy"}).Proxy.Key; got != "own/p1" {
		t.Errorf("greedy's lease in any namespace on %s, want own/p1 (it is at its share in shared)", got)
	}
	// A release gives the slot back; an expiry too.
	if err := fx.h.Store.Release(ctx, l1.ID); err != nil {
		t.Fatal(err)
	}
	l3 := fx.mustAcquire(t, greedy)
	if _, err := fx.acquire(t, greedy); !errors.Is(err, lease.ErrTooManyLeases) {
		t.Fatalf("greedy at its share again: %v", err)
	}
	if _, err := fx.h.Store.Renew(ctx, l3.ID, 0); err != nil {
		t.Fatal(err)
	}
	fx.clock.Advance(2 * 60e9)
	fx.h.Reap(t)
	fx.mustAcquire(t, greedy)
}

// testHolderShares: a request's HolderShares lower the holder's bound in one namespace (its
// fair share there), never raise it, and leave other namespaces and holders alone.
func testHolderShares(t *testing.T, f Factory) {
	fx := newFixtureWith(t, f, Env{MaxLeasesPerHolder: 3},
		spec{ns: "small", name: "p1", max: 2, latency: 10}, spec{ns: "small", name: "p2", max: 2, latency: 20},
		spec{ns: "big", name: "p1", max: 10, latency: 30})
	wide := lease.Request{Holder: "wide", Namespaces: []string{"small", "big"}, HolderShares: map[string]int{"small": 1, "big": 50}}
	if got := fx.mustAcquire(t, wide).Proxy.Key; got[:6] != "small/" {
		t.Fatalf("wide's first lease on %s, want one in small (the faster proxies)", got)
	}
	// Its share of small (1) is taken: the next leases go to big, up to the store's bound (3),
	// which a share above it does not raise.
	for i := range 3 {
		if got := fx.mustAcquire(t, wide).Proxy.Key; got != "big/p1" {
			t.Fatalf("wide's lease %d on %s, want big/p1", i+2, got)
		}
	}
	_, err := fx.acquire(t, wide)
	var tm *lease.TooManyLeasesError
	if !errors.As(err, &tm) || tm.Limit != 1 {
		t.Fatalf("wide at its shares everywhere: %v, want TooManyLeasesError naming the share 1", err)
	}
	// small's own tenant still has the rest of small.
	own := lease.Request{Holder: "own", Namespaces: []string{"small"}}
	for i := range 3 {
		if got := fx.mustAcquire(t, own).Proxy.Key; got[:6] != "small/" {
			t.Fatalf("own's lease %d on %s, want small", i+1, got)
		}
	}
}

// testBandOrder: with PreferBand a Good proxy is leased before a Fair one even when the Fair
// one is idle and faster, and an ungraded one last; without it, bands are ignored.
func testBandOrder(t *testing.T, f Factory) {
	for _, tc := range []struct {
		prefer bool
		want   []string
	}{
		{prefer: true, want: []string{"ns/good", "ns/good", "ns/fair", "ns/poor", "ns/ungraded"}},
		{prefer: false, want: []string{"ns/ungraded", "ns/poor", "ns/fair", "ns/good", "ns/ungraded"}},
	} {
		fx := newFixtureWith(t, f, Env{PreferBand: tc.prefer},
			spec{name: "good", max: 2, latency: 40}, spec{name: "fair", max: 1, latency: 30},
			spec{name: "poor", max: 1, latency: 20}, spec{name: "ungraded", max: 2, latency: 10})
		for key, b := range map[string]v1.QualityBand{"ns/good": v1.BandGood, "ns/fair": v1.BandFair, "ns/poor": v1.BandPoor} {
			h := fx.health.Health(key)
			h.Band = b
			fx.health.Set(key, h)
		}
		fx.h.Sync(t)
		var got []string
		for range tc.want {
			got = append(got, fx.mustAcquire(t, lease.Request{}).Proxy.Key)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("PreferBand %v: leases on %v, want %v", tc.prefer, got, tc.want)
		}
	}
}

// testAdmit: a record the egress policy denies is never handed out, whatever its health; it
// is counted with the proxies that cannot be leased.
func testAdmit(t *testing.T, f Factory) {
	deny := func(p fleet.Proxy) error {
		if p.IP == "169.254.169.254" {
			return errors.New("a link-local metadata address")
		}
		return nil
	}
	fx := newFixtureWith(t, f, Env{Admit: deny}, spec{name: "good", max: 10, latency: 50}, spec{name: "meta", max: 10, latency: 5})
	fx.view.Upsert(fleet.Proxy{Key: "ns/meta", UID: "meta", IP: "169.254.169.254", Port: 80, MaxLeases: 10})
	fx.h.Sync(t)
	for range 3 {
		if got := fx.mustAcquire(t, lease.Request{}).Proxy.Key; got != "ns/good" {
			t.Fatalf("lease on %s, want ns/good (ns/meta is denied)", got)
		}
	}
	fx.view.Remove("ns/good")
	fx.h.Sync(t)
	_, err := fx.acquire(t, lease.Request{})
	var nm *lease.NoMatchError
	if !errors.As(err, &nm) || nm.Matching != 1 || nm.Unhealthy != 1 {
		t.Errorf("lease with only the denied proxy: %v, want no match, 1 matching and unhealthy", err)
	}
}
