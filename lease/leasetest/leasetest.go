// Package leasetest owns the conformance suite every lease.Store passes: the same tests run
// against the in-memory store and against the Redis store on a real redis-server. It knows
// nothing of how a store is built; a Factory does that.
package leasetest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
	"github.com/proxy-operator/proxy-operator/internal/clocktest"
	"github.com/proxy-operator/proxy-operator/internal/fleet"
	"github.com/proxy-operator/proxy-operator/internal/healthtest"
	"github.com/proxy-operator/proxy-operator/internal/verdict"
	"github.com/proxy-operator/proxy-operator/lease"
)

// Harness is one store under test.
type Harness struct {
	Store lease.Store
	// Sync makes the store see the fleet view and the health verdicts as they are now (the
	// in-memory store re-reads them, the Redis store has them published).
	Sync func(t *testing.T)
	// Reap runs what the store's Run does on its own schedule.
	Reap func(t *testing.T)
}

// Env is what a Factory builds the store on: the fleet, the verdicts, the clock and the
// settings a test needs.
type Env struct {
	Fleet       *fleet.View
	Health      lease.Health
	Now         func() time.Time
	MaxSessions int // 0: the default
	// The tenant bounds (0: the defaults) and the per-holder share (0: none), as in
	// lease.Config.
	MaxCooldowns, MaxCooldownsPerNamespace, MaxSessionsPerNamespace, MaxLeasesPerHolder int
	// PreferBand ranks by quality band before load and latency.
	PreferBand bool
	// Admit is the egress policy asked about every record before it is leased.
	Admit func(fleet.Proxy) error
}

// Factory builds a fresh, empty store on env.
type Factory func(t *testing.T, env Env) Harness

// Run runs the whole suite against stores made by f.
func Run(t *testing.T, f Factory) {
	for _, tc := range []struct {
		name string
		fn   func(*testing.T, Factory)
	}{
		{"AcquirePicks", testAcquirePicks},
		{"CapacityIsNeverExceeded", testCapacity},
		{"ExpiryAndRenew", testExpiryAndRenew},
		{"RenewKeepsTTL", testRenewKeepsTTL},
		{"ReleaseIsIdempotent", testRelease},
		{"CooldownPerTarget", testCooldownPerTarget},
		{"CooldownLength", testCooldownLength},
		{"CooldownForgotten", testCooldownForgotten},
		{"ReportRejects", testReportRejects},
		{"StickySession", testStickySession},
		{"StickySessionIdleExpiry", testStickyIdle},
		{"SessionTableIsBounded", testSessionBound},
		{"ProxyLeavingDropsLeases", testProxyLeaving},
		{"FleetChangesReachTheIndex", testFleetChanges},
		{"RecoveredProxyReturns", testRecovered},
		{"LatencyOrderFollowsHealth", testLatencyOrder},
		{"ManyBuckets", testManyBuckets},
		{"LeaseCarriesTheRecord", testLeaseRecord},
		{"OneHolderPerProxyAndTarget", testOneHolder},
		{"NoMatchSaysWhen", testNoMatchSaysWhen},
		{"AvoidRotates", testAvoid},
		{"NamespacesLimitTheLease", testNamespaces},
		{"PoolLoad", testPoolLoad},
		{"Holdings", testHoldings},
		{"ClearCooldown", testClearCooldown},
		{"CoolingLists", testCooling},
		{"TenantQuotas", testTenantQuotas},
		{"LeasesPerHolder", testLeasesPerHolder},
		{"HolderShares", testHolderShares},
		{"BandBeforeLoadAndLatency", testBandOrder},
		{"AdmitDeniesRecords", testAdmit},
		{"VendorOnlyWhenAsked", testVendorOnlyWhenAsked},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, f) })
	}
}

// fixture is a store with its fleet.
type fixture struct {
	h      Harness
	view   *fleet.View
	health *healthtest.Map
	clock  *clocktest.Clock
}

// Spec describes one proxy: healthy with the given latency unless Unhealthy.
type spec struct {
	ns        string // default "ns"
	name      string
	attrs     map[string]string
	max       int32
	latency   int64
	unhealthy bool
	deleting  bool
	noIP      bool
}

func newFixture(t *testing.T, f Factory, specs ...spec) *fixture {
	return newFixtureEnv(t, f, 0, specs...)
}

func newFixtureEnv(t *testing.T, f Factory, maxSessions int, specs ...spec) *fixture {
	t.Helper()
	return newFixtureWith(t, f, Env{MaxSessions: maxSessions}, specs...)
}

// newFixtureWith builds the store on env with the fixture's fleet, verdicts and clock.
func newFixtureWith(t *testing.T, f Factory, env Env, specs ...spec) *fixture {
	t.Helper()
	clock := clocktest.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	fx := &fixture{view: fleet.New(clock.Now, 0), health: &healthtest.Map{}, clock: clock}
	for _, s := range specs {
		fx.put(s)
	}
	env.Fleet, env.Health, env.Now = fx.view, fx.health, clock.Now
	fx.h = f(t, env)
	fx.h.Sync(t)
	return fx
}

// put adds or replaces a proxy (the caller syncs).
func (fx *fixture) put(s spec) {
	ns := s.ns
	if ns == "" {
		ns = "ns"
	}
	p := fleet.Proxy{Key: ns + "/" + s.name, UID: s.name, IP: "10.0.0.1", Port: 3128, Attributes: s.attrs, MaxLeases: s.max, Deleting: s.deleting}
	if s.noIP {
		p.IP = ""
	}
	fx.view.Upsert(p)
	state := verdict.Healthy
	if s.unhealthy {
		state = verdict.Unhealthy
	}
	fx.health.SetState(p.Key, state, s.latency)
}

func (fx *fixture) acquire(t *testing.T, r lease.Request) (lease.Lease, error) {
	t.Helper()
	if r.TTL == 0 {
		r.TTL = time.Minute
	}
	return fx.h.Store.Acquire(context.Background(), r)
}

func (fx *fixture) mustAcquire(t *testing.T, r lease.Request) lease.Lease {
	t.Helper()
	l, err := fx.acquire(t, r)
	if err != nil {
		t.Fatalf("Acquire(%+v): %v", r, err)
	}
	return l
}

var eu = map[string]string{"geo": "eu"}

func testAcquirePicks(t *testing.T, f Factory) {
	us := map[string]string{"geo": "us"}
	tests := []struct {
		name    string
		specs   []spec
		held    []string // proxies leased once before the request, in order
		req     lease.Request
		want    string
		wantErr *lease.NoMatchError
	}{
		{
			name:  "least loaded first",
			specs: []spec{{name: "a", max: 5, latency: 10}, {name: "b", max: 5, latency: 50}},
			held:  []string{"ns/a"},
			want:  "ns/b",
		},
		{
			name:  "latency breaks a tie",
			specs: []spec{{name: "a", max: 5, latency: 90}, {name: "b", max: 5, latency: 20}, {name: "c", max: 5, latency: 40}},
			want:  "ns/b",
		},
		{
			name:  "key breaks a tie of load and latency",
			specs: []spec{{name: "c", max: 5, latency: 20}, {name: "a", attrs: eu, max: 5, latency: 20}, {name: "b", max: 5, latency: 20}},
			want:  "ns/a",
		},
		{
			name:  "selector filters, across buckets",
			specs: []spec{{name: "a", attrs: us, max: 5}, {name: "b", attrs: map[string]string{"geo": "eu", "asn": "1"}, max: 5, latency: 30}, {name: "c", attrs: map[string]string{"geo": "eu", "asn": "2"}, max: 5, latency: 20}},
			req:   lease.Request{Selector: eu},
			want:  "ns/c",
		},
		{
			name:  "unhealthy, deleting and addressless skipped",
			specs: []spec{{name: "a", max: 5, unhealthy: true}, {name: "b", max: 5, deleting: true}, {name: "c", max: 5, noIP: true}, {name: "d", max: 5, latency: 900}},
			want:  "ns/d",
		},
		{
			name:    "nothing matches",
			specs:   []spec{{name: "a", attrs: us, max: 5}},
			req:     lease.Request{Selector: eu},
			wantErr: &lease.NoMatchError{},
		},
		{
			name:  "counts why",
			specs: []spec{{name: "a", attrs: eu, max: 1}, {name: "b", attrs: eu, max: 0}, {name: "c", attrs: eu, max: 3, unhealthy: true}, {name: "d", attrs: us, max: 3}},
			held:  []string{"ns/a"},
			req:   lease.Request{Selector: eu},
			// a's lease (a minute from the fixture's start) is the first to end.
			wantErr: &lease.NoMatchError{Matching: 3, Unhealthy: 1, AtCapacity: 2, FreeAt: time.Date(2026, 1, 1, 0, 1, 0, 0, time.UTC)},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fx := newFixture(t, f, tc.specs...)
			for _, h := range tc.held {
				l := fx.mustAcquire(t, lease.Request{Selector: tc.req.Selector})
				if l.Proxy.Key != h {
					t.Fatalf("setup lease went to %s, want %s", l.Proxy.Key, h)
				}
			}
			l, err := fx.acquire(t, tc.req)
			if tc.wantErr != nil {
				var got *lease.NoMatchError
				if !errors.As(err, &got) || !errors.Is(err, lease.ErrNoMatch) {
					t.Fatalf("Acquire: err %v, want a NoMatchError", err)
				}
				if diff := cmp.Diff(tc.wantErr, got); diff != "" {
					t.Errorf("NoMatchError mismatch (-want +got):\n%s", diff)
				}
				return
			}
			if err != nil {
				t.Fatalf("Acquire: %v", err)
			}
			if l.Proxy.Key != tc.want {
				t.Errorf("leased %s, want %s", l.Proxy.Key, tc.want)
			}
		})
	}
}

func testCapacity(t *testing.T, f Factory) {
	fx := newFixture(t, f, spec{name: "a", max: 2}, spec{name: "b", max: 1})
	got := map[string]int{}
	for i := range 3 {
		l := fx.mustAcquire(t, lease.Request{})
		got[l.Proxy.Key]++
		if l.Active != got[l.Proxy.Key] {
			t.Errorf("lease %d: Active %d, want %d", i, l.Active, got[l.Proxy.Key])
		}
	}
	if diff := cmp.Diff(map[string]int{"ns/a": 2, "ns/b": 1}, got); diff != "" {
		t.Errorf("leases per proxy mismatch (-want +got):\n%s", diff)
	}
	_, err := fx.acquire(t, lease.Request{})
	var nm *lease.NoMatchError
	if !errors.As(err, &nm) || nm.AtCapacity != 2 {
		t.Fatalf("fourth Acquire: err %v, want 2 at capacity", err)
	}
	if diff := cmp.Diff(got, active(t, fx.h.Store)); diff != "" {
		t.Errorf("ActiveByProxy mismatch (-want +got):\n%s", diff)
	}
	if n := count(t, fx.h.Store); n != 3 {
		t.Errorf("ActiveCount %d, want 3", n)
	}
}

func testExpiryAndRenew(t *testing.T, f Factory) {
	ctx := context.Background()
	fx := newFixture(t, f, spec{name: "a", max: 1})
	l := fx.mustAcquire(t, lease.Request{TTL: 10 * time.Second})
	if want := fx.clock.Now().Add(10 * time.Second); !l.ExpiresAt.Equal(want) {
		t.Errorf("ExpiresAt %s, want %s", l.ExpiresAt, want)
	}
	fx.clock.Advance(8 * time.Second)
	r, err := fx.h.Store.Renew(ctx, l.ID, 10*time.Second)
	if err != nil {
		t.Fatalf("Renew: %v", err)
	}
	if want := fx.clock.Now().Add(10 * time.Second); !r.ExpiresAt.Equal(want) {
		t.Errorf("renewed ExpiresAt %s, want %s", r.ExpiresAt, want)
	}
	if r.Proxy.Key != "ns/a" || r.Active != 1 {
		t.Errorf("renewed lease on %s with %d active, want ns/a with 1", r.Proxy.Key, r.Active)
	}
	fx.clock.Advance(8 * time.Second) // 16 s after the grant: alive only thanks to the renewal
	if got := count(t, fx.h.Store); got != 1 {
		t.Fatalf("ActiveCount after renewal = %d, want 1", got)
	}
	if _, err := fx.acquire(t, lease.Request{}); !errors.Is(err, lease.ErrNoMatch) {
		t.Fatalf("Acquire on a full proxy: err %v, want ErrNoMatch", err)
	}
	fx.clock.Advance(2 * time.Second)
	if got := count(t, fx.h.Store); got != 0 {
		t.Fatalf("ActiveCount after expiry = %d, want 0", got)
	}
	if _, err := fx.h.Store.Renew(ctx, l.ID, time.Minute); !errors.Is(err, lease.ErrNotFound) {
		t.Errorf("Renew of an expired lease: err %v, want ErrNotFound", err)
	}
	if _, err := fx.h.Store.Renew(ctx, "nope", time.Minute); !errors.Is(err, lease.ErrNotFound) {
		t.Errorf("Renew of an unknown lease: err %v, want ErrNotFound", err)
	}
	if _, err := fx.h.Store.Renew(ctx, l.ID, -time.Second); !errors.Is(err, lease.ErrInvalid) {
		t.Errorf("Renew with a negative TTL: err %v, want ErrInvalid", err)
	}
	if _, err := fx.acquire(t, lease.Request{TTL: -time.Second}); !errors.Is(err, lease.ErrInvalid) {
		t.Errorf("Acquire with a negative TTL: err %v, want ErrInvalid", err)
	}
	fx.mustAcquire(t, lease.Request{}) // the slot is free again
}

func testRenewKeepsTTL(t *testing.T, f Factory) {
	fx := newFixture(t, f, spec{name: "a", max: 1})
	l := fx.mustAcquire(t, lease.Request{TTL: 30 * time.Second, Target: "t.example", SessionKey: "s"})
	fx.clock.Advance(20 * time.Second)
	r, err := fx.h.Store.Renew(context.Background(), l.ID, 0)
	if err != nil {
		t.Fatalf("Renew: %v", err)
	}
	if want := fx.clock.Now().Add(30 * time.Second); !r.ExpiresAt.Equal(want) {
		t.Errorf("renewed ExpiresAt %s, want %s (the lease's own TTL)", r.ExpiresAt, want)
	}
	if r.Target != "t.example" || r.SessionKey != "s" || r.ID != l.ID {
		t.Errorf("renewed lease %+v lost the grant's target, session or id", r)
	}
}

func testRelease(t *testing.T, f Factory) {
	ctx := context.Background()
	fx := newFixture(t, f, spec{name: "a", max: 1})
	l := fx.mustAcquire(t, lease.Request{})
	for i := range 3 {
		if err := fx.h.Store.Release(ctx, l.ID); err != nil {
			t.Fatalf("Release #%d: %v", i, err)
		}
	}
	if err := fx.h.Store.Release(ctx, "unknown"); err != nil {
		t.Fatalf("Release(unknown): %v", err)
	}
	if got := count(t, fx.h.Store); got != 0 {
		t.Errorf("ActiveCount = %d, want 0", got)
	}
	if got := active(t, fx.h.Store); len(got) != 0 {
		t.Errorf("ActiveByProxy = %v, want empty", got)
	}
	fx.mustAcquire(t, lease.Request{})
}

func testCooldownPerTarget(t *testing.T, f Factory) {
	ctx := context.Background()
	fx := newFixture(t, f, spec{name: "a", max: 5, latency: 10}, spec{name: "b", max: 5, latency: 20})
	l := fx.mustAcquire(t, lease.Request{Target: "example.com"})
	if l.Proxy.Key != "ns/a" {
		t.Fatalf("first lease on %s, want ns/a", l.Proxy.Key)
	}
	c, err := fx.h.Store.Report(ctx, l.ID, lease.Report{Result: lease.ResultRateLimited, Target: "example.com"})
	if err != nil {
		t.Fatalf("Report: %v", err)
	}
	if want := fx.clock.Now().Add(lease.DefaultRateLimitedCooldown); !c.Until.Equal(want) || c.Proxy != "ns/a" || c.Strikes != 0 {
		t.Errorf("cooldown %+v, want ns/a until %s, no strike (rate limiting is not a ban)", c, want)
	}
	_ = fx.h.Store.Release(ctx, l.ID)

	if got := fx.mustAcquire(t, lease.Request{Target: "example.com"}).Proxy.Key; got != "ns/b" {
		t.Errorf("lease for the cooled target on %s, want ns/b", got)
	}
	if got := fx.mustAcquire(t, lease.Request{Target: "other.org"}).Proxy.Key; got != "ns/a" {
		t.Errorf("lease for another target on %s, want ns/a", got)
	}
	fx.clock.Advance(lease.DefaultRateLimitedCooldown)
	// a's cooldown is over; b holds example.com.
	if got := fx.mustAcquire(t, lease.Request{Target: "example.com"}).Proxy.Key; got != "ns/a" {
		t.Errorf("lease after the cooldown on %s, want ns/a", got)
	}
	// Cooling proxies are counted as such.
	fx2 := newFixture(t, f, spec{name: "a", max: 5})
	l2 := fx2.mustAcquire(t, lease.Request{})
	if _, err := fx2.h.Store.Report(ctx, l2.ID, lease.Report{Result: lease.ResultBanned, Target: "x"}); err != nil {
		t.Fatal(err)
	}
	_, err = fx2.acquire(t, lease.Request{Target: "x"})
	var nm *lease.NoMatchError
	want := lease.NoMatchError{Matching: 1, Cooling: 1, Target: "x", FreeAt: fx2.clock.Now().Add(lease.DefaultBannedCooldown)}
	if !errors.As(err, &nm) {
		t.Fatalf("Acquire while cooling: %v, want a NoMatchError", err)
	}
	if diff := cmp.Diff(want, *nm); diff != "" {
		t.Errorf("Acquire while cooling (-want +got):\n%s", diff)
	}
}

func testCooldownLength(t *testing.T, f Factory) {
	type report struct {
		result     lease.Result
		retryAfter time.Duration
		gap        time.Duration // clock advance before the report
	}
	rl, ban, maxCD := lease.DefaultRateLimitedCooldown, lease.DefaultBannedCooldown, lease.DefaultMaxCooldown
	tests := []struct {
		name    string
		reports []report
		want    time.Duration // cooldown left after the last report
		strikes int
	}{
		{"rate limited", []report{{lease.ResultRateLimited, 0, 0}}, rl, 0},
		{"banned is longer", []report{{lease.ResultBanned, 0, 0}}, ban, 1},
		{"longer Retry-After wins", []report{{lease.ResultRateLimited, 40 * time.Minute, 0}}, 40 * time.Minute, 0},
		{"rate limited with a Retry-After cools for exactly that", []report{{lease.ResultRateLimited, time.Minute, 0}}, time.Minute, 0},
		{"a Retry-After is not doubled on repeats", []report{{lease.ResultRateLimited, 2 * time.Second, 0}, {lease.ResultRateLimited, 2 * time.Second, 3 * time.Second}, {lease.ResultRateLimited, 2 * time.Second, 3 * time.Second}}, 2 * time.Second, 0},
		{"a Retry-After never shortens a running cooldown", []report{{lease.ResultRateLimited, 0, 0}, {lease.ResultRateLimited, time.Second, time.Minute}}, rl - time.Minute, 0},
		{"rate limited never escalates", []report{{lease.ResultRateLimited, time.Second, 0}, {lease.ResultRateLimited, 0, 1500 * time.Millisecond}, {lease.ResultRateLimited, 0, rl + time.Second}}, rl, 0},
		{"banned: a shorter Retry-After loses", []report{{lease.ResultBanned, time.Minute, 0}}, ban, 1},
		{"Retry-After capped", []report{{lease.ResultRateLimited, 30 * 24 * time.Hour, 0}}, maxCD, 0},
		{"bans double", []report{{lease.ResultBanned, 0, 0}, {lease.ResultBanned, 0, 20 * time.Minute}, {lease.ResultBanned, 0, 40 * time.Minute}}, 4 * ban, 3},
		{"repeats capped", []report{{lease.ResultBanned, 0, 0}, {lease.ResultBanned, 0, 0}, {lease.ResultBanned, 0, 0}, {lease.ResultBanned, 0, 0}, {lease.ResultBanned, 0, 0}, {lease.ResultBanned, 0, 0}}, maxCD, 6},
		{"never shortened", []report{{lease.ResultBanned, 0, 0}, {lease.ResultRateLimited, 0, time.Minute}}, ban - time.Minute, 1},
		{"forgotten after as long again", []report{{lease.ResultBanned, 0, 0}, {lease.ResultBanned, 0, 2 * ban}}, ban, 1},
		{"a success forgives a strike", []report{{lease.ResultBanned, 0, 0}, {lease.ResultBanned, 0, 0}, {lease.ResultOK, 0, 0}, {lease.ResultBanned, 0, 0}}, 2 * ban, 2},
		{"ok starts nothing", []report{{lease.ResultOK, 0, 0}}, 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			fx := newFixture(t, f, spec{name: "a", max: 1})
			l := fx.mustAcquire(t, lease.Request{TTL: 365 * 24 * time.Hour})
			var c lease.Cooldown
			for _, r := range tc.reports {
				fx.clock.Advance(r.gap)
				var err error
				if c, err = fx.h.Store.Report(ctx, l.ID, lease.Report{Result: r.result, Target: "t.example", RetryAfter: r.retryAfter}); err != nil {
					t.Fatalf("Report: %v", err)
				}
			}
			got := time.Duration(0)
			if !c.Until.IsZero() {
				got = c.Until.Sub(fx.clock.Now())
			}
			if got != tc.want || c.Strikes != tc.strikes {
				t.Errorf("cooldown %s with %d strikes, want %s with %d", got, c.Strikes, tc.want, tc.strikes)
			}
		})
	}
}

func testCooldownForgotten(t *testing.T, f Factory) {
	ctx := context.Background()
	fx := newFixture(t, f, spec{name: "a", max: 1})
	l := fx.mustAcquire(t, lease.Request{TTL: 24 * time.Hour})
	if _, err := fx.h.Store.Report(ctx, l.ID, lease.Report{Result: lease.ResultBanned, Target: "x"}); err != nil {
		t.Fatal(err)
	}
	_ = fx.h.Store.Release(ctx, l.ID)
	if _, err := fx.acquire(t, lease.Request{Target: "x"}); !errors.Is(err, lease.ErrNoMatch) {
		t.Fatalf("Acquire while cooling: %v, want ErrNoMatch", err)
	}
	fx.clock.Advance(lease.DefaultBannedCooldown)
	l = fx.mustAcquire(t, lease.Request{Target: "x", TTL: 24 * time.Hour}) // cooled down, strikes remembered
	c, err := fx.h.Store.Report(ctx, l.ID, lease.Report{Result: lease.ResultBanned, Target: "x"})
	if err != nil || c.Strikes != 2 {
		t.Fatalf("report within the memory: %+v, %v; want 2 strikes", c, err)
	}
	fx.clock.Advance(4 * lease.DefaultBannedCooldown)
	fx.h.Reap(t)
	c, err = fx.h.Store.Report(ctx, l.ID, lease.Report{Result: lease.ResultBanned, Target: "x"})
	if err != nil || c.Strikes != 1 {
		t.Fatalf("report after the memory: %+v, %v; want 1 strike", c, err)
	}
}

func testReportRejects(t *testing.T, f Factory) {
	ctx := context.Background()
	fx := newFixture(t, f, spec{name: "a", max: 1})
	l := fx.mustAcquire(t, lease.Request{})
	for _, r := range []lease.Report{{Result: "meh", Target: "x"}, {Result: lease.ResultBanned}, {Result: lease.ResultBanned, Target: "x", RetryAfter: -time.Second}} {
		if _, err := fx.h.Store.Report(ctx, l.ID, r); !errors.Is(err, lease.ErrInvalid) {
			t.Errorf("Report(%+v): err %v, want ErrInvalid", r, err)
		}
	}
	if _, err := fx.h.Store.Report(ctx, "gone", lease.Report{Result: lease.ResultOK, Target: "x"}); !errors.Is(err, lease.ErrNotFound) {
		t.Errorf("Report on an unknown lease: err %v, want ErrNotFound", err)
	}
	c, err := fx.h.Store.Report(ctx, l.ID, lease.Report{Result: lease.ResultOK, Target: "x"})
	if err != nil || c != (lease.Cooldown{Proxy: "ns/a", Target: "x"}) {
		t.Errorf("ok report: %+v, %v; want no cooldown on ns/a", c, err)
	}
}

func testStickySession(t *testing.T, f Factory) {
	ctx := context.Background()
	fx := newFixture(t, f, spec{name: "a", max: 5, latency: 10}, spec{name: "b", max: 5, latency: 20}, spec{name: "c", max: 5, latency: 30})
	first := fx.mustAcquire(t, lease.Request{SessionKey: "s1"})
	// Sticky beats least-loaded: a has one lease, b and c none.
	if got := fx.mustAcquire(t, lease.Request{SessionKey: "s1"}); got.Proxy.Key != first.Proxy.Key || got.SessionKey != "s1" {
		t.Fatalf("second lease of s1 on %s (session %q), want %s", got.Proxy.Key, got.SessionKey, first.Proxy.Key)
	}
	if got := fx.mustAcquire(t, lease.Request{SessionKey: "s2"}).Proxy.Key; got == first.Proxy.Key {
		t.Errorf("another session got the loaded proxy %s", got)
	}

	// Cooling for the target: a new proxy, and the session follows it.
	l := fx.mustAcquire(t, lease.Request{SessionKey: "s1", Target: "x"})
	if _, err := fx.h.Store.Report(ctx, l.ID, lease.Report{Result: lease.ResultBanned, Target: "x"}); err != nil {
		t.Fatal(err)
	}
	moved := fx.mustAcquire(t, lease.Request{SessionKey: "s1", Target: "x"})
	if moved.Proxy.Key == first.Proxy.Key {
		t.Fatalf("session kept %s while it cools for the target", moved.Proxy.Key)
	}
	if got := fx.mustAcquire(t, lease.Request{SessionKey: "s1"}).Proxy.Key; got != moved.Proxy.Key {
		t.Errorf("session went to %s after moving, want %s", got, moved.Proxy.Key)
	}

	// Unhealthy: a new proxy.
	fx.health.SetState(moved.Proxy.Key, verdict.Unhealthy, 0)
	fx.h.Sync(t)
	if got := fx.mustAcquire(t, lease.Request{SessionKey: "s1"}).Proxy.Key; got == moved.Proxy.Key {
		t.Errorf("session kept unhealthy %s", got)
	}

	// Full: a new proxy.
	fx3 := newFixture(t, f, spec{name: "a", max: 1, latency: 1}, spec{name: "b", max: 5, latency: 2})
	if got := fx3.mustAcquire(t, lease.Request{SessionKey: "k"}).Proxy.Key; got != "ns/a" {
		t.Fatalf("lease on %s, want ns/a", got)
	}
	if got := fx3.mustAcquire(t, lease.Request{SessionKey: "k"}).Proxy.Key; got != "ns/b" {
		t.Errorf("session on a full proxy: lease on %s, want ns/b", got)
	}

	// Selector no longer matching: not the bound proxy.
	fx2 := newFixture(t, f, spec{name: "a", attrs: eu, max: 5, latency: 50}, spec{name: "b", max: 5, latency: 1})
	if got := fx2.mustAcquire(t, lease.Request{SessionKey: "k"}).Proxy.Key; got != "ns/b" {
		t.Fatalf("lease on %s, want ns/b", got)
	}
	if got := fx2.mustAcquire(t, lease.Request{SessionKey: "k", Selector: eu}).Proxy.Key; got != "ns/a" {
		t.Errorf("selector ignored for a sticky session: lease on %s", got)
	}
}

func testStickyIdle(t *testing.T, f Factory) {
	ctx := context.Background()
	fx := newFixture(t, f, spec{name: "a", max: 5, latency: 10}, spec{name: "b", max: 5, latency: 20})
	fx.mustAcquire(t, lease.Request{TTL: 24 * time.Hour}) // a: 1 lease, so a fresh choice is b
	l := fx.mustAcquire(t, lease.Request{SessionKey: "s"})
	if l.Proxy.Key != "ns/b" {
		t.Fatalf("session lease on %s, want ns/b", l.Proxy.Key)
	}
	_ = fx.h.Store.Release(ctx, l.ID)
	fx.mustAcquire(t, lease.Request{TTL: 24 * time.Hour}) // b: 1 lease; a and b tie, a wins on latency
	fx.clock.Advance(lease.DefaultSessionIdle - time.Second)
	got := fx.mustAcquire(t, lease.Request{SessionKey: "s"})
	if got.Proxy.Key != "ns/b" {
		t.Fatalf("within idle time: lease on %s, want ns/b", got.Proxy.Key)
	}
	_ = fx.h.Store.Release(ctx, got.ID)
	fx.clock.Advance(lease.DefaultSessionIdle)
	fx.h.Reap(t)
	if got := fx.mustAcquire(t, lease.Request{SessionKey: "s"}).Proxy.Key; got != "ns/a" {
		t.Errorf("after %s idle: lease on %s, want the fresh choice ns/a", lease.DefaultSessionIdle, got)
	}
}

func testSessionBound(t *testing.T, f Factory) {
	fx := newFixtureEnv(t, f, 2, spec{name: "a", max: 100, latency: 10}, spec{name: "b", max: 100, latency: 20})
	if got := fx.mustAcquire(t, lease.Request{SessionKey: "k0"}).Proxy.Key; got != "ns/a" {
		t.Fatalf("k0 on %s, want ns/a", got)
	}
	if got := fx.mustAcquire(t, lease.Request{SessionKey: "k1"}).Proxy.Key; got != "ns/b" {
		t.Fatalf("k1 on %s, want ns/b", got)
	}
	// Beyond the cap a key still gets leases, unbound: a then b by load.
	if got := fx.mustAcquire(t, lease.Request{SessionKey: "k2"}).Proxy.Key; got != "ns/a" {
		t.Fatalf("k2 on %s, want ns/a", got)
	}
	if got := fx.mustAcquire(t, lease.Request{SessionKey: "k2"}).Proxy.Key; got != "ns/b" {
		t.Errorf("k2 again on %s, want ns/b: a key beyond the cap must not be bound", got)
	}
	// A bound key stays sticky at the cap.
	for range 3 {
		if got := fx.mustAcquire(t, lease.Request{SessionKey: "k0"}).Proxy.Key; got != "ns/a" {
			t.Fatalf("bound session moved from ns/a to %s at the cap", got)
		}
	}
}

func testProxyLeaving(t *testing.T, f Factory) {
	ctx := context.Background()
	fx := newFixture(t, f, spec{name: "a", max: 5}, spec{name: "b", max: 5, latency: 5})
	l := fx.mustAcquire(t, lease.Request{})
	fx.view.Remove(l.Proxy.Key)
	fx.h.Sync(t)
	if _, err := fx.h.Store.Renew(ctx, l.ID, time.Minute); !errors.Is(err, lease.ErrNotFound) {
		t.Errorf("Renew after the proxy left: err %v, want ErrNotFound", err)
	}
	if _, err := fx.h.Store.Report(ctx, l.ID, lease.Report{Result: lease.ResultBanned, Target: "x"}); !errors.Is(err, lease.ErrNotFound) {
		t.Errorf("Report after the proxy left: err %v, want ErrNotFound", err)
	}
	l2 := fx.mustAcquire(t, lease.Request{})
	if l2.Proxy.Key == l.Proxy.Key {
		t.Fatalf("leased %s after it left the fleet", l2.Proxy.Key)
	}
	fx.view.Remove(l2.Proxy.Key)
	fx.h.Sync(t)
	if got := count(t, fx.h.Store); got != 0 {
		t.Errorf("ActiveCount = %d after both proxies left, want 0", got)
	}
	if got := active(t, fx.h.Store); len(got) != 0 {
		t.Errorf("ActiveByProxy = %v after both proxies left, want empty", got)
	}
	// Back in the fleet: leasable again, from zero.
	fx.put(spec{name: "a", max: 1})
	fx.h.Sync(t)
	if got := fx.mustAcquire(t, lease.Request{}); got.Proxy.Key != "ns/a" || got.Active != 1 {
		t.Errorf("lease on %s with %d active, want ns/a with 1", got.Proxy.Key, got.Active)
	}
}

func testFleetChanges(t *testing.T, f Factory) {
	us := map[string]string{"geo": "us"}
	fx := newFixture(t, f, spec{name: "a", attrs: eu, max: 5})
	if _, err := fx.acquire(t, lease.Request{Selector: us}); !errors.Is(err, lease.ErrNoMatch) {
		t.Fatalf("us before relabel: err %v, want ErrNoMatch", err)
	}
	held := fx.mustAcquire(t, lease.Request{Selector: eu})
	fx.put(spec{name: "a", attrs: us, max: 5})
	fx.h.Sync(t)
	if got := fx.mustAcquire(t, lease.Request{Selector: us}); got.Proxy.Key != "ns/a" || got.Active != 2 {
		t.Errorf("after relabel: lease on %s with %d active, want ns/a with 2 (the load moves with it)", got.Proxy.Key, got.Active)
	}
	if _, err := fx.acquire(t, lease.Request{Selector: eu}); !errors.Is(err, lease.ErrNoMatch) {
		t.Errorf("eu after relabel: err %v, want ErrNoMatch", err)
	}
	fx.put(spec{name: "b", attrs: eu, max: 5})
	fx.h.Sync(t)
	if got := fx.mustAcquire(t, lease.Request{Selector: eu}).Proxy.Key; got != "ns/b" {
		t.Errorf("new proxy: lease on %s, want ns/b", got)
	}
	// Capacity lowered below the load: full until leases end.
	fx.put(spec{name: "a", attrs: us, max: 1})
	fx.h.Sync(t)
	var nm *lease.NoMatchError
	if _, err := fx.acquire(t, lease.Request{Selector: us}); !errors.As(err, &nm) || nm.AtCapacity != 1 {
		t.Errorf("after lowering capacity: err %v, want 1 at capacity", err)
	}
	_ = held
}

func testRecovered(t *testing.T, f Factory) {
	fx := newFixture(t, f, spec{name: "a", max: 5, unhealthy: true})
	if _, err := fx.acquire(t, lease.Request{}); !errors.Is(err, lease.ErrNoMatch) {
		t.Fatalf("unhealthy: err %v, want ErrNoMatch", err)
	}
	fx.health.SetState("ns/a", verdict.Healthy, 5)
	fx.h.Sync(t)
	fx.mustAcquire(t, lease.Request{})
}

func testLatencyOrder(t *testing.T, f Factory) {
	fx := newFixture(t, f, spec{name: "a", max: 5, latency: 10}, spec{name: "b", max: 5, latency: 20})
	fx.health.SetState("ns/a", verdict.Healthy, 500)
	fx.h.Sync(t)
	if got := fx.mustAcquire(t, lease.Request{}); got.Proxy.Key != "ns/b" || got.Health.LatencyMillis != 20 {
		t.Errorf("lease on %s (latency %d), want ns/b (20, now faster)", got.Proxy.Key, got.Health.LatencyMillis)
	}
}

// testManyBuckets makes sure the head-of-bucket search stops early yet finds the global best.
func testManyBuckets(t *testing.T, f Factory) {
	var specs []spec
	for i := range 50 {
		specs = append(specs, spec{name: fmt.Sprintf("p%02d", i), attrs: map[string]string{"geo": "eu", "n": fmt.Sprint(i % 7)}, max: 2, latency: int64(100 - i)})
	}
	fx := newFixture(t, f, specs...)
	first := fx.mustAcquire(t, lease.Request{Selector: eu}).Proxy.Key
	if first != "ns/p49" {
		t.Errorf("first lease on %s, want the fastest ns/p49", first)
	}
	got := map[string]int{first: 1}
	for range 99 {
		got[fx.mustAcquire(t, lease.Request{Selector: eu}).Proxy.Key]++
	}
	for _, s := range specs {
		if got["ns/"+s.name] != 2 {
			t.Errorf("%s holds %d leases, want 2", s.name, got["ns/"+s.name])
		}
	}
}

// testLeaseRecord: a lease carries the proxy's whole record and the verdict it was made on.
func testLeaseRecord(t *testing.T, f Factory) {
	fx := newFixture(t, f)
	p := fleet.Proxy{Key: "ns/full", UID: "u1", Generation: 3, Provider: "mock", ProviderID: "i-1", IP: "10.1.2.3", Port: 8080,
		Attributes: map[string]string{"geo": "eu", "tier": "gold"}, MaxLeases: 3, Phase: "Ready"}
	fx.view.Upsert(p)
	fx.health.SetState(p.Key, verdict.Healthy, 42)
	fx.h.Sync(t)
	l := fx.mustAcquire(t, lease.Request{Selector: eu, Target: "t.example", SessionKey: "s"})
	if diff := cmp.Diff(p, l.Proxy); diff != "" {
		t.Errorf("lease's proxy mismatch (-want +got):\n%s", diff)
	}
	if l.Health.State != verdict.Healthy || l.Health.LatencyMillis != 42 || l.Target != "t.example" || l.SessionKey != "s" || l.Active != 1 || l.ID == "" {
		t.Errorf("lease %+v: want healthy at 42 ms, target, session, 1 active and an id", l)
	}
}

func active(t *testing.T, s lease.Store) map[string]int {
	t.Helper()
	m, err := s.Active(context.Background())
	if err != nil {
		t.Fatalf("Active: %v", err)
	}
	return m
}

func count(t *testing.T, s lease.Store) int {
	t.Helper()
	n, err := s.Count(context.Background())
	if err != nil {
		t.Fatalf("Count: %v", err)
	}
	return n
}

// testOneHolder: a proxy leased for a target is not leased for it again until that lease ends,
// while leases for other targets or without one share it as before.
func testOneHolder(t *testing.T, f Factory) {
	ctx := context.Background()
	fx := newFixture(t, f, spec{name: "a", max: 4, latency: 1}, spec{name: "b", max: 4, latency: 2}, spec{name: "c", max: 4, unhealthy: true})
	step := func(target, want string) lease.Lease {
		t.Helper()
		l := fx.mustAcquire(t, lease.Request{Target: target})
		if l.Proxy.Key != want {
			t.Fatalf("lease for %q on %s, want %s", target, l.Proxy.Key, want)
		}
		return l
	}
	first := step("t.example", "ns/a")
	step("u.example", "ns/b") // least loaded
	step("t.example", "ns/b") // a holds t.example: b, though a is as loaded and faster
	step("", "ns/a")          // no target: shared as before
	step("u.example", "ns/a") // b holds u.example
	_, err := fx.acquire(t, lease.Request{Target: "t.example"})
	var nm *lease.NoMatchError
	if !errors.As(err, &nm) {
		t.Fatalf("third lease for t.example: %v, want a NoMatchError", err)
	}
	// Both holders' leases were granted now for a minute: that is when the first frees up.
	want := lease.NoMatchError{Matching: 3, Unhealthy: 1, LeasedForTarget: 2, Target: "t.example", FreeAt: fx.clock.Now().Add(time.Minute)}
	if diff := cmp.Diff(want, *nm); diff != "" {
		t.Fatalf("no match (-want +got):\n%s", diff)
	}
	// The same session key does not get around it either.
	if _, err := fx.acquire(t, lease.Request{Target: "t.example", SessionKey: "s"}); !errors.Is(err, lease.ErrNoMatch) {
		t.Fatalf("lease for t.example with a session key: %v, want ErrNoMatch", err)
	}
	// Ending the lease frees the target on its proxy.
	if err := fx.h.Store.Release(ctx, first.ID); err != nil {
		t.Fatal(err)
	}
	step("t.example", "ns/a")
	// So does expiry.
	fx.clock.Advance(2 * time.Minute)
	step("t.example", "ns/a")
	// And a proxy leaving the fleet.
	fx.view.Remove("ns/a")
	fx.h.Sync(t)
	fx.put(spec{name: "a", max: 4, latency: 1})
	fx.h.Sync(t)
	step("t.example", "ns/a")
}

// testNoMatchSaysWhen: a refusal carries the earliest time a matching proxy frees up by
// itself: the soonest of a cooldown's end and a lease's expiry (for proxies at capacity the
// store's first expiry, a lower bound); none when only unhealthy proxies match.
func testNoMatchSaysWhen(t *testing.T, f Factory) {
	ctx := context.Background()
	fx := newFixture(t, f, spec{name: "a", max: 1, latency: 1}, spec{name: "b", max: 4, latency: 2}, spec{name: "c", max: 4, unhealthy: true})
	start := fx.clock.Now()
	freeAt := func(r lease.Request) time.Time {
		t.Helper()
		_, err := fx.acquire(t, r)
		var nm *lease.NoMatchError
		if !errors.As(err, &nm) {
			t.Fatalf("Acquire(%+v): %v, want a NoMatchError", r, err)
		}
		return nm.FreeAt
	}
	// a is full until its 10-minute lease expires.
	fx.mustAcquire(t, lease.Request{TTL: 10 * time.Minute})
	// b cools for s.example for 2 minutes.
	fx.clock.Advance(time.Second)
	lb := fx.mustAcquire(t, lease.Request{Target: "s.example", TTL: 5 * time.Minute})
	if lb.Proxy.Key != "ns/b" {
		t.Fatalf("lease on %s, want ns/b", lb.Proxy.Key)
	}
	if _, err := fx.h.Store.Report(ctx, lb.ID, lease.Report{Result: lease.ResultRateLimited, Target: "s.example", RetryAfter: 2 * time.Minute}); err != nil {
		t.Fatal(err)
	}
	if got, want := freeAt(lease.Request{Target: "s.example"}), start.Add(time.Second+2*time.Minute); !got.Equal(want) {
		t.Errorf("cooling b, full a: free at %s, want the cooldown's end %s", got, want)
	}
	// Nothing matches: no time.
	if got, want := freeAt(lease.Request{Target: "s.example", Selector: map[string]string{"geo": "mars"}}), (time.Time{}); !got.Equal(want) {
		t.Errorf("nothing matching: free at %s, want none", got)
	}
	fx.clock.Advance(3 * time.Minute) // b's cooldown is over; its lease for s.example still runs
	if got, want := freeAt(lease.Request{Target: "s.example"}), start.Add(time.Second+5*time.Minute); !got.Equal(want) {
		t.Errorf("b leased for the target, a full: free at %s, want b's lease expiry %s", got, want)
	}
	fx.clock.Advance(3 * time.Minute) // b's lease has expired; a's runs until start+10m
	fx.mustAcquire(t, lease.Request{TTL: 20 * time.Minute})
	fx.mustAcquire(t, lease.Request{TTL: 20 * time.Minute})
	fx.mustAcquire(t, lease.Request{TTL: 20 * time.Minute})
	fx.mustAcquire(t, lease.Request{TTL: 20 * time.Minute})
	if got, want := freeAt(lease.Request{}), start.Add(10*time.Minute); !got.Equal(want) {
		t.Errorf("all full: free at %s, want the first expiry %s", got, want)
	}
	// Only an unhealthy proxy matches: no time is known.
	fx2 := newFixture(t, f, spec{name: "c", max: 4, unhealthy: true})
	if _, err := fx2.acquire(t, lease.Request{}); err == nil {
		t.Fatal("lease on an unhealthy proxy")
	} else if nm := new(lease.NoMatchError); !errors.As(err, &nm) || !nm.FreeAt.IsZero() {
		t.Errorf("only unhealthy: %v, free at %v, want none", err, nm.FreeAt)
	}
}

// testAvoid: avoided proxies are passed over while another fits, and granted when none does.
func testAvoid(t *testing.T, f Factory) {
	ctx := context.Background()
	fx := newFixture(t, f, spec{name: "a", max: 4, latency: 1}, spec{name: "b", max: 4, latency: 2},
		spec{name: "c", max: 4, latency: 3}, spec{name: "d", max: 4, unhealthy: true})
	for _, tc := range []struct {
		avoid []string
		want  string
	}{
		{nil, "ns/a"},
		{[]string{"ns/a"}, "ns/b"},
		{[]string{"ns/a", "ns/b"}, "ns/c"},
		{[]string{"ns/b", "ns/a", "ns/c"}, "ns/a"}, // none else fits: the best avoided one
		{[]string{"ns/a", "ns/b", "ns/c", "ns/d"}, "ns/a"},
	} {
		l := fx.mustAcquire(t, lease.Request{Target: "t.example", Avoid: tc.avoid})
		if l.Proxy.Key != tc.want {
			t.Errorf("avoiding %v: lease on %s, want %s", tc.avoid, l.Proxy.Key, tc.want)
		}
		if err := fx.h.Store.Release(ctx, l.ID); err != nil {
			t.Fatal(err)
		}
	}
}

// testNamespaces: a request limited to namespaces (a scoped token's lease rights) is granted
// only proxies in them, and its refusal counts only those proxies, even where another
// namespace's proxies carry the same attributes.
func testNamespaces(t *testing.T, f Factory) {
	fx := newFixture(t, f, spec{ns: "a", name: "p", attrs: eu, max: 1, latency: 10}, spec{ns: "b", name: "p", attrs: eu, max: 1, latency: 20})
	for range 2 {
		_, err := fx.acquire(t, lease.Request{Selector: eu, Namespaces: []string{"b"}})
		if err == nil {
			continue
		}
		var nm *lease.NoMatchError
		// FreeAt (the lease's expiry) is testNoMatchSaysWhen's subject.
		if !errors.As(err, &nm) || *nm != (lease.NoMatchError{Matching: 1, AtCapacity: 1, FreeAt: nm.FreeAt}) {
			t.Errorf("second lease in b: %v, want 1 matching at capacity", err)
		}
	}
	if got := active(t, fx.h.Store); !cmp.Equal(got, map[string]int{"b/p": 1}) {
		t.Errorf("active %v, want only b/p leased", got)
	}
	if got := fx.mustAcquire(t, lease.Request{Selector: eu}).Proxy.Key; got != "a/p" {
		t.Errorf("unlimited lease on %s, want a/p", got)
	}
	if _, err := fx.acquire(t, lease.Request{Selector: eu, Namespaces: []string{}}); !errors.Is(err, lease.ErrNoMatch) {
		t.Errorf("lease with no namespaces: %v, want no match", err)
	}
}

// testPoolLoad: a store that implements lease.PoolLoad reports each member's leases and
// cooling targets, and counts a refusal for capacity once per pool, keyed by namespace and
// pool: the same pool name in another namespace keeps its own count.
func testPoolLoad(t *testing.T, f Factory) {
	ctx := context.Background()
	web := map[string]string{"pool": "web"}
	fx := newFixture(t, f, spec{name: "w1", attrs: web, max: 1}, spec{name: "w2", attrs: web, max: 2},
		spec{ns: "other", name: "w1", attrs: web, max: 1})
	pl, ok := fx.h.Store.(lease.PoolLoad)
	if !ok {
		t.Skip("the store has no pool view")
	}
	scoped := lease.Request{Selector: web, Namespaces: []string{"ns"}}
	l := fx.mustAcquire(t, scoped)
	if _, err := fx.h.Store.Report(ctx, l.ID, lease.Report{Result: lease.ResultBanned, Target: "x.example"}); err != nil {
		t.Fatal(err)
	}
	if _, err := fx.h.Store.Report(ctx, l.ID, lease.Report{Result: lease.ResultRateLimited, Target: "y.example"}); err != nil {
		t.Fatal(err)
	}
	fx.mustAcquire(t, scoped)
	fx.mustAcquire(t, scoped)
	for range 2 {
		if _, err := fx.acquire(t, scoped); !errors.Is(err, lease.ErrNoMatch) {
			t.Fatalf("lease on a full pool: %v", err)
		}
	}
	q := lease.PoolQuery{Namespace: "ns", Pool: "web", Members: []string{"ns/w1", "ns/w2"}}
	got, err := pl.PoolLoad(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	cooling := map[string]int{l.Proxy.Key: 2}
	want := lease.PoolView{Active: map[string]int{"ns/w1": 1, "ns/w2": 2}, Cooling: cooling, Denied: 2}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("pool view mismatch (-want +got):\n%s", d)
	}
	other, err := pl.PoolLoad(ctx, lease.PoolQuery{Namespace: "other", Pool: "web", Members: []string{"other/w1"}})
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(lease.PoolView{Active: map[string]int{}, Cooling: map[string]int{}}, other); d != "" {
		t.Errorf("the same pool name in another namespace (-want +got):\n%s", d)
	}
	// Cooldowns over are no longer counted.
	fx.clock.Advance(lease.DefaultBannedCooldown)
	got, err = pl.PoolLoad(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Cooling) != 0 {
		t.Errorf("cooling after every cooldown ended: %v, want none", got.Cooling)
	}
}

// testCooling: Cooling lists the cooldowns in force, the latest end first (then target, then
// proxy), with their strikes and the result that set their end; bounded by the limit, scoped
// by namespace, with the total in force; a cooldown past its end is not listed, an ok report
// starts none.
func testCooling(t *testing.T, f Factory) {
	ctx := context.Background()
	fx := newFixture(t, f,
		spec{name: "a", max: 5, attrs: map[string]string{"p": "a"}},
		spec{name: "b", max: 5, attrs: map[string]string{"p": "b"}},
		spec{ns: "other", name: "c", max: 5, attrs: map[string]string{"p": "c"}})
	report := func(p string, r lease.Report) {
		t.Helper()
		l := fx.mustAcquire(t, lease.Request{Selector: map[string]string{"p": p}, TTL: time.Hour})
		if _, err := fx.h.Store.Report(ctx, l.ID, r); err != nil {
			t.Fatalf("Report %s %+v: %v", p, r, err)
		}
		_ = fx.h.Store.Release(ctx, l.ID)
	}
	report("a", lease.Report{Result: lease.ResultRateLimited, Target: "rl.example", RetryAfter: time.Minute})
	report("a", lease.Report{Result: lease.ResultBanned, Target: "both.example"})
	report("a", lease.Report{Result: lease.ResultRateLimited, Target: "both.example", RetryAfter: time.Minute}) // shortens nothing
	report("a", lease.Report{Result: lease.ResultOK, Target: "fine.example"})
	report("b", lease.Report{Result: lease.ResultBanned, Target: "ban.example"})
	report("c", lease.Report{Result: lease.ResultBanned, Target: "c.example", RetryAfter: 2 * time.Hour})
	now := fx.clock.Now()
	ban := lease.DefaultBannedCooldown
	all := []lease.Cooldown{
		{Proxy: "other/c", Target: "c.example", Until: now.Add(2 * time.Hour), Strikes: 1, Reason: lease.ResultBanned},
		{Proxy: "ns/b", Target: "ban.example", Until: now.Add(ban), Strikes: 1, Reason: lease.ResultBanned},
		{Proxy: "ns/a", Target: "both.example", Until: now.Add(ban), Strikes: 1, Reason: lease.ResultBanned},
		{Proxy: "ns/a", Target: "rl.example", Until: now.Add(time.Minute), Strikes: 0, Reason: lease.ResultRateLimited},
	}
	for _, tc := range []struct {
		name string
		q    lease.CoolingQuery
		skip time.Duration
		want lease.CoolingList
	}{
		{"every namespace", lease.CoolingQuery{}, 0, lease.CoolingList{Cooldowns: all, Total: 4}},
		{"one namespace", lease.CoolingQuery{Namespaces: []string{"ns"}}, 0, lease.CoolingList{Cooldowns: all[1:], Total: 3}},
		{"no namespace", lease.CoolingQuery{Namespaces: []string{}}, 0, lease.CoolingList{Cooldowns: []lease.Cooldown{}, Total: 0}},
		{"limit", lease.CoolingQuery{Limit: 2}, 0, lease.CoolingList{Cooldowns: all[:2], Total: 4}},
		{"ended cooldowns are not listed", lease.CoolingQuery{}, time.Minute, lease.CoolingList{Cooldowns: all[:3], Total: 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fx.clock.Advance(tc.skip)
			got, err := fx.h.Store.Cooling(ctx, tc.q)
			if err != nil {
				t.Fatalf("Cooling: %v", err)
			}
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("Cooling(%+v) mismatch (-want +got):\n%s", tc.q, diff)
			}
		})
	}
}

// testVendorOnlyWhenAsked: a vendor proxy (v1.SourceAttribute) is leased only by a request
// whose selector names the attribute, even when it is the only healthy proxy (decision 0293).
func testVendorOnlyWhenAsked(t *testing.T, f Factory) {
	vendor := map[string]string{v1.SourceAttribute: v1.SourceVendor}
	fx := newFixture(t, f, spec{name: "vendor", attrs: vendor, max: 100, latency: 1}, spec{name: "own", max: 1, latency: 50})
	l, err := fx.acquire(t, lease.Request{Target: "site"})
	if err != nil || l.Proxy.Key != "ns/own" {
		t.Fatalf("an ordinary request got %q, %v; want ns/own", l.Proxy.Key, err)
	}
	if l, err := fx.acquire(t, lease.Request{Target: "site2"}); err == nil {
		t.Fatalf("with our own proxy full, an ordinary request got %s; want no match", l.Proxy.Key)
	}
	l, err = fx.acquire(t, lease.Request{Selector: vendor})
	if err != nil || l.Proxy.Key != "ns/vendor" {
		t.Fatalf("a request naming the source got %q, %v; want ns/vendor", l.Proxy.Key, err)
	}
}
