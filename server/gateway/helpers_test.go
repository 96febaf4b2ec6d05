package gateway_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/proxy-operator/proxy-operator/internal/fleet"
	"github.com/proxy-operator/proxy-operator/internal/healthtest"
	"github.com/proxy-operator/proxy-operator/internal/logtest"
	"github.com/proxy-operator/proxy-operator/internal/netpolicy"
	"github.com/proxy-operator/proxy-operator/internal/verdict"
	"github.com/proxy-operator/proxy-operator/lease"
	"github.com/proxy-operator/proxy-operator/providers"
	"github.com/proxy-operator/proxy-operator/providers/mock"
	"github.com/proxy-operator/proxy-operator/server/discovery/access"
	"github.com/proxy-operator/proxy-operator/server/gateway"
)

const (
	token     = "gw-test-token-3f9a1c"
	readToken = "gw-read-token-77b2e0"
	teamToken = "gw-team-token-c0ffee"
)

// env is a gateway in front of real mock upstream proxies (each on its own 127.0.0.x, so a
// site sees which one relayed) over a Memory lease store.
type env struct {
	view   *fleet.View
	health *healthtest.Map
	store  lease.Store
	gw     *gateway.Gateway
	addr   string // the gateway's host:port
	reg    *prometheus.Registry
	logs   *logtest.Buffer
	ups    map[string]string // proxy key -> upstream IP
}

func tokens(t testing.TB) *access.Tokens {
	t.Helper()
	tk, err := access.New([]access.TokenSpec{
		{Name: "crawler", Token: token, Namespaces: []string{access.AllNamespaces}, Right: access.RightLease},
		{Name: "dashboard", Token: readToken, Namespaces: []string{access.AllNamespaces}, Right: access.RightRead},
		{Name: "team", Token: teamToken, Namespaces: []string{"team"}, Right: access.RightLease},
	})
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

// newEnv starts n mock upstreams (keys crawl/p1..pn) and a gateway; mod adjusts the gateway
// before it serves.
func newEnv(t testing.TB, n int, mod func(*gateway.Gateway)) *env {
	t.Helper()
	view := fleet.New(time.Now, 0)
	h := &healthtest.Map{}
	store := lease.NewMemory(lease.Config{Fleet: view, Health: h})
	e := newEnvWith(t, view, h, store, mod)
	for i := 1; i <= n; i++ {
		e.addUpstream(t, fmt.Sprintf("crawl/p%d", i), fmt.Sprintf("127.0.0.%d", 10+i), map[string]string{"pool": "web"}, 100)
	}
	return e
}

func newEnvWith(t testing.TB, view *fleet.View, h *healthtest.Map, store lease.Store, mod func(*gateway.Gateway)) *env {
	t.Helper()
	e := &env{view: view, health: h, store: store, reg: prometheus.NewRegistry(), logs: &logtest.Buffer{}, ups: map[string]string{}}
	e.gw = &gateway.Gateway{Leases: store, Tokens: tokens(t), Registerer: e.reg, Egress: loopbackPolicy(t),
		Log: slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	if mod != nil {
		mod(e.gw)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := e.gw.Server()
	go func() { _ = srv.Serve(e.gw.Listener(ln)) }()
	t.Cleanup(func() { _ = srv.Close() })
	e.addr = ln.Addr().String()
	return e
}

// loopbackPolicy is the egress policy of these tests: their upstreams and sites are on
// loopback, which the default policy refuses; protected adds addresses that stay denied.
func loopbackPolicy(t testing.TB, protected ...string) *netpolicy.Policy {
	t.Helper()
	p, err := netpolicy.New(loopbackConfig(protected...))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// loopbackConfig is loopbackPolicy's configuration, for a test that adds to it.
func loopbackConfig(protected ...string) netpolicy.Config {
	return netpolicy.Config{AllowLoopback: true, Protected: protected,
		TargetAllow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}}
}

// upstreamCreds are the credential every mock upstream demands.
func upstreamCreds(key string) *providers.Credentials {
	return &providers.Credentials{Username: "gw", Password: "pw-of-" + key}
}

// addUpstream starts a real relaying mock proxy on ip and adds it to the fleet, healthy.
func (e *env) addUpstream(t testing.TB, key, ip string, attrs map[string]string, maxLeases int32) {
	t.Helper()
	creds := upstreamCreds(key)
	var stop func()
	var addr string
	for range 5 {
		ln, err := net.Listen("tcp", ip+":0")
		if err != nil {
			t.Fatal(err)
		}
		addr = ln.Addr().String()
		ln.Close()
		if stop, err = mock.ServeForwardProxy(addr, creds); err == nil {
			break
		}
	}
	if stop == nil {
		t.Fatalf("mock upstream on %s did not start", ip)
	}
	t.Cleanup(stop)
	host, port, _ := net.SplitHostPort(addr)
	p, _ := strconv.Atoi(port)
	e.view.Upsert(fleet.Proxy{Key: key, UID: key, IP: host, Port: int32(p), Attributes: attrs, MaxLeases: maxLeases,
		Phase: "Ready", Credentials: creds})
	e.health.SetState(key, verdict.Healthy, 10)
	e.ups[key] = host
}

// proxyURL is the gateway's URL with a username and the token.
func (e *env) proxyURL(user, tok string) *url.URL {
	return &url.URL{Scheme: "http", Host: e.addr, User: url.UserPassword(user, tok)}
}

// client is an HTTP client through the gateway; keep-alive on, so rotation must not depend on
// new connections.
func (e *env) client(user, tok string) *http.Client {
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(e.proxyURL(user, tok))}}
}

// site is a loopback HTTP site that records which address each request came from; handle
// decides its answer.
type site struct {
	addr   string
	mu     sync.Mutex
	from   []string // remote IPs, in order
	handle func(w http.ResponseWriter, r *http.Request, from string)
	seen   []http.Header
}

func newSite(t testing.TB, handle func(w http.ResponseWriter, r *http.Request, from string)) *site {
	t.Helper()
	s := &site{handle: handle}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ip, _, _ := net.SplitHostPort(r.RemoteAddr)
		s.mu.Lock()
		s.from = append(s.from, ip)
		s.seen = append(s.seen, r.Header.Clone())
		s.mu.Unlock()
		if s.handle != nil {
			s.handle(w, r, ip)
			return
		}
		_, _ = io.WriteString(w, "hello from the site\n")
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	s.addr = ln.Addr().String()
	return s
}

func (s *site) url(path string) string { return "http://" + s.addr + path }

func (s *site) froms() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.from...)
}

func (s *site) headers() []http.Header {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]http.Header(nil), s.seen...)
}

func basicAuth(user, pass string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
}

// get fetches u through the gateway with client c and returns the answer with its body read.
func get(t testing.TB, c *http.Client, u string) (*http.Response, string) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatalf("GET %s through the gateway: %v", u, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: reading the body: %v", u, err)
	}
	return resp, string(b)
}

// leases is the number of live leases in the store.
func (e *env) leases(t testing.TB) int {
	t.Helper()
	n, err := e.store.Count(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// waitFor polls cond until it holds or the deadline passes (no fixed sleeps).
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// testMetric sums the series of a metric that have a label with value label ("" : all).
func testMetric(t testing.TB, e *env, name, label string) float64 {
	t.Helper()
	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			match := label == ""
			for _, lp := range m.GetLabel() {
				if lp.GetValue() == label {
					match = true
				}
			}
			if !match {
				continue
			}
			switch {
			case m.Counter != nil:
				sum += m.GetCounter().GetValue()
			case m.Gauge != nil:
				sum += m.GetGauge().GetValue()
			}
		}
	}
	return sum
}
