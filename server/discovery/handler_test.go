package discovery_test

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/proxy-operator/proxy-operator/client"
	"github.com/proxy-operator/proxy-operator/internal/clocktest"
	"github.com/proxy-operator/proxy-operator/internal/fleet"
	"github.com/proxy-operator/proxy-operator/internal/healthtest"
	"github.com/proxy-operator/proxy-operator/internal/verdict"
	"github.com/proxy-operator/proxy-operator/lease"
	"github.com/proxy-operator/proxy-operator/server/discovery"
)

const discToken = "s3cret-token-value"

type discFixture struct {
	clock  *clocktest.Clock
	view   *fleet.View
	health *healthtest.Map
	store  *lease.Memory
	reg    *prometheus.Registry
	srv    *httptest.Server
	logs   *bytes.Buffer
}

type discOpts struct {
	token  string
	warmup time.Duration
}

func newDiscFixture(t testing.TB, o discOpts) *discFixture {
	t.Helper()
	clock := clocktest.New(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	f := &discFixture{
		clock:  clock,
		view:   fleet.New(clock.Now, o.warmup),
		health: &healthtest.Map{},
		reg:    prometheus.NewRegistry(),
		logs:   &bytes.Buffer{},
	}
	f.store = lease.NewMemory(lease.Config{Fleet: f.view, Health: f.health, Now: clock.Now})
	var mu sync.Mutex
	d := &discovery.Discovery{
		Fleet: f.view, Health: f.health, Leases: f.store, Token: o.token, Insecure: o.token == "", Now: clock.Now, Registerer: f.reg,
		Log: slog.New(slog.NewTextHandler(lockedWriter{&mu, f.logs}, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	f.srv = httptest.NewServer(d.Handler())
	t.Cleanup(f.srv.Close)
	return f
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (f *discFixture) add(name string, attrs map[string]string, max int32, state verdict.State, latency int64) {
	key := "crawl/" + name
	f.view.Upsert(fleet.Proxy{Key: key, UID: name, IP: "10.1.0." + name[len(name)-1:], Port: 3128, Attributes: attrs, MaxLeases: max, Phase: "Ready"})
	f.health.SetState(key, state, latency)
}

type resp struct {
	code   int
	header http.Header
	body   []byte
}

func (f *discFixture) do(t testing.TB, method, path, token, body string) resp {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, f.srv.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := f.srv.Client().Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp{res.StatusCode, res.Header, b}
}

func decodeAs[T any](t testing.TB, r resp) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(r.body, &v); err != nil {
		t.Fatalf("decode %s: %v", r.body, err)
	}
	return v
}

func TestDiscoveryAuth(t *testing.T) {
	f := newDiscFixture(t, discOpts{token: discToken})
	f.add("p1", nil, 5, verdict.Healthy, 10)
	tests := []struct {
		name, method, path, header string
		want                       int
	}{
		{"no header", "GET", "/v1/proxies", "", 401},
		{"wrong token", "GET", "/v1/proxies", "Bearer nope", 401},
		{"token prefix", "GET", "/v1/proxies", "Bearer " + discToken[:5], 401},
		{"basic scheme", "GET", "/v1/proxies", "Basic " + discToken, 401},
		{"bare token", "GET", "/v1/proxies", discToken, 401},
		{"lease without token", "POST", "/v1/leases", "", 401},
		{"release without token", "DELETE", "/v1/leases/x", "", 401},
		{"renew without token", "POST", "/v1/leases/x/renew", "", 401},
		{"report without token", "POST", "/v1/leases/x/report", "", 401},
		{"unknown v1 path without token", "GET", "/v1/secrets", "", 401},
		{"right token", "GET", "/v1/proxies", "Bearer " + discToken, 200},
		{"scheme case-insensitive", "GET", "/v1/proxies", "bearer " + discToken, 200},
		{"healthz open", "GET", "/healthz", "", 200},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, f.srv.URL+tc.path, nil)
			if tc.header != "" {
				req.Header.Set("Authorization", tc.header)
			}
			res, err := f.srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != tc.want {
				t.Fatalf("status %d, want %d (%s)", res.StatusCode, tc.want, b)
			}
			if tc.want == 401 {
				if e := decodeAs[client.ErrorBody](t, resp{body: b}); !strings.Contains(e.Error, "bearer token") {
					t.Errorf("401 body %s does not say what is wrong", b)
				}
			}
		})
	}
	// Path tricks never reach a /v1 handler without the token.
	for _, path := range []string{"//v1/proxies", "/v1//proxies", "/%761/proxies", "/healthz/../v1/proxies", "/./v1/proxies", "/V1/proxies"} {
		req, _ := http.NewRequest("GET", f.srv.URL+path, nil)
		req.URL.Opaque = path // keep the path as written
		res, err := f.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode == http.StatusOK {
			t.Errorf("GET %s without a token: 200 %s", path, b)
		}
	}
	if got := f.store.ActiveCount(); got != 0 {
		t.Errorf("unauthenticated requests changed state: %d leases", got)
	}
	if strings.Contains(f.logs.String(), discToken) || strings.Contains(f.logs.String(), discToken[:5]) {
		t.Errorf("the token reached the logs:\n%s", f.logs)
	}
}

func TestDiscoveryAuthOff(t *testing.T) {
	f := newDiscFixture(t, discOpts{})
	if r := f.do(t, "GET", "/v1/proxies", "", ""); r.code != 200 {
		t.Fatalf("status %d with auth off, want 200", r.code)
	}
	if !strings.Contains(f.logs.String(), "level=WARN") || !strings.Contains(f.logs.String(), "AUTH DISABLED") {
		t.Errorf("no loud warning when auth is off; logs:\n%s", f.logs)
	}
}

func TestDiscoveryList(t *testing.T) {
	f := newDiscFixture(t, discOpts{token: discToken})
	eu := map[string]string{"geo": "eu", "purpose": "crawl"}
	f.add("p1", eu, 5, verdict.Healthy, 10)
	f.add("p2", eu, 5, verdict.Unhealthy, 0)
	f.add("p3", map[string]string{"geo": "us"}, 0, verdict.Healthy, 30)
	f.add("p4", nil, 1, verdict.Unknown, 0)
	f.do(t, "POST", "/v1/leases", discToken, `{"selector":{"geo":"eu"}}`)

	p1 := client.Proxy{ID: "crawl/p1", IP: "10.1.0.1", Port: 3128, Attributes: eu, Phase: "Ready", Healthy: true, LatencyMillis: 10, ActiveLeases: 1, MaxLeases: 5}
	p2 := client.Proxy{ID: "crawl/p2", IP: "10.1.0.2", Port: 3128, Attributes: eu, Phase: "Ready", MaxLeases: 5}
	p3 := client.Proxy{ID: "crawl/p3", IP: "10.1.0.3", Port: 3128, Attributes: map[string]string{"geo": "us"}, Phase: "Ready", Healthy: true, LatencyMillis: 30}
	p4 := client.Proxy{ID: "crawl/p4", IP: "10.1.0.4", Port: 3128, Attributes: map[string]string{}, Phase: "Ready", MaxLeases: 1}
	tests := []struct {
		query string
		want  []client.Proxy
	}{
		{"", []client.Proxy{p1, p2, p3, p4}},
		{"?attr.geo=eu", []client.Proxy{p1, p2}},
		{"?attr.geo=eu&attr.purpose=crawl&healthy=true", []client.Proxy{p1}},
		{"?attr.geo=eu&healthy=false", []client.Proxy{p2}},
		{"?healthy=true", []client.Proxy{p1, p3}},
		{"?attr.geo=mars", []client.Proxy{}},
		{"?attr.purpose=crawl&attr.geo=us", []client.Proxy{}},
	}
	for _, tc := range tests {
		t.Run(tc.query, func(t *testing.T) {
			r := f.do(t, "GET", "/v1/proxies"+tc.query, discToken, "")
			if r.code != 200 {
				t.Fatalf("status %d: %s", r.code, r.body)
			}
			want := client.ProxyList{Complete: true, Count: len(tc.want), Proxies: tc.want}
			if diff := cmp.Diff(want, decodeAs[client.ProxyList](t, r)); diff != "" {
				t.Errorf("list mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// TestDiscoveryWarmup: right after a restart the view may be partial; the list says so and
// leasing waits.
func TestDiscoveryWarmup(t *testing.T) {
	f := newDiscFixture(t, discOpts{token: discToken, warmup: 90 * time.Second})
	f.add("p1", nil, 5, verdict.Healthy, 10)
	f.clock.Advance(30 * time.Second)

	r := f.do(t, "GET", "/v1/proxies", discToken, "")
	l := decodeAs[client.ProxyList](t, r)
	if r.code != 200 || l.Complete || l.CompleteAt == nil || r.header.Get("Retry-After") != "60" {
		t.Errorf("list during warmup: status %d complete %v completeAt %v Retry-After %q; want 200, false, set, 60",
			r.code, l.Complete, l.CompleteAt, r.header.Get("Retry-After"))
	}
	r = f.do(t, "POST", "/v1/leases", discToken, `{}`)
	if r.code != 503 || r.header.Get("Retry-After") != "60" {
		t.Errorf("lease during warmup: status %d Retry-After %q, want 503 and 60 (%s)", r.code, r.header.Get("Retry-After"), r.body)
	}
	if n := f.store.ActiveCount(); n != 0 {
		t.Errorf("%d leases granted during warmup", n)
	}
	f.clock.Advance(60 * time.Second)
	if r := f.do(t, "POST", "/v1/leases", discToken, `{}`); r.code != 200 {
		t.Errorf("lease after warmup: status %d (%s)", r.code, r.body)
	}
	if l := decodeAs[client.ProxyList](t, f.do(t, "GET", "/v1/proxies", discToken, "")); !l.Complete || l.CompleteAt != nil {
		t.Errorf("list after warmup: complete %v completeAt %v", l.Complete, l.CompleteAt)
	}
}

func TestDiscoveryLeaseLifecycle(t *testing.T) {
	f := newDiscFixture(t, discOpts{token: discToken})
	f.add("p1", nil, 5, verdict.Healthy, 10)
	f.add("p2", nil, 5, verdict.Healthy, 20)

	r := f.do(t, "POST", "/v1/leases", discToken, `{"ttlSeconds": 60, "target": "Example.COM"}`)
	if r.code != 200 {
		t.Fatalf("lease: status %d (%s)", r.code, r.body)
	}
	l := decodeAs[client.Lease](t, r)
	want := client.Lease{ID: l.ID, ExpiresAt: f.clock.Now().Add(time.Minute), TTLSeconds: 60, Target: "example.com", ProxyURL: "http://10.1.0.1:3128",
		Proxy: client.Proxy{ID: "crawl/p1", IP: "10.1.0.1", Port: 3128, Attributes: map[string]string{}, Phase: "Ready", Healthy: true, LatencyMillis: 10, ActiveLeases: 1, MaxLeases: 5}}
	if diff := cmp.Diff(want, l); diff != "" || len(l.ID) < 32 {
		t.Errorf("lease mismatch (-want +got):\n%s (id %q)", diff, l.ID)
	}

	f.clock.Advance(50 * time.Second)
	r = f.do(t, "POST", "/v1/leases/"+l.ID+"/renew", discToken, "")
	if got := decodeAs[client.Lease](t, r); r.code != 200 || !got.ExpiresAt.Equal(f.clock.Now().Add(time.Minute)) {
		t.Errorf("renew with its own TTL: status %d expiresAt %s, want 200 and %s", r.code, got.ExpiresAt, f.clock.Now().Add(time.Minute))
	}
	r = f.do(t, "POST", "/v1/leases/"+l.ID+"/renew", discToken, `{"ttlSeconds": 600}`)
	if got := decodeAs[client.Lease](t, r); r.code != 200 || !got.ExpiresAt.Equal(f.clock.Now().Add(10*time.Minute)) {
		t.Errorf("renew for 600 s: status %d expiresAt %s", r.code, got.ExpiresAt)
	}

	r = f.do(t, "POST", "/v1/leases/"+l.ID+"/report", discToken, `{"result": "rate_limited", "target": "example.com", "retryAfterSeconds": 3600}`)
	var rep client.Cooldown
	if err := json.Unmarshal(r.body, &rep); r.code != 200 || err != nil || rep.ProxyID != "crawl/p1" || rep.Until == nil || !rep.Until.Equal(f.clock.Now().Add(time.Hour)) {
		t.Errorf("report: status %d body %s; want cooldown for crawl/p1 until %s", r.code, r.body, f.clock.Now().Add(time.Hour))
	}
	// The report is counted with source api; every other result and source is there at 0.
	if err := testutil.GatherAndCompare(f.reg, strings.NewReader(`
# HELP proxy_operator_lease_reports_total Reports on leased proxies the lease store accepted, by result (ok, rate_limited, banned) and source (api: POST /v1/leases/{id}/report; gateway: the gateway's own).
# TYPE proxy_operator_lease_reports_total counter
proxy_operator_lease_reports_total{result="banned",source="api"} 0
proxy_operator_lease_reports_total{result="banned",source="gateway"} 0
proxy_operator_lease_reports_total{result="ok",source="api"} 0
proxy_operator_lease_reports_total{result="ok",source="gateway"} 0
proxy_operator_lease_reports_total{result="rate_limited",source="api"} 1
proxy_operator_lease_reports_total{result="rate_limited",source="gateway"} 0
`), "proxy_operator_lease_reports_total"); err != nil {
		t.Error(err)
	}
	// p1 cools for example.com (the target was lower-cased on the way in), not for others.
	for _, tc := range []struct{ target, want string }{{"example.com", "crawl/p2"}, {"other.org", "crawl/p1"}, {"other.org", "crawl/p2"}} {
		r := f.do(t, "POST", "/v1/leases", discToken, `{"target": "`+tc.target+`"}`)
		if got := decodeAs[client.Lease](t, r).Proxy.ID; r.code != 200 || got != tc.want {
			t.Errorf("lease for %s: status %d proxy %s, want %s", tc.target, r.code, got, tc.want)
		}
	}

	for i := range 2 {
		if r := f.do(t, "DELETE", "/v1/leases/"+l.ID, discToken, ""); r.code != 204 || len(r.body) != 0 {
			t.Errorf("release #%d: status %d body %q, want 204 and none", i, r.code, r.body)
		}
	}
	if r := f.do(t, "DELETE", "/v1/leases/never-existed", discToken, ""); r.code != 204 {
		t.Errorf("release of an unknown lease: status %d, want 204", r.code)
	}
	for path, body := range map[string]string{"/renew": "", "/report": `{"result":"ok","target":"x.org"}`} {
		r := f.do(t, "POST", "/v1/leases/"+l.ID+path, discToken, body)
		if r.code != 404 || !strings.Contains(decodeAs[client.ErrorBody](t, r).Error, "lease not found") {
			t.Errorf("%s after release: status %d (%s), want 404", path, r.code, r.body)
		}
	}
}

func TestDiscoverySticky(t *testing.T) {
	f := newDiscFixture(t, discOpts{token: discToken})
	f.add("p1", nil, 5, verdict.Healthy, 10)
	f.add("p2", nil, 5, verdict.Healthy, 20)
	lease := func(body string) string {
		r := f.do(t, "POST", "/v1/leases", discToken, body)
		if r.code != 200 {
			t.Fatalf("lease %s: %d %s", body, r.code, r.body)
		}
		return decodeAs[client.Lease](t, r).Proxy.ID
	}
	first := lease(`{"sessionKey": "user-42"}`)
	for range 3 {
		if got := lease(`{"sessionKey": "user-42"}`); got != first {
			t.Fatalf("sticky session moved from %s to %s", first, got)
		}
	}
	f.health.SetState(first, verdict.Unhealthy, 0)
	if got := lease(`{"sessionKey": "user-42"}`); got == first {
		t.Errorf("sticky session kept unhealthy %s", got)
	}
}

// TestDiscoveryLeasedForTarget: a proxy leased for a target is not leased for it again until
// that lease ends; the 409 counts it apart.
func TestDiscoveryLeasedForTarget(t *testing.T) {
	f := newDiscFixture(t, discOpts{token: discToken})
	f.add("p1", nil, 4, verdict.Healthy, 10)
	body := `{"target":"shop.example"}`
	l := decodeAs[client.Lease](t, f.do(t, "POST", "/v1/leases", discToken, body))
	r := f.do(t, "POST", "/v1/leases", discToken, body)
	want := client.ErrorBody{Error: "none of the 1 proxies matching the selector can be leased: 1 already leased for shop.example", Matching: 1, LeasedForTarget: 1, Target: "shop.example"}
	if r.code != 409 {
		t.Fatalf("second lease for the target: %d %s, want 409", r.code, r.body)
	}
	if diff := cmp.Diff(want, decodeAs[client.ErrorBody](t, r), ignoreWhen); diff != "" {
		t.Errorf("409 body mismatch (-want +got):\n%s", diff)
	}
	if r := f.do(t, "POST", "/v1/leases", discToken, `{"target":"other.example"}`); r.code != 200 {
		t.Errorf("lease for another target: %d %s", r.code, r.body)
	}
	if r := f.do(t, "DELETE", "/v1/leases/"+l.ID, discToken, ""); r.code != 204 {
		t.Fatalf("release: %d", r.code)
	}
	if r := f.do(t, "POST", "/v1/leases", discToken, body); r.code != 200 {
		t.Errorf("lease for the target after its release: %d %s", r.code, r.body)
	}
}

func TestDiscoveryConflict(t *testing.T) {
	f := newDiscFixture(t, discOpts{token: discToken})
	eu := map[string]string{"geo": "eu"}
	f.add("p1", eu, 1, verdict.Healthy, 10)
	f.add("p2", eu, 2, verdict.Unhealthy, 0)
	f.add("p3", eu, 2, verdict.Healthy, 10)
	f.add("p4", map[string]string{"geo": "us"}, 2, verdict.Healthy, 10)
	l1 := decodeAs[client.Lease](t, f.do(t, "POST", "/v1/leases", discToken, `{"selector":{"geo":"eu"}}`))
	l3 := decodeAs[client.Lease](t, f.do(t, "POST", "/v1/leases", discToken, `{"selector":{"geo":"eu"}}`))
	if l1.Proxy.ID != "crawl/p1" || l3.Proxy.ID != "crawl/p3" {
		t.Fatalf("setup leases on %s and %s, want p1 and p3", l1.Proxy.ID, l3.Proxy.ID)
	}
	if r := f.do(t, "POST", "/v1/leases/"+l3.ID+"/report", discToken, `{"result":"banned","target":"shop.example"}`); r.code != 200 {
		t.Fatalf("report: %d %s", r.code, r.body)
	}
	tests := []struct {
		name, body string
		want       client.ErrorBody
	}{
		{"no match", `{"selector":{"geo":"mars"}}`, client.ErrorBody{Error: "no proxy matches the selector"}},
		{"all unavailable", `{"selector":{"geo":"eu"},"target":"shop.example"}`, client.ErrorBody{
			Error: "none of the 3 proxies matching the selector can be leased: 1 unhealthy, 1 at capacity, 1 cooling down for shop.example", Matching: 3, Unhealthy: 1, AtCapacity: 1, CoolingForTarget: 1, Target: "shop.example"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := f.do(t, "POST", "/v1/leases", discToken, tc.body)
			if r.code != 409 {
				t.Fatalf("status %d (%s), want 409", r.code, r.body)
			}
			if diff := cmp.Diff(tc.want, decodeAs[client.ErrorBody](t, r), ignoreWhen); diff != "" {
				t.Errorf("409 body mismatch (-want +got):\n%s", diff)
			}
		})
	}
	if got := counterValue(t, f.reg, "proxy_operator_lease_requests_total", "no_match"); got != 2 {
		t.Errorf("no_match count %v, want 2", got)
	}
	if got := counterValue(t, f.reg, "proxy_operator_lease_requests_total", "granted"); got != 2 {
		t.Errorf("granted count %v, want 2", got)
	}
	if got := gaugeValue(t, f.reg, "proxy_operator_leases_active"); got != 2 {
		t.Errorf("leases_active %v, want 2", got)
	}
}

// counterValue finds one series of a counter by its single label value in the registry.
func counterValue(t *testing.T, reg *prometheus.Registry, name, label string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) != 1 {
				t.Fatalf("%s has labels %v: want one, low-cardinality", name, m.GetLabel())
			}
			if m.GetLabel()[0].GetValue() == label {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("%s{%s} not registered", name, label)
	return 0
}

func gaugeValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("%s not registered", name)
	return 0
}

// TestDiscoveryBadInput: every malformed request is a JSON 4xx naming the problem and changes
// nothing: no lease, no cooldown, no counter.
func TestDiscoveryBadInput(t *testing.T) {
	f := newDiscFixture(t, discOpts{token: discToken})
	f.add("p1", nil, 5, verdict.Healthy, 10)
	f.add("p2", nil, 5, verdict.Healthy, 20)
	held := decodeAs[client.Lease](t, f.do(t, "POST", "/v1/leases", discToken, `{}`))
	if held.Proxy.ID != "crawl/p1" {
		t.Fatalf("setup lease on %s", held.Proxy.ID)
	}
	report := "/v1/leases/" + held.ID + "/report"
	renew := "/v1/leases/" + held.ID + "/renew"
	tests := []struct {
		name, method, path, body string
		code                     int
		says                     string
	}{
		{"malformed JSON", "POST", "/v1/leases", `{"ttlSeconds": `, 400, "malformed JSON"},
		{"trailing garbage", "POST", "/v1/leases", `{} {}`, 400, "malformed JSON"},
		{"not an object", "POST", "/v1/leases", `[1]`, 400, "want discovery.acquireRequest"},
		{"unknown field", "POST", "/v1/leases", `{"ttl": 30}`, 400, `unknown field "ttl"`},
		{"ttl zero", "POST", "/v1/leases", `{"ttlSeconds": 0}`, 400, "ttlSeconds 0 out of range 1..3600"},
		{"ttl negative", "POST", "/v1/leases", `{"ttlSeconds": -5}`, 400, "ttlSeconds -5 out of range"},
		{"ttl huge", "POST", "/v1/leases", `{"ttlSeconds": 9999999999}`, 400, "out of range"},
		{"ttl overflow", "POST", "/v1/leases", `{"ttlSeconds": 1e40}`, 400, "field ttlSeconds"},
		{"ttl fraction", "POST", "/v1/leases", `{"ttlSeconds": 1.5}`, 400, "field ttlSeconds"},
		{"ttl string", "POST", "/v1/leases", `{"ttlSeconds": "300"}`, 400, "field ttlSeconds"},
		{"selector not strings", "POST", "/v1/leases", `{"selector": {"geo": ["eu"]}}`, 400, "field selector"},
		{"selector syntax", "POST", "/v1/leases", `{"selector": {"geo!": "eu"}}`, 400, "unsupported selector syntax"},
		{"selector set syntax", "POST", "/v1/leases", `{"selector": {"geo in (eu,us)": ""}}`, 400, "unsupported selector syntax"},
		{"target a URL", "POST", "/v1/leases", `{"target": "https://example.com/x"}`, 400, "not a URL"},
		{"oversized", "POST", "/v1/leases", `{"sessionKey": "` + strings.Repeat("a", 70<<10) + `"}`, 413, "exceeds 65536 bytes"},
		{"session key too long", "POST", "/v1/leases", `{"sessionKey": "` + strings.Repeat("a", 300) + `"}`, 400, "sessionKey longer"},
		{"renew ttl negative", "POST", renew, `{"ttlSeconds": -1}`, 400, "out of range"},
		{"renew unknown field", "POST", renew, `{"ttlSecs": 10}`, 400, "unknown field"},
		{"report unknown result", "POST", report, `{"result": "captcha", "target": "x.org"}`, 400, `result "captcha"`},
		{"report no result", "POST", report, `{"target": "x.org"}`, 400, `result ""`},
		{"report missing target", "POST", report, `{"result": "banned"}`, 400, "target is required"},
		{"report empty body", "POST", report, ``, 400, "empty body"},
		{"report negative retry", "POST", report, `{"result": "banned", "target": "x.org", "retryAfterSeconds": -3}`, 400, "retryAfterSeconds -3"},
		{"report huge retry", "POST", report, `{"result": "banned", "target": "x.org", "retryAfterSeconds": 99999999}`, 400, "retryAfterSeconds 99999999"},
		{"report unknown field", "POST", report, `{"result": "banned", "target": "x.org", "why": "x"}`, 400, "unknown field"},
		{"list unknown param", "GET", "/v1/proxies?geo=eu", "", 400, `unknown query parameter "geo"`},
		{"list healthy maybe", "GET", "/v1/proxies?healthy=maybe", "", 400, "healthy"},
		{"list attr twice", "GET", "/v1/proxies?attr.geo=eu&attr.geo=us", "", 400, "given 2 times"},
		{"list empty attr key", "GET", "/v1/proxies?attr.=eu", "", 400, "attribute key"},
		{"list selector syntax", "GET", "/v1/proxies?attr.geo!=eu", "", 400, "unsupported selector syntax"},
		{"wrong method on leases", "GET", "/v1/leases", "", 405, "method GET not allowed"},
		{"wrong method on lease", "PUT", "/v1/leases/" + held.ID, `{}`, 405, "method PUT not allowed"},
		{"wrong method on renew", "GET", renew, "", 405, "not allowed"},
		{"wrong method on proxies", "POST", "/v1/proxies", `{}`, 405, "not allowed"},
		{"unknown route", "GET", "/v1/leases/x/y/z", "", 404, "no route"},
	}
	before := f.store.ActiveByProxy()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := f.do(t, tc.method, tc.path, discToken, tc.body)
			if r.code != tc.code {
				t.Fatalf("status %d (%s), want %d", r.code, r.body, tc.code)
			}
			if ct := r.header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q, want application/json", ct)
			}
			if e := decodeAs[client.ErrorBody](t, r); !strings.Contains(e.Error, tc.says) {
				t.Errorf("error %q does not say %q", e.Error, tc.says)
			}
		})
	}
	if diff := cmp.Diff(before, f.store.ActiveByProxy()); diff != "" {
		t.Errorf("bad input changed the leases (-before +after):\n%s", diff)
	}
	// No cooldown was recorded: the held lease's proxy is still offered for x.org, and its
	// expiry did not move.
	l := decodeAs[client.Lease](t, f.do(t, "POST", "/v1/leases", discToken, `{"target":"x.org"}`))
	l2 := decodeAs[client.Lease](t, f.do(t, "POST", "/v1/leases", discToken, `{"target":"x.org"}`))
	if l.Proxy.ID != "crawl/p2" || l2.Proxy.ID != "crawl/p1" {
		t.Errorf("after bad reports leases went to %s, %s; want p2 then p1 (no cooldown)", l.Proxy.ID, l2.Proxy.ID)
	}
	f.clock.Advance(discovery.DefaultLeaseTTL)
	if r := f.do(t, "POST", renew, discToken, ""); r.code != 404 {
		t.Errorf("the held lease outlived its TTL after bad renewals: status %d", r.code)
	}
	if got := counterValue(t, f.reg, "proxy_operator_lease_requests_total", "no_match"); got != 0 {
		t.Errorf("no_match counted %v for bad input", got)
	}
}

// TestUnauthorizedIsLoggedAndCounted: every 401 is logged (reason, route, remote address, never
// the token) and counted by reason on the injected Registerer.
func TestUnauthorizedIsLoggedAndCounted(t *testing.T) {
	f := newDiscFixture(t, discOpts{token: discToken})
	const wrong = "wrong-token-7d1e0b5a9c"
	f.do(t, "GET", "/v1/proxies", "", "")
	f.do(t, "GET", "/v1/proxies", wrong, "")
	f.do(t, "POST", "/v1/leases", wrong, "")
	f.do(t, "GET", "/v1/proxies", discToken, "")
	mfs, err := f.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "proxy_operator_discovery_unauthorized_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" {
					got[l.GetValue()] = m.GetCounter().GetValue()
				}
			}
		}
	}
	if want := map[string]float64{"missing_token": 1, "invalid_token": 2, "throttled": 0}; !maps.Equal(got, want) {
		t.Errorf("proxy_operator_discovery_unauthorized_total = %v, want %v", got, want)
	}
	logs := f.logs.String()
	if strings.Count(logs, "discovery request unauthorized") != 3 || !strings.Contains(logs, "reason=invalid_token") || !strings.Contains(logs, "reason=missing_token") {
		t.Errorf("401s not logged with their reason:\n%s", logs)
	}
	if strings.Contains(logs, wrong) || strings.Contains(logs, discToken) {
		t.Errorf("a token reached the log:\n%s", logs)
	}
}

// TestVendorSourcesAreNeverLeased: a vendor proxy's credential is the vendor account's, so
// the lease API neither hands one out to an ordinary selector nor lets one be asked for
// (decision 0293).
func TestVendorSourcesAreNeverLeased(t *testing.T) {
	f := newDiscFixture(t, discOpts{token: discToken})
	f.add("vendor", map[string]string{"crawl.example.com/source": "vendor"}, 100, verdict.Healthy, 10)
	if r := f.do(t, "POST", "/v1/leases", discToken, `{}`); r.code != 409 {
		t.Errorf("an ordinary lease with only a vendor proxy: %d %s, want 409", r.code, r.body)
	}
	r := f.do(t, "POST", "/v1/leases", discToken, `{"selector":{"crawl.example.com/source":"vendor"}}`)
	if r.code != 400 || !strings.Contains(string(r.body), "served through the gateway only") {
		t.Errorf("a lease asking for the vendor source: %d %s, want 400 naming the gateway", r.code, r.body)
	}
}
