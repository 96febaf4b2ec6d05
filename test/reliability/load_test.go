package reliability

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/internal/verdict"
	"github.com/proxy-operator/proxy-operator/lease"
)

// Load shape; LOAD_SECONDS and LOAD_CLIENTS override the first two (make load: 60 s).
const (
	defaultLoadSeconds = 5
	defaultLoadClients = 64
	externalProxies    = 32 // External Proxies in front of flippable loopback stubs
	managedProxies     = 8  // Managed Proxies on the mock provider's real loopback proxies
	maxLeasesPerProxy  = 3
	syncsPerSecond     = 40
	// healthSlack is how long after the prober logs a transition it may take to publish it:
	// the log line comes first, the verdict is published right after, but a pause of the
	// process (GC, -race on a busy machine) can fall between the two. A stub stays down for
	// many seconds on average (one of 32 flips every 700 ms), so a store that ignored health
	// would still be caught. 1 s was seen to be too little once under -race with a load
	// average above 20.
	healthSlack = 2500 * time.Millisecond
	// hookBudget is well inside Metacontroller's 10 s hook timeout.
	hookBudget = 5 * time.Second
)

func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

// stubProxy is a forward proxy on loopback that answers every proxied request itself (so a
// probe never leaves the machine) with 204 while up and 503 while down.
type stubProxy struct {
	srv *httptest.Server
	up  atomic.Bool
}

func newStubProxy(t *testing.T) *stubProxy {
	t.Helper()
	s := &stubProxy{}
	s.up.Store(true)
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if s.up.Load() {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *stubProxy) port() int {
	return s.srv.Listener.Addr().(*net.TCPAddr).Port
}

// transitions records the prober's health changes from its log, as a timeline per proxy that
// does not come from the lease store it is used to check.
type transitions struct {
	mu  sync.Mutex
	log map[string][]transition
}

type transition struct {
	at    time.Time
	state string
}

func (tr *transitions) Enabled(context.Context, slog.Level) bool { return true }
func (tr *transitions) WithAttrs([]slog.Attr) slog.Handler       { return tr }
func (tr *transitions) WithGroup(string) slog.Handler            { return tr }
func (tr *transitions) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "proxy health changed" {
		return nil
	}
	at := time.Now()
	var key, to string
	r.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "proxy":
			key = a.Value.String()
		case "to":
			to = a.Value.String()
		}
		return true
	})
	tr.mu.Lock()
	tr.log[key] = append(tr.log[key], transition{at, to})
	tr.mu.Unlock()
	return nil
}

// healthyAt says whether the proxy could have been Healthy to the prober at t: its last
// transition logged before t-healthSlack is to Healthy, or one to Healthy came since.
func (tr *transitions) healthyAt(key string, t time.Time) bool {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	state := string(verdict.Unknown)
	for _, x := range tr.log[key] {
		switch {
		case !x.at.After(t.Add(-healthSlack)):
			state = x.state
		case !x.at.After(t) && x.state == string(verdict.Healthy):
			return true
		}
	}
	return state == string(verdict.Healthy)
}

// latencies collects request durations by operation.
type latencies struct {
	mu sync.Mutex
	d  map[string][]time.Duration
}

func (l *latencies) add(op string, d time.Duration) {
	l.mu.Lock()
	l.d[op] = append(l.d[op], d)
	l.mu.Unlock()
}

func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

// counts tallies answers by operation and status.
type counts struct {
	mu sync.Mutex
	n  map[string]map[int]int
}

func (c *counts) add(op string, code int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n[op] == nil {
		c.n[op] = map[int]int{}
	}
	c.n[op][code]++
}

// leaseAnswer is what the test reads of a granted lease.
type leaseAnswer struct {
	LeaseID string `json:"leaseID"`
	Target  string `json:"target"`
	Proxy   struct {
		ID           string `json:"id"`
		Healthy      bool   `json:"healthy"`
		ActiveLeases int    `json:"activeLeases"`
		MaxLeases    int32  `json:"maxLeases"`
	} `json:"proxy"`
}

// TestLoad runs the discovery API under concurrent crawlers over loopback HTTP while the
// prober flips the health of real (stub) proxies, syncs arrive at the hook server at a steady
// rate and one External Proxy is deleted and re-created over and over. It fails on any 5xx or
// transport error, on any lease that breaks an invariant, and when a hook call takes longer
// than hookBudget; it reports p50/p99 of both servers.
func TestLoad(t *testing.T) {
	seconds := envInt(t, "LOAD_SECONDS", defaultLoadSeconds)
	clients := envInt(t, "LOAD_CLIENTS", defaultLoadClients)
	tr := &transitions{log: map[string][]transition{}}

	// The lease store's changes, in the order it applied them (Observe runs under its lock).
	var evMu sync.Mutex
	var events []lease.Event
	op := bootOperator(t, operatorOpts{
		token:        badToken,
		cooldown:     250 * time.Millisecond,
		healthLog:    tr,
		leaseObserve: func(e lease.Event) { evMu.Lock(); events = append(events, e); evMu.Unlock() },
	})
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	t.Cleanup(target.Close)

	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: clients + 8}}
	var (
		hookLat, discLat = &latencies{d: map[string][]time.Duration{}}, &latencies{d: map[string][]time.Duration{}}
		answers          = &counts{n: map[string]map[int]int{}}
		failMu           sync.Mutex
		failures         []string
	)
	fail := func(format string, args ...any) {
		failMu.Lock()
		defer failMu.Unlock()
		if len(failures) < 20 {
			failures = append(failures, fmt.Sprintf(format, args...))
		}
	}
	do := func(lat *latencies, opName, method, url, token, body string) (int, []byte) {
		req, err := http.NewRequest(method, url, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		start := time.Now()
		res, err := hc.Do(req)
		if err != nil {
			fail("%s %s: %v", method, url, err)
			answers.add(opName, -1)
			return -1, nil
		}
		b, err := io.ReadAll(res.Body)
		res.Body.Close()
		lat.add(opName, time.Since(start))
		answers.add(opName, res.StatusCode)
		if err != nil {
			fail("%s %s: reading body: %v", method, url, err)
		}
		if res.StatusCode >= 500 {
			fail("%s %s: %d %s", method, url, res.StatusCode, b)
		}
		return res.StatusCode, b
	}

	// The fleet: External Proxies in front of stubs the test flips, Managed ones on the mock
	// provider. Each keeps the status its last sync answered, as Metacontroller would.
	type proxy struct {
		name, spec string
		mu         sync.Mutex
		status     json.RawMessage
		gen        int // bumps the UID on each re-creation
		// children are the children the last answer left (the credentials Secret), for the
		// UID they belong to.
		children    json.RawMessage
		childrenUID string
	}
	stubs := make([]*stubProxy, externalProxies)
	var fleet []*proxy
	hcSpec := fmt.Sprintf(`"healthCheck":{"probeURL":%q,"intervalSeconds":1,"timeoutSeconds":1,"failureThreshold":1,"successThreshold":1}`, target.URL+"/generate_204")
	for i := range stubs {
		stubs[i] = newStubProxy(t)
		geo := []string{"eu", "us"}[i%2]
		fleet = append(fleet, &proxy{name: fmt.Sprintf("ext-%02d", i), spec: fmt.Sprintf(
			`{"mode":"External","endpoint":{"host":"127.0.0.1","port":%d},"attributes":{"geo":%q},"maxLeases":%d,%s}`,
			stubs[i].port(), geo, maxLeasesPerProxy, hcSpec)})
	}
	for i := range managedProxies {
		fleet = append(fleet, &proxy{name: fmt.Sprintf("vm-%02d", i), spec: fmt.Sprintf(
			`{"mode":"Managed","provider":"mock","attributes":{"geo":"eu"},"maxLeases":%d,%s}`, maxLeasesPerProxy, hcSpec)})
	}
	maxOf := map[string]int{}
	for _, p := range fleet {
		maxOf["crawl/"+p.name] = maxLeasesPerProxy
	}
	sync1 := func(p *proxy, hook string, deleting bool) int {
		p.mu.Lock()
		defer p.mu.Unlock()
		status := p.status
		if status == nil {
			status = json.RawMessage(`{}`)
		}
		uid := fmt.Sprintf("uid-%s-%d", p.name, p.gen)
		meta := fmt.Sprintf(`{"name":%q,"namespace":"crawl","uid":%q,"generation":1`, p.name, uid)
		if deleting {
			meta += `,"deletionTimestamp":"2026-11-30T12:00:00Z"`
		}
		children := p.children
		if children == nil || p.childrenUID != uid {
			children = json.RawMessage(`{}`)
		}
		body := fmt.Sprintf(`{"controller":{},"parent":{"apiVersion":"crawl.example.com/v1alpha1","kind":"Proxy","metadata":%s},"spec":%s,"status":%s},"children":%s,"related":{},"finalizing":%t}`,
			meta, p.spec, status, children, deleting)
		code, b := do(hookLat, hook, http.MethodPost, op.hookURL+"/"+hook, "", body)
		if code != http.StatusOK {
			fail("%s %s: %d %s", hook, p.name, code, b)
			return code
		}
		var resp struct {
			Status   json.RawMessage  `json:"status"`
			Children []map[string]any `json:"children"`
		}
		if err := json.Unmarshal(b, &resp); err != nil {
			fail("%s %s answer: %v", hook, p.name, err)
		}
		p.status = resp.Status
		// Apply the children as Metacontroller would (the Secret keeps its first content).
		observed := map[string]map[string]any{}
		var prev map[string]map[string]any
		if p.childrenUID == uid {
			_ = json.Unmarshal(p.children, &prev)
		}
		for _, c := range resp.Children {
			m := c["metadata"].(map[string]any)
			typ, key := fmt.Sprint(c["kind"], ".", c["apiVersion"]), fmt.Sprint("crawl/", m["name"])
			if old, ok := prev[typ][key]; ok {
				c = old.(map[string]any)
			} else {
				m["uid"] = "child-" + uid
			}
			if observed[typ] == nil {
				observed[typ] = map[string]any{}
			}
			observed[typ][key] = c
		}
		p.children, _ = json.Marshal(observed)
		p.childrenUID = uid
		return code
	}
	for _, p := range fleet {
		sync1(p, "sync", false)
	}
	// Managed instances start, then every proxy is probed: sync again until all are Healthy.
	deadline := time.Now().Add(30 * time.Second)
	for {
		ready := 0
		for _, p := range fleet {
			sync1(p, "sync", false)
			if op.sched.Health("crawl/"+p.name).State == verdict.Healthy {
				ready++
			}
		}
		if ready == len(fleet) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d proxies healthy after 30 s", ready, len(fleet))
		}
		time.Sleep(200 * time.Millisecond)
	}

	loadStart := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(seconds)*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	// Health flips: every 700 ms a random stub changes state; at most a third are down.
	wg.Add(1)
	go func() {
		defer wg.Done()
		rng := rand.New(rand.NewPCG(1, 2))
		down := 0
		for tick := time.NewTicker(700 * time.Millisecond); ; {
			select {
			case <-ctx.Done():
				tick.Stop()
				return
			case <-tick.C:
			}
			s := stubs[rng.IntN(len(stubs))]
			switch {
			case s.up.Load() && down < len(stubs)/3:
				s.up.Store(false)
				down++
			case !s.up.Load():
				s.up.Store(true)
				down--
			}
		}
	}()
	// Syncs at a steady rate, round robin over the fleet (but the churned proxy).
	wg.Add(1)
	go func() {
		defer wg.Done()
		i := 0
		for tick := time.NewTicker(time.Second / syncsPerSecond); ; i++ {
			select {
			case <-ctx.Done():
				tick.Stop()
				return
			case <-tick.C:
			}
			if p := fleet[i%len(fleet)]; p != fleet[0] {
				sync1(p, "sync", false)
			}
		}
	}()
	// Churn: fleet[0] is finalized (External: at once) and re-created with a new UID. A lease
	// on it granted between the finalize answer and the re-creating sync is a bad lease.
	var gapMu sync.Mutex
	var gaps [][2]time.Time
	wg.Add(1)
	go func() {
		defer wg.Done()
		p := fleet[0]
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
			if sync1(p, "finalize", true) != http.StatusOK {
				continue
			}
			gone := time.Now()
			time.Sleep(300 * time.Millisecond)
			p.mu.Lock()
			p.gen++
			p.status = nil
			p.mu.Unlock()
			back := time.Now()
			gapMu.Lock()
			gaps = append(gaps, [2]time.Time{gone, back})
			gapMu.Unlock()
			sync1(p, "sync", false)
		}
	}()

	// Crawlers: each holds at most two leases and mixes list, lease, renew, release, report.
	targets := []string{"", "a.example", "b.example", "c.example"}
	granted := atomic.Int64{}
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(c), 7))
			var held []leaseAnswer
			pick := func() (leaseAnswer, int) {
				i := rng.IntN(len(held))
				return held[i], i
			}
			for ctx.Err() == nil {
				switch r := rng.IntN(100); {
				case r < 25:
					q := []string{"", "?healthy=true", "?attr.geo=eu", "?attr.geo=us&healthy=true"}[rng.IntN(4)]
					if code, b := do(discLat, "list", "GET", op.discURL+"/v1/proxies"+q, badToken, ""); code != 200 {
						fail("list%s: %d %s", q, code, b)
					}
				case r < 55 || len(held) == 0:
					if len(held) >= 2 {
						continue
					}
					sel := []string{`{}`, `{"geo":"eu"}`, `{"geo":"us"}`}[rng.IntN(3)]
					tgt := targets[rng.IntN(len(targets))]
					body := fmt.Sprintf(`{"selector":%s,"ttlSeconds":%d,"target":%q}`, sel, 2+rng.IntN(4), tgt)
					if rng.IntN(5) == 0 {
						body = fmt.Sprintf(`{"selector":%s,"ttlSeconds":3,"sessionKey":"s-%d"}`, sel, rng.IntN(16))
					}
					code, b := do(discLat, "lease", "POST", op.discURL+"/v1/leases", badToken, body)
					switch code {
					case 200:
						var l leaseAnswer
						if err := json.Unmarshal(b, &l); err != nil {
							fail("lease answer: %v", err)
							continue
						}
						if !l.Proxy.Healthy || l.Proxy.ActiveLeases > int(l.Proxy.MaxLeases) || maxOf[l.Proxy.ID] == 0 {
							fail("lease answer breaks an invariant: %s", b)
						}
						granted.Add(1)
						held = append(held, l)
					case 409:
					default:
						fail("lease %s: %d %s", body, code, b)
					}
				case r < 70:
					l, _ := pick()
					// 404: the lease expired (TTLs are short) or its proxy left the fleet.
					if code, b := do(discLat, "renew", "POST", op.discURL+"/v1/leases/"+l.LeaseID+"/renew", badToken, `{"ttlSeconds":3}`); code != 200 && code != 404 {
						fail("renew: %d %s", code, b)
					}
				case r < 85:
					l, i := pick()
					if code, b := do(discLat, "release", "DELETE", op.discURL+"/v1/leases/"+l.LeaseID, badToken, ""); code != 204 {
						fail("release: %d %s", code, b)
					}
					held = slices.Delete(held, i, i+1)
				default:
					l, _ := pick()
					tgt := l.Target
					if tgt == "" {
						tgt = targets[1+rng.IntN(len(targets)-1)]
					}
					res := []string{"ok", "ok", "ok", "ok", "ok", "ok", "ok", "rate_limited", "rate_limited", "banned"}[rng.IntN(10)]
					body := fmt.Sprintf(`{"result":%q,"target":%q}`, res, tgt)
					if code, b := do(discLat, "report", "POST", op.discURL+"/v1/leases/"+l.LeaseID+"/report", badToken, body); code != 200 && code != 404 {
						fail("report: %d %s", code, b)
					}
				}
			}
		}()
	}
	wg.Wait()

	// The invariants, replayed over the store's own change stream against the fleet's limits,
	// the prober's transitions and the churned proxy's absences.
	evMu.Lock()
	evs := slices.Clone(events)
	evMu.Unlock()
	active := map[string]int{}
	holder := map[string]string{}
	cooled := map[[2]string]time.Time{}
	bad := 0
	badLease := func(format string, args ...any) {
		if bad++; bad <= 10 {
			fail(format, args...)
		}
	}
	grants := 0
	for _, e := range evs {
		switch e.Kind {
		case lease.EventGranted:
			grants++
			active[e.Proxy]++
			holder[e.LeaseID] = e.Proxy
			if max, ok := maxOf[e.Proxy]; !ok || active[e.Proxy] > max {
				badLease("lease %s on %s: %d active, max %d", e.LeaseID, e.Proxy, active[e.Proxy], max)
			}
			if !tr.healthyAt(e.Proxy, e.At) {
				badLease("lease %s on %s at %s: the prober did not hold it Healthy", e.LeaseID, e.Proxy, e.At.Format(time.StampMicro))
			}
			if until := cooled[[2]string{e.Target, e.Proxy}]; e.Target != "" && e.At.Before(until) {
				badLease("lease %s on %s for %s at %s: cooling until %s", e.LeaseID, e.Proxy, e.Target, e.At.Format(time.StampMicro), until.Format(time.StampMicro))
			}
			gapMu.Lock()
			for _, g := range gaps {
				if e.Proxy == "crawl/"+fleet[0].name && e.At.After(g[0]) && e.At.Before(g[1]) {
					badLease("lease %s on %s at %s: the Proxy was deleted", e.LeaseID, e.Proxy, e.At.Format(time.StampMicro))
				}
			}
			gapMu.Unlock()
		case lease.EventReleased, lease.EventExpired, lease.EventDropped:
			if p, ok := holder[e.LeaseID]; ok {
				active[p]--
				delete(holder, e.LeaseID)
			}
		case lease.EventCooled:
			cooled[[2]string{e.Target, e.Proxy}] = e.Until
		}
	}

	report := func(name string, l *latencies) {
		l.mu.Lock()
		defer l.mu.Unlock()
		var all []time.Duration
		for op, ds := range l.d {
			all = append(all, ds...)
			t.Logf("%-9s %-9s n=%-7d p50=%-10s p99=%-10s max=%s", name, op, len(ds), percentile(ds, .5).Round(time.Microsecond), percentile(ds, .99).Round(time.Microsecond), slices.Max(ds).Round(time.Microsecond))
		}
		t.Logf("%-9s %-9s n=%-7d p50=%-10s p99=%s", name, "all", len(all), percentile(all, .5).Round(time.Microsecond), percentile(all, .99).Round(time.Microsecond))
	}
	t.Logf("load: %d clients for %d s over %d proxies (%d External flipping, %d Managed mock), %d syncs/s", clients, seconds, len(fleet), externalProxies, managedProxies, syncsPerSecond)
	report("discovery", discLat)
	report("hooks", hookLat)
	answers.mu.Lock()
	t.Logf("answers by operation and status: %v", answers.n)
	answers.mu.Unlock()
	flips := 0 // transitions during the load, not the first verdicts before it
	tr.mu.Lock()
	for _, xs := range tr.log {
		for _, x := range xs {
			if x.at.After(loadStart) {
				flips++
			}
		}
	}
	tr.mu.Unlock()
	gapMu.Lock()
	t.Logf("lease events %d (grants %d, answered 200 %d); health transitions %d; re-creations %d; bad leases %d",
		len(evs), grants, granted.Load(), flips, len(gaps), bad)
	gapMu.Unlock()

	for _, f := range failures {
		t.Error(f)
	}
	hookLat.mu.Lock()
	var hooks []time.Duration
	for _, ds := range hookLat.d {
		hooks = append(hooks, ds...)
	}
	hookLat.mu.Unlock()
	if p99 := percentile(hooks, .99); p99 > hookBudget {
		t.Errorf("hook p99 %s, want under %s (Metacontroller times a hook out at 10 s)", p99, hookBudget)
	}
	// A run that leased nothing, flipped nothing or never churned proved nothing.
	if grants == 0 || seconds >= 2 && (flips == 0 || len(gaps) == 0) {
		t.Errorf("the load did not exercise the operator: %d grants, %d health transitions, %d re-creations", grants, flips, len(gaps))
	}
	if int64(grants) != granted.Load() {
		t.Errorf("store granted %d leases, clients were answered 200 for %d", grants, granted.Load())
	}
}
