package sim_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
	"github.com/proxy-operator/proxy-operator/internal/fleet"
	"github.com/proxy-operator/proxy-operator/internal/lifecycle"
	"github.com/proxy-operator/proxy-operator/internal/verdict"
	"github.com/proxy-operator/proxy-operator/metacontroller"
	"github.com/proxy-operator/proxy-operator/metacontroller/driver"
	"github.com/proxy-operator/proxy-operator/providers"
	"github.com/proxy-operator/proxy-operator/providers/mock"
	"github.com/proxy-operator/proxy-operator/server/hooks"
)

var start = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// fakeHealth is the prober's verdict, set by the test.
type fakeHealth struct {
	mu sync.Mutex
	m  map[string]verdict.Health
}

func (f *fakeHealth) Health(key string) verdict.Health {
	f.mu.Lock()
	defer f.mu.Unlock()
	if h, ok := f.m[key]; ok {
		return h
	}
	return verdict.Health{State: verdict.Unknown}
}

func (f *fakeHealth) set(key string, s verdict.State, since time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.m == nil {
		f.m = map[string]verdict.Health{}
	}
	f.m[key] = verdict.Health{State: s, LatencyMillis: 40, Since: since}
}

type env struct {
	d      *driver.Driver
	mock   *mock.Provider
	health *fakeHealth
	fleet  *fleet.View
}

// newEnv starts the real hook router over a mock provider on a virtual clock, and a driver
// playing Metacontroller against it over HTTP.
func newEnv(t *testing.T) *env {
	t.Helper()
	clock := driver.NewClock(start)
	mp, err := mock.New(mock.Config{}, mock.WithClock(clock.Now))
	if err != nil {
		t.Fatal(err)
	}
	e := &env{mock: mp, health: &fakeHealth{}, fleet: fleet.New(clock.Now, time.Minute)}
	h := &hooks.Hooks{
		Providers: providers.NewSet(providers.Entry{Name: "mock", Type: "mock", Provider: mp}),
		Fleet:     e.fleet,
		Health:    e.health,
		Now:       clock.Now,
	}
	srv := httptest.NewServer(h.Handler())
	t.Cleanup(srv.Close)
	e.d = &driver.Driver{URL: srv.URL, Clock: clock, ResyncPeriod: 120 * time.Second, Refinalize: true}
	return e
}

func managed(name string, zone string) *v1.Proxy {
	return &v1.Proxy{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "crawl"},
		Spec: v1.ProxySpec{Mode: v1.ModeManaged, Provider: "mock",
			Placement: &v1.PlacementSpec{Region: "local", Zone: zone, MachineType: "small", Image: "squid-6"}},
	}
}

func external(name string) *v1.Proxy {
	return &v1.Proxy{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "crawl"},
		Spec:       v1.ProxySpec{Mode: v1.ModeExternal, Endpoint: &v1.EndpointSpec{Host: "127.0.0.1", Port: 3128}},
	}
}

// ready reports whether the parent is Ready.
func (e *env) ready(key string) func() bool {
	return func() bool {
		st, _ := e.d.Status(key)
		return st.Phase == v1.PhaseReady
	}
}

func (e *env) mustReady(t *testing.T, p *v1.Proxy) {
	t.Helper()
	e.health.set(p.Key(), verdict.Healthy, e.d.Clock.Now())
	if err := e.d.Apply(p); err != nil {
		t.Fatal(err)
	}
	if err := e.d.RunUntil(e.ready(p.Key()), 5*time.Minute); err != nil {
		st, _ := e.d.Status(p.Key())
		t.Fatalf("%s not Ready: %v; status %+v; events %v", p.Key(), err, st, e.d.Events())
	}
}

func condition(st v1.ProxyStatus, typ string) metav1.Condition {
	for _, c := range st.Conditions {
		if c.Type == typ {
			return c
		}
	}
	return metav1.Condition{}
}

func TestManagedReachesReady(t *testing.T) {
	e := newEnv(t)
	p := managed("edge-1", "local-a")
	e.mustReady(t, p)
	live, _ := e.d.Get(p.Key())
	insts := e.mock.Instances()
	if len(insts) != 1 {
		t.Fatalf("mock instances = %d, want 1", len(insts))
	}
	want := v1.ProxyStatus{Phase: v1.PhaseReady, ProviderID: insts[0].ID, IP: mock.Address(insts[0].Name), ObservedGeneration: 1}
	got := v1.ProxyStatus{Phase: live.Status.Phase, ProviderID: live.Status.ProviderID, IP: live.Status.IP, ObservedGeneration: live.Status.ObservedGeneration}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("status mismatch (-want +got):\n%s", d)
	}
	if live.Status.SpecHash != insts[0].SpecHash {
		t.Errorf("status specHash %q, instance %q", live.Status.SpecHash, insts[0].SpecHash)
	}
	if d := cmp.Diff([]string{e.d.Finalizer()}, live.Finalizers); d != "" {
		t.Errorf("finalizers (-want +got):\n%s", d)
	}
	// The mock provisions in 5 virtual seconds; the server polls every 5: Ready well within a minute.
	if el := e.d.Clock.Now().Sub(start); el > time.Minute {
		t.Errorf("Ready after %s, want within a minute", el)
	}
	if fp, ok := e.fleet.Get(p.Key()); !ok || fp.Phase != v1.PhaseReady || fp.IP != live.Status.IP {
		t.Errorf("fleet view %+v, want Ready at %s", fp, live.Status.IP)
	}
	if ev := e.d.Events(); len(ev) != 0 {
		t.Errorf("events %v, want none", ev)
	}
}

func TestSpecChangeReplacesInstance(t *testing.T) {
	e := newEnv(t)
	p := managed("edge-1", "local-a")
	e.mustReady(t, p)
	old, _ := e.d.Status(p.Key())
	e.mock.ResetCalls()

	if err := e.d.Apply(managed("edge-1", "local-b")); err != nil {
		t.Fatal(err)
	}
	replaced := func() bool {
		st, _ := e.d.Status(p.Key())
		return st.Phase == v1.PhaseReady && st.ObservedGeneration == 2 && st.SpecHash != old.SpecHash
	}
	if err := e.d.RunUntil(replaced, 5*time.Minute); err != nil {
		st, _ := e.d.Status(p.Key())
		t.Fatalf("not replaced: %v; status %+v", err, st)
	}
	var ops []string
	for _, c := range e.mock.Calls() {
		if c.Op == "create" || c.Op == "delete" {
			ops = append(ops, c.Op+" "+c.Arg)
		}
	}
	insts := e.mock.Instances()
	if len(insts) != 1 {
		t.Fatalf("mock instances = %d, want 1", len(insts))
	}
	wantOps := []string{"delete " + old.ProviderID, "create " + insts[0].Name}
	if d := cmp.Diff(wantOps, ops); d != "" {
		t.Errorf("provider actions (-want +got):\n%s", d)
	}
	st, _ := e.d.Status(p.Key())
	if insts[0].SpecHash != st.SpecHash {
		t.Errorf("instance specHash %q, status %q", insts[0].SpecHash, st.SpecHash)
	}
}

func TestDeleteRunsFinalize(t *testing.T) {
	e := newEnv(t)
	p := managed("edge-1", "local-a")
	e.mustReady(t, p)
	if err := e.d.Delete(p.Key()); err != nil {
		t.Fatal(err)
	}
	if err := e.d.RunUntil(func() bool { return !e.d.Exists(p.Key()) }, 5*time.Minute); err != nil {
		st, _ := e.d.Status(p.Key())
		t.Fatalf("not finalized: %v; status %+v; events %v", err, st, e.d.Events())
	}
	if insts := e.mock.Instances(); len(insts) != 0 {
		t.Errorf("mock instances after delete = %+v, want none", insts)
	}
	if _, ok := e.fleet.Get(p.Key()); ok {
		t.Errorf("fleet view still holds %s", p.Key())
	}
}

func TestExternalReadyWhenHealthPasses(t *testing.T) {
	e := newEnv(t)
	p := external("ext-1")
	if err := e.d.Apply(p); err != nil {
		t.Fatal(err)
	}
	if err := e.d.RunFor(2 * time.Minute); err != nil {
		t.Fatal(err)
	}
	st, _ := e.d.Status(p.Key())
	if st.Phase != v1.PhasePending || st.IP != "127.0.0.1" {
		t.Fatalf("before a verdict: phase %s ip %q, want Pending 127.0.0.1", st.Phase, st.IP)
	}
	e.health.set(p.Key(), verdict.Healthy, e.d.Clock.Now())
	if err := e.d.RunUntil(e.ready(p.Key()), time.Minute); err != nil {
		t.Fatalf("External not Ready within a minute of a passing probe: %v", err)
	}
	if calls := e.mock.Calls(); len(calls) != 0 {
		t.Errorf("External proxy made provider calls %v", calls)
	}
	e.health.set(p.Key(), verdict.Unhealthy, e.d.Clock.Now())
	unhealthy := func() bool { st, _ := e.d.Status(p.Key()); return st.Phase == v1.PhaseUnhealthy }
	if err := e.d.RunUntil(unhealthy, time.Minute); err != nil {
		t.Fatalf("External not Unhealthy within a minute of a failing probe: %v", err)
	}
}

func TestQuotaSlowsResync(t *testing.T) {
	e := newEnv(t)
	// Without the periodic resync, every retry is the hook's own resyncAfterSeconds.
	e.d.ResyncPeriod = 0
	if err := e.mock.Inject(mock.Fault{Op: "create", Kind: "quota", Count: 1}); err != nil {
		t.Fatal(err)
	}
	p := managed("edge-1", "local-a")
	if err := e.d.Apply(p); err != nil {
		t.Fatal(err)
	}
	if err := e.d.RunUntilIdle(); err != nil {
		t.Fatal(err)
	}
	st, _ := e.d.Status(p.Key())
	if c := condition(st, v1.ConditionProvisioned); c.Reason != lifecycle.ReasonQuotaExceeded || c.Status != metav1.ConditionFalse {
		t.Fatalf("Provisioned condition %+v, want False/QuotaExceeded", c)
	}
	next, ok := e.d.NextSync(p.Key())
	if wait := next.Sub(e.d.Clock.Now()); !ok || wait < 300*time.Second {
		t.Errorf("next sync in %s (scheduled %v), want at least 300s", wait, ok)
	}
	creates := func() int {
		n := 0
		for _, c := range e.mock.Calls() {
			if c.Op == "create" {
				n++
			}
		}
		return n
	}
	if got := creates(); got != 1 {
		t.Errorf("%d create calls before the quota wait, want 1", got)
	}
	if err := e.d.RunFor(299 * time.Second); err != nil {
		t.Fatal(err)
	}
	if got := creates(); got != 1 {
		t.Errorf("create retried within 299 s of a quota error (%d calls)", got)
	}
	e.health.set(p.Key(), verdict.Healthy, e.d.Clock.Now())
	if err := e.d.RunUntil(e.ready(p.Key()), 10*time.Minute); err != nil {
		t.Fatalf("not Ready once quota freed: %v", err)
	}
}

func TestSteadyFleetCausesNoWrites(t *testing.T) {
	e := newEnv(t)
	proxies := []*v1.Proxy{managed("edge-1", "local-a"), managed("edge-2", "local-b"), external("ext-1")}
	for _, p := range proxies {
		e.mustReady(t, p)
	}
	if err := e.d.RunFor(time.Minute); err != nil {
		t.Fatal(err)
	}
	writes, syncs := e.d.Writes(), e.d.Syncs()
	// The server asks for a resync every 30 s: 50 per proxy in 25 minutes.
	if err := e.d.RunFor(50*30*time.Second + time.Second); err != nil {
		t.Fatal(err)
	}
	if got := e.d.Syncs() - syncs; got < 50*len(proxies) {
		t.Fatalf("%d syncs, want at least %d", got, 50*len(proxies))
	}
	if got := e.d.Writes() - writes; got != 0 {
		t.Errorf("steady fleet: %d status writes over %d syncs, want 0", got, e.d.Syncs()-syncs)
	}
}

// TestDriverCountsMovingStatus proves the no-writes check can fail: a hook whose status
// carries the time writes on every sync.
func TestDriverCountsMovingStatus(t *testing.T) {
	clock := driver.NewClock(start)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]any{
			"status":             map[string]any{"phase": "Ready", "lastHealthCheckTime": clock.Now().Format(time.RFC3339)},
			"children":           []any{},
			"resyncAfterSeconds": 30,
		})
	}))
	t.Cleanup(srv.Close)
	d := &driver.Driver{URL: srv.URL, Clock: clock}
	if err := d.Apply(external("ext-1")); err != nil {
		t.Fatal(err)
	}
	if err := d.RunFor(10 * 30 * time.Second); err != nil {
		t.Fatal(err)
	}
	if d.Writes() < 10 {
		t.Errorf("moving status: %d writes, want one per sync (>= 10)", d.Writes())
	}
}

// TestDriverRejectsUnknownStatusField: a field the CRD does not declare would be pruned and
// rewritten forever; the driver treats it as a broken contract.
func TestDriverRejectsUnknownStatusField(t *testing.T) {
	clock := driver.NewClock(start)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(`{"status":{"phase":"Ready","bogus":1},"children":[]}`))
	}))
	t.Cleanup(srv.Close)
	d := &driver.Driver{URL: srv.URL, Clock: clock}
	if err := d.Apply(external("ext-1")); err != nil {
		t.Fatal(err)
	}
	if err := d.RunUntilIdle(); err == nil {
		t.Fatal("status with an undeclared field: no error")
	}
}

// TestHookErrorBacksOff: a non-200 answer is an event and an exponential retry; 429 waits
// Retry-After.
func TestHookErrorBacksOff(t *testing.T) {
	clock := driver.NewClock(start)
	var mu sync.Mutex
	code := http.StatusInternalServerError
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if code == http.StatusTooManyRequests {
			w.Header().Set("Retry-After", "7")
		}
		w.WriteHeader(code)
	}))
	t.Cleanup(srv.Close)
	d := &driver.Driver{URL: srv.URL, Clock: clock}
	p := external("ext-1")
	if err := d.Apply(p); err != nil {
		t.Fatal(err)
	}
	var waits []time.Duration
	for range 4 {
		if _, err := d.Step(); err != nil {
			t.Fatal(err)
		}
		next, _ := d.NextSync(p.Key())
		waits = append(waits, next.Sub(clock.Now()))
	}
	mu.Lock()
	code = http.StatusTooManyRequests
	mu.Unlock()
	if _, err := d.Step(); err != nil {
		t.Fatal(err)
	}
	next, _ := d.NextSync(p.Key())
	waits = append(waits, next.Sub(clock.Now()))
	want := []time.Duration{5 * time.Millisecond, 10 * time.Millisecond, 20 * time.Millisecond, 40 * time.Millisecond, 7 * time.Second}
	if d := cmp.Diff(want, waits); d != "" {
		t.Errorf("retry delays (-want +got):\n%s", d)
	}
	if got := len(d.Events()); got != 5 {
		t.Errorf("%d events, want 5", got)
	}
}

// TestTransientBacksOff: failed creates are retried after 5, 10, 20 s, not at once. The
// status write of each failure queues an immediate sync (Metacontroller re-syncs on its own
// status updates); that sync must not call the provider again before the backoff is over.
func TestTransientBacksOff(t *testing.T) {
	e := newEnv(t)
	e.d.ResyncPeriod = 0
	if err := e.mock.Inject(mock.Fault{Op: "create", Kind: "transient", Count: 3}); err != nil {
		t.Fatal(err)
	}
	p := managed("edge-1", "local-a")
	if err := e.d.Apply(p); err != nil {
		t.Fatal(err)
	}
	created := func() bool { st, _ := e.d.Status(p.Key()); return st.ProviderID != "" }
	if err := e.d.RunUntil(created, 5*time.Minute); err != nil {
		t.Fatal(err)
	}
	var creates int
	for _, c := range e.mock.Calls() {
		if c.Op == "create" {
			creates++
		}
	}
	if creates != 4 {
		t.Errorf("%d create calls, want 4 (3 failures, then success)", creates)
	}
	if el, want := e.d.Clock.Now().Sub(start), (5+10+20)*time.Second; el < want {
		t.Errorf("created after %s, want at least %s of backoff", el, want)
	}
	if w := e.d.Writes(); w > 6 {
		t.Errorf("%d status writes for 3 failures and a create, want at most 6", w)
	}
}

// TestRestartBetweenCreateAndStatusWrite is the shape of a crash-safety schedule: the server
// creates the instance, dies before Metacontroller writes the status, and a new server with
// empty memory takes over. The Proxy still ends Ready with exactly one instance.
func TestRestartBetweenCreateAndStatusWrite(t *testing.T) {
	e := newEnv(t)
	p := managed("edge-1", "local-a")
	e.health.set(p.Key(), verdict.Healthy, start)
	dropped := 0
	e.d.BeforeApply = func(key string, resp *metacontroller.SyncResponse) bool {
		b, _ := json.Marshal(resp.Status)
		var st v1.ProxyStatus
		_ = json.Unmarshal(b, &st)
		if live, _ := e.d.Status(key); st.ProviderID != "" && live.ProviderID == "" && dropped == 0 {
			dropped++
			// The old server is gone; a fresh one (new memory, same cloud) answers from now on.
			h := &hooks.Hooks{
				Providers: providers.NewSet(providers.Entry{Name: "mock", Type: "mock", Provider: e.mock}),
				Fleet:     fleet.New(e.d.Clock.Now, time.Minute),
				Health:    e.health,
				Now:       e.d.Clock.Now,
			}
			srv := httptest.NewServer(h.Handler())
			t.Cleanup(srv.Close)
			e.d.URL = srv.URL
			return false
		}
		return true
	}
	if err := e.d.Apply(p); err != nil {
		t.Fatal(err)
	}
	if err := e.d.RunUntil(e.ready(p.Key()), 5*time.Minute); err != nil {
		t.Fatal(err)
	}
	if dropped != 1 {
		t.Fatalf("dropped %d answers, want 1", dropped)
	}
	if n := len(e.mock.Instances()); n != 1 {
		t.Errorf("%d instances after the restart, want 1", n)
	}
}

// TestChildrenFollowTheAnswer: returned children are created with the selector label, kept
// with their observed state, deleted when an answer leaves them out, and a child update
// re-syncs the parent.
func TestChildrenFollowTheAnswer(t *testing.T) {
	clock := driver.NewClock(start)
	var mu sync.Mutex
	want := []string{"a", "b"}
	var seen []map[string]any
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		var req struct {
			Children map[string]map[string]map[string]any `json:"children"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		seen = append(seen, req.Children["Pod.v1"]["crawl/a"])
		var children []map[string]any
		for _, n := range want {
			children = append(children, map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": map[string]any{"name": n}})
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"status": map[string]any{"phase": "Pending"}, "children": children})
	}))
	t.Cleanup(srv.Close)
	d := &driver.Driver{URL: srv.URL, Clock: clock}
	p := external("ext-1")
	if err := d.Apply(p); err != nil {
		t.Fatal(err)
	}
	if err := d.RunUntilIdle(); err != nil {
		t.Fatal(err)
	}
	names := func() []string {
		var out []string
		for k, raw := range d.Children(p.Key())["Pod.v1"] {
			var o struct {
				Metadata struct {
					Labels map[string]string `json:"labels"`
				} `json:"metadata"`
			}
			_ = json.Unmarshal(raw, &o)
			live, _ := d.Get(p.Key())
			if o.Metadata.Labels["controller-uid"] != string(live.UID) {
				t.Errorf("child %s lacks controller-uid=%s", k, live.UID)
			}
			out = append(out, k)
		}
		slices.Sort(out)
		return out
	}
	if diff := cmp.Diff([]string{"crawl/a", "crawl/b"}, names()); diff != "" {
		t.Fatalf("children (-want +got):\n%s", diff)
	}
	syncs := d.Syncs()
	if err := d.UpdateChild(p.Key(), "Pod.v1", "crawl/a", func(o map[string]any) {
		o["status"] = map[string]any{"podIP": "127.0.0.9"}
	}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	want = []string{"a"}
	mu.Unlock()
	if err := d.RunUntilIdle(); err != nil {
		t.Fatal(err)
	}
	if d.Syncs() != syncs+1 {
		t.Errorf("child update caused %d syncs, want 1", d.Syncs()-syncs)
	}
	mu.Lock()
	last := seen[len(seen)-1]
	mu.Unlock()
	if st, _ := last["status"].(map[string]any); st["podIP"] != "127.0.0.9" {
		t.Errorf("hook saw child %v, want its status.podIP", last)
	}
	if diff := cmp.Diff([]string{"crawl/a"}, names()); diff != "" {
		t.Errorf("children after b left the answer (-want +got):\n%s", diff)
	}
}
