package lease

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/proxy-operator/proxy-operator/internal/clocktest"
	"github.com/proxy-operator/proxy-operator/internal/fleet"
	"github.com/proxy-operator/proxy-operator/internal/healthtest"
	"github.com/proxy-operator/proxy-operator/internal/verdict"
)

type fixture struct {
	view   *fleet.View
	health *healthtest.Map
	clock  *clocktest.Clock
	store  *Memory
}

// spec describes one proxy for a fixture: healthy with the given latency unless unhealthy.
type spec struct {
	name      string
	ns        string // "ns" when empty
	attrs     map[string]string
	max       int32
	latency   int64
	unhealthy bool
	deleting  bool
	noIP      bool
}

func newFixture(t *testing.T, specs ...spec) *fixture {
	t.Helper()
	clock := clocktest.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	f := &fixture{view: fleet.New(clock.Now, 0), health: &healthtest.Map{}, clock: clock}
	for _, s := range specs {
		f.add(s)
	}
	f.store = NewMemory(Config{Fleet: f.view, Health: f.health, Now: clock.Now, MinSyncInterval: 0})
	return f
}

func (f *fixture) add(s spec) {
	ns := s.ns
	if ns == "" {
		ns = "ns"
	}
	p := fleet.Proxy{Key: ns + "/" + s.name, UID: s.name, IP: "10.0.0.1", Port: 3128, Attributes: s.attrs, MaxLeases: s.max, Deleting: s.deleting}
	if s.noIP {
		p.IP = ""
	}
	f.view.Upsert(p)
	state := verdict.Healthy
	if s.unhealthy {
		state = verdict.Unhealthy
	}
	f.health.SetState(p.Key, state, s.latency)
}

func (f *fixture) acquire(t *testing.T, r Request) (Lease, error) {
	t.Helper()
	if r.TTL == 0 {
		r.TTL = time.Minute
	}
	return f.store.Acquire(context.Background(), r)
}

func (f *fixture) mustAcquire(t *testing.T, r Request) Lease {
	t.Helper()
	l, err := f.acquire(t, r)
	if err != nil {
		t.Fatalf("Acquire(%+v): %v", r, err)
	}
	return l
}

var eu = map[string]string{"geo": "eu"}

func TestAcquirePicks(t *testing.T) {
	us := map[string]string{"geo": "us"}
	tests := []struct {
		name    string
		specs   []spec
		held    []string // proxies leased once before the request, in order
		req     Request
		want    string
		wantErr *NoMatchError
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
			name:  "selector filters, across buckets",
			specs: []spec{{name: "a", attrs: us, max: 5}, {name: "b", attrs: map[string]string{"geo": "eu", "asn": "1"}, max: 5, latency: 30}, {name: "c", attrs: map[string]string{"geo": "eu", "asn": "2"}, max: 5, latency: 20}},
			req:   Request{Selector: eu},
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
			req:     Request{Selector: eu},
			wantErr: &NoMatchError{},
		},
		{
			name:    "counts why",
			specs:   []spec{{name: "a", attrs: eu, max: 1}, {name: "b", attrs: eu, max: 0}, {name: "c", attrs: eu, max: 3, unhealthy: true}, {name: "d", attrs: us, max: 3}},
			held:    []string{"ns/a"},
			req:     Request{Selector: eu},
			wantErr: &NoMatchError{Matching: 3, Unhealthy: 1, AtCapacity: 2, FreeAt: time.Date(2026, 1, 1, 0, 1, 0, 0, time.UTC)}, // a's lease, a minute from the start, ends first
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, tc.specs...)
			for _, h := range tc.held {
				l := f.mustAcquire(t, Request{Selector: tc.req.Selector})
				if l.Proxy.Key != h {
					t.Fatalf("setup lease went to %s, want %s", l.Proxy.Key, h)
				}
			}
			l, err := f.acquire(t, tc.req)
			if tc.wantErr != nil {
				var got *NoMatchError
				if !errors.As(err, &got) || !errors.Is(err, ErrNoMatch) {
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

func TestCapacityIsNeverExceeded(t *testing.T) {
	f := newFixture(t, spec{name: "a", max: 2}, spec{name: "b", max: 1})
	got := map[string]int{}
	for range 3 {
		got[f.mustAcquire(t, Request{}).Proxy.Key]++
	}
	if diff := cmp.Diff(map[string]int{"ns/a": 2, "ns/b": 1}, got); diff != "" {
		t.Errorf("leases per proxy mismatch (-want +got):\n%s", diff)
	}
	_, err := f.acquire(t, Request{})
	var nm *NoMatchError
	if !errors.As(err, &nm) || nm.AtCapacity != 2 {
		t.Fatalf("fourth Acquire: err %v, want 2 at capacity", err)
	}
	if diff := cmp.Diff(got, f.store.ActiveByProxy()); diff != "" {
		t.Errorf("ActiveByProxy mismatch (-want +got):\n%s", diff)
	}
}

func TestExpiryAndRenew(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, spec{name: "a", max: 1})
	l := f.mustAcquire(t, Request{TTL: 10 * time.Second})
	if want := f.clock.Now().Add(10 * time.Second); !l.ExpiresAt.Equal(want) {
		t.Errorf("ExpiresAt %s, want %s", l.ExpiresAt, want)
	}
	f.clock.Advance(8 * time.Second)
	r, err := f.store.Renew(ctx, l.ID, 10*time.Second)
	if err != nil {
		t.Fatalf("Renew: %v", err)
	}
	if want := f.clock.Now().Add(10 * time.Second); !r.ExpiresAt.Equal(want) {
		t.Errorf("renewed ExpiresAt %s, want %s", r.ExpiresAt, want)
	}
	f.clock.Advance(8 * time.Second) // 16 s after the grant: alive only thanks to the renewal
	if got := f.store.ActiveCount(); got != 1 {
		t.Fatalf("ActiveCount after renewal = %d, want 1", got)
	}
	if _, err := f.acquire(t, Request{}); !errors.Is(err, ErrNoMatch) {
		t.Fatalf("Acquire on a full proxy: err %v, want ErrNoMatch", err)
	}
	f.clock.Advance(2 * time.Second)
	if got := f.store.ActiveCount(); got != 0 {
		t.Fatalf("ActiveCount after expiry = %d, want 0", got)
	}
	if _, err := f.store.Renew(ctx, l.ID, time.Minute); !errors.Is(err, ErrNotFound) {
		t.Errorf("Renew of an expired lease: err %v, want ErrNotFound", err)
	}
	if _, err := f.store.Renew(ctx, "nope", time.Minute); !errors.Is(err, ErrNotFound) {
		t.Errorf("Renew of an unknown lease: err %v, want ErrNotFound", err)
	}
	f.mustAcquire(t, Request{}) // the slot is free again
}

func TestReleaseIsIdempotent(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, spec{name: "a", max: 1})
	l := f.mustAcquire(t, Request{})
	for i := range 3 {
		if err := f.store.Release(ctx, l.ID); err != nil {
			t.Fatalf("Release #%d: %v", i, err)
		}
	}
	if err := f.store.Release(ctx, "unknown"); err != nil {
		t.Fatalf("Release(unknown): %v", err)
	}
	if got := f.store.ActiveCount(); got != 0 {
		t.Errorf("ActiveCount = %d, want 0", got)
	}
	f.mustAcquire(t, Request{})
}

func TestCooldownPerTarget(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, spec{name: "a", max: 5, latency: 10}, spec{name: "b", max: 5, latency: 20})
	l := f.mustAcquire(t, Request{Target: "example.com"})
	if l.Proxy.Key != "ns/a" {
		t.Fatalf("first lease on %s, want ns/a", l.Proxy.Key)
	}
	c, err := f.store.Report(ctx, l.ID, Report{Result: ResultRateLimited, Target: "example.com"})
	if err != nil {
		t.Fatalf("Report: %v", err)
	}
	if want := f.clock.Now().Add(DefaultRateLimitedCooldown); !c.Until.Equal(want) {
		t.Errorf("cooldown until %s, want %s", c.Until, want)
	}
	_ = f.store.Release(ctx, l.ID)

	if got := f.mustAcquire(t, Request{Target: "example.com"}).Proxy.Key; got != "ns/b" {
		t.Errorf("lease for the cooled target on %s, want ns/b", got)
	}
	if got := f.mustAcquire(t, Request{Target: "other.org"}).Proxy.Key; got != "ns/a" {
		t.Errorf("lease for another target on %s, want ns/a", got)
	}
	f.clock.Advance(DefaultRateLimitedCooldown)
	// a now has one lease, b one: the latency decides again once a's cooldown is over.
	if got := f.mustAcquire(t, Request{Target: "example.com"}).Proxy.Key; got != "ns/a" {
		t.Errorf("lease after the cooldown on %s, want ns/a", got)
	}
}

func TestCooldownLength(t *testing.T) {
	type report struct {
		result     Result
		retryAfter time.Duration
		gap        time.Duration // clock advance before the report
	}
	tests := []struct {
		name    string
		reports []report
		want    time.Duration // cooldown left after the last report
	}{
		{"rate limited", []report{{ResultRateLimited, 0, 0}}, DefaultRateLimitedCooldown},
		{"banned is longer", []report{{ResultBanned, 0, 0}}, DefaultBannedCooldown},
		{"longer Retry-After wins", []report{{ResultRateLimited, 40 * time.Minute, 0}}, 40 * time.Minute},
		{"rate limited with a Retry-After cools for exactly that", []report{{ResultRateLimited, time.Minute, 0}}, time.Minute},
		{"a Retry-After is not doubled on repeats", []report{{ResultRateLimited, 2 * time.Second, 0}, {ResultRateLimited, 2 * time.Second, 3 * time.Second}, {ResultRateLimited, 2 * time.Second, 3 * time.Second}},
			2 * time.Second},
		{"a Retry-After never shortens a running cooldown", []report{{ResultRateLimited, 0, 0}, {ResultRateLimited, time.Second, time.Minute}}, DefaultRateLimitedCooldown - time.Minute},
		{"rate limited never escalates", []report{{ResultRateLimited, time.Second, 0}, {ResultRateLimited, 0, 1500 * time.Millisecond}}, DefaultRateLimitedCooldown},
		{"banned: a shorter Retry-After loses", []report{{ResultBanned, time.Minute, 0}}, DefaultBannedCooldown},
		{"Retry-After capped", []report{{ResultRateLimited, 30 * 24 * time.Hour, 0}}, DefaultMaxCooldown},
		{"bans double", []report{{ResultBanned, 0, 0}, {ResultBanned, 0, 20 * time.Minute}, {ResultBanned, 0, 40 * time.Minute}},
			4 * DefaultBannedCooldown},
		{"repeats capped", []report{{ResultBanned, 0, 0}, {ResultBanned, 0, 0}, {ResultBanned, 0, 0}, {ResultBanned, 0, 0}, {ResultBanned, 0, 0}, {ResultBanned, 0, 0}},
			DefaultMaxCooldown},
		{"forgotten after as long again", []report{{ResultRateLimited, 0, 0}, {ResultRateLimited, 0, 2 * DefaultRateLimitedCooldown}},
			DefaultRateLimitedCooldown},
		{"ok starts nothing", []report{{ResultOK, 0, 0}}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			f := newFixture(t, spec{name: "a", max: 1})
			l := f.mustAcquire(t, Request{TTL: 365 * 24 * time.Hour})
			var c Cooldown
			for _, r := range tc.reports {
				f.clock.Advance(r.gap)
				var err error
				if c, err = f.store.Report(ctx, l.ID, Report{Result: r.result, Target: "t.example", RetryAfter: r.retryAfter}); err != nil {
					t.Fatalf("Report: %v", err)
				}
			}
			got := time.Duration(0)
			if !c.Until.IsZero() {
				got = c.Until.Sub(f.clock.Now())
			}
			if got != tc.want {
				t.Errorf("cooldown %s, want %s", got, tc.want)
			}
		})
	}
}

func TestCooldownsExpireAndAreReaped(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, spec{name: "a", max: 1})
	l := f.mustAcquire(t, Request{})
	if _, err := f.store.Report(ctx, l.ID, Report{Result: ResultRateLimited, Target: "x"}); err != nil {
		t.Fatal(err)
	}
	_ = f.store.Release(ctx, l.ID)
	if _, err := f.acquire(t, Request{Target: "x"}); !errors.Is(err, ErrNoMatch) {
		t.Fatalf("Acquire while cooling: %v, want ErrNoMatch", err)
	}
	f.clock.Advance(2 * DefaultRateLimitedCooldown)
	f.store.Reap()
	f.store.mu.Lock()
	n := len(f.store.cool)
	f.store.mu.Unlock()
	if n != 0 {
		t.Errorf("%d cooldowns remembered after they were forgotten, want 0", n)
	}
	f.mustAcquire(t, Request{Target: "x"})
}

func TestReportRejects(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, spec{name: "a", max: 1})
	l := f.mustAcquire(t, Request{})
	for _, r := range []Report{{Result: "meh", Target: "x"}, {Result: ResultBanned}, {Result: ResultBanned, Target: "x", RetryAfter: -time.Second}} {
		if _, err := f.store.Report(ctx, l.ID, r); !errors.Is(err, ErrInvalid) {
			t.Errorf("Report(%+v): err %v, want ErrInvalid", r, err)
		}
	}
	if _, err := f.store.Report(ctx, "gone", Report{Result: ResultOK, Target: "x"}); !errors.Is(err, ErrNotFound) {
		t.Errorf("Report on an unknown lease: err %v, want ErrNotFound", err)
	}
}

func TestStickySession(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, spec{name: "a", max: 5, latency: 10}, spec{name: "b", max: 5, latency: 20}, spec{name: "c", max: 5, latency: 30})
	first := f.mustAcquire(t, Request{SessionKey: "s1"})
	// Sticky beats least-loaded: a has one lease, b and c none.
	if got := f.mustAcquire(t, Request{SessionKey: "s1"}).Proxy.Key; got != first.Proxy.Key {
		t.Fatalf("second lease of s1 on %s, want %s", got, first.Proxy.Key)
	}
	if got := f.mustAcquire(t, Request{SessionKey: "s2"}).Proxy.Key; got == first.Proxy.Key {
		t.Errorf("another session got the loaded proxy %s", got)
	}

	// Cooling for the target: a new proxy, and the session follows it.
	l := f.mustAcquire(t, Request{SessionKey: "s1", Target: "x"})
	if _, err := f.store.Report(ctx, l.ID, Report{Result: ResultBanned, Target: "x"}); err != nil {
		t.Fatal(err)
	}
	moved := f.mustAcquire(t, Request{SessionKey: "s1", Target: "x"})
	if moved.Proxy.Key == first.Proxy.Key {
		t.Fatalf("session kept %s while it cools for the target", moved.Proxy.Key)
	}
	if got := f.mustAcquire(t, Request{SessionKey: "s1"}).Proxy.Key; got != moved.Proxy.Key {
		t.Errorf("session went to %s after moving, want %s", got, moved.Proxy.Key)
	}

	// Unhealthy: a new proxy.
	f.health.SetState(moved.Proxy.Key, verdict.Unhealthy, 0)
	if got := f.mustAcquire(t, Request{SessionKey: "s1"}).Proxy.Key; got == moved.Proxy.Key {
		t.Errorf("session kept unhealthy %s", got)
	}

	// Selector no longer matching: not the bound proxy.
	f2 := newFixture(t, spec{name: "a", attrs: eu, max: 5, latency: 50}, spec{name: "b", max: 5, latency: 1})
	if got := f2.mustAcquire(t, Request{SessionKey: "k"}).Proxy.Key; got != "ns/b" {
		t.Fatalf("lease on %s, want ns/b", got)
	}
	if got := f2.mustAcquire(t, Request{SessionKey: "k", Selector: eu}).Proxy.Key; got != "ns/a" {
		t.Errorf("selector ignored for a sticky session: lease on %s", got)
	}
}

func TestStickySessionIdleExpiry(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, spec{name: "a", max: 5, latency: 10}, spec{name: "b", max: 5, latency: 20})
	f.mustAcquire(t, Request{}) // a: 1 lease, so a fresh choice is b
	l := f.mustAcquire(t, Request{SessionKey: "s"})
	_ = f.store.Release(ctx, l.ID)
	f.mustAcquire(t, Request{}) // b: 1 lease; a and b tie, a wins on latency
	f.clock.Advance(DefaultSessionIdle - time.Second)
	if got := f.mustAcquire(t, Request{SessionKey: "s"}); got.Proxy.Key != l.Proxy.Key {
		t.Fatalf("within idle time: lease on %s, want %s", got.Proxy.Key, l.Proxy.Key)
	} else {
		_ = f.store.Release(ctx, got.ID)
	}
	f.clock.Advance(DefaultSessionIdle)
	f.store.Reap()
	f.store.mu.Lock()
	_, kept := f.store.sessions["s"]
	f.store.mu.Unlock()
	if kept {
		t.Errorf("session still bound after %s idle", DefaultSessionIdle)
	}
}

func TestProxyLeavingDropsLeases(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, spec{name: "a", max: 5}, spec{name: "b", max: 5, latency: 5})
	l := f.mustAcquire(t, Request{})
	f.view.Remove(l.Proxy.Key)
	if _, err := f.store.Renew(ctx, l.ID, time.Minute); !errors.Is(err, ErrNotFound) {
		t.Errorf("Renew after the proxy left: err %v, want ErrNotFound", err)
	}
	l2 := f.mustAcquire(t, Request{})
	if l2.Proxy.Key == l.Proxy.Key {
		t.Fatalf("leased %s after it left the fleet", l2.Proxy.Key)
	}
	f.view.Remove(l2.Proxy.Key)
	f.store.Sync()
	if got := f.store.ActiveCount(); got != 0 {
		t.Errorf("ActiveCount = %d after both proxies left, want 0", got)
	}
}

func TestFleetChangesReachTheIndex(t *testing.T) {
	f := newFixture(t, spec{name: "a", attrs: eu, max: 5})
	if _, err := f.acquire(t, Request{Selector: map[string]string{"geo": "us"}}); !errors.Is(err, ErrNoMatch) {
		t.Fatalf("us before relabel: err %v, want ErrNoMatch", err)
	}
	f.add(spec{name: "a", attrs: map[string]string{"geo": "us"}, max: 5})
	if got := f.mustAcquire(t, Request{Selector: map[string]string{"geo": "us"}}).Proxy.Key; got != "ns/a" {
		t.Errorf("after relabel: lease on %s, want ns/a", got)
	}
	f.add(spec{name: "b", attrs: eu, max: 5})
	if got := f.mustAcquire(t, Request{Selector: eu}).Proxy.Key; got != "ns/b" {
		t.Errorf("new proxy: lease on %s, want ns/b", got)
	}
}

func TestRecoveredProxyReturnsOnRefresh(t *testing.T) {
	f := newFixture(t, spec{name: "a", max: 5, unhealthy: true})
	if _, err := f.acquire(t, Request{}); !errors.Is(err, ErrNoMatch) {
		t.Fatalf("unhealthy: err %v, want ErrNoMatch", err)
	}
	f.health.SetState("ns/a", verdict.Healthy, 5)
	f.store.RefreshHealth()
	f.mustAcquire(t, Request{})
}

func TestLatencyOrderFollowsRefresh(t *testing.T) {
	f := newFixture(t, spec{name: "a", max: 5, latency: 10}, spec{name: "b", max: 5, latency: 20})
	f.health.SetState("ns/a", verdict.Healthy, 500)
	f.store.RefreshHealth()
	if got := f.mustAcquire(t, Request{}).Proxy.Key; got != "ns/b" {
		t.Errorf("lease on %s, want ns/b (now faster)", got)
	}
}

// TestManyBuckets makes sure the head-of-bucket search stops early yet finds the global best.
func TestManyBuckets(t *testing.T) {
	var specs []spec
	for i := range 50 {
		specs = append(specs, spec{name: fmt.Sprintf("p%02d", i), attrs: map[string]string{"geo": "eu", "n": fmt.Sprint(i % 7)}, max: 2, latency: int64(100 - i)})
	}
	f := newFixture(t, specs...)
	got := map[string]int{}
	for range 100 {
		got[f.mustAcquire(t, Request{Selector: eu}).Proxy.Key]++
	}
	for _, s := range specs {
		if got["ns/"+s.name] != 2 {
			t.Errorf("%s holds %d leases, want 2", s.name, got["ns/"+s.name])
		}
	}
	first := newFixture(t, specs...).mustAcquire(t, Request{Selector: eu}).Proxy.Key
	if first != "ns/p49" {
		t.Errorf("first lease on %s, want the fastest ns/p49", first)
	}
}

func TestSessionTableIsBounded(t *testing.T) {
	f := newFixture(t, spec{name: "a", max: 100, latency: 10}, spec{name: "b", max: 100, latency: 20})
	f.store = NewMemory(Config{Fleet: f.view, Health: f.health, Now: f.clock.Now, MaxSessions: 2})
	for i := range 5 {
		f.mustAcquire(t, Request{SessionKey: fmt.Sprint("k", i)})
	}
	f.store.mu.Lock()
	n := len(f.store.sessions)
	f.store.mu.Unlock()
	if n != 2 {
		t.Errorf("%d sessions bound, want the cap of 2", n)
	}
	// A bound key stays sticky at the cap.
	first := f.mustAcquire(t, Request{SessionKey: "k0"}).Proxy.Key
	for range 3 {
		if got := f.mustAcquire(t, Request{SessionKey: "k0"}).Proxy.Key; got != first {
			t.Fatalf("bound session moved from %s to %s at the cap", first, got)
		}
	}
}

// run starts the store's Run loop until the test ends.
func (f *fixture) run(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.store.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

// TestRunFollowsTheFleet: with no lease traffic at all, Run drops the leases of a proxy that
// leaves the view, expires leases and picks up a recovered proxy.
func TestRunFollowsTheFleet(t *testing.T) {
	f := newFixture(t, spec{name: "a", max: 5}, spec{name: "b", max: 5, latency: 5}, spec{name: "c", max: 5, unhealthy: true})
	f.store = NewMemory(Config{Fleet: f.view, Health: f.health, Now: f.clock.Now,
		ReapInterval: time.Millisecond, HealthRefresh: time.Millisecond, MinSyncInterval: time.Millisecond})
	a := f.mustAcquire(t, Request{Selector: nil, TTL: time.Hour})
	f.mustAcquire(t, Request{TTL: 10 * time.Second})
	f.run(t)
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("Run never %s", what)
			}
			time.Sleep(time.Millisecond)
		}
	}
	f.view.Remove(a.Proxy.Key)
	waitFor("dropped the departed proxy's lease", func() bool { return f.store.ActiveByProxy()[a.Proxy.Key] == 0 })
	f.clock.Advance(11 * time.Second)
	waitFor("expired the short lease", func() bool {
		f.store.mu.Lock()
		defer f.store.mu.Unlock()
		return len(f.store.leases) == 0
	})
	f.health.SetState("ns/c", verdict.Healthy, 1)
	waitFor("offered the recovered proxy", func() bool {
		f.store.mu.Lock()
		defer f.store.mu.Unlock()
		e := f.store.entries["ns/c"]
		return e != nil && e.inTree
	})
}

// TestHealthChangedOffersAtOnce: a proxy the prober just found healthy is leasable as soon
// as the prober says so (HealthChanged), not at the next HealthRefresh tick (an hour here):
// /v1/proxies shows it healthy from that moment, and a crawler that leases then must get it.
func TestHealthChangedOffersAtOnce(t *testing.T) {
	f := newFixture(t, spec{name: "a", max: 5, unhealthy: true})
	f.store = NewMemory(Config{Fleet: f.view, Health: f.health, Now: f.clock.Now,
		ReapInterval: time.Hour, HealthRefresh: time.Hour, MinSyncInterval: time.Hour})
	if _, err := f.acquire(t, Request{TTL: time.Minute}); err == nil {
		t.Fatal("leased an unhealthy proxy")
	}
	f.run(t)
	f.health.SetState("ns/a", verdict.Healthy, 1)
	f.store.HealthChanged()
	f.store.HealthChanged() // a second kick while one is pending does not block
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := f.acquire(t, Request{TTL: time.Minute}); err == nil {
			return
		} else if time.Now().After(deadline) {
			t.Fatalf("the recovered proxy is still refused after HealthChanged: %v", err)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestOneHolderPerProxyAndTarget: a proxy leased for a target is not leased for it again
// until that lease ends, while leases for other targets or without one share it as before.
func TestOneHolderPerProxyAndTarget(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, spec{name: "a", max: 4, latency: 1}, spec{name: "b", max: 4, latency: 2}, spec{name: "c", max: 4, unhealthy: true})
	step := func(target, want string) Lease {
		t.Helper()
		l := f.mustAcquire(t, Request{Target: target})
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
	_, err := f.acquire(t, Request{Target: "t.example"})
	var nm *NoMatchError
	if !errors.As(err, &nm) {
		t.Fatalf("third lease for t.example: %v, want a NoMatchError", err)
	}
	want := NoMatchError{Matching: 3, Unhealthy: 1, LeasedForTarget: 2, Target: "t.example", FreeAt: f.clock.Now().Add(time.Minute)}
	if diff := cmp.Diff(want, *nm); diff != "" {
		t.Fatalf("no match (-want +got):\n%s", diff)
	}
	if got := nm.Error(); got != "none of the 3 proxies matching the selector can be leased: 1 unhealthy, 2 already leased for t.example" {
		t.Errorf("reason %q", got)
	}
	// The same session key does not get around it either.
	if _, err := f.acquire(t, Request{Target: "t.example", SessionKey: "s"}); !errors.Is(err, ErrNoMatch) {
		t.Fatalf("lease for t.example with a session key: %v, want ErrNoMatch", err)
	}
	// Ending the lease frees the target on its proxy.
	if err := f.store.Release(ctx, first.ID); err != nil {
		t.Fatal(err)
	}
	step("t.example", "ns/a")
	// So does expiry.
	f.clock.Advance(2 * time.Minute)
	step("t.example", "ns/a")
	f.store.mu.Lock()
	n := len(f.store.byTarget)
	f.store.mu.Unlock()
	if n != 1 {
		t.Fatalf("%d (target, proxy) counts for one live lease with a target, want 1", n)
	}
}
