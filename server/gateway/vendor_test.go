package gateway_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
	"github.com/proxy-operator/proxy-operator/internal/fleet"
	"github.com/proxy-operator/proxy-operator/internal/healthtest"
	"github.com/proxy-operator/proxy-operator/internal/redistest"
	"github.com/proxy-operator/proxy-operator/internal/verdict"
	"github.com/proxy-operator/proxy-operator/lease/redisstore"
	"github.com/proxy-operator/proxy-operator/server/discovery/access"
	"github.com/proxy-operator/proxy-operator/server/gateway"
	"github.com/proxy-operator/proxy-operator/server/gateway/vendortest"
)

const vendorKey = "crawl/oxylabs"

var residential = netip.MustParsePrefix("127.0.200.0/24")

// addVendor starts the stand-in vendor and adds it to the fleet as a vendor Proxy (Oxylabs'
// username form), healthy.
func (e *env) addVendor(t *testing.T) *vendortest.Vendor {
	t.Helper()
	v, err := vendortest.Start(vendortest.Config{Customer: "acme", Password: "vendor-pw"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(v.Close)
	host, port, _ := net.SplitHostPort(v.Addr())
	p, _ := strconv.Atoi(port)
	e.view.Upsert(fleet.Proxy{Key: vendorKey, UID: vendorKey, IP: host, Port: int32(p), MaxLeases: 1000, Phase: "Ready",
		Attributes:  fleet.WithSource(nil, true),
		Credentials: &fleet.Credentials{Username: "acme", Password: "vendor-pw"},
		Vendor: &v1.VendorSpec{UsernameTemplate: "customer-{user}[-cc-{country}]-sessid-{session}-sesstime-{lifetimeMinutes}",
			Countries: []string{"US", "DE"}, PricePerGiB: "8"}})
	e.health.SetState(vendorKey, verdict.Healthy, 10)
	return v
}

// datacenterBlocking is a site that refuses every address but the vendor's residential ones,
// with a body of size bytes to the others.
func datacenterBlocking(t *testing.T, size int) *site {
	return newSite(t, func(w http.ResponseWriter, _ *http.Request, from string) {
		if a, err := netip.ParseAddr(from); err != nil || !residential.Contains(a) {
			http.Error(w, "datacenter addresses are not welcome", http.StatusForbidden)
			return
		}
		_, _ = w.Write([]byte(strings.Repeat("r", size)))
	})
}

func TestWaterfallSendsARefusingSiteToTheVendor(t *testing.T) {
	e := newEnv(t, 2, func(g *gateway.Gateway) { g.Waterfall = true })
	vendor := e.addVendor(t)
	blocking, open := datacenterBlocking(t, 100), newSite(t, nil)
	c := e.client("any", token)

	resp, _ := get(t, c, blocking.url("/1"))
	if resp.StatusCode != http.StatusOK || resp.Header.Get(gateway.HeaderProxy) != vendorKey {
		t.Fatalf("first page: %d through %q, want 200 through the vendor", resp.StatusCode, resp.Header.Get(gateway.HeaderProxy))
	}
	if got := len(blocking.froms()); got != 3 {
		t.Errorf("the site saw %d requests for the first page, want 3 (two of ours refused, then the vendor)", got)
	}
	resp, _ = get(t, c, blocking.url("/2"))
	if resp.StatusCode != http.StatusOK || resp.Header.Get(gateway.HeaderProxy) != vendorKey || len(blocking.froms()) != 4 {
		t.Errorf("second page: %d through %q after %d requests, want 200 straight to the vendor", resp.StatusCode, resp.Header.Get(gateway.HeaderProxy), len(blocking.froms()))
	}
	resp, _ = get(t, c, open.url("/"))
	if resp.StatusCode != http.StatusOK || resp.Header.Get(gateway.HeaderProxy) == vendorKey {
		t.Errorf("a site that welcomes our fleet: %d through %q, want 200 through our own", resp.StatusCode, resp.Header.Get(gateway.HeaderProxy))
	}
	if got := testMetric(t, e, "proxy_operator_gateway_waterfall_total", "to_vendor"); got != 1 {
		t.Errorf("to_vendor decisions %v, want 1", got)
	}
	var found bool
	for _, s := range e.gw.Sites() {
		if s.Site == blocking.addr {
			found = s.Vendor != nil && s.Vendor.Reason == "refused"
		}
		if s.Site == open.addr && s.Vendor != nil {
			t.Errorf("the open site shows a vendor: %+v", s.Vendor)
		}
	}
	if !found {
		t.Errorf("the sites view does not show the refusing site with the vendor (reason refused): %+v", e.gw.Sites())
	}
	// Usage: our fleet and the vendor apart, the vendor's matching the stand-in's own count.
	usage := map[string]int64{}
	for _, u := range e.gw.Usage() {
		if u.Team != "crawler" {
			t.Errorf("usage of team %q, want crawler only", u.Team)
		}
		usage[u.Source] = u.BytesIn
	}
	if got := usage[vendorKey]; got != 200 {
		t.Errorf("vendor bytes in: the gateway counted %d, want 200", got)
	}
	// The stand-in counts a body once its handler returns, after the client has it.
	waitFor(t, "the vendor's count of 200 bytes", func() bool { return vendor.Usage().BytesIn == 200 })
	if usage[gateway.SourceFleet] == 0 {
		t.Errorf("no fleet usage counted: %v", usage)
	}
}

func TestWithoutTheWaterfallTheSiteFails(t *testing.T) {
	e := newEnv(t, 2, nil)
	e.addVendor(t)
	blocking := datacenterBlocking(t, 100)
	resp, _ := get(t, e.client("any", token), blocking.url("/1"))
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("without the waterfall: %d through %q, want the site's 403", resp.StatusCode, resp.Header.Get(gateway.HeaderProxy))
	}
}

func TestWaterfallTriesOurOwnAgainAfterTheCooldown(t *testing.T) {
	e := newEnv(t, 2, func(g *gateway.Gateway) { g.Waterfall, g.WaterfallCooldown = true, 50*time.Millisecond })
	e.addVendor(t)
	var refusing atomic.Bool
	refusing.Store(true)
	s := newSite(t, func(w http.ResponseWriter, _ *http.Request, from string) {
		if a, _ := netip.ParseAddr(from); refusing.Load() && !residential.Contains(a) {
			http.Error(w, "no", http.StatusForbidden)
			return
		}
		_, _ = w.Write([]byte("ok"))
	})
	c := e.client("any", token)
	if resp, _ := get(t, c, s.url("/")); resp.Header.Get(gateway.HeaderProxy) != vendorKey {
		t.Fatalf("first page through %q, want the vendor", resp.Header.Get(gateway.HeaderProxy))
	}
	refusing.Store(false)
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, _ := get(t, c, s.url("/"))
		if resp.Header.Get(gateway.HeaderProxy) != vendorKey {
			break // our own again
		}
		if time.Now().After(deadline) {
			t.Fatal("our own proxies were never tried again")
		}
	}
	if got := testMetric(t, e, "proxy_operator_gateway_waterfall_total", "back_to_fleet"); got != 1 {
		t.Errorf("back_to_fleet decisions %v, want 1", got)
	}
}

func TestVendorSessionsStickAndDiffer(t *testing.T) {
	e := newEnv(t, 2, func(g *gateway.Gateway) { g.Waterfall = true })
	vendor := e.addVendor(t)
	blocking := datacenterBlocking(t, 10)
	exits := func(user string, n int) []string {
		c := e.client(user, token)
		before := len(blocking.froms())
		for i := range n {
			if resp, _ := get(t, c, blocking.url("/"+strconv.Itoa(i))); resp.StatusCode != http.StatusOK {
				t.Fatalf("%s: %d", user, resp.StatusCode)
			}
		}
		var out []string
		for _, ip := range blocking.froms()[before:] {
			if a, _ := netip.ParseAddr(ip); residential.Contains(a) {
				out = append(out, ip)
			}
		}
		return out
	}
	exits("any", 1) // two of ours refused: the site goes to the vendor
	a := exits("geo-us-session-a", 4)
	b := exits("geo-us-session-b", 2)
	for _, ip := range a[1:] {
		if ip != a[0] {
			t.Errorf("session a left from %v: want one exit", a)
			break
		}
	}
	if b[0] != b[1] || b[0] == a[0] {
		t.Errorf("session b left from %v, session a from %s: want one exit of its own", b, a[0])
	}
	none := exits("any", 3)
	if none[0] == none[1] || none[1] == none[2] {
		t.Errorf("requests without a session left from %v: want a fresh exit each", none)
	}
	if got := vendor.Refused(); got != 0 {
		t.Errorf("the vendor refused %d credentials", got)
	}
	// A country the vendor does not sell: refused, with the reason.
	resp, body := get(t, e.client("geo-fr", token), blocking.url("/fr"))
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get(gateway.HeaderError) != gateway.ReasonNoVendor || !strings.Contains(body, "does not offer country FR") {
		t.Errorf("geo-fr: %d %s %s, want 503 no_vendor", resp.StatusCode, resp.Header.Get(gateway.HeaderError), body)
	}
}

func TestBudgetStopsVendorTraffic(t *testing.T) {
	const page, budget = 1000, 5500
	tk, err := access.New([]access.TokenSpec{{Name: "team-a", Token: token, Namespaces: []string{access.AllNamespaces}, Right: access.RightLease,
		Budgets: []access.Budget{{Source: vendorKey, Period: access.PeriodDay, Bytes: budget}}}})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, 2, func(g *gateway.Gateway) { g.Waterfall, g.Tokens = true, tk })
	vendor := e.addVendor(t)
	blocking, open := datacenterBlocking(t, page), newSite(t, nil)
	c := e.client("any", token)
	served := 0
	var resp *http.Response
	var body string
	for range 20 {
		if resp, body = get(t, c, blocking.url("/")); resp.StatusCode != http.StatusOK {
			break
		}
		served++
	}
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get(gateway.HeaderError) != gateway.ReasonBudget ||
		!strings.Contains(body, "daily budget of 5500 bytes for vendor source crawl/oxylabs") {
		t.Fatalf("past the budget: %d %s %s, want 429 naming the budget", resp.StatusCode, resp.Header.Get(gateway.HeaderError), body)
	}
	// The cap is passed by at most one request: six pages of 1000 bytes for 5500.
	if served != 6 {
		t.Errorf("%d pages served through the vendor, want 6 (the last one crossing the budget)", served)
	}
	if resp, _ := get(t, c, open.url("/")); resp.StatusCode != http.StatusOK {
		t.Errorf("our own fleet past the vendor budget: %d, want 200", resp.StatusCode)
	}
	var used int64
	for _, u := range e.gw.Usage() {
		if u.Source == vendorKey {
			used = u.BytesIn + u.BytesOut
			if len(u.Budgets) != 1 || u.Budgets[0].Used != used {
				t.Errorf("the usage row's budgets %+v, want one with used %d", u.Budgets, used)
			}
		}
	}
	waitFor(t, "the vendor's count to match the gateway's", func() bool { v := vendor.Usage(); return v.BytesIn+v.BytesOut == used })
	if got := testMetric(t, e, "proxy_operator_gateway_budget_used_ratio", "team-a"); got < 1 {
		t.Errorf("budget used ratio %v, want at least 1", got)
	}
}

// TestTunnelsOfAVendorSiteGoToTheVendor: once the waterfall sends a site to the vendor, its
// CONNECT tunnels open there too, counted in usage like requests.
func TestTunnelsOfAVendorSiteGoToTheVendor(t *testing.T) {
	e := newEnv(t, 2, func(g *gateway.Gateway) { g.Waterfall = true })
	vendor := e.addVendor(t)
	blocking := datacenterBlocking(t, 10)
	if resp, _ := get(t, e.client("any", token), blocking.url("/")); resp.Header.Get(gateway.HeaderProxy) != vendorKey {
		t.Fatalf("the plain-HTTP page went through %q, want the vendor", resp.Header.Get(gateway.HeaderProxy))
	}
	conn, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, _ = conn.Write([]byte("CONNECT " + blocking.addr + " HTTP/1.1\r\nHost: " + blocking.addr + "\r\nProxy-Authorization: " + basicAuth("any", token) + "\r\n\r\n" +
		"GET /in-tunnel HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"))
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil || resp.StatusCode != http.StatusOK || resp.Header.Get(gateway.HeaderProxy) != vendorKey {
		t.Fatalf("CONNECT: %v %v, want 200 through the vendor", resp, err)
	}
	inner, err := http.ReadResponse(br, nil)
	if err != nil || inner.StatusCode != http.StatusOK {
		t.Fatalf("the request inside the tunnel: %v %v, want the site's 200 (a residential exit)", inner, err)
	}
	_, _ = io.Copy(io.Discard, inner.Body)
	conn.Close()
	waitFor(t, "the tunnel's usage", func() bool {
		for _, u := range e.gw.Usage() {
			if u.Source == vendorKey && u.Requests == 2 {
				v := vendor.Usage()
				return u.BytesIn == v.BytesIn && u.BytesOut == v.BytesOut
			}
		}
		return false
	})
}

// TestUsageSharedInRedis: with the Redis store as the usage book, two gateway replicas count
// one budget together, and a replica started afterwards (a restart) sees what they counted.
func TestUsageSharedInRedis(t *testing.T) {
	const page, budget = 1000, 3500
	srv := redistest.Start(t)
	tk, err := access.New([]access.TokenSpec{{Name: "team-a", Token: token, Namespaces: []string{access.AllNamespaces}, Right: access.RightLease,
		Budgets: []access.Budget{{Source: access.AnyVendor, Period: access.PeriodMonth, Bytes: budget}}}})
	if err != nil {
		t.Fatal(err)
	}
	view, h := fleet.New(time.Now, 0), &healthtest.Map{}
	replica := func() *env {
		return redisGateway(t, srv.Addr, view, h, func(g *gateway.Gateway) { g.Waterfall, g.Tokens = true, tk }, func(g *gateway.Gateway) {
			g.UsageBook = g.Leases.(*redisstore.Store)
		})
	}
	a, b := replica(), replica()
	for i := 1; i <= 2; i++ {
		a.addUpstream(t, fmt.Sprintf("crawl/p%d", i), fmt.Sprintf("127.0.0.%d", 40+i), nil, 100)
	}
	vendor := a.addVendor(t)
	if err := redisstore.NewPublisher(redisstore.PublisherConfig{Store: a.store.(*redisstore.Store), Fleet: view, Health: h}).Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	blocking := datacenterBlocking(t, page)
	served := 0
	var resp *http.Response
	for i := range 10 {
		e := []*env{a, b}[i%2]
		if resp, _ = get(t, e.client("any", token), blocking.url("/")); resp.StatusCode != http.StatusOK {
			break
		}
		served++
	}
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get(gateway.HeaderError) != gateway.ReasonBudget || served != 4 {
		t.Fatalf("after %d pages through two replicas: %d %s, want 429 budget after 4 (3500 bytes, 1000 a page)", served, resp.StatusCode, resp.Header.Get(gateway.HeaderError))
	}
	restarted := replica()
	var used int64
	for _, u := range restarted.gw.Usage() {
		if u.Source == vendorKey {
			used = u.BytesIn + u.BytesOut
		}
	}
	if used != 4*page {
		t.Errorf("a replica started afterwards sees %d vendor bytes, want %d", used, 4*page)
	}
	// A discovery replica, which runs no gateway, reads the same rows and budgets (no cost).
	shared := gateway.SharedUsage{Book: a.store.(*redisstore.Store), Tokens: tk}.Usage()
	want := restarted.gw.Usage()
	for i := range want {
		want[i].Cost = 0
	}
	if diff := cmp.Diff(want, shared); diff != "" {
		t.Errorf("SharedUsage mismatch (-a restarted gateway +SharedUsage):\n%s", diff)
	}
	waitFor(t, "the vendor's count", func() bool { v := vendor.Usage(); return v.BytesIn+v.BytesOut == used })
}

// TestWaterfallAfterBansCoolOurFleet: a site whose ban page a rule names (not a bare 403)
// bans each of our upstreams in turn; once every one cools for it, the site goes to the
// vendor (reason cooling). A site that only rate-limits our fleet stays with it.
func TestWaterfallAfterBansCoolOurFleet(t *testing.T) {
	rules, err := gateway.ParseRules([]byte("rules:\n  - {name: blocked, header: X-Blocked, result: banned}\n"))
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, 2, func(g *gateway.Gateway) { g.Waterfall, g.Rules, g.QueueWait = true, rules, 200*time.Millisecond })
	e.addVendor(t)
	banning := newSite(t, func(w http.ResponseWriter, _ *http.Request, from string) {
		if a, _ := netip.ParseAddr(from); !residential.Contains(a) {
			w.Header().Set("X-Blocked", "1")
			http.Error(w, "blocked", http.StatusForbidden)
			return
		}
		_, _ = w.Write([]byte("ok"))
	})
	limiting := newSite(t, func(w http.ResponseWriter, _ *http.Request, _ string) {
		w.Header().Set("Retry-After", "30")
		http.Error(w, "slow down", http.StatusTooManyRequests)
	})
	c := e.client("any", token)
	var resp *http.Response
	for range 3 {
		if resp, _ = get(t, c, banning.url("/")); resp.Header.Get(gateway.HeaderProxy) == vendorKey {
			break
		}
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get(gateway.HeaderProxy) != vendorKey {
		t.Fatalf("after our upstreams were banned: %d through %q, want 200 through the vendor", resp.StatusCode, resp.Header.Get(gateway.HeaderProxy))
	}
	if got := testMetric(t, e, "proxy_operator_gateway_waterfall_total", "cooling"); got != 1 {
		t.Errorf("to_vendor (cooling) decisions %v, want 1", got)
	}
	for range 3 {
		if resp, _ = get(t, c, limiting.url("/")); resp.Header.Get(gateway.HeaderProxy) == vendorKey {
			t.Fatalf("a site that only rate-limits our fleet went to the vendor")
		}
	}
}

// TestRuleMarksAVendorSite: a site the rules file's vendorHosts name goes to the vendor from
// its first request, our own fleet never tried; other sites are ours.
func TestRuleMarksAVendorSite(t *testing.T) {
	rules, err := gateway.ParseRules([]byte("vendorHosts: [\"127.0.0.1\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gateway.ParseRules([]byte("vendorHosts: [\"[\"]\n")); err == nil || !strings.Contains(err.Error(), "vendorHosts") {
		t.Errorf("a malformed vendorHosts glob: %v, want an error naming vendorHosts", err)
	}
	e := newEnv(t, 2, func(g *gateway.Gateway) { g.Waterfall, g.Rules = true, rules })
	e.addVendor(t)
	s := newSite(t, nil)
	resp, _ := get(t, e.client("any", token), s.url("/"))
	if resp.Header.Get(gateway.HeaderProxy) != vendorKey || len(s.froms()) != 1 {
		t.Errorf("a vendorHosts site: through %q after %d requests, want the vendor at once", resp.Header.Get(gateway.HeaderProxy), len(s.froms()))
	}
	if got := testMetric(t, e, "proxy_operator_gateway_waterfall_total", "vendor"); got != 1 {
		t.Errorf("vendor decisions %v, want 1", got)
	}
}

// TestVendorSessionExitCheck: with spec.verify.exitURL on the vendor Proxy, a gateway
// session's vendor session is trusted only once its exit, fetched through it, is inside
// expectedExit: once per session; a vendor whose exits are elsewhere gets a 502 after three
// sessions tried.
func TestVendorSessionExitCheck(t *testing.T) {
	echo := newSite(t, func(w http.ResponseWriter, _ *http.Request, from string) { _, _ = io.WriteString(w, from+"\n") })
	for _, tc := range []struct {
		name     string
		expected string
		want     int
		checks   int
	}{
		{"exits inside expectedExit", "127.0.200.0/24", http.StatusOK, 1},          // checked once, then trusted
		{"exits outside expectedExit", "127.0.201.0/24", http.StatusBadGateway, 6}, // three sessions per request
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, 2, func(g *gateway.Gateway) { g.Waterfall = true })
			e.addVendor(t)
			p, _ := e.view.Get(vendorKey)
			p.Verify = &v1.VerifySpec{ExitURL: echo.url("/ip"), ExpectedExit: []string{tc.expected}}
			e.view.Upsert(p)
			blocking := datacenterBlocking(t, 10)
			get(t, e.client("any", token), blocking.url("/")) // the site goes to the vendor; no session, no check
			before := len(echo.froms())
			c := e.client("session-s1", token)
			var resp *http.Response
			for range 2 {
				resp, _ = get(t, c, blocking.url("/s"))
			}
			if resp.StatusCode != tc.want {
				t.Errorf("through a checked session: %d, want %d", resp.StatusCode, tc.want)
			}
			if got := len(echo.froms()) - before; got != tc.checks {
				t.Errorf("%d exit checks for two requests, want %d", got, tc.checks)
			}
		})
	}
}

// TestVendorSessionMovesOnBanNotOnRateLimit: a vendor exit a site bans is left for another
// (the session's next request asks for a new vendor session); one it rate-limits is kept.
func TestVendorSessionMovesOnBanNotOnRateLimit(t *testing.T) {
	e := newEnv(t, 2, func(g *gateway.Gateway) { g.Waterfall = true })
	e.addVendor(t)
	var mode atomic.Int32 // 0 serve, 1 rate-limit the vendor's exits, 2 ban them
	s := newSite(t, func(w http.ResponseWriter, _ *http.Request, from string) {
		a, _ := netip.ParseAddr(from)
		switch {
		case !residential.Contains(a):
			http.Error(w, "no datacenters", http.StatusForbidden)
		case mode.Load() == 1:
			http.Error(w, "slow down", http.StatusTooManyRequests)
		case mode.Load() == 2:
			w.Header().Set("X-Blocked", "1")
			http.Error(w, "blocked", http.StatusForbidden)
		default:
			_, _ = io.WriteString(w, "ok")
		}
	})
	c := e.client("session-s1", token)
	get(t, c, s.url("/warm")) // our two refuse: the site goes to the vendor
	exit := func() string {
		t.Helper()
		f := s.froms()
		return f[len(f)-1]
	}
	get(t, c, s.url("/1"))
	first := exit()
	mode.Store(1)
	get(t, c, s.url("/limited"))
	mode.Store(0)
	get(t, c, s.url("/2"))
	if got := exit(); got != first {
		t.Errorf("after a 429 the session left from %s, want %s still", got, first)
	}
	mode.Store(2)
	get(t, c, s.url("/banned"))
	mode.Store(0)
	get(t, c, s.url("/3"))
	if got := exit(); got == first {
		t.Errorf("after a ban the session still leaves from %s", got)
	}
}
