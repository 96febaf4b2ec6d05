package gc_test

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/proxy-operator/proxy-operator/internal/clocktest"
	"github.com/proxy-operator/proxy-operator/internal/fleet"
	"github.com/proxy-operator/proxy-operator/internal/gc"
	"github.com/proxy-operator/proxy-operator/providers"
	"github.com/proxy-operator/proxy-operator/providers/kubernetes"
	"github.com/proxy-operator/proxy-operator/providers/mock"
	"github.com/proxy-operator/proxy-operator/server/hooks"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

const warmup = 3 * time.Minute

// proxyUIDs of the two live Proxies, and of one deleted long ago.
const (
	uidA    = "aaaaaaaa-0000-4000-8000-000000000001"
	uidB    = "bbbbbbbb-0000-4000-8000-000000000002"
	uidDead = "dddddddd-0000-4000-8000-00000000dead"
	uidNew  = "eeeeeeee-0000-4000-8000-0000000000ee"
)

// process is one run of the operator: a fleet view and a hook server over the shared provider.
type process struct {
	t     *testing.T
	view  *fleet.View
	hooks http.Handler
	// status is what each Proxy's status last said, as the API server would keep it.
	status map[string]json.RawMessage
}

func start(t *testing.T, clk *clocktest.Clock, set *providers.Set, status map[string]json.RawMessage) *process {
	t.Helper()
	view := fleet.New(clk.Now, warmup)
	h := &hooks.Hooks{Providers: set, Fleet: view, Now: clk.Now}
	return &process{t: t, view: view, hooks: h.Handler(), status: status}
}

// sync makes one sync call for the Proxy, as Metacontroller would, and keeps its status.
func (p *process) sync(name, uid string) {
	p.t.Helper()
	parent := map[string]any{
		"apiVersion": "crawl.example.com/v1alpha1", "kind": "Proxy",
		"metadata": map[string]any{"name": name, "namespace": "crawl", "uid": uid, "generation": 1},
		"spec":     map[string]any{"mode": "Managed", "provider": "mock"},
	}
	if st, ok := p.status[uid]; ok {
		parent["status"] = st
	}
	// The children (the credentials Secret) are kept beside the status, under "children/<uid>",
	// as the API server keeps them across operator restarts.
	children := p.status["children/"+uid]
	if children == nil {
		children = json.RawMessage(`{}`)
	}
	body, _ := json.Marshal(map[string]any{"parent": parent, "children": children})
	rec := httptest.NewRecorder()
	p.hooks.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/sync", bytes.NewReader(body)))
	if rec.Code != http.StatusOK {
		p.t.Fatalf("sync %s: %d %s", name, rec.Code, rec.Body)
	}
	var ans struct {
		Status   json.RawMessage  `json:"status"`
		Children []map[string]any `json:"children"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &ans); err != nil {
		p.t.Fatal(err)
	}
	p.status[uid] = ans.Status
	var prev map[string]map[string]json.RawMessage
	_ = json.Unmarshal(p.status["children/"+uid], &prev)
	observed := map[string]map[string]json.RawMessage{}
	for _, c := range ans.Children {
		m := c["metadata"].(map[string]any)
		typ, key := c["kind"].(string)+"."+c["apiVersion"].(string), "crawl/"+m["name"].(string)
		if observed[typ] == nil {
			observed[typ] = map[string]json.RawMessage{}
		}
		if old, ok := prev[typ][key]; ok {
			observed[typ][key] = old // stored children are never updated (OnDelete)
			continue
		}
		m["uid"] = "child-" + uid
		observed[typ][key], _ = json.Marshal(c)
	}
	p.status["children/"+uid], _ = json.Marshal(observed)
	if len(prev) == 0 && len(observed) > 0 {
		// Creating a child makes Metacontroller sync the parent again: the instance is created
		// once its credentials Secret is stored.
		p.sync(name, uid)
	}
}

func owners(insts []providers.Instance) []string {
	out := []string{}
	for _, in := range insts {
		out = append(out, in.OwnerUID)
	}
	slices.Sort(out)
	return out
}

// apiServer serves the Proxy list the way the API server does, two items per page; while
// fail is set it answers 500.
type apiServer struct {
	mu   sync.Mutex
	uids []string
	fail bool
}

func (a *apiServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if r.Header.Get("Authorization") != "Bearer sa-token" {
		http.Error(w, `{"kind":"Status","code":401}`, http.StatusUnauthorized)
		return
	}
	if r.URL.Path != "/apis/crawl.example.com/v1alpha1/proxies" {
		http.NotFound(w, r)
		return
	}
	if a.fail {
		http.Error(w, `{"kind":"Status","code":500}`, http.StatusInternalServerError)
		return
	}
	from := 0
	if c := r.URL.Query().Get("continue"); c != "" {
		from = len(c)
	}
	type item struct {
		Metadata map[string]string `json:"metadata"`
	}
	l := struct {
		Kind       string            `json:"kind"`
		APIVersion string            `json:"apiVersion"`
		Metadata   map[string]string `json:"metadata"`
		Items      []item            `json:"items"`
	}{Kind: "ProxyList", APIVersion: "crawl.example.com/v1alpha1", Metadata: map[string]string{}, Items: []item{}}
	to := min(from+2, len(a.uids))
	for _, u := range a.uids[from:to] {
		l.Items = append(l.Items, item{Metadata: map[string]string{"namespace": "crawl", "name": "p-" + u, "uid": u}})
	}
	if to < len(a.uids) {
		l.Metadata["continue"] = strings.Repeat("x", to)
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(l)
}

func (a *apiServer) set(fail bool, uids ...string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.fail, a.uids = fail, uids
}

func newAPISource(t *testing.T, a http.Handler) *gc.APISource {
	t.Helper()
	return &gc.APISource{Client: fakeAPIClient(t, a, "sa-token"), PageSize: 2}
}

// fakeAPIClient is client-go's dynamic client talking TLS to h with a bearer token.
func fakeAPIClient(t *testing.T, h http.Handler, token string) dynamic.Interface {
	t.Helper()
	srv := httptest.NewTLSServer(h)
	t.Cleanup(srv.Close)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	c, err := dynamic.NewForConfig(&rest.Config{Host: srv.URL, BearerToken: token, Timeout: 10 * time.Second,
		TLSClientConfig: rest.TLSClientConfig{CAData: ca}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestRestartNeverDeletesLiveInstances restarts the operator over a provider that still holds
// the instances of two live Proxies and of one deleted long ago, and sweeps at every point
// where the new process knows less than everything.
func TestRestartNeverDeletesLiveInstances(t *testing.T) {
	for _, source := range []string{"fleet", "api"} {
		t.Run(source, func(t *testing.T) {
			clk := clocktest.New(t0)
			mp, err := mock.New(mock.Config{}, mock.WithClock(clk.Now))
			if err != nil {
				t.Fatal(err)
			}
			set := providers.NewSet(providers.Entry{Name: "mock", Type: "mock", Provider: mp},
				providers.Entry{Name: "pods", Type: "kubernetes", Provider: must(kubernetes.New(kubernetes.Config{}))})
			mp.Seed(providers.Instance{ID: mock.ID("proxy-dead"), Name: "proxy-dead", State: providers.StateRunning,
				OwnerUID: uidDead, CreatedAt: t0.Add(-24 * time.Hour)})

			// The first process creates the instances of A and B.
			status := map[string]json.RawMessage{}
			first := start(t, clk, set, status)
			first.sync("a", uidA)
			first.sync("b", uidB)
			if got, want := owners(mp.Instances()), []string{uidA, uidB, uidDead}; !slices.Equal(got, want) {
				t.Fatalf("before restart: owners %v, want %v", got, want)
			}

			// Restart half an hour later: a new, empty fleet view over the same provider.
			clk.Set(t0.Add(30 * time.Minute))
			second := start(t, clk, set, status)
			api := &apiServer{}
			api.set(false, uidA, uidB)
			var src gc.LiveSource = gc.FleetSource{View: second.view}
			if source == "api" {
				src = newAPISource(t, api)
			}
			var logs bytes.Buffer
			col, err := gc.New(gc.Config{
				Providers: set, Sources: []gc.LiveSource{src}, Now: clk.Now,
				Log: slog.New(slog.NewJSONHandler(&logs, nil)), Registerer: prometheus.NewRegistry(),
			})
			if err != nil {
				t.Fatal(err)
			}
			var deleted []string
			sweep := func(when string) gc.Report {
				t.Helper()
				rep, err := col.Sweep(context.Background())
				if err != nil && !errors.Is(err, gc.ErrSkipped) {
					t.Fatalf("%s: sweep: %v", when, err)
				}
				for _, o := range rep.Deleted {
					if o.Instance.OwnerUID == uidA || o.Instance.OwnerUID == uidB {
						t.Fatalf("%s: GC deleted %s of a live Proxy", when, o.Instance.ID)
					}
					deleted = append(deleted, o.Instance.OwnerUID)
				}
				return rep
			}

			// Right after the restart the fleet view knows nothing; the API list knows all.
			sweep("empty view")
			if got, want := slices.Contains(owners(mp.Instances()), uidDead), source == "fleet"; got != want {
				t.Errorf("after the first sweep, orphan left = %t, want %t", got, want)
			}
			// A is synced again; B not yet (a partial view).
			clk.Set(t0.Add(31 * time.Minute))
			second.sync("a", uidA)
			sweep("partial view")
			// The API fails.
			api.set(true)
			sweep("api error")
			api.set(false, uidA, uidB)
			if source == "fleet" {
				if got := owners(mp.Instances()); !slices.Contains(got, uidDead) {
					t.Fatalf("fleet: the orphan was deleted before the view was complete")
				}
				// By the end of the warmup Metacontroller's resync has synced B as well.
				clk.Set(t0.Add(32 * time.Minute))
				second.sync("b", uidB)
				clk.Set(t0.Add(30*time.Minute + warmup))
			}

			// A Proxy created just now has a young instance the live list may not show yet.
			second.sync("new", uidNew)
			rep := sweep("complete")
			if got, want := owners(mp.Instances()), []string{uidA, uidB, uidNew}; !slices.Equal(got, want) {
				t.Errorf("after a trusted sweep: owners %v, want %v (only the orphan deleted)", got, want)
			}
			if diff := cmp.Diff([]string{uidDead}, deleted); diff != "" {
				t.Errorf("deleted owners (-want +got):\n%s", diff)
			}
			if source == "api" && (len(rep.Young) != 1 || rep.Young[0].Instance.OwnerUID != uidNew) {
				t.Errorf("young %v, want the instance of %s (not in the live list yet)", rep.Young, uidNew)
			}

			// The new Proxy's instance is deleted only if, once old enough, it still has no live owner.
			clk.Set(t0.Add(45 * time.Minute))
			second.sync("new", uidNew)
			if source == "api" {
				api.set(false, uidA, uidB, uidNew)
			}
			sweep("later")
			if got, want := owners(mp.Instances()), []string{uidA, uidB, uidNew}; !slices.Equal(got, want) {
				t.Errorf("later: owners %v, want %v", got, want)
			}
			if source == "api" {
				api.set(false, uidA, uidB) // the new Proxy is gone, its finalizer removed by hand
				sweep("orphaned later")
				if got, want := owners(mp.Instances()), []string{uidA, uidB}; !slices.Equal(got, want) {
					t.Errorf("orphaned later: owners %v, want %v", got, want)
				}
			}

			// Every kill is logged at Warn with provider, providerID and UID.
			var kills []map[string]any
			for _, line := range bytes.Split(bytes.TrimSpace(logs.Bytes()), []byte("\n")) {
				var rec map[string]any
				if err := json.Unmarshal(line, &rec); err != nil {
					t.Fatal(err)
				}
				if rec["msg"] == "gc deleted orphan instance" {
					kills = append(kills, rec)
				}
			}
			if len(kills) == 0 {
				t.Fatal("no kill logged")
			}
			k := kills[0]
			if k["level"] != "WARN" || k["provider"] != "mock" || k["providerID"] != mock.ID("proxy-dead") || k["uid"] != uidDead {
				t.Errorf("kill log %v, want level WARN, provider mock, providerID %s, uid %s", k, mock.ID("proxy-dead"), uidDead)
			}
		})
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestSweep covers the guards one at a time over a seeded provider.
func TestSweep(t *testing.T) {
	old := t0.Add(-time.Hour)
	seed := []providers.Instance{
		{ID: "mock://live", Name: "live", OwnerUID: uidA, CreatedAt: old},
		{ID: "mock://orphan-1", Name: "orphan-1", OwnerUID: uidDead, CreatedAt: old},
		{ID: "mock://orphan-2", Name: "orphan-2", OwnerUID: "gone-2", CreatedAt: old},
		{ID: "mock://young", Name: "young", OwnerUID: "gone-3", CreatedAt: t0.Add(-9 * time.Minute)},
		{ID: "mock://ageless", Name: "ageless", OwnerUID: "gone-4"},
		{ID: "mock://ownerless", Name: "ownerless", CreatedAt: old},
	}
	for _, tc := range []struct {
		name        string
		cfg         gc.Config
		faults      []mock.Fault
		live        fakeSource
		wantErr     error
		wantLeft    []string
		wantDeleted []string
		wantFailed  []string
	}{
		{
			name:        "deletes old orphans only",
			live:        fakeSource{uids: []string{uidA}},
			wantLeft:    []string{"mock://ageless", "mock://live", "mock://ownerless", "mock://young"},
			wantDeleted: []string{"mock://orphan-1", "mock://orphan-2"},
		},
		{
			name:        "dry run deletes nothing",
			cfg:         gc.Config{DryRun: true},
			live:        fakeSource{uids: []string{uidA}},
			wantLeft:    []string{"mock://ageless", "mock://live", "mock://orphan-1", "mock://orphan-2", "mock://ownerless", "mock://young"},
			wantDeleted: []string{"mock://orphan-1", "mock://orphan-2"},
		},
		{
			name:     "too many orphans: the live set is suspect",
			cfg:      gc.Config{MaxDeletions: 1},
			live:     fakeSource{uids: []string{uidA}},
			wantErr:  gc.ErrSkipped,
			wantLeft: []string{"mock://ageless", "mock://live", "mock://orphan-1", "mock://orphan-2", "mock://ownerless", "mock://young"},
		},
		{
			name:     "source error",
			live:     fakeSource{err: errors.New("boom")},
			wantErr:  gc.ErrSkipped,
			wantLeft: []string{"mock://ageless", "mock://live", "mock://orphan-1", "mock://orphan-2", "mock://ownerless", "mock://young"},
		},
		{
			name:       "provider list error",
			faults:     []mock.Fault{{Op: "list", Kind: "transient"}},
			live:       fakeSource{uids: []string{uidA}},
			wantLeft:   []string{"mock://ageless", "mock://live", "mock://orphan-1", "mock://orphan-2", "mock://ownerless", "mock://young"},
			wantFailed: []string{"mock"},
		},
		{
			name:        "delete error: the others still go",
			faults:      []mock.Fault{{Op: "delete", Kind: "transient"}},
			live:        fakeSource{uids: []string{uidA}},
			wantLeft:    []string{"mock://ageless", "mock://live", "mock://orphan-1", "mock://ownerless", "mock://young"},
			wantDeleted: []string{"mock://orphan-2"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mp := must(mock.New(mock.Config{}, mock.WithClock(func() time.Time { return t0 })))
			mp.Seed(seed...)
			if err := mp.Inject(tc.faults...); err != nil {
				t.Fatal(err)
			}
			cfg := tc.cfg
			cfg.Providers = providers.NewSet(providers.Entry{Name: "mock", Type: "mock", Provider: mp})
			cfg.Sources = []gc.LiveSource{tc.live}
			cfg.Now = func() time.Time { return t0 }
			col, err := gc.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			rep, err := col.Sweep(context.Background())
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil && err != nil) {
				t.Fatalf("Sweep error %v, want %v", err, tc.wantErr)
			}
			left := []string{}
			for _, in := range mp.Instances() {
				left = append(left, in.ID)
			}
			if diff := cmp.Diff(tc.wantLeft, left); diff != "" {
				t.Errorf("instances left (-want +got):\n%s", diff)
			}
			deleted := []string{}
			for _, o := range rep.Deleted {
				deleted = append(deleted, o.Instance.ID)
			}
			slices.Sort(deleted)
			if diff := cmp.Diff(append([]string{}, tc.wantDeleted...), deleted); diff != "" {
				t.Errorf("reported deleted (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantFailed, rep.FailedProviders); diff != "" {
				t.Errorf("failed providers (-want +got):\n%s", diff)
			}
		})
	}
}

type fakeSource struct {
	uids []string
	err  error
}

func (fakeSource) Name() string { return "fake" }

func (f fakeSource) LiveUIDs(context.Context) (map[string]bool, error) {
	if f.err != nil {
		return nil, f.err
	}
	out := map[string]bool{}
	for _, u := range f.uids {
		out[u] = true
	}
	return out, nil
}

// TestMetrics: kills are counted per provider; sweeps by result.
func TestMetrics(t *testing.T) {
	mp := must(mock.New(mock.Config{}))
	mp.Seed(providers.Instance{ID: "mock://o", Name: "o", OwnerUID: uidDead, CreatedAt: t0.Add(-time.Hour)})
	reg := prometheus.NewRegistry()
	src := &fakeSource{err: errors.New("not yet")}
	col := must(gc.New(gc.Config{
		Providers: providers.NewSet(providers.Entry{Name: "mock", Type: "mock", Provider: mp}),
		Sources:   []gc.LiveSource{src}, Now: func() time.Time { return t0 }, Registerer: reg,
	}))
	_, _ = col.Sweep(context.Background())
	src.err, src.uids = nil, []string{uidA}
	_, _ = col.Sweep(context.Background())
	got := gather(t, reg)
	want := map[string]float64{
		`proxy_operator_gc_deletions_total{provider="mock"}`: 1,
		`proxy_operator_gc_sweeps_total{result="skipped"}`:   1,
		`proxy_operator_gc_sweeps_total{result="done"}`:      1,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("metrics (-want +got):\n%s", diff)
	}
}

func gather(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var lbl []string
			for _, l := range m.GetLabel() {
				lbl = append(lbl, l.GetName()+`="`+l.GetValue()+`"`)
			}
			out[mf.GetName()+"{"+strings.Join(lbl, ",")+"}"] = m.GetCounter().GetValue()
		}
	}
	return out
}

// TestRunSweepsOnScheduleAndStops uses a short interval on the real clock (ages use the
// injected one).
func TestRunSweepsOnScheduleAndStops(t *testing.T) {
	mp := must(mock.New(mock.Config{}))
	mp.Seed(providers.Instance{ID: "mock://o", Name: "o", OwnerUID: uidDead, CreatedAt: t0.Add(-time.Hour)})
	col := must(gc.New(gc.Config{
		Providers: providers.NewSet(providers.Entry{Name: "mock", Type: "mock", Provider: mp}),
		Sources:   []gc.LiveSource{fakeSource{uids: []string{uidA}}}, Now: func() time.Time { return t0 },
		Interval: 10 * time.Millisecond,
	}))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- col.Run(ctx) }()
	deadline := time.After(5 * time.Second)
	for len(mp.Instances()) != 0 {
		select {
		case <-deadline:
			t.Fatal("Run did not sweep within 5s")
		case <-time.After(5 * time.Millisecond):
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run returned %v, want nil", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not stop after cancel")
	}
}
