package sim_test

import (
	"fmt"
	"math/rand/v2"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
	"github.com/proxy-operator/proxy-operator/health"
	"github.com/proxy-operator/proxy-operator/internal/fleet"
	"github.com/proxy-operator/proxy-operator/internal/verdict"
	"github.com/proxy-operator/proxy-operator/metacontroller/driver"
	"github.com/proxy-operator/proxy-operator/providers"
	"github.com/proxy-operator/proxy-operator/providers/mock"
	"github.com/proxy-operator/proxy-operator/server/hooks"
)

// Status discipline under churn (issue 7, part 5): 200 proxies re-synced for a simulated
// hour, with the health of a few flipping. Every status write must be a health transition,
// apart from the writes that bring each proxy to Ready in the first place, which are counted
// separately and exactly.

// flapHealth is the prober: every proxy healthy, a few flipping at set times, and latency
// jittering by 10x, which status ignores between transitions (decision 0170).
type flapHealth struct {
	mu    sync.Mutex
	state map[string]verdict.Health
	rng   *rand.Rand
}

func (f *flapHealth) Health(key string) verdict.Health {
	f.mu.Lock()
	defer f.mu.Unlock()
	h, ok := f.state[key]
	if !ok {
		h = verdict.Health{State: verdict.Healthy, Since: start}
	}
	h.LatencyMillis = 4 + f.rng.Int64N(37) // 4..40 ms
	return h
}

// flip turns key's health over, as a probe that crossed a threshold at now would.
func (f *flapHealth) flip(key string, now time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	h, ok := f.state[key]
	if !ok {
		h = verdict.Health{State: verdict.Healthy, Since: start}
	}
	h.Since = now
	if h.State == verdict.Healthy {
		h.State, h.Reason = verdict.Unhealthy, "timeout"
	} else {
		h.State, h.Reason = verdict.Healthy, ""
	}
	f.state[key] = h
}

type flipEvent struct {
	at  time.Duration
	key string
}

func TestStatusWritesUnderChurn(t *testing.T) {
	const (
		fleetSize = 200
		externals = 40
		flappers  = 8
		hour      = time.Hour
	)
	clock := driver.NewClock(start)
	cloud, err := mock.New(mock.Config{}, mock.WithClock(clock.Now))
	if err != nil {
		t.Fatal(err)
	}
	hs := &flapHealth{state: map[string]verdict.Health{}, rng: rand.New(rand.NewPCG(7, 7))}
	h := &hooks.Hooks{
		Providers: providers.NewSet(providers.Entry{Name: "mock", Type: "mock", Provider: cloud}),
		Fleet:     fleet.New(clock.Now, time.Minute),
		Health:    hs,
		Now:       clock.Now,
		// As main wires it: 200 proxies at 2.5 resyncs a second is one resync every 80 s.
		HealthResync: health.ResyncPolicy{}.After,
	}
	srv := httptest.NewServer(h.Handler())
	t.Cleanup(srv.Close)
	// resyncPeriodSeconds as metacontroller/compositecontroller.yaml sets it.
	d := &driver.Driver{URL: srv.URL, Clock: clock, ResyncPeriod: 120 * time.Second}

	var keys []string
	isExternal := map[string]bool{}
	for i := range fleetSize {
		var p *v1.Proxy
		if i < externals {
			p = external(fmt.Sprintf("ext-%03d", i))
			isExternal[p.Key()] = true
		} else {
			p = managed(fmt.Sprintf("edge-%03d", i), zones[i%len(zones)])
		}
		keys = append(keys, p.Key())
		if err := d.Apply(p); err != nil {
			t.Fatal(err)
		}
	}
	allReady := func() bool {
		for _, k := range keys {
			if st, _ := d.Status(k); st.Phase != v1.PhaseReady {
				return false
			}
		}
		return true
	}
	// Checked every 30 virtual seconds rather than after every sync: reading 200 statuses per
	// sync would cost more than the syncs.
	for range 10 {
		if err := d.RunFor(30 * time.Second); err != nil {
			t.Fatal(err)
		}
		if allReady() {
			break
		}
	}
	if !allReady() {
		t.Fatal("fleet not Ready within 5 minutes")
	}
	// Initial convergence: an External proxy is Ready on its first sync (one write); a Managed
	// one writes Pending while its credentials Secret is being stored, Provisioning when its
	// create starts and Ready once the machine runs (three).
	initial := map[string]int{}
	initialTotal := 0
	for _, k := range keys {
		initial[k] = d.ParentWrites(k)
		initialTotal += initial[k]
		want := 3
		if isExternal[k] {
			want = 1
		}
		if initial[k] != want {
			t.Errorf("%s: %d writes to reach Ready, want %d", k, initial[k], want)
		}
	}
	if want := externals + 3*(fleetSize-externals); initialTotal != want {
		t.Errorf("initial convergence: %d writes, want %d", initialTotal, want)
	}
	if got := len(cloud.Instances()); got != fleetSize-externals {
		t.Fatalf("%d instances, want %d", got, fleetSize-externals)
	}

	// A few proxies flap, 3 to 7 times each, at least 3 minutes apart: longer than the
	// 80 s health resync, so each transition is synced at least once before the next.
	var events []flipEvent
	flips := map[string]int{}
	for j := range flappers {
		k := keys[j*(fleetSize/flappers)+3] // some External, most Managed
		n := 3 + j%5
		gap := (hour - 5*time.Minute) / time.Duration(n)
		for f := range n {
			events = append(events, flipEvent{at: time.Minute + time.Duration(f)*gap + time.Duration(j)*7*time.Second, key: k})
		}
		flips[k] = n
	}
	slices.SortFunc(events, func(a, b flipEvent) int { return int(a.at - b.at) })
	begin, syncs, writes := clock.Now(), d.Syncs(), d.Writes()
	for _, ev := range events {
		if err := d.RunFor(begin.Add(ev.at).Sub(clock.Now())); err != nil {
			t.Fatal(err)
		}
		hs.flip(ev.key, clock.Now())
	}
	if err := d.RunFor(begin.Add(hour).Sub(clock.Now())); err != nil {
		t.Fatal(err)
	}

	transitions := 0
	for _, k := range keys {
		got := d.ParentWrites(k) - initial[k]
		transitions += flips[k]
		if got != flips[k] {
			t.Errorf("%s: %d status writes in the hour, want %d (its health transitions)", k, got, flips[k])
		}
	}
	churnWrites, churnSyncs := d.Writes()-writes, d.Syncs()-syncs
	if churnWrites != transitions {
		t.Errorf("%d status writes in the hour for %d health transitions, want equal", churnWrites, transitions)
	}
	// Every proxy was resynced all hour long (so the zero-write result means something).
	if minSyncs := fleetSize * int(hour/(120*time.Second)); churnSyncs < minSyncs {
		t.Errorf("%d syncs in the hour, want at least %d", churnSyncs, minSyncs)
	}
	for k, n := range flips {
		want := v1.PhaseReady
		if n%2 == 1 {
			want = v1.PhaseUnhealthy
		}
		if st, _ := d.Status(k); st.Phase != want {
			t.Errorf("%s after %d flips: phase %s, want %s", k, n, st.Phase, want)
		}
	}
	t.Logf("%d proxies (%d External): initial convergence %d writes; over a simulated hour %d syncs, %d health transitions on %d proxies, %d status writes",
		fleetSize, externals, initialTotal, churnSyncs, transitions, flappers, churnWrites)
}
