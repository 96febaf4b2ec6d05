package sim_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
	"github.com/proxy-operator/proxy-operator/internal/fleet"
	"github.com/proxy-operator/proxy-operator/internal/gc"
	"github.com/proxy-operator/proxy-operator/internal/lifecycle"
	"github.com/proxy-operator/proxy-operator/internal/verdict"
	"github.com/proxy-operator/proxy-operator/metacontroller"
	"github.com/proxy-operator/proxy-operator/metacontroller/driver"
	"github.com/proxy-operator/proxy-operator/providers"
	"github.com/proxy-operator/proxy-operator/providers/mock"
	"github.com/proxy-operator/proxy-operator/server/hooks"
)

// Crash-safety simulation (issue 7, part 1). Each schedule plays a small fleet through
// creates, spec changes that replace the machine, deletes and provider faults of every class,
// while the operator process is killed at random points and restarted with empty memory (new
// hooks.Hooks, new fleet view; the mock provider is the cloud and survives). After every step
// no Proxy may own two instances; once the schedule converges every live Proxy is Ready or
// in its expected Failed state, every deleted Proxy's instances are gone, the operator leaked
// nothing and GC over the live parents deletes only the planted orphan.
//
// CRASH_SEED=N reruns one schedule with its trace; CRASH_SCHEDULES=M changes how many run.

const defaultCrashSchedules = 1000

// operator is the process under test. One listener serves whichever incarnation is alive,
// so a restart costs no socket; the driver is sequential, so no call straddles a restart.
type operator struct {
	cloud  *simCloud
	health hooks.HealthSource
	clock  *driver.Clock

	mu       sync.Mutex
	handler  http.Handler
	view     *fleet.View
	restarts int
}

// restart kills the process and starts a new one that remembers nothing.
func (o *operator) restart() {
	view := fleet.New(o.clock.Now, 2*time.Minute)
	h := &hooks.Hooks{
		Providers: providers.NewSet(providers.Entry{Name: o.cloud.name, Type: o.cloud.name, Provider: o.cloud.provider}),
		Fleet:     view,
		Health:    o.health,
		Now:       o.clock.Now,
	}
	handler := h.Handler()
	o.mu.Lock()
	defer o.mu.Unlock()
	o.handler, o.view = handler, view
	o.restarts++
}

func (o *operator) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	o.mu.Lock()
	h := o.handler
	o.mu.Unlock()
	h.ServeHTTP(w, r)
}

// alwaysHealthy is a prober that finds every proxy with an address healthy.
type alwaysHealthy struct{ since time.Time }

func (a alwaysHealthy) Health(string) verdict.Health {
	return verdict.Health{State: verdict.Healthy, LatencyMillis: 40, Since: a.since}
}

// crashStats adds up what the schedules exercised, so a run that silently stopped killing or
// injecting would show (and fail the coverage check).
type crashStats struct {
	schedules, syncs, steps, restarts int
	kills                             map[string]int
	faults                            map[string]int
	creates, changes, deletes         int
	terminated                        int
	acceptedFailed, fixedFailed       int
	gcDeleted                         int
}

func (c *crashStats) add(o crashStats) {
	c.schedules++
	c.syncs += o.syncs
	c.steps += o.steps
	c.restarts += o.restarts
	c.creates += o.creates
	c.changes += o.changes
	c.deletes += o.deletes
	c.terminated += o.terminated
	c.acceptedFailed += o.acceptedFailed
	c.fixedFailed += o.fixedFailed
	c.gcDeleted += o.gcDeleted
	for k, v := range o.kills {
		c.kills[k] += v
	}
	for k, v := range o.faults {
		c.faults[k] += v
	}
}

// sim is one schedule.
type sim struct {
	seed  uint64
	rng   *rand.Rand
	clock *driver.Clock
	cloud *simCloud
	op    *operator
	d     *driver.Driver

	names    []string             // every name ever used
	specs    map[string]*v1.Proxy // the desired object of each name applied and not deleted
	deleted  map[string]bool      // UIDs of deleted Proxies
	fixed    map[string]bool      // keys re-applied to cure a permanent failure
	killing  bool
	killProb float64
	orphan   string // ID of the planted orphan
	dupErr   error  // a duplicate seen between a provider call and the status write
	trace    []string
	stats    crashStats
}

func newSim(seed uint64, newCloud func(*driver.Clock) (*simCloud, error)) (*sim, func(), error) {
	clock := driver.NewClock(start)
	cloud, err := newCloud(clock)
	if err != nil {
		return nil, nil, err
	}
	s := &sim{
		seed: seed, rng: rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15)), clock: clock, cloud: cloud,
		specs: map[string]*v1.Proxy{}, deleted: map[string]bool{}, fixed: map[string]bool{},
		stats: crashStats{kills: map[string]int{}, faults: map[string]int{}},
	}
	s.op = &operator{cloud: cloud, health: alwaysHealthy{since: start}, clock: clock}
	s.op.restart()
	srv := httptest.NewServer(s.op)
	s.d = &driver.Driver{URL: srv.URL, Clock: clock, ResyncPeriod: 120 * time.Second, Refinalize: true, BeforeApply: s.beforeApply}
	// An instance whose owner is long gone, as a crash in an older operator version might have
	// left: GC must find it, so the leak check can be seen to work.
	s.orphan = cloud.plant("orphan-"+strconv.FormatUint(seed, 10), "dead-owner", start.Add(-time.Hour))
	return s, func() { srv.Close(); cloud.close() }, nil
}

func (s *sim) logf(format string, args ...any) {
	s.trace = append(s.trace, fmt.Sprintf("%s ", s.clock.Now().Sub(start))+fmt.Sprintf(format, args...))
}

// beforeApply runs after the server acted and answered, before Metacontroller writes the
// status: killing the process here is the crash between a provider call and the status write.
func (s *sim) beforeApply(key string, resp *metacontroller.SyncResponse) bool {
	if err := s.noDuplicates(); err != nil && s.dupErr == nil {
		s.dupErr = fmt.Errorf("before applying the answer for %s: %w", key, err)
	}
	if !s.killing || s.rng.Float64() >= s.killProb {
		return true
	}
	var st v1.ProxyStatus
	b, _ := json.Marshal(resp.Status)
	_ = json.Unmarshal(b, &st)
	live, _ := s.d.Get(key)
	kind := "other"
	switch {
	case live.DeletionTimestamp != nil:
		kind = "mid-finalize"
	case condition(st, v1.ConditionProvisioned).Reason == lifecycle.ReasonReplacing:
		kind = "mid-replacement"
	case st.ProviderID != "" && st.ProviderID != live.Status.ProviderID:
		kind = "after-create"
	}
	s.stats.kills[kind]++
	s.logf("KILL %s (%s) dropping phase=%s providerID=%s", key, kind, st.Phase, st.ProviderID)
	s.op.restart()
	// The user acts while the operator is down, before anything recorded what it did: the
	// instance the dead process made is now known only by its tags.
	if p, ok := s.specs[live.Name]; ok && live.DeletionTimestamp == nil {
		switch s.rng.IntN(3) {
		case 0:
			s.stats.kills[kind+"+delete"]++
			if err := s.deleteProxy(p.Name); err != nil {
				s.logf("delete failed: %v", err)
			}
		case 1:
			if p.Spec.Mode == v1.ModeManaged {
				s.stats.kills[kind+"+change"]++
				if err := s.changeProxy(p.Name); err != nil {
					s.logf("change failed: %v", err)
				}
			}
		}
	}
	return false
}

// noDuplicates fails if any Proxy owns more than one instance.
func (s *sim) noDuplicates() error {
	byOwner := map[string][]string{}
	for _, in := range s.cloud.instances() {
		byOwner[in.OwnerUID] = append(byOwner[in.OwnerUID], in.ID)
	}
	for uid, ids := range byOwner {
		if len(ids) > 1 {
			return fmt.Errorf("owner %s has %d instances %v", uid, len(ids), ids)
		}
	}
	return nil
}

func (s *sim) step() error {
	if _, err := s.d.Step(); err != nil {
		return err
	}
	s.stats.steps++
	if err := s.noDuplicates(); err != nil {
		return fmt.Errorf("duplicate instances: %w", err)
	}
	if s.dupErr != nil {
		return fmt.Errorf("duplicate instances: %w", s.dupErr)
	}
	return nil
}

// runFor plays every sync due within dur, checking after each one.
func (s *sim) runFor(dur time.Duration) error {
	end := s.clock.Now().Add(dur)
	for range 20000 {
		due, ok := s.d.NextDue()
		if !ok || due.After(end) {
			s.clock.Advance(end.Sub(s.clock.Now()))
			return nil
		}
		if err := s.step(); err != nil {
			return err
		}
	}
	return driver.ErrHotLoop
}

// runUntil plays syncs until cond holds or limit passes.
func (s *sim) runUntil(cond func() error, limit time.Duration) error {
	end := s.clock.Now().Add(limit)
	for range 50000 {
		err := cond()
		if err == nil {
			return nil
		}
		due, ok := s.d.NextDue()
		if !ok || due.After(end) {
			return fmt.Errorf("not converged within %s: %w", limit, err)
		}
		if err := s.step(); err != nil {
			return err
		}
	}
	return driver.ErrHotLoop
}

func (s *sim) liveNames() []string {
	var out []string
	for _, n := range s.names {
		if _, ok := s.specs[n]; ok {
			out = append(out, n)
		}
	}
	return out
}

var zones = []string{"local-a", "local-b", "local-c"}

func (s *sim) newProxy() *v1.Proxy {
	name := fmt.Sprintf("p%d", len(s.names))
	hasExternal := false
	for _, p := range s.specs {
		hasExternal = hasExternal || p.Spec.Mode == v1.ModeExternal
	}
	var p *v1.Proxy
	if !hasExternal && s.rng.IntN(6) == 0 {
		p = external(name)
	} else {
		p = managed(name, s.cloud.zones[s.rng.IntN(len(s.cloud.zones))])
		p.Spec.Provider = s.cloud.name
		p.Spec.Placement = s.cloud.placement(p.Spec.Placement.Zone)
	}
	s.names = append(s.names, name)
	return p
}

// change alters what replaces the machine: placement, port or cloud-init.
func (s *sim) change(p *v1.Proxy) string {
	switch s.rng.IntN(3) {
	case 0:
		z := p.Spec.Placement.Zone
		for z == p.Spec.Placement.Zone {
			z = s.cloud.zones[s.rng.IntN(len(s.cloud.zones))]
		}
		p.Spec.Placement.Zone = z
		return "zone=" + z
	case 1:
		p.Spec.Port = int32(3000 + s.rng.IntN(1000))
		return fmt.Sprintf("port=%d", p.Spec.Port)
	default:
		ci := fmt.Sprintf("#cloud-config\n# rev %d\n", s.rng.IntN(1<<20))
		p.Spec.CloudInit = &v1.CloudInitSpec{Inline: &ci}
		return "cloudInit"
	}
}

var faultOps, faultKinds = []string{"create", "get", "delete", "list"}, []string{"quota", "transient", "permanent"}

// act plays one random event of the schedule.
func (s *sim) act() error {
	live := s.liveNames()
	switch r := s.rng.IntN(100); {
	case r < 25 && len(live) < 4:
		p := s.newProxy()
		s.specs[p.Name] = p
		s.stats.creates++
		s.logf("apply %s %s", p.Key(), p.Spec.Mode)
		return s.d.Apply(p)
	case r < 50:
		var managedLive []string
		for _, n := range live {
			if s.specs[n].Spec.Mode == v1.ModeManaged {
				managedLive = append(managedLive, n)
			}
		}
		if len(managedLive) == 0 {
			return nil
		}
		return s.changeProxy(managedLive[s.rng.IntN(len(managedLive))])
	case r < 62:
		if len(live) == 0 {
			return nil
		}
		return s.deleteProxy(live[s.rng.IntN(len(live))])
	case r < 84:
		f := mock.Fault{Op: faultOps[s.rng.IntN(len(faultOps))], Kind: faultKinds[s.rng.IntN(len(faultKinds))], Count: 1 + s.rng.IntN(2)}
		s.stats.faults[f.Op+"/"+f.Kind]++
		s.logf("fault %s/%s x%d", f.Op, f.Kind, f.Count)
		return s.cloud.inject(f)
	case r < 90:
		// The cloud stops a machine behind the operator's back: it must be replaced.
		insts := s.cloud.instances()
		if len(insts) == 0 {
			return nil
		}
		in := insts[s.rng.IntN(len(insts))]
		if in.ID == s.orphan {
			return nil
		}
		s.cloud.terminate(in)
		s.stats.terminated++
		s.logf("cloud terminates %s of %s", in.ID, in.OwnerUID)
		return nil
	default:
		// A crash while idle: no answer is lost, but the memory (backoffs, fleet view) is.
		s.stats.kills["idle"]++
		s.logf("KILL idle")
		s.op.restart()
		return nil
	}
}

func (s *sim) changeProxy(name string) error {
	p := s.specs[name]
	what := s.change(p)
	s.stats.changes++
	s.logf("change %s %s", p.Key(), what)
	return s.d.Apply(p)
}

func (s *sim) deleteProxy(name string) error {
	p := s.specs[name]
	got, _ := s.d.Get(p.Key())
	s.deleted[string(got.UID)] = true
	delete(s.specs, p.Name)
	s.stats.deletes++
	s.logf("delete %s uid=%s", p.Key(), got.UID)
	return s.d.Delete(p.Key())
}

// drainFaults ends the outage: every armed fault is gone.
func (s *sim) drainFaults() { s.cloud.drain() }

// drainMock consumes every fault armed in m.
func drainMock(m *mock.Provider) {
	ctx := context.Background()
	for range 1000 {
		armed := false
		if _, err := m.ListByTag(ctx); err != nil {
			armed = true
		}
		if _, err := m.Get(ctx, "mock://drain"); err != nil && !errors.Is(err, providers.ErrNotFound) {
			armed = true
		}
		if err := m.Delete(ctx, "mock://drain"); err != nil {
			armed = true
		}
		// An empty request fails validation after the fault check: it creates nothing.
		if _, err := m.Create(ctx, providers.CreateRequest{}); err != nil && strings.Contains(err.Error(), "injected fault") {
			armed = true
		}
		if !armed {
			return
		}
	}
}

func (s *sim) ownerInstances(uid string) []providers.Instance {
	var out []providers.Instance
	for _, in := range s.cloud.instances() {
		if in.OwnerUID == uid {
			out = append(out, in)
		}
	}
	return out
}

// permanentlyFailed is the one failure state a converged schedule may leave: a create of the
// current spec refused as permanent, not retried until the spec changes, and nothing created.
// (A Failed status for an older spec hash, or from a failed observe, is retried: not an end.)
func (s *sim) permanentlyFailed(p v1.Proxy) bool {
	ci := ""
	if c := p.Spec.CloudInit; c != nil && c.Inline != nil {
		ci = *c.Inline
	}
	c := condition(p.Status, v1.ConditionProvisioned)
	return p.Status.Phase == v1.PhaseFailed && c.Reason == lifecycle.ReasonPermanentError && strings.HasPrefix(c.Message, "Create: ") &&
		p.Status.ObservedGeneration == p.Generation && p.Status.SpecHash == lifecycle.SpecHash(&p.Spec, ci) &&
		len(s.ownerInstances(string(p.UID))) == 0
}

// converged says what still differs from the end state.
func (s *sim) converged() error {
	for _, k := range s.d.Keys() {
		p, _ := s.d.Get(k)
		if p.DeletionTimestamp != nil {
			return fmt.Errorf("%s still finalizing (phase %s)", k, p.Status.Phase)
		}
		// Ready alone is not the end: a Ready proxy waiting out an observe error keeps its
		// phase but says so in Provisioned until the wait is over.
		// A status can also be Ready only because no sync has seen the cloud stop the machine
		// yet: the end state needs the cloud to agree.
		if p.Status.Phase == v1.PhaseReady && p.Status.ObservedGeneration == p.Generation &&
			condition(p.Status, v1.ConditionProvisioned).Status == metav1.ConditionTrue && s.cloudAgrees(p) {
			continue
		}
		if !s.fixed[k] && s.permanentlyFailed(p) {
			continue
		}
		c := condition(p.Status, v1.ConditionProvisioned)
		return fmt.Errorf("%s phase %s gen %d/%d (%s: %s)", k, p.Status.Phase, p.Status.ObservedGeneration, p.Generation, c.Reason, c.Message)
	}
	return nil
}

func (s *sim) statuses() map[string]v1.ProxyStatus {
	out := map[string]v1.ProxyStatus{}
	for _, k := range s.d.Keys() {
		out[k], _ = s.d.Status(k)
	}
	return out
}

// cloudAgrees: an External proxy owns nothing; a Managed one owns exactly its recorded,
// running machine.
func (s *sim) cloudAgrees(p v1.Proxy) bool {
	insts := s.ownerInstances(string(p.UID))
	if p.Spec.Mode == v1.ModeExternal {
		return len(insts) == 0
	}
	return len(insts) == 1 && insts[0].ID == p.Status.ProviderID && insts[0].State == providers.StateRunning
}

// driverLive is the live-UID source a cluster's API server would be: the driver's parents.
type driverLive struct{ d *driver.Driver }

func (driverLive) Name() string { return "driver" }

func (l driverLive) LiveUIDs(context.Context) (map[string]bool, error) {
	out := map[string]bool{}
	for _, k := range l.d.Keys() {
		p, _ := l.d.Get(k)
		out[string(p.UID)] = true
	}
	return out, nil
}

// run plays the schedule and checks the end state.
func (s *sim) run() error {
	s.killing, s.killProb = true, 0.05+0.2*s.rng.Float64()
	for range 6 + s.rng.IntN(7) {
		if err := s.act(); err != nil {
			return err
		}
		if err := s.runFor(time.Duration(s.rng.IntN(46)) * time.Second); err != nil {
			return err
		}
	}
	// Converge: the outage ends, the process stays up, a human fixes some permanent failures.
	s.killing = false
	s.drainFaults()
	s.logf("faults drained; converging")
	if err := s.runFor(0); err != nil {
		return err
	}
	for _, n := range s.liveNames() {
		p := s.specs[n]
		live, _ := s.d.Get(p.Key())
		if live.Status.Phase == v1.PhaseFailed && s.rng.IntN(2) == 0 {
			what := s.change(p)
			s.fixed[p.Key()] = true
			s.stats.fixedFailed++
			s.logf("fix %s %s", p.Key(), what)
			if err := s.d.Apply(p); err != nil {
				return err
			}
		}
	}
	if err := s.runUntil(s.converged, 30*time.Minute); err != nil {
		return err
	}
	// Steady: three more minutes of resyncs change nothing.
	writes, before := s.d.Writes(), s.statuses()
	if err := s.runFor(3 * time.Minute); err != nil {
		return err
	}
	if err := s.converged(); err != nil {
		return fmt.Errorf("left the converged state: %w", err)
	}
	if w := s.d.Writes() - writes; w != 0 {
		return fmt.Errorf("converged fleet wrote status %d times in 3 minutes (-before +after):\n%s", w, cmp.Diff(before, s.statuses()))
	}
	// The operator itself leaked nothing: every instance but the planted orphan has a live owner.
	live, _ := driverLive{s.d}.LiveUIDs(context.Background())
	for _, in := range s.cloud.instances() {
		if in.ID != s.orphan && !live[in.OwnerUID] {
			return fmt.Errorf("leaked instance %s of owner %s (deleted: %v)", in.ID, in.OwnerUID, s.deleted[in.OwnerUID])
		}
	}
	// GC trusts the last incarnation's fleet view, as it does outside a cluster: by now it has
	// been refilled by resyncs. An empty fleet is never trusted by that source, so the API
	// server's answer (the driver's parents) stands in when every Proxy is gone.
	var src gc.LiveSource = driverLive{s.d}
	if len(live) > 0 {
		s.op.mu.Lock()
		src = gc.FleetSource{View: s.op.view}
		s.op.mu.Unlock()
	}
	col, err := gc.New(gc.Config{
		Providers: providers.NewSet(providers.Entry{Name: s.cloud.name, Type: s.cloud.name, Provider: s.cloud.provider}),
		Sources:   []gc.LiveSource{src},
		Now:       func() time.Time { return s.clock.Now().Add(gc.DefaultMinAge + time.Minute) },
	})
	if err != nil {
		return err
	}
	rep, err := col.Sweep(context.Background())
	if err != nil {
		return fmt.Errorf("gc sweep: %w", err)
	}
	s.stats.gcDeleted += len(rep.Deleted)
	if len(rep.Deleted) != 1 || rep.Deleted[0].Instance.ID != s.orphan {
		return fmt.Errorf("gc deleted %+v, want only the planted orphan %s", rep.Deleted, s.orphan)
	}
	return s.checkEnd(live)
}

// checkEnd: one instance per Ready Managed proxy, matching its status; none for anyone else.
func (s *sim) checkEnd(live map[string]bool) error {
	if err := s.noDuplicates(); err != nil {
		return err
	}
	for _, in := range s.cloud.instances() {
		if !live[in.OwnerUID] {
			return fmt.Errorf("after gc: instance %s of owner %s has no live owner", in.ID, in.OwnerUID)
		}
	}
	for uid := range s.deleted {
		if insts := s.ownerInstances(uid); len(insts) != 0 {
			return fmt.Errorf("deleted proxy %s still owns %v", uid, insts)
		}
	}
	for _, k := range s.d.Keys() {
		p, _ := s.d.Get(k)
		insts := s.ownerInstances(string(p.UID))
		switch {
		case p.Spec.Mode == v1.ModeExternal:
			if len(insts) != 0 {
				return fmt.Errorf("external %s owns instances %v", k, insts)
			}
		case p.Status.Phase == v1.PhaseFailed:
			s.stats.acceptedFailed++
			if len(insts) != 0 {
				return fmt.Errorf("failed %s owns instances %v", k, insts)
			}
		default:
			if len(insts) != 1 || insts[0].ID != p.Status.ProviderID || insts[0].SpecHash != p.Status.SpecHash ||
				insts[0].State != providers.StateRunning || p.Status.IP != insts[0].IP {
				return fmt.Errorf("ready %s status {id %s hash %s ip %s}, instances %+v", k, p.Status.ProviderID, p.Status.SpecHash, p.Status.IP, insts)
			}
		}
	}
	return nil
}

func runSchedule(seed uint64) (crashStats, []string, error) {
	return runScheduleOn(seed, newMockCloud)
}

func runScheduleOn(seed uint64, newCloud func(*driver.Clock) (*simCloud, error)) (crashStats, []string, error) {
	s, stop, err := newSim(seed, newCloud)
	if err != nil {
		return crashStats{}, nil, err
	}
	defer stop()
	err = s.run()
	s.stats.syncs = s.d.Syncs()
	s.stats.restarts = s.op.restarts - 1
	return s.stats, s.trace, err
}

func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		t.Fatalf("%s=%q: want a non-negative integer", name, v)
	}
	return n
}

func TestCrashSafety(t *testing.T) {
	rerun := func(seed uint64) string {
		return fmt.Sprintf("rerun just it: CRASH_SEED=%d go test -race -count=1 -run 'TestCrashSafety$' -v ./test/sim/", seed)
	}
	if v := os.Getenv("CRASH_SEED"); v != "" {
		seed, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("CRASH_SEED=%q: %v", v, err)
		}
		st, trace, err := runSchedule(seed)
		for _, l := range trace {
			t.Log(l)
		}
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		t.Logf("seed %d: %d syncs, %d restarts, kills %v", seed, st.syncs, st.restarts, st.kills)
		return
	}
	n := envInt(t, "CRASH_SCHEDULES", defaultCrashSchedules)
	total := crashStats{kills: map[string]int{}, faults: map[string]int{}}
	failed := 0
	for i := range n {
		seed := uint64(i + 1)
		st, trace, err := runSchedule(seed)
		total.add(st)
		if err != nil {
			failed++
			tail := trace[max(0, len(trace)-30):]
			t.Errorf("seed %d failed: %v\nlast events:\n  %s\n%s", seed, err, strings.Join(tail, "\n  "), rerun(seed))
			if failed >= 5 {
				t.Fatalf("stopping after %d failed schedules", failed)
			}
		}
	}
	t.Logf("%d schedules: %d syncs, %d steps, %d restarts; %d creates, %d spec changes, %d deletes; "+
		"%d machines terminated by the cloud; %d permanent failures fixed by a spec change, %d left Failed as expected; gc deleted %d (the planted orphans)",
		total.schedules, total.syncs, total.steps, total.restarts, total.creates, total.changes, total.deletes, total.terminated,
		total.fixedFailed, total.acceptedFailed, total.gcDeleted)
	t.Logf("kills by point: %v", total.kills)
	t.Logf("faults injected by op/class: %v", total.faults)
	if n < defaultCrashSchedules {
		return
	}
	// Coverage: a run that stopped killing at some point or injecting some fault proves less.
	for _, k := range []string{"after-create", "mid-finalize", "mid-replacement", "other", "idle"} {
		if total.kills[k] == 0 {
			t.Errorf("no schedule killed the process %s", k)
		}
	}
	for _, op := range faultOps {
		for _, kind := range faultKinds {
			if total.faults[op+"/"+kind] == 0 {
				t.Errorf("no schedule injected a %s fault on %s", kind, op)
			}
		}
	}
	if total.terminated == 0 {
		t.Error("no schedule had the cloud terminate a machine")
	}
	if want := n / 100; total.fixedFailed < want || total.acceptedFailed < want {
		t.Errorf("only %d fixed and %d accepted permanent failures, want at least %d each", total.fixedFailed, total.acceptedFailed, want)
	}
}

// TestPermanentCreateErrorAfterLostStatusWrite is crash seed 4116 made small: the create
// succeeded but its status write was lost, and the retried create failed as permanent. The
// Proxy must not stay Failed ("nothing created, no retries") while its machine runs
// unrecorded: the operator has to find it.
func TestPermanentCreateErrorAfterLostStatusWrite(t *testing.T) {
	e := newEnv(t)
	p := managed("edge-1", "local-a")
	e.health.set(p.Key(), verdict.Healthy, start)
	dropped := false
	e.d.BeforeApply = func(key string, resp *metacontroller.SyncResponse) bool {
		if !dropped && len(e.mock.Instances()) == 1 {
			dropped = true
			if err := e.mock.Inject(mock.Fault{Op: "create", Kind: "permanent"}); err != nil {
				t.Error(err)
			}
			return false
		}
		return true
	}
	if err := e.d.Apply(p); err != nil {
		t.Fatal(err)
	}
	if err := e.d.RunUntil(e.ready(p.Key()), 10*time.Minute); err != nil {
		st, _ := e.d.Status(p.Key())
		c := condition(st, v1.ConditionProvisioned)
		t.Fatalf("not Ready: %v; phase %s providerID %q (%s: %s); instances %+v", err, st.Phase, st.ProviderID, c.Reason, c.Message, e.mock.Instances())
	}
	insts := e.mock.Instances()
	if st, _ := e.d.Status(p.Key()); len(insts) != 1 || insts[0].ID != st.ProviderID {
		t.Errorf("status records %q, instances %+v; want the one machine recorded", st.ProviderID, insts)
	}
}
