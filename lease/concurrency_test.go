package lease

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/proxy-operator/proxy-operator/internal/clocktest"
	"github.com/proxy-operator/proxy-operator/internal/fleet"
	"github.com/proxy-operator/proxy-operator/internal/healthtest"
	"github.com/proxy-operator/proxy-operator/internal/verdict"
)

// model is the test's own account of the store, kept from the store's event stream (which
// arrives in the order the store applied changes) and checked at every grant.
type model struct {
	max        map[string]int
	health     *healthtest.Map
	held       map[string]string // lease ID -> proxy
	count      map[string]int
	cool       map[coolKey]time.Time
	byTarget   map[coolKey]int // live leases per (target, proxy)
	grants     int
	violations []string
}

func (m *model) observe(e Event) {
	switch e.Kind {
	case EventGranted:
		m.grants++
		m.held[e.LeaseID] = e.Proxy
		m.count[e.Proxy]++
		if m.count[e.Proxy] > m.max[e.Proxy] {
			m.violations = append(m.violations, fmt.Sprintf("%s holds %d leases, max %d", e.Proxy, m.count[e.Proxy], m.max[e.Proxy]))
		}
		// Health only changes while no store call runs (see flip), so the fake's current
		// verdict is the one in force at the grant.
		if h := m.health.Health(e.Proxy); h.State != verdict.Healthy || e.Health.State != verdict.Healthy {
			m.violations = append(m.violations, fmt.Sprintf("%s leased while %s", e.Proxy, h.State))
		}
		if e.Target != "" {
			k := coolKey{e.Target, e.Proxy}
			if until, ok := m.cool[k]; ok && e.At.Before(until) {
				m.violations = append(m.violations, fmt.Sprintf("%s leased for %s at %s while cooling until %s", e.Proxy, e.Target, e.At, until))
			}
			if m.byTarget[k]++; m.byTarget[k] > 1 {
				m.violations = append(m.violations, fmt.Sprintf("%s leased for %s while another lease holds it for that target", e.Proxy, e.Target))
			}
		}
	case EventReleased, EventExpired, EventDropped:
		p, ok := m.held[e.LeaseID]
		if !ok || p != e.Proxy {
			m.violations = append(m.violations, fmt.Sprintf("%s of lease %s on %s that the model does not hold", e.Kind, e.LeaseID, e.Proxy))
			return
		}
		delete(m.held, e.LeaseID)
		if e.Target != "" {
			if k := (coolKey{e.Target, e.Proxy}); m.byTarget[k] <= 1 {
				delete(m.byTarget, k)
			} else {
				m.byTarget[k]--
			}
		}
		m.count[e.Proxy]--
		if m.count[e.Proxy] == 0 {
			delete(m.count, e.Proxy)
		}
	case EventCooled:
		k := coolKey{e.Target, e.Proxy}
		if e.Until.After(m.cool[k]) {
			m.cool[k] = e.Until
		}
	}
}

// TestConcurrentInvariants runs 64 goroutines of random leases, renewals, releases, reports,
// clock jumps, health flips and fleet churn against one store (with its Run loop), then
// checks that no grant broke capacity, health or cooldown, and that the store's counts are
// the model's. LEASE_STRESS_SECONDS sets the length (default 10, 2 with -short).
func TestConcurrentInvariants(t *testing.T) {
	seconds := 10
	if testing.Short() {
		seconds = 2
	}
	if s := os.Getenv("LEASE_STRESS_SECONDS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("LEASE_STRESS_SECONDS=%q: %v", s, err)
		}
		seconds = n
	}

	clock := clocktest.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	view := fleet.New(clock.Now, 0)
	health := &healthtest.Map{}
	md := &model{max: map[string]int{}, health: health, held: map[string]string{}, count: map[string]int{}, cool: map[coolKey]time.Time{}, byTarget: map[coolKey]int{}}
	const proxies = 40
	records := make([]fleet.Proxy, proxies)
	for i := range proxies {
		p := fleet.Proxy{Key: fmt.Sprintf("ns/p%02d", i), IP: "10.0.0.1", Port: 3128, MaxLeases: int32(1 + i%4),
			Attributes: map[string]string{"geo": []string{"eu", "us"}[i%2], "tier": strconv.Itoa(i % 3)}}
		records[i] = p
		md.max[p.Key] = int(p.MaxLeases)
		view.Upsert(p)
		health.SetState(p.Key, verdict.Healthy, int64(rand.IntN(100)))
	}
	store := NewMemory(Config{Fleet: view, Health: health, Now: clock.Now, Observe: md.observe,
		ReapInterval: 5 * time.Millisecond, HealthRefresh: 7 * time.Millisecond, MinSyncInterval: time.Millisecond})

	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	go func() { runDone <- store.Run(ctx) }()

	// world is held for reading by every store call and for writing by a health flip, so a
	// flip never lands between a grant's health read and the model's check of it.
	var world sync.RWMutex
	var ops, noMatch, notFound atomic.Int64
	deadline := time.Now().Add(time.Duration(seconds) * time.Second)
	selectors := []map[string]string{nil, {"geo": "eu"}, {"geo": "us", "tier": "1"}, {"tier": "2"}}
	targets := []string{"", "a.example", "b.example", "c.example"}
	var wg sync.WaitGroup
	for g := range 64 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			var mine []string
			pick := func() string {
				if len(mine) == 0 {
					return "unknown"
				}
				return mine[rng.IntN(len(mine))]
			}
			for time.Now().Before(deadline) {
				ops.Add(1)
				switch op := rng.IntN(100); {
				case op < 2: // health flip
					world.Lock()
					k := records[rng.IntN(proxies)].Key
					state := verdict.Healthy
					if rng.IntN(3) == 0 {
						state = verdict.Unhealthy
					}
					health.SetState(k, state, int64(rng.IntN(100)))
					world.Unlock()
					continue
				case op < 3: // fleet churn: a proxy leaves and comes back
					p := records[rng.IntN(proxies)]
					view.Remove(p.Key)
					view.Upsert(p)
					continue
				case op < 10: // time passes
					clock.Advance(time.Duration(rng.IntN(3000)) * time.Millisecond)
					continue
				}
				world.RLock()
				switch op := rng.IntN(100); {
				case op < 45:
					l, err := store.Acquire(ctx, Request{
						Selector: selectors[rng.IntN(len(selectors))], TTL: time.Duration(1+rng.IntN(20)) * time.Second,
						Target: targets[rng.IntN(len(targets))], SessionKey: []string{"", "s1", "s2", "s3"}[rng.IntN(4)],
					})
					switch {
					case err == nil:
						mine = append(mine, l.ID)
					case errors.Is(err, ErrNoMatch):
						noMatch.Add(1)
					default:
						t.Errorf("Acquire: %v", err)
					}
				case op < 65:
					_ = store.Release(ctx, pick())
				case op < 80:
					if _, err := store.Renew(ctx, pick(), time.Duration(1+rng.IntN(20))*time.Second); errors.Is(err, ErrNotFound) {
						notFound.Add(1)
					}
				default:
					r := Report{Result: []Result{ResultOK, ResultRateLimited, ResultBanned}[rng.IntN(3)],
						Target: targets[1+rng.IntN(len(targets)-1)], RetryAfter: time.Duration(rng.IntN(40)) * time.Second}
					_, _ = store.Report(ctx, pick(), r)
				}
				world.RUnlock()
				if len(mine) > 64 {
					mine = mine[32:]
				}
			}
		})
	}
	wg.Wait()
	cancel()
	if err := <-runDone; err != nil {
		t.Errorf("Run: %v", err)
	}

	// Settle: apply the last fleet changes so dropped leases are out of both accounts.
	store.Sync()
	store.Reap()
	store.mu.Lock()
	grants, violations := md.grants, md.violations
	wantCounts := map[string]int{}
	for k, v := range md.count {
		wantCounts[k] = v
	}
	store.mu.Unlock()

	t.Logf("%d ops, %d grants, %d no-match, %d renewals of gone leases", ops.Load(), grants, noMatch.Load(), notFound.Load())
	for i, v := range violations {
		if i == 10 {
			t.Errorf("... and %d more", len(violations)-10)
			break
		}
		t.Error(v)
	}
	if grants < 1000 || noMatch.Load() == 0 {
		t.Errorf("%d grants and %d no-matches: the run did not exercise both paths", grants, noMatch.Load())
	}
	if diff := cmp.Diff(wantCounts, store.ActiveByProxy()); diff != "" {
		t.Errorf("active leases per proxy mismatch (-model +store):\n%s", diff)
	}
	total := 0
	for _, n := range wantCounts {
		total += n
	}
	if got := store.ActiveCount(); got != total {
		t.Errorf("ActiveCount %d, model holds %d", got, total)
	}
	// The index agrees with the leases: every entry's load is its lease count.
	store.mu.Lock()
	for k, e := range store.entries {
		if e.load != wantCounts[k] {
			t.Errorf("index load of %s is %d, model %d", k, e.load, wantCounts[k])
		}
	}
	storeByTarget := map[coolKey]int{}
	for k, l := range store.byTarget {
		if l != nil && store.leases[l.id] == l {
			storeByTarget[k]++
		}
	}
	if diff := cmp.Diff(md.byTarget, storeByTarget, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("leases per (target, proxy) mismatch (-model +store):\n%s", diff)
	}
	store.mu.Unlock()
}
