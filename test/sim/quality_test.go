package sim_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
	"github.com/proxy-operator/proxy-operator/internal/pool"
	"github.com/proxy-operator/proxy-operator/lease"
	"github.com/proxy-operator/proxy-operator/metacontroller/driver"
	"github.com/proxy-operator/proxy-operator/providers/factory"
	"github.com/proxy-operator/proxy-operator/providers/mock"
	"github.com/proxy-operator/proxy-operator/server"
)

// Pool replacement by quality (issue 23) under the driver: the whole operator process
// (server.New: hooks, pool hooks, prober, lease store wrapped so reports feed the score) with
// the mock provider serving a real forward proxy on each instance's own 127.x address.
// Metacontroller's two loops are played in real time (the prober and the provider run on
// the wall clock), so the driver's clock follows it.

// qualityEnv is the operator and the two controller loops played against it.
type qualityEnv struct {
	op *server.Operator
	ps *driver.Pools
}

func newQualityEnv(t *testing.T) *qualityEnv {
	t.Helper()
	op, err := server.New(server.Config{
		Hooks:     server.HooksConfig{Addr: "127.0.0.1:0"},
		Discovery: server.DiscoveryAPIConfig{Addr: "127.0.0.1:0", Token: "t0ken-0123456789abcdef"},
		Quality:   server.QualityConfig{EchoAddr: "127.0.0.1:0"},
		Providers: server.ProvidersConfig{Parsed: &factory.Config{Providers: []factory.Entry{{
			Name: "mock", Type: "mock", Mock: &mock.Config{ServeProxies: true, ProvisioningDelay: mock.Duration(time.Second)},
		}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- op.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	// The operator has no Kubernetes client here, so no health annotation wakes a Proxy on
	// a band change: the proxy level's resync carries it to status instead.
	d := &driver.Driver{URL: "http://" + op.HookAddr(), Clock: driver.NewClock(time.Now()), ResyncPeriod: 2 * time.Second}
	return &qualityEnv{op: op, ps: &driver.Pools{Proxies: d, URL: "http://" + op.HookAddr() + "/pools", ResyncPeriod: 5 * time.Second}}
}

// run plays both controllers with the clock at the wall clock's time until cond holds,
// failing after limit of real time.
func (e *qualityEnv) run(t *testing.T, what string, cond func() bool, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			pp, _ := e.ps.Pool("crawl/web")
			t.Fatalf("%s: not within %s; pool status %+v (%d syncs); members %s; pool events %v; proxy events %v", what, limit, pp.Status, e.ps.PoolSyncs(), e.describe(), e.ps.PoolEvents(), e.ps.Proxies.Events())
		}
		e.ps.Proxies.Clock.AdvanceTo(time.Now())
		if err := e.ps.RunFor(0); err != nil {
			t.Fatal(err)
		}
		<-tick.C
	}
}

func (e *qualityEnv) describe() string {
	var out []string
	for _, m := range e.ps.Members("crawl/web") {
		out = append(out, fmt.Sprintf("%s(%s,band=%q,draining=%q,reason=%q,live=%q)", m.Name, m.Status.Phase, m.Status.QualityBand,
			m.Labels[v1.PoolDrainingLabel], m.Annotations[v1.PoolDrainReasonAnnotation], e.op.Health().Health(m.Key()).Band))
	}
	return fmt.Sprint(out)
}

// available is whether a member serves crawlers: the pool sees it Ready, healthy and not on
// its way out, and the lease store would lease it now (lease.Leasable over the operator's
// fleet view and the prober's live verdict).
func (e *qualityEnv) available(m v1.Proxy) bool {
	if m.DeletionTimestamp != nil || m.Labels[v1.PoolDrainingLabel] != "" || m.Status.Phase != v1.PhaseReady {
		return false
	}
	healthy := false
	for _, c := range m.Status.Conditions {
		if c.Type == v1.ConditionHealthy {
			healthy = c.Status == metav1.ConditionTrue
		}
	}
	fp, ok := e.op.Fleet().Get(m.Key())
	return healthy && ok && lease.Leasable(fp, e.op.Health().Health(m.Key()))
}

// qualityInvariants is checked after every sync of either level.
type qualityInvariants struct {
	e    *qualityEnv
	key  string
	poor map[string]bool // members made Poor on purpose; nil until then

	reached      bool
	checks       int
	minAvailable int
	maxMembers   int
	replaced     map[string]string // member -> drain reason
	violations   []string
	poolStatus   []byte
	poolWrites   int
}

func (iv *qualityInvariants) check() {
	p, ok := iv.e.ps.Pool(iv.key)
	if !ok {
		return
	}
	iv.checks++
	spec := p.Spec
	spec.Default()
	r := *spec.Replicas
	surge, unavailable := spec.SurgeAndUnavailable(r)
	now := iv.e.ps.Proxies.Clock.Now().Format(time.TimeOnly)
	members := iv.e.ps.Members(iv.key)
	available := 0
	for _, m := range members {
		if iv.e.available(m) {
			available++
		}
		if m.Labels[v1.PoolDrainingLabel] != "" || m.DeletionTimestamp != nil {
			reason := m.Annotations[v1.PoolDrainReasonAnnotation]
			if _, seen := iv.replaced[m.Name]; !seen {
				iv.replaced[m.Name] = reason
				if !iv.poor[m.Name] || reason != pool.ReasonLowQuality {
					iv.violations = append(iv.violations, fmt.Sprintf("%s: %s replaced (reason %q), not one of the Poor members %v",
						now, m.Name, reason, slices.Sorted(maps.Keys(iv.poor))))
				}
			}
		}
	}
	iv.maxMembers = max(iv.maxMembers, len(members))
	if int32(len(members)) > r+surge {
		iv.violations = append(iv.violations, fmt.Sprintf("%s: %d members > replicas %d + maxSurge %d", now, len(members), r, surge))
	}
	if !iv.reached && int32(available) >= r {
		iv.reached, iv.minAvailable = true, available
	}
	if iv.reached {
		iv.minAvailable = min(iv.minAvailable, available)
		if int32(available) < r-unavailable {
			iv.violations = append(iv.violations, fmt.Sprintf("%s: %d available members < replicas %d - maxUnavailable %d", now, available, r, unavailable))
		}
	}
	if b, _ := json.Marshal(p.Status); string(b) != string(iv.poolStatus) {
		iv.poolStatus = b
		iv.poolWrites++
	}
}

// TestPoolReplacesLowQuality: a pool with rotation.minBand Good comes up all Good; crawlers
// report bans on two members through the operator's lease store until the prober's score
// grades them Poor; their statuses take the band on their next sync and the pool replaces
// exactly those two, make-before-break: after every sync of either level, never more than
// replicas + maxSurge members and, once it had replicas available, never fewer available
// (Ready, healthy, not draining, leasable now) than replicas - maxUnavailable. It ends all
// Good, and further resyncs write nothing.
func TestPoolReplacesLowQuality(t *testing.T) {
	e := newQualityEnv(t)
	echo := "http://" + e.op.EchoAddr() + "/ip"
	p := webPool(4)
	p.Spec.DrainSeconds = i32p(1)
	p.Spec.Rotation = &v1.PoolRotation{MinBand: v1.BandGood}
	p.Spec.Template.Spec.HealthCheck = &v1.HealthCheckSpec{ProbeURL: echo, IntervalSeconds: 2, TimeoutSeconds: 2, FailureThreshold: 3, SuccessThreshold: 1}
	iv := &qualityInvariants{e: e, key: p.Key(), replaced: map[string]string{}}
	e.ps.AfterSync = iv.check
	if err := e.ps.ApplyPool(p); err != nil {
		t.Fatal(err)
	}

	// graded: replicas members, all available and Good in status, none on its way out.
	graded := func() bool {
		pp, _ := e.ps.Pool(p.Key())
		ms := e.ps.Members(p.Key())
		if len(ms) != 4 || pp.Status.HealthyReplicas != 4 || pp.Status.ObservedGeneration != pp.Generation {
			return false
		}
		for _, m := range ms {
			if !e.available(m) || m.Status.QualityBand != v1.BandGood {
				return false
			}
		}
		return true
	}
	e.run(t, "the pool comes up Good", graded, 3*time.Minute)
	if len(iv.replaced) > 0 {
		t.Fatalf("members replaced before any went Poor: %v", iv.replaced)
	}
	first := e.ps.Members(p.Key())

	// Crawlers burn two members: leases through the operator's store (the one discovery and
	// the gateway use, whose reports feed the score), bans reported on one site after another
	// until the prober's score grades each Poor.
	ctx := context.Background()
	store := e.op.LeaseStore()
	iv.poor = map[string]bool{first[0].Name: true, first[1].Name: true}
	var held []string
	onMember := map[string]string{}
	for range 40 {
		if len(onMember) == len(iv.poor) {
			break
		}
		l, err := store.Acquire(ctx, lease.Request{Selector: map[string]string{v1.PoolAttribute: "web"}, TTL: time.Minute})
		if err != nil {
			t.Fatalf("lease: %v", err)
		}
		held = append(held, l.ID)
		if name := strings.TrimPrefix(l.Proxy.Key, p.Namespace+"/"); iv.poor[name] {
			onMember[name] = l.ID
		}
	}
	if len(onMember) != len(iv.poor) {
		t.Fatalf("leases landed on %v, want one on each of %v", onMember, iv.poor)
	}
	for name, id := range onMember {
		key := p.Namespace + "/" + name
		for site := 0; e.op.Health().Health(key).Band != v1.BandPoor; site++ {
			if site == 10 {
				t.Fatalf("%s still %q after 10 bans", key, e.op.Health().Health(key).Band)
			}
			if _, err := store.Report(ctx, id, lease.Report{Result: lease.ResultBanned, Target: fmt.Sprintf("site-%d.example", site)}); err != nil {
				t.Fatalf("report on %s: %v", key, err)
			}
		}
	}
	for _, id := range held {
		if err := store.Release(ctx, id); err != nil {
			t.Fatal(err)
		}
	}

	// The pool replaces exactly those two, make-before-break, and ends all Good.
	gone := func() bool {
		for _, m := range e.ps.Members(p.Key()) {
			if iv.poor[m.Name] {
				return false
			}
		}
		return true
	}
	replaceStart := time.Now()
	e.run(t, "the Poor members are replaced", func() bool { return gone() && graded() }, 3*time.Minute)
	took := time.Since(replaceStart)

	// Steady: every member and the pool synced several times more, 0 writes.
	writes, poolWrites := e.ps.Proxies.Writes(), iv.poolWrites
	syncs, poolSyncs := e.ps.Proxies.Syncs(), e.ps.PoolSyncs()
	e.run(t, "steady resyncs", func() bool {
		return e.ps.Proxies.Syncs() >= syncs+3*4 && e.ps.PoolSyncs() >= poolSyncs+3
	}, 2*time.Minute)
	if w := e.ps.Proxies.Writes() - writes; w != 0 {
		t.Errorf("%d proxy status writes after the pool converged, want 0", w)
	}
	if w := iv.poolWrites - poolWrites; w != 0 {
		t.Errorf("%d pool status writes after the pool converged, want 0", w)
	}

	if iv.checks == 0 {
		t.Fatal("the invariants were never checked")
	}
	if len(iv.violations) > 0 {
		t.Fatalf("%d invariant violations, first: %v", len(iv.violations), iv.violations[:min(5, len(iv.violations))])
	}
	want := map[string]string{}
	for name := range iv.poor {
		want[name] = pool.ReasonLowQuality
	}
	if !maps.Equal(iv.replaced, want) {
		t.Errorf("replaced %v, want %v", iv.replaced, want)
	}
	t.Logf("2 of 4 members banned to Poor and replaced (maxSurge 1, maxUnavailable 0) in %s; min available %d, max members %d, %d invariant checks; "+
		"steady after: 0 writes over %d proxy and %d pool syncs", took.Round(100*time.Millisecond), iv.minAvailable, iv.maxMembers, iv.checks,
		e.ps.Proxies.Syncs()-syncs, e.ps.PoolSyncs()-poolSyncs)
}
