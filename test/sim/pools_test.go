package sim_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
	"github.com/proxy-operator/proxy-operator/internal/fleet"
	"github.com/proxy-operator/proxy-operator/internal/pool"
	"github.com/proxy-operator/proxy-operator/lease"
	"github.com/proxy-operator/proxy-operator/metacontroller"
	"github.com/proxy-operator/proxy-operator/metacontroller/driver"
	"github.com/proxy-operator/proxy-operator/providers"
	"github.com/proxy-operator/proxy-operator/providers/mock"
	"github.com/proxy-operator/proxy-operator/server/hooks"
	"github.com/proxy-operator/proxy-operator/server/hooks/poolhook"
)

// poolOperator is the process under test for pools: the proxy hooks, the pool hooks and the
// lease store they share, on one listener. restart replaces all of it with a fresh process
// that remembers nothing (the mock provider is the cloud and survives).
type poolOperator struct {
	cloud  *mock.Provider
	clock  *driver.Clock
	health hooks.HealthSource

	mu       sync.Mutex
	handler  http.Handler
	view     *fleet.View
	store    *lease.Memory
	restarts int
}

func (o *poolOperator) restart() {
	view := fleet.New(o.clock.Now, 0)
	store := lease.NewMemory(lease.Config{Fleet: view, Health: o.health, Now: o.clock.Now})
	h := &hooks.Hooks{
		Providers: providers.NewSet(providers.Entry{Name: "mock", Type: "mock", Provider: o.cloud}),
		Fleet:     view,
		Health:    o.health,
		Now:       o.clock.Now,
		// Health never changes here: a slow steady resync keeps a simulated day cheap.
		HealthResync: func(int, v1.HealthCheckSpec) time.Duration { return 10 * time.Minute },
		Pools:        &poolhook.Hooks{Load: store, Now: o.clock.Now},
	}
	handler := h.Handler()
	o.mu.Lock()
	defer o.mu.Unlock()
	o.handler, o.view, o.store = handler, view, store
	o.restarts++
}

func (o *poolOperator) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	o.mu.Lock()
	h := o.handler
	o.mu.Unlock()
	h.ServeHTTP(w, r)
}

func (o *poolOperator) leases() *lease.Memory {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.store
}

// simScale is the share of a simulated day the long pool scenarios cover: the full day with
// POOL_SIM=full (the figures in docs/reliability.md), a quarter or half of it otherwise, time
// constants scaled alike so the same things happen, only fewer times. `make test` runs with
// -race on a shared machine.
func simScale() float64 {
	if os.Getenv("POOL_SIM") == "full" {
		return 1
	}
	return 0.25
}

type poolEnv struct {
	op  *poolOperator
	ps  *driver.Pools
	inv *invariants
}

func newPoolEnv(t *testing.T, provisioning time.Duration) *poolEnv {
	t.Helper()
	clock := driver.NewClock(start)
	cloud, err := mock.New(mock.Config{ProvisioningDelay: mock.Duration(provisioning)}, mock.WithClock(clock.Now))
	if err != nil {
		t.Fatal(err)
	}
	op := &poolOperator{cloud: cloud, clock: clock, health: alwaysHealthy{since: start}}
	op.restart()
	srv := httptest.NewServer(op)
	t.Cleanup(srv.Close)
	d := &driver.Driver{URL: srv.URL, Clock: clock, ResyncPeriod: 120 * time.Second}
	e := &poolEnv{op: op, ps: &driver.Pools{Proxies: d, URL: srv.URL + "/pools", ResyncPeriod: 120 * time.Second}}
	return e
}

func webPool(replicas int32) *v1.ProxyPool {
	return &v1.ProxyPool{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "crawl"},
		Spec: v1.ProxyPoolSpec{
			Replicas:     &replicas,
			DrainSeconds: i32p(120),
			Template: v1.ProxyTemplate{Spec: v1.ProxySpec{
				Mode: v1.ModeManaged, Provider: "mock", MaxLeases: i32p(10),
				Placement: &v1.PlacementSpec{Region: "local", Zone: "local-a", Image: "squid-6"},
			}},
		},
	}
}

func i32p(v int32) *int32 { return &v }

// invariants checks, after every sync of either level, that a pool never has more members
// than replicas + maxSurge (a scale-down's draining surplus aside) and, once it first had
// replicas healthy members, never fewer healthy non-draining members than replicas -
// maxUnavailable. It records the extremes for the report.
type invariants struct {
	ps  *driver.Pools
	key string

	generation  int64
	reached     bool
	minHealthy  int32
	maxMembers  int32
	violations  []string
	checks      int
	lastDesired int32
}

func (iv *invariants) check() {
	p, ok := iv.ps.Pool(iv.key)
	if !ok {
		return
	}
	iv.checks++
	spec := p.Spec
	spec.Default()
	r := *spec.Replicas
	if spec.Autoscale != nil {
		r = p.Status.DesiredReplicas
	}
	if p.Generation != iv.generation || r != iv.lastDesired {
		if r > iv.lastDesired {
			iv.reached = false // a larger size is not there at once
		}
		iv.generation, iv.lastDesired = p.Generation, r
	}
	surge, unavailable := spec.SurgeAndUnavailable(r)
	var total, healthy int32
	for _, m := range iv.ps.Members(iv.key) {
		if m.Annotations[v1.PoolDrainReasonAnnotation] != pool.ReasonScaleDown {
			total++
		}
		if m.DeletionTimestamp == nil && m.Labels[v1.PoolDrainingLabel] != "true" && m.Status.Phase == v1.PhaseReady {
			healthy++
		}
	}
	iv.maxMembers = max(iv.maxMembers, total)
	if total > r+surge && p.DeletionTimestamp == nil {
		iv.violations = append(iv.violations, fmt.Sprintf("%s: %d members > replicas %d + maxSurge %d", iv.ps.Proxies.Clock.Now().Format(time.TimeOnly), total, r, surge))
	}
	if healthy >= r {
		if !iv.reached {
			iv.minHealthy = healthy
		}
		iv.reached = true
	}
	if iv.reached && p.DeletionTimestamp == nil {
		iv.minHealthy = min(iv.minHealthy, healthy)
		if healthy < r-unavailable {
			iv.violations = append(iv.violations, fmt.Sprintf("%s: %d healthy members < replicas %d - maxUnavailable %d", iv.ps.Proxies.Clock.Now().Format(time.TimeOnly), healthy, r, unavailable))
		}
	}
}

func (e *poolEnv) watch(key string) *invariants {
	e.inv = &invariants{ps: e.ps, key: key}
	e.ps.AfterSync = e.inv.check
	return e.inv
}

func (iv *invariants) assert(t *testing.T) {
	t.Helper()
	if iv.checks == 0 {
		t.Fatal("the invariants were never checked")
	}
	if len(iv.violations) > 0 {
		t.Fatalf("%d invariant violations, first: %v", len(iv.violations), iv.violations[:min(5, len(iv.violations))])
	}
}

// settled: the pool has exactly replicas members, all current, healthy and none draining.
func (e *poolEnv) settled(key string) func() bool {
	return func() bool {
		p, ok := e.ps.Pool(key)
		if !ok || p.Status.ObservedGeneration != p.Generation || p.Status.TemplateHash == "" {
			return false
		}
		if p.Spec.Autoscale == nil && p.Status.DesiredReplicas != *p.Spec.Replicas {
			return false
		}
		ms := e.ps.Members(key)
		if int32(len(ms)) != p.Status.DesiredReplicas || p.Status.DesiredReplicas == 0 && len(ms) > 0 {
			return false
		}
		for _, m := range ms {
			if m.Status.Phase != v1.PhaseReady || m.Labels[v1.PoolDrainingLabel] != "" || m.DeletionTimestamp != nil ||
				m.Annotations[v1.PoolTemplateHashAnnotation] != p.Status.TemplateHash {
				return false
			}
		}
		return p.Status.HealthyReplicas == p.Status.DesiredReplicas
	}
}

func (e *poolEnv) mustSettle(t *testing.T, key string, limit time.Duration) {
	t.Helper()
	if err := e.ps.RunUntil(e.settled(key), limit); err != nil {
		p, _ := e.ps.Pool(key)
		var names []string
		for _, m := range e.ps.Members(key) {
			names = append(names, fmt.Sprintf("%s(%s,%s)", m.Name, m.Status.Phase, m.Labels[v1.PoolDrainingLabel]))
		}
		t.Fatalf("pool %s not settled: %v; status %+v; members %v; events %v %v", key, err, p.Status, names, e.ps.PoolEvents(), e.ps.Proxies.Events())
	}
}

// instancesOwnedByLiveProxies checks the cloud against the proxy level: every running
// instance belongs to a live member and no member has two (0 leaks, 0 duplicates).
func (e *poolEnv) checkCloud(t *testing.T) {
	t.Helper()
	live := map[string]bool{}
	for _, k := range e.ps.Proxies.Keys() {
		p, _ := e.ps.Proxies.Get(k)
		live[string(p.UID)] = true
	}
	per := map[string]int{}
	for _, inst := range e.op.cloud.Instances() {
		if inst.State == providers.StateTerminated {
			continue
		}
		per[inst.OwnerUID]++
		if !live[inst.OwnerUID] {
			t.Errorf("leaked instance %s (owner %s is gone)", inst.ID, inst.OwnerUID)
		}
	}
	for uid, n := range per {
		if n > 1 {
			t.Errorf("owner %s has %d instances", uid, n)
		}
	}
}

func TestPoolRollout(t *testing.T) {
	e := newPoolEnv(t, 30*time.Second)
	p := webPool(5)
	iv := e.watch(p.Key())
	if err := e.ps.ApplyPool(p); err != nil {
		t.Fatal(err)
	}
	e.mustSettle(t, p.Key(), 10*time.Minute)
	first := map[string]bool{}
	for _, m := range e.ps.Members(p.Key()) {
		first[m.Name] = true
	}

	p.Spec.Template.Spec.Placement.Image = "squid-7"
	if err := e.ps.ApplyPool(p); err != nil {
		t.Fatal(err)
	}
	started := e.ps.Proxies.Clock.Now()
	e.mustSettle(t, p.Key(), time.Hour)
	iv.assert(t)
	took := e.ps.Proxies.Clock.Now().Sub(started)
	for _, m := range e.ps.Members(p.Key()) {
		if first[m.Name] {
			t.Errorf("member %s survived the rollout", m.Name)
		}
		if m.Spec.Placement.Image != "squid-7" {
			t.Errorf("member %s runs %s", m.Name, m.Spec.Placement.Image)
		}
	}
	e.checkCloud(t)
	t.Logf("rollout of 5 members (maxSurge 1, maxUnavailable 0, 30 s provisioning): %s simulated, min healthy %d, max members %d, %d checks",
		took, iv.minHealthy, iv.maxMembers, iv.checks)
	if iv.minHealthy < 5 || iv.maxMembers > 6 {
		t.Errorf("min healthy %d, max members %d; want 5 and at most 6", iv.minHealthy, iv.maxMembers)
	}
}

func TestPoolMaxAgeDay(t *testing.T) {
	f := simScale()
	day := time.Duration(f * float64(24*time.Hour))
	e := newPoolEnv(t, 45*time.Second)
	p := webPool(5)
	p.Spec.Rotation = &v1.PoolRotation{MaxAge: &metav1.Duration{Duration: day / 4}}
	iv := e.watch(p.Key())
	if err := e.ps.ApplyPool(p); err != nil {
		t.Fatal(err)
	}
	e.mustSettle(t, p.Key(), 10*time.Minute)
	created := map[string]time.Time{}
	track := func() {
		for _, m := range e.ps.Members(p.Key()) {
			if _, ok := created[m.Name]; !ok {
				created[m.Name] = m.CreationTimestamp.Time
			}
		}
	}
	track()
	prev := e.ps.AfterSync
	e.ps.AfterSync = func() { prev(); track() }
	if err := e.ps.RunFor(day); err != nil {
		t.Fatal(err)
	}
	iv.assert(t)
	e.checkCloud(t)
	rotations := len(created) - 5
	perMember := float64(rotations) / 5
	t.Logf("%s of maxAge %s rotation, 5 members: %d members made after the first 5 (%.1f rotations per member slot), min healthy %d, max members %d, %d pool syncs, %d proxy syncs",
		day, day/4, rotations, perMember, iv.minHealthy, iv.maxMembers, e.ps.PoolSyncs(), e.ps.Proxies.Syncs())
	// About N members per maxAge: the first 5 turn over at maxAge, 2 maxAge and 3 maxAge (15),
	// the members made during a turnover a little later each time.
	if rotations < 15 || rotations > 25 {
		t.Errorf("%d rotations in a day, want about 20", rotations)
	}
	if iv.minHealthy < 5 {
		t.Errorf("min healthy %d during rotation, want 5 (maxUnavailable 0)", iv.minHealthy)
	}
}

func TestPoolBanRotation(t *testing.T) {
	e := newPoolEnv(t, 20*time.Second)
	p := webPool(3)
	p.Spec.Rotation = &v1.PoolRotation{BanThreshold: i32p(2)}
	iv := e.watch(p.Key())
	if err := e.ps.ApplyPool(p); err != nil {
		t.Fatal(err)
	}
	e.mustSettle(t, p.Key(), 10*time.Minute)
	ctx := context.Background()
	store := e.op.leases()
	l, err := store.Acquire(ctx, lease.Request{Selector: map[string]string{v1.PoolAttribute: "web"}, TTL: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	burned := l.Proxy.Key
	for _, target := range []string{"shop.example", "news.example"} {
		if _, err := store.Report(ctx, l.ID, lease.Report{Result: lease.ResultBanned, Target: target}); err != nil {
			t.Fatal(err)
		}
	}
	// The pool drains the burned member; its own sync carries the mark into the fleet view,
	// and from then on the store leases it no more while the lease held on it keeps working.
	draining := func() bool {
		for _, m := range e.ps.Members(p.Key()) {
			if m.Key() == burned && m.Labels[v1.PoolDrainingLabel] == "true" {
				fp, ok := e.op.view.Get(burned)
				return ok && fp.Draining
			}
		}
		return false
	}
	if err := e.ps.RunUntil(draining, 30*time.Minute); err != nil {
		t.Fatalf("the burned member %s was not drained: %v", burned, err)
	}
	for range 12 {
		nl, err := store.Acquire(ctx, lease.Request{Selector: map[string]string{v1.PoolAttribute: "web"}, TTL: time.Minute})
		if err != nil {
			break
		}
		if nl.Proxy.Key == burned {
			t.Fatalf("a lease was granted on the draining member %s", burned)
		}
		_ = store.Release(ctx, nl.ID)
	}
	if _, err := store.Renew(ctx, l.ID, 10*time.Minute); err != nil {
		t.Errorf("the lease held on the draining member stopped working: %v", err)
	}
	if err := store.Release(ctx, l.ID); err != nil {
		t.Fatal(err)
	}
	gone := func() bool {
		for _, m := range e.ps.Members(p.Key()) {
			if m.Key() == burned {
				return false
			}
		}
		return true
	}
	if err := e.ps.RunUntil(func() bool { return gone() && e.settled(p.Key())() }, 30*time.Minute); err != nil {
		t.Fatalf("the burned member %s was not replaced: %v", burned, err)
	}
	iv.assert(t)
	e.checkCloud(t)
	if iv.minHealthy < 3 {
		t.Errorf("min healthy %d during the ban rotation, want 3", iv.minHealthy)
	}
}

// TestPoolAutoscaleDay drives an autoscaled pool with a synthetic day of crawler demand (a
// night low of 10 leases, a day high of 150, two bursts) through the real lease store, and
// reports how long utilization stayed outside the target band and how often the pool scaled.
func TestPoolAutoscaleDay(t *testing.T) {
	e := newPoolEnv(t, 30*time.Second)
	p := webPool(2)
	p.Spec.Autoscale = &v1.PoolAutoscale{MinReplicas: i32p(2), MaxReplicas: 30, TargetLeaseUtilization: i32p(70), ScaleDownStabilizationSeconds: i32p(600)}
	iv := e.watch(p.Key())
	if err := e.ps.ApplyPool(p); err != nil {
		t.Fatal(err)
	}
	e.mustSettle(t, p.Key(), 10*time.Minute)
	ctx := context.Background()
	f := simScale()
	minutes := int(f * 24 * 60)
	demand := func(t time.Duration) int {
		h := t.Hours() / f // the day's shape, compressed into f of a day
		d := 10.0
		switch {
		case h >= 7 && h < 9:
			d = 10 + 140*(h-7)/2
		case h >= 9 && h < 18:
			d = 150
		case h >= 18 && h < 21:
			d = 150 - 140*(h-18)/3
		}
		if (h >= 12 && h < 12.5) || (h >= 22 && h < 22.25) {
			d += 60 // bursts
		}
		return int(d)
	}
	held := []string{}
	var outside, denied, unmetMinutes int
	var lastDesired int32
	scaleEvents := 0
	begin := e.ps.Proxies.Clock.Now()
	for minute := 0; minute < minutes; minute++ {
		store := e.op.leases()
		want := demand(time.Duration(minute) * time.Minute)
		// Crawlers release what they no longer need, oldest first, and ask for the rest.
		for len(held) > want {
			_ = store.Release(ctx, held[0])
			held = held[1:]
		}
		unmet := false
		for len(held) < want {
			l, err := store.Acquire(ctx, lease.Request{Selector: map[string]string{v1.PoolAttribute: "web"}, TTL: time.Hour})
			if err != nil {
				denied++
				unmet = true
				break
			}
			held = append(held, l.ID)
		}
		if unmet {
			unmetMinutes++
		}
		for _, id := range held {
			_, _ = store.Renew(ctx, id, time.Hour)
		}
		if err := e.ps.RunFor(time.Minute); err != nil {
			t.Fatal(err)
		}
		pp, _ := e.ps.Pool(p.Key())
		if pp.Status.DesiredReplicas != lastDesired && minute > 0 {
			scaleEvents++
		}
		lastDesired = pp.Status.DesiredReplicas
		u := pp.Status.UtilizationPercent
		// The band: within 20 points of the target, or at minReplicas with less demand.
		atMin := pp.Status.DesiredReplicas == 2 && u < 70
		if !atMin && (u < 50 || u > 90) {
			outside++
		}
	}
	iv.assert(t)
	e.checkCloud(t)
	t.Logf("a day of demand (10 -> 150 leases, two bursts) in %d simulated minutes from %s: utilization outside 50-90%% for %d minutes (%.1f %%), "+
		"%d scale events, %d minutes with a refused lease (%d refusals), max members %d, %d pool syncs, %d proxy syncs",
		minutes, begin.Format(time.TimeOnly), outside, 100*float64(outside)/float64(minutes), scaleEvents, unmetMinutes, denied, iv.maxMembers, e.ps.PoolSyncs(), e.ps.Proxies.Syncs())
	if outside > minutes/6 {
		t.Errorf("utilization outside the band for %d of %d minutes, want at most a sixth", outside, minutes)
	}
	if scaleEvents == 0 || scaleEvents > 200 {
		t.Errorf("%d scale events in a day", scaleEvents)
	}
}

func TestPoolDeleteRemovesEverything(t *testing.T) {
	e := newPoolEnv(t, 10*time.Second)
	p := webPool(4)
	if err := e.ps.ApplyPool(p); err != nil {
		t.Fatal(err)
	}
	e.mustSettle(t, p.Key(), 10*time.Minute)
	if n := len(e.op.cloud.Instances()); n != 4 {
		t.Fatalf("%d instances before delete, want 4", n)
	}
	if err := e.ps.DeletePool(p.Key()); err != nil {
		t.Fatal(err)
	}
	if err := e.ps.RunUntil(func() bool { _, ok := e.ps.Pool(p.Key()); return !ok }, 30*time.Minute); err != nil {
		t.Fatalf("pool not finalized: %v; members %d", err, len(e.ps.Members(p.Key())))
	}
	if keys := e.ps.Proxies.Keys(); len(keys) != 0 {
		t.Errorf("proxies left after the pool was deleted: %v", keys)
	}
	var running []string
	for _, inst := range e.op.cloud.Instances() {
		if inst.State != providers.StateTerminated {
			running = append(running, inst.ID)
		}
	}
	if len(running) != 0 {
		t.Errorf("instances left after the pool was deleted: %v", running)
	}
}

// TestPoolCrashSchedules kills the operator (fresh hooks, fleet view and lease store) at
// random points of rollouts and rotations, and drops answers as if the process died before
// Metacontroller applied them, at both levels. Invariants hold throughout; at the end the
// pool settles with no duplicate instance and no leak.
func TestPoolCrashSchedules(t *testing.T) {
	schedules := 5 // POOL_CRASH_SCHEDULES=N for more
	if n, err := strconv.Atoi(os.Getenv("POOL_CRASH_SCHEDULES")); err == nil && n > 0 {
		schedules = n
	}
	totalKills, totalDrops := 0, 0
	for seed := range schedules {
		t.Run(fmt.Sprintf("seed-%d", seed), func(t *testing.T) {
			e := newPoolEnv(t, 30*time.Second)
			rng := rand.New(rand.NewPCG(uint64(seed), 11))
			p := webPool(4)
			p.Spec.Rotation = &v1.PoolRotation{MaxAge: &metav1.Duration{Duration: 2 * time.Hour}}
			iv := e.watch(p.Key())
			kills, drops := 0, 0
			drop := func() bool {
				switch x := rng.IntN(100); {
				case x < 4:
					e.op.restart()
					kills++
					return false
				case x < 8:
					drops++
					return false
				}
				return true
			}
			e.ps.BeforeApply = func(string, *metacontroller.SyncResponse) bool { return drop() }
			e.ps.Proxies.BeforeApply = func(string, *metacontroller.SyncResponse) bool { return drop() }
			if err := e.ps.ApplyPool(p); err != nil {
				t.Fatal(err)
			}
			e.mustSettle(t, p.Key(), time.Hour)
			for round := range 3 {
				switch round {
				case 0:
					p.Spec.Template.Spec.Placement.Image = fmt.Sprintf("squid-%d", 7+seed)
				case 1:
					p.Spec.Replicas = i32p(6)
				case 2:
					p.Spec.Template.Spec.Placement.Zone = "local-b"
				}
				if err := e.ps.ApplyPool(p); err != nil {
					t.Fatal(err)
				}
				e.mustSettle(t, p.Key(), 2*time.Hour)
			}
			// A stretch of maxAge rotation with crashes.
			if err := e.ps.RunFor(3 * time.Hour); err != nil {
				t.Fatal(err)
			}
			e.ps.BeforeApply, e.ps.Proxies.BeforeApply = nil, nil
			e.mustSettle(t, p.Key(), 2*time.Hour)
			iv.assert(t)
			e.checkCloud(t)
			t.Logf("restarts %d, dropped answers %d", kills, drops)
			totalKills += kills
			totalDrops += drops
			if n := len(e.ps.Proxies.Keys()); n != 6 {
				t.Errorf("%d proxies at the end, want 6", n)
			}
		})
	}
	t.Logf("%d crash schedules: %d operator restarts, %d dropped answers; invariants held, 0 duplicates, 0 leaks", schedules, totalKills, totalDrops)
	if totalKills == 0 || totalDrops == 0 {
		t.Errorf("the schedules never killed (%d) or dropped (%d)", totalKills, totalDrops)
	}
}
