package sim_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
	"github.com/proxy-operator/proxy-operator/health"
	"github.com/proxy-operator/proxy-operator/internal/fleet"
	"github.com/proxy-operator/proxy-operator/internal/gc"
	"github.com/proxy-operator/proxy-operator/internal/verdict"
	"github.com/proxy-operator/proxy-operator/lease"
	"github.com/proxy-operator/proxy-operator/metacontroller/driver"
	"github.com/proxy-operator/proxy-operator/providers"
	"github.com/proxy-operator/proxy-operator/providers/mock"
	"github.com/proxy-operator/proxy-operator/server/discovery"
	"github.com/proxy-operator/proxy-operator/server/hooks"
)

// Restart safety (issue 7, part 2): right after a restart, before Metacontroller's resyncs
// have refilled the fleet view, nothing may act as if the fleet were empty: GC deletes
// nothing, discovery says it is incomplete and refuses leases, and the status health of a
// healthy fleet does not flap while the fresh prober has no verdict.

const restartWarmup = 2 * time.Minute

// hungProber never concludes: its probes wait until cancelled, so the restarted prober keeps
// having no verdict of its own for the whole test.
type hungProber struct{}

func (hungProber) Probe(ctx context.Context, _ health.Target) health.Result {
	<-ctx.Done()
	return health.Result{Kind: "timeout", Err: ctx.Err()}
}

// restarted is the operator process after a restart, wired as main wires it: one fleet view
// read by the hooks, a freshly started prober, the lease store and the discovery API.
type restarted struct {
	view  *fleet.View
	sched *health.Scheduler
	hooks *httptest.Server
	disc  *httptest.Server
}

func startProcess(t *testing.T, clock *driver.Clock, cloud *mock.Provider) *restarted {
	t.Helper()
	view := fleet.New(clock.Now, restartWarmup)
	sched, err := health.New(health.Config{View: view, Prober: hungProber{}, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = sched.Run(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	h := &hooks.Hooks{
		Providers: providers.NewSet(providers.Entry{Name: "mock", Type: "mock", Provider: cloud}),
		Fleet:     view,
		Health:    sched,
		Now:       clock.Now,
	}
	store := lease.NewMemory(lease.Config{Fleet: view, Health: sched, Now: clock.Now})
	disc := &discovery.Discovery{Fleet: view, Health: sched, Leases: store, Now: clock.Now, Token: "t0ken-0123456789abcdef"}
	r := &restarted{view: view, sched: sched, hooks: httptest.NewServer(h.Handler()), disc: httptest.NewServer(disc.Handler())}
	t.Cleanup(r.hooks.Close)
	t.Cleanup(r.disc.Close)
	return r
}

// callDiscovery calls the discovery API and returns the status, Retry-After and decoded body.
func callDiscovery(t *testing.T, base, method, path, body string) (int, string, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer t0ken-0123456789abcdef")
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("%s %s: undecodable answer %q: %v", method, path, b, err)
	}
	return resp.StatusCode, resp.Header.Get("Retry-After"), out
}

// partialSource lists the view without asking whether it is complete: the mistake the
// fleet source guards against, used only as the control that shows what is at stake.
type partialSource struct{ v *fleet.View }

func (partialSource) Name() string { return "partial" }

func (s partialSource) LiveUIDs(context.Context) (map[string]bool, error) {
	out := map[string]bool{}
	for _, p := range s.v.List() {
		out[p.UID] = true
	}
	return out, nil
}

func newCollector(t *testing.T, cloud *mock.Provider, clock *driver.Clock, dryRun bool, src gc.LiveSource) *gc.Collector {
	t.Helper()
	col, err := gc.New(gc.Config{
		Providers: providers.NewSet(providers.Entry{Name: "mock", Type: "mock", Provider: cloud}),
		Sources:   []gc.LiveSource{src},
		DryRun:    dryRun,
		// Every instance of the test is older than the minimum age: only the live set spares it.
		Now: func() time.Time { return clock.Now().Add(gc.DefaultMinAge + time.Hour) },
	})
	if err != nil {
		t.Fatal(err)
	}
	return col
}

func deletes(cloud *mock.Provider) int {
	n := 0
	for _, c := range cloud.Calls() {
		if c.Op == "delete" {
			n++
		}
	}
	return n
}

func TestRestartSafety(t *testing.T) {
	e := newEnv(t)
	e.d.ResyncPeriod = 0 // the hooks' own resyncAfterSeconds (30 s when steady) paces the resyncs
	fleetProxies := []*v1.Proxy{managed("edge-1", "local-a"), managed("edge-2", "local-b"), managed("edge-3", "local-a"),
		managed("edge-4", "local-c"), external("ext-1")}
	for _, p := range fleetProxies {
		e.mustReady(t, p)
	}
	if err := e.d.RunFor(time.Minute); err != nil {
		t.Fatal(err)
	}
	before := map[string]v1.ProxyStatus{}
	for _, p := range fleetProxies {
		before[p.Key()], _ = e.d.Status(p.Key())
	}
	instances := len(e.mock.Instances())
	if instances != 4 {
		t.Fatalf("%d instances before the restart, want 4", instances)
	}

	// The restart: new memory, new view, a prober that has not concluded anything.
	r := startProcess(t, e.d.Clock, e.mock)
	e.d.URL = r.hooks.URL
	writes := e.d.Writes()
	e.mock.ResetCalls()

	t.Run("gc deletes nothing while the view is empty", func(t *testing.T) {
		rep, err := newCollector(t, e.mock, e.d.Clock, false, gc.FleetSource{View: r.view}).Sweep(context.Background())
		if !errors.Is(err, gc.ErrSkipped) {
			t.Errorf("sweep over an empty, incomplete view: err %v, want ErrSkipped", err)
		}
		if len(rep.Deleted) != 0 || deletes(e.mock) != 0 || len(e.mock.Instances()) != instances {
			t.Errorf("sweep deleted %v (%d delete calls)", rep.Deleted, deletes(e.mock))
		}
	})

	t.Run("discovery does not answer as if the fleet were empty", func(t *testing.T) {
		code, retry, body := callDiscovery(t, r.disc.URL, http.MethodGet, "/v1/proxies", "")
		if code != http.StatusOK || body["complete"] != false || body["completeAt"] == nil || retry == "" {
			t.Errorf("list: %d Retry-After %q body %v, want 200, complete false, completeAt and Retry-After", code, retry, body)
		}
		code, retry, body = callDiscovery(t, r.disc.URL, http.MethodPost, "/v1/leases", `{}`)
		if code != http.StatusServiceUnavailable || retry == "" {
			t.Errorf("lease: %d Retry-After %q body %v, want 503 with Retry-After", code, retry, body)
		}
	})

	// One sync reaches the new process: the view now holds one Proxy of five.
	if _, err := e.d.Step(); err != nil {
		t.Fatal(err)
	}
	if n := r.view.Len(); n != 1 {
		t.Fatalf("view holds %d proxies after one sync, want 1", n)
	}

	t.Run("gc deletes nothing while the view is partly filled", func(t *testing.T) {
		// Control: a source that trusted the partial view would take three live machines.
		rep, err := newCollector(t, e.mock, e.d.Clock, true, partialSource{r.view}).Sweep(context.Background())
		if err != nil || len(rep.Deleted) < 3 {
			t.Fatalf("control (dry run over the partial view): would delete %d, err %v; want at least 3", len(rep.Deleted), err)
		}
		rep, err = newCollector(t, e.mock, e.d.Clock, false, gc.FleetSource{View: r.view}).Sweep(context.Background())
		if !errors.Is(err, gc.ErrSkipped) {
			t.Errorf("sweep over a partial view: err %v, want ErrSkipped", err)
		}
		if len(rep.Deleted) != 0 || deletes(e.mock) != 0 || len(e.mock.Instances()) != instances {
			t.Errorf("sweep deleted %v (%d delete calls)", rep.Deleted, deletes(e.mock))
		}
		code, _, body := callDiscovery(t, r.disc.URL, http.MethodGet, "/v1/proxies", "")
		if code != http.StatusOK || body["complete"] != false {
			t.Errorf("list with a partial view: %d complete=%v, want 200 complete=false", code, body["complete"])
		}
		if code, _, _ := callDiscovery(t, r.disc.URL, http.MethodPost, "/v1/leases", `{}`); code != http.StatusServiceUnavailable {
			t.Errorf("lease with a partial view: %d, want 503", code)
		}
	})

	// The warmup: every Proxy resyncs (every 30 s) while the prober has no verdict.
	if err := e.d.RunFor(restartWarmup + time.Second); err != nil {
		t.Fatal(err)
	}

	t.Run("health does not flap while the prober has no verdict", func(t *testing.T) {
		after := map[string]v1.ProxyStatus{}
		for _, p := range fleetProxies {
			after[p.Key()], _ = e.d.Status(p.Key())
			if c := condition(after[p.Key()], v1.ConditionHealthy); c.Status != metav1.ConditionTrue {
				t.Errorf("%s Healthy condition %s/%s, want True as recorded", p.Key(), c.Status, c.Reason)
			}
		}
		if d := cmp.Diff(before, after); d != "" {
			t.Errorf("status changed across the restart (-before +after):\n%s", d)
		}
		if w := e.d.Writes() - writes; w != 0 {
			t.Errorf("%d status writes after the restart, want 0", w)
		}
		if h := r.sched.Health("crawl/edge-1"); h.State != verdict.Healthy {
			t.Errorf("prober verdict %v, want the recorded Healthy", h)
		}
	})

	t.Run("after the warmup the view is trusted", func(t *testing.T) {
		if !r.view.Complete() || r.view.Len() != len(fleetProxies) {
			t.Fatalf("view complete=%v with %d proxies, want complete with %d", r.view.Complete(), r.view.Len(), len(fleetProxies))
		}
		code, _, body := callDiscovery(t, r.disc.URL, http.MethodGet, "/v1/proxies", "")
		if code != http.StatusOK || body["complete"] != true || body["count"] != float64(len(fleetProxies)) {
			t.Errorf("list: %d complete=%v count=%v, want 200 complete=true count=%d", code, body["complete"], body["count"], len(fleetProxies))
		}
		if code, _, body := callDiscovery(t, r.disc.URL, http.MethodPost, "/v1/leases", `{}`); code != http.StatusOK {
			t.Errorf("lease: %d %v, want 200", code, body)
		}
		// An orphan left by some earlier crash: now, and only now, GC may take it.
		orphan := providers.Instance{ID: mock.ID("orphan"), Name: "orphan", State: providers.StateRunning, OwnerUID: "gone",
			CreatedAt: start.Add(-time.Hour)}
		e.mock.Seed(orphan)
		rep, err := newCollector(t, e.mock, e.d.Clock, false, gc.FleetSource{View: r.view}).Sweep(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, o := range rep.Deleted {
			got = append(got, o.Instance.ID)
		}
		if d := cmp.Diff([]string{orphan.ID}, got); d != "" {
			t.Errorf("gc after the warmup deleted (-want +got):\n%s", d)
		}
		if n := len(e.mock.Instances()); n != instances {
			t.Errorf("%d instances after the sweep, want the %d live ones", n, instances)
		}
	})
}
