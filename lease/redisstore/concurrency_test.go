package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/proxy-operator/proxy-operator/internal/clocktest"
	"github.com/proxy-operator/proxy-operator/internal/fleet"
	"github.com/proxy-operator/proxy-operator/internal/redistest"
	"github.com/proxy-operator/proxy-operator/internal/verdict"
	"github.com/proxy-operator/proxy-operator/lease"
)

// staticHealth is every proxy healthy at a latency of its own.
// publish puts proxies into a fleet view and publishes it to s, as the operator does.
func publish(t *testing.T, s *Store, proxies ...fleet.Proxy) {
	t.Helper()
	view := fleet.New(time.Now, 0)
	for _, p := range proxies {
		view.Upsert(p)
	}
	if err := NewPublisher(PublisherConfig{Store: s, Fleet: view, Health: staticHealth{}}).Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// boundedStore is a store on a fresh redis-server that remembers at most 2 cooldowns per proxy
// and 3 in all, on the test clock it returns.
func boundedStore(t *testing.T) (*Store, *clocktest.Clock) {
	t.Helper()
	clock := clocktest.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	s, err := New(Config{Client: newClient(t, redistest.Start(t)), Prefix: freshPrefix(), Now: clock.Now, MaxCooldownsPerProxy: 2, MaxCooldowns: 3})
	if err != nil {
		t.Fatal(err)
	}
	return s, clock
}

type staticHealth struct{}

func (staticHealth) Health(key string) verdict.Health {
	lat := int64(0)
	for _, c := range key {
		lat = (lat*31 + int64(c)) % 97
	}
	return verdict.Health{State: verdict.Healthy, LatencyMillis: 10 + lat}
}

// sharedFleet publishes n proxies over 3 attribute sets into one prefix and returns n
// stores on that prefix, each with its own client: n replicas sharing one Redis.
func sharedFleet(t *testing.T, srv *redistest.Server, proxies, maxLeases, replicas int) []*Store {
	t.Helper()
	prefix := freshPrefix()
	view := fleet.New(time.Now, 0)
	for i := range proxies {
		view.Upsert(fleet.Proxy{Key: fmt.Sprintf("ns/p%03d", i), IP: "10.0.0.1", Port: 3128, MaxLeases: int32(maxLeases),
			Attributes: map[string]string{"geo": []string{"eu", "us", "asia"}[i%3]}})
	}
	var stores []*Store
	for range replicas {
		// Long timeouts (the store's call, the client's reads): these tests are about
		// consistency, and on a busy 2-core machine (-race, other packages in parallel) one
		// of 64 goroutines' calls waited past the default 2 s; a call that times out after
		// its script ran would leave a lease the model does not know.
		c := redis.NewClient(&redis.Options{Addr: srv.Addr, ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second})
		t.Cleanup(func() { c.Close() })
		s, err := New(Config{Client: c, Prefix: prefix, Timeout: 30 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		stores = append(stores, s)
	}
	if err := NewPublisher(PublisherConfig{Store: stores[0], Fleet: view, Health: staticHealth{}}).Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	return stores
}

type coolPair struct{ proxy, target string }

// TestReplicasShareOneState: 3 stores (as 3 discovery replicas) on one real Redis, 64
// goroutines leasing, reporting and releasing through whichever replica they pick. No grant
// may pass a proxy's cap, go to a proxy that a report through any replica put in cooldown for
// the target before the grant was asked for, or to a proxy another live lease holds for the
// same target; at the end the store's counts are the
// model's.
func TestReplicasShareOneState(t *testing.T) {
	srv := redistest.Start(t)
	const maxLeases = 3
	stores := sharedFleet(t, srv, 24, maxLeases, 3)
	ctx := context.Background()
	targets := []string{"never-reported.example", "a.example", "b.example", "c.example"}
	sels := []map[string]string{nil, {"geo": "eu"}, {"geo": "us"}}

	var (
		mu         sync.Mutex
		live       = map[string]int{}    // proxy -> leases the model knows are live
		held       = map[string]string{} // lease -> proxy
		cooled     = map[coolPair]bool{}
		holders    = map[coolPair]int{} // live leases per (proxy, target) the model knows
		grants     int
		noMatch    int
		violations []string
	)
	violate := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		if len(violations) < 20 {
			violations = append(violations, fmt.Sprintf(format, args...))
		}
	}

	var wg sync.WaitGroup
	for g := range 64 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			var mine []lease.Lease
			for range 120 {
				s := stores[rng.IntN(len(stores))]
				switch op := rng.IntN(10); {
				case op < 5 || len(mine) == 0:
					target := targets[rng.IntN(len(targets))]
					mu.Lock()
					before := make(map[coolPair]bool, len(cooled))
					for k := range cooled {
						before[k] = true
					}
					mu.Unlock()
					l, err := s.Acquire(ctx, lease.Request{Selector: sels[rng.IntN(len(sels))], TTL: time.Hour, Target: target})
					if errors.Is(err, lease.ErrNoMatch) {
						mu.Lock()
						noMatch++
						mu.Unlock()
						continue
					}
					if err != nil {
						violate("acquire: %v", err)
						continue
					}
					if l.Active > maxLeases {
						violate("grant on %s reports %d active, cap %d", l.Proxy.Key, l.Active, maxLeases)
					}
					if before[coolPair{l.Proxy.Key, target}] {
						violate("%s granted for %s while a report through another replica cooled it", l.Proxy.Key, target)
					}
					mu.Lock()
					grants++
					live[l.Proxy.Key]++
					held[l.ID] = l.Proxy.Key
					if live[l.Proxy.Key] > maxLeases {
						violations = append(violations, fmt.Sprintf("%s holds %d live leases, cap %d", l.Proxy.Key, live[l.Proxy.Key], maxLeases))
					}
					if holders[coolPair{l.Proxy.Key, target}]++; holders[coolPair{l.Proxy.Key, target}] > 1 {
						violations = append(violations, fmt.Sprintf("%s leased for %s twice at once", l.Proxy.Key, target))
					}
					mu.Unlock()
					mine = append(mine, l)
				case op < 6:
					// Rare reports, so the fleet is not all cooling by the end.
					l := mine[rng.IntN(len(mine))]
					if l.Target == targets[0] || l.Target == "" {
						continue
					}
					c, err := s.Report(ctx, l.ID, lease.Report{Result: lease.ResultBanned, Target: l.Target})
					if err != nil {
						violate("report: %v", err)
						continue
					}
					mu.Lock()
					cooled[coolPair{c.Proxy, c.Target}] = true
					mu.Unlock()
				case op < 7:
					l := mine[rng.IntN(len(mine))]
					if _, err := s.Renew(ctx, l.ID, time.Hour); err != nil {
						violate("renew %s: %v", l.ID, err)
					}
				default:
					i := rng.IntN(len(mine))
					l := mine[i]
					mine = append(mine[:i], mine[i+1:]...)
					// Out of the model before the call: the model never counts a lease the
					// store may already have freed.
					mu.Lock()
					live[l.Proxy.Key]--
					holders[coolPair{l.Proxy.Key, l.Target}]--
					delete(held, l.ID)
					mu.Unlock()
					if err := s.Release(ctx, l.ID); err != nil {
						violate("release: %v", err)
					}
				}
			}
		})
	}
	wg.Wait()
	for _, v := range violations {
		t.Error(v)
	}
	want := map[string]int{}
	for _, p := range held {
		want[p]++
	}
	for _, s := range stores {
		got, err := s.Active(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("leases per proxy, store vs model (-model +store):\n%s", diff)
		}
	}
	t.Logf("%d grants, %d no-match answers, %d (proxy, target) pairs cooled, %d leases held at the end", grants, noMatch, len(cooled), len(held))
	if grants == 0 || noMatch == 0 {
		t.Errorf("the run did not contend: %d grants, %d no-match answers", grants, noMatch)
	}
}

// TestSessionNeverSplits: 64 goroutines ask for leases of 16 session keys at once through 3
// replicas, with room everywhere: each key must map to exactly one proxy, however the first
// grants of a key race.
func TestSessionNeverSplits(t *testing.T) {
	srv := redistest.Start(t)
	stores := sharedFleet(t, srv, 24, 10_000, 3)
	ctx := context.Background()
	var mu sync.Mutex
	bound := map[string]map[string]int{}
	var wg sync.WaitGroup
	for g := range 64 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 11))
			key := fmt.Sprint("session-", g%16)
			for range 40 {
				s := stores[rng.IntN(len(stores))]
				l, err := s.Acquire(ctx, lease.Request{TTL: time.Hour, SessionKey: key})
				if err != nil {
					t.Errorf("acquire: %v", err)
					return
				}
				mu.Lock()
				if bound[key] == nil {
					bound[key] = map[string]int{}
				}
				bound[key][l.Proxy.Key]++
				mu.Unlock()
				if rng.IntN(2) == 0 {
					if err := stores[rng.IntN(len(stores))].Release(ctx, l.ID); err != nil {
						t.Errorf("release: %v", err)
					}
				}
			}
		})
	}
	wg.Wait()
	if len(bound) != 16 {
		t.Fatalf("%d session keys seen, want 16", len(bound))
	}
	for key, proxies := range bound {
		if len(proxies) != 1 {
			t.Errorf("session %s mapped to %d proxies: %v", key, len(proxies), proxies)
		}
	}
}
