package lease

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

// TestTenantQuotas is issue 21, item 5: team-a filled the store-wide cooldown and session
// tables; team-b's banned report was then refused and its new sessions were not sticky.
// Each namespace now has its share, and a banned report is always recorded.
func TestTenantQuotas(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, spec{name: "a1", ns: "team-a", max: 100}, spec{name: "b1", ns: "team-b", max: 100})
	f.store = NewMemory(Config{Fleet: f.view, Health: f.health, Now: f.clock.Now,
		MaxCooldowns: 6, MaxCooldownsPerNamespace: 4, MaxSessions: 5, MaxSessionsPerNamespace: 3})
	a := f.mustAcquire(t, Request{Namespaces: []string{"team-a"}})
	b := f.mustAcquire(t, Request{Namespaces: []string{"team-b"}})

	// team-a floods rate_limited reports: its share is kept, the rest refused.
	refused := 0
	for i := range 10 {
		_, err := f.store.Report(ctx, a.ID, Report{Result: ResultRateLimited, Target: fmt.Sprintf("t%d.example", i)})
		var tm *TooManyCooldownsError
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
	// team-b is not refused, rate_limited or banned.
	for _, r := range []Result{ResultRateLimited, ResultBanned} {
		if _, err := f.store.Report(ctx, b.ID, Report{Result: r, Target: "b-" + string(r) + ".example"}); err != nil {
			t.Errorf("team-b %s report beside team-a at its share: %v", r, err)
		}
	}
	// team-a's ban is recorded too, in place of its own oldest cooldown.
	c, err := f.store.Report(ctx, a.ID, Report{Result: ResultBanned, Target: "banned.example"})
	if err != nil || c.Until.IsZero() {
		t.Fatalf("team-a banned report at its share: %+v %v, want it recorded", c, err)
	}
	if _, err := f.store.Acquire(ctx, Request{Namespaces: []string{"team-a"}, Target: "banned.example", TTL: a.ExpiresAt.Sub(f.clock.Now())}); !errors.Is(err, ErrNoMatch) {
		t.Errorf("a lease for the banned target after the ban: %v, want no match (the only proxy is cooling)", err)
	}
	f.store.mu.Lock()
	if n := f.store.coolNS["team-a"].Len(); n != 4 {
		t.Errorf("team-a remembers %d cooldowns, want its share 4", n)
	}
	if f.store.cool[coolKey{"t0.example", "team-a/a1"}] != nil {
		t.Errorf("team-a's oldest cooldown was kept; the ban should have taken its place")
	}
	f.store.mu.Unlock()

	// Sessions: team-a mints keys until its share; team-b's key is still bound.
	for i := range 10 {
		f.mustAcquire(t, Request{Namespaces: []string{"team-a"}, SessionKey: fmt.Sprintf("a-%d", i)})
	}
	f.mustAcquire(t, Request{Namespaces: []string{"team-b"}, SessionKey: "b-1"})
	f.store.mu.Lock()
	defer f.store.mu.Unlock()
	if f.store.sessions["b-1"] == nil {
		t.Errorf("team-b's session key was not bound beside team-a at its share")
	}
	if got := f.store.sessNS["team-a"]; got != 3 {
		t.Errorf("team-a has %d bound sessions, want its share 3", got)
	}
}
