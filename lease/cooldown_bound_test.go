package lease

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/internal/fleet"
	"github.com/proxy-operator/proxy-operator/internal/verdict"
)

// TestCooldownsAreBounded is the cooldown flood (issue 10, item 1): one lease reporting
// rate_limited with a new target each time used to grow the table without end.
func TestCooldownsAreBounded(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name              string
		perProxy, total   int
		proxies           int
		wantScope         string
		wantLimit         int
		wantRememberedMax int
	}{
		{name: "per proxy", perProxy: 3, total: 100, proxies: 2, wantScope: "proxy", wantLimit: 3, wantRememberedMax: 6},
		{name: "total", perProxy: 100, total: 5, proxies: 2, wantScope: "total", wantLimit: 5, wantRememberedMax: 5},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var specs []spec
			for i := range tc.proxies {
				specs = append(specs, spec{name: fmt.Sprint("p", i), max: 10})
			}
			f := newFixture(t, specs...)
			f.store = NewMemory(Config{Fleet: f.view, Health: f.health, Now: f.clock.Now,
				MaxCooldownsPerProxy: tc.perProxy, MaxCooldowns: tc.total})
			var refused int
			for i := range tc.proxies {
				l := f.mustAcquire(t, Request{Selector: nil})
				for j := range 50 {
					_, err := f.store.Report(ctx, l.ID, Report{Result: ResultRateLimited, Target: fmt.Sprintf("t%d-%d.example", i, j)})
					var tm *TooManyCooldownsError
					switch {
					case err == nil:
					case errors.As(err, &tm):
						refused++
						if !errors.Is(err, ErrTooManyCooldowns) || tm.Scope != tc.wantScope || tm.Limit != tc.wantLimit {
							t.Fatalf("Report refused with %v (scope %q limit %d), want scope %q limit %d", err, tm.Scope, tm.Limit, tc.wantScope, tc.wantLimit)
						}
					default:
						t.Fatalf("Report: %v", err)
					}
				}
			}
			if got := f.store.CooldownCount(); got != tc.wantRememberedMax {
				t.Errorf("%d cooldowns remembered, want %d", got, tc.wantRememberedMax)
			}
			if refused == 0 {
				t.Error("no report refused")
			}
		})
	}
}

func TestCooldownBoundKeepsKnownPairsAndFrees(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, spec{name: "a", max: 10})
	f.store = NewMemory(Config{Fleet: f.view, Health: f.health, Now: f.clock.Now, MaxCooldownsPerProxy: 2})
	l := f.mustAcquire(t, Request{TTL: 30 * 24 * time.Hour})
	for _, target := range []string{"x", "y"} {
		if _, err := f.store.Report(ctx, l.ID, Report{Result: ResultRateLimited, Target: target}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.store.Report(ctx, l.ID, Report{Result: ResultRateLimited, Target: "z"}); !errors.Is(err, ErrTooManyCooldowns) {
		t.Fatalf("third target: %v, want ErrTooManyCooldowns", err)
	}
	// A pair already remembered is still reported at the bound.
	c, err := f.store.Report(ctx, l.ID, Report{Result: ResultRateLimited, Target: "x", RetryAfter: 2 * DefaultRateLimitedCooldown})
	if err != nil || !c.Until.Equal(f.clock.Now().Add(2*DefaultRateLimitedCooldown)) {
		t.Fatalf("second report on x: until %s, %v; want twice the default from now, nil", c.Until, err)
	}
	// y is forgotten after 2x its cooldown: it stops counting at once, without a Reap.
	f.clock.Advance(2 * DefaultRateLimitedCooldown)
	if _, err := f.store.Report(ctx, l.ID, Report{Result: ResultRateLimited, Target: "z"}); err != nil {
		t.Fatalf("after y was forgotten: %v", err)
	}
	f.clock.Advance(7 * 24 * time.Hour)
	f.store.Reap()
	f.store.mu.Lock()
	defer f.store.mu.Unlock()
	if len(f.store.cool) != 0 || len(f.store.coolBy) != 0 || len(f.store.forget) != 0 {
		t.Errorf("after everything was forgotten: %d cooldowns, %d per-proxy counts, %d in the heap; want 0",
			len(f.store.cool), len(f.store.coolBy), len(f.store.forget))
	}
}

// TestSessionsReapedByHeap checks the idle-session heap against the table after bindings move.
func TestSessionsReapedByHeap(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, spec{name: "a", max: 10, latency: 1}, spec{name: "b", max: 10, latency: 2})
	l1 := f.mustAcquire(t, Request{SessionKey: "s"})
	_ = f.store.Release(ctx, l1.ID)
	l2 := f.mustAcquire(t, Request{SessionKey: "s"}) // rebinds the idle session: leaves the heap
	f.clock.Advance(2 * DefaultSessionIdle)
	f.store.Reap()
	f.store.mu.Lock()
	if _, ok := f.store.sessions["s"]; !ok {
		t.Error("session with a live lease reaped")
	}
	f.store.mu.Unlock()
	_ = f.store.Release(ctx, l2.ID)
	f.clock.Advance(DefaultSessionIdle)
	f.store.Reap()
	f.store.mu.Lock()
	defer f.store.mu.Unlock()
	if len(f.store.sessions) != 0 || len(f.store.idle) != 0 {
		t.Errorf("%d sessions, %d idle after the idle time; want 0", len(f.store.sessions), len(f.store.idle))
	}
}

// TestAdmitDeniesLease: a proxy the egress policy refuses is never leased, even when its
// health says Healthy (a recorded status after a restart), and is counted as unhealthy.
func TestAdmitDeniesLease(t *testing.T) {
	f := newFixture(t, spec{name: "meta", max: 10, latency: 1}, spec{name: "ok", max: 10, latency: 50})
	f.store = NewMemory(Config{Fleet: f.view, Health: f.health, Now: f.clock.Now, Admit: func(p fleet.Proxy) error {
		if p.Key == "ns/meta" {
			return errors.New("denied")
		}
		return nil
	}})
	for range 3 {
		if got := f.mustAcquire(t, Request{}).Proxy.Key; got != "ns/ok" {
			t.Fatalf("leased %s, want ns/ok", got)
		}
	}
	f.view.Remove("ns/ok")
	_, err := f.acquire(t, Request{})
	var nm *NoMatchError
	if !errors.As(err, &nm) || nm.Unhealthy != 1 {
		t.Fatalf("Acquire with only the denied proxy: %v, want a NoMatchError with 1 unhealthy", err)
	}
}

// TestAcquireScopedToNamespaces: a caller with lease rights in some namespaces never gets a
// proxy of another, even the best one or the one its session last had.
func TestAcquireScopedToNamespaces(t *testing.T) {
	f := newFixture(t)
	for _, p := range []fleet.Proxy{
		{Key: "team-a/p", UID: "a", IP: "10.0.0.1", Port: 3128, MaxLeases: 10, Attributes: map[string]string{"geo": "eu"}},
		{Key: "team-b/p", UID: "b", IP: "10.0.0.2", Port: 3128, MaxLeases: 10, Attributes: map[string]string{"geo": "eu"}},
	} {
		f.view.Upsert(p)
	}
	f.health.SetState("team-a/p", verdict.Healthy, 90)
	f.health.SetState("team-b/p", verdict.Healthy, 10) // the better one
	if got := f.mustAcquire(t, Request{SessionKey: "s"}).Proxy.Key; got != "team-b/p" {
		t.Fatalf("unscoped lease on %s, want team-b/p", got)
	}
	for range 3 {
		if got := f.mustAcquire(t, Request{SessionKey: "s", Namespaces: []string{"team-a"}}).Proxy.Key; got != "team-a/p" {
			t.Fatalf("lease scoped to team-a on %s", got)
		}
	}
	_, err := f.acquire(t, Request{Namespaces: []string{"team-c"}})
	var nm *NoMatchError
	if !errors.As(err, &nm) || nm.Matching != 0 {
		t.Fatalf("lease scoped to an empty namespace: %v, want no match over 0 proxies", err)
	}
}
