package gateway_test

import (
	"encoding/json"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"github.com/proxy-operator/proxy-operator/internal/netpolicy"
	"github.com/proxy-operator/proxy-operator/server/gateway"
)

// TestTargetsRefusedBeforeLeasing: with the default policy every internal target, in every
// spelling a client or a resolver reads as an address, is a 403 with the reason, and nothing
// is leased or relayed for it (issue 30: CONNECT 127.0.0.1:<redis> reached the lease store).
func TestTargetsRefusedBeforeLeasing(t *testing.T) {
	s := newSite(t, nil)
	_, port, _ := net.SplitHostPort(s.addr)
	e := newEnv(t, 1, func(g *gateway.Gateway) { g.Egress = nil })
	targets := []string{
		"127.0.0.1:" + port, "127.1:" + port, "2130706433:" + port, "0x7f000001:" + port, "0177.0.0.1:" + port,
		"[::1]:" + port, "[::ffff:127.0.0.1]:" + port, "[::ffff:7f00:1]:" + port, "[64:ff9b::7f00:1]:" + port,
		"localhost:" + port, "LOCALHOST.:" + port, "redis.localhost:6379",
		"169.254.169.254:80", "169.254.169.254.:80", "2852039166:80", "0xa9fea9fe:80", "0251.0376.0251.0376:80",
		"[fd00:ec2::254]:80", "metadata.google.internal:80",
		"10.0.0.1:6379", "172.16.0.1:80", "192.168.1.1:80", "100.64.0.1:80", "[fd12::1]:80", "0.0.0.0:80",
		"redis:6379", "redis.default.svc:6379", "redis.default.svc.cluster.local.:6379", "db.internal:5432",
	}
	for _, target := range targets {
		for _, method := range []string{http.MethodGet, http.MethodConnect} {
			t.Run(method+" "+target, func(t *testing.T) {
				status, head, body := rawProxy(t, e.addr, method, target, basicAuth("", token))
				if status != http.StatusForbidden {
					t.Fatalf("%s %s: %d %q, want 403", method, target, status, body)
				}
				if !strings.Contains(head, gateway.HeaderError+": "+gateway.ReasonTargetDenied) {
					t.Errorf("%s %s: head %q lacks %s: %s", method, target, head, gateway.HeaderError, gateway.ReasonTargetDenied)
				}
				var got struct{ Error string }
				if err := json.Unmarshal([]byte(body), &got); err != nil || !strings.Contains(got.Error, "egress policy") {
					t.Errorf("%s %s: body %q, want a JSON error naming the egress policy", method, target, body)
				}
			})
		}
	}
	if n := len(s.froms()); n != 0 {
		t.Errorf("the site saw %d requests, want none", n)
	}
	if n := e.leases(t); n != 0 {
		t.Errorf("%d leases live, want none", n)
	}
	if got := testMetric(t, e, "proxy_operator_gateway_egress_denied_total", "target"); got != float64(2*len(targets)) {
		t.Errorf("egress_denied{hop=target} = %v, want %d", got, 2*len(targets))
	}
}

// TestAllowedLoopbackKeepsProtectedDenied: the tests' allow-list opens loopback targets, but
// the lease store's address and the gateway's own listener stay refused.
func TestAllowedLoopbackKeepsProtectedDenied(t *testing.T) {
	store := newSite(t, nil) // stands for the lease store's port
	s := newSite(t, nil)
	e := newEnv(t, 1, func(g *gateway.Gateway) { g.Egress = loopbackPolicy(t, store.addr) })
	if resp, body := get(t, e.client("", token), s.url("/")); resp.StatusCode != http.StatusOK {
		t.Fatalf("allowed loopback site: %d %q", resp.StatusCode, body)
	}
	_, port, _ := net.SplitHostPort(store.addr)
	for _, target := range []string{store.addr, "127.1:" + port, "2130706433:" + port, "[::ffff:127.0.0.1]:" + port} {
		for _, method := range []string{http.MethodGet, http.MethodConnect} {
			if status, _, body := rawProxy(t, e.addr, method, target, basicAuth("", token)); status != http.StatusForbidden {
				t.Errorf("%s %s (the store): %d %q, want 403", method, target, status, body)
			}
		}
	}
	if n := len(store.froms()); n != 0 {
		t.Errorf("the store saw %d requests, want none", n)
	}
}

// TestUpstreamDialedOnlyUnderThePolicy: an upstream whose address the proxy policy denies is
// never dialled, for a request or a tunnel (the prober's check, now the gateway's too).
func TestUpstreamDialedOnlyUnderThePolicy(t *testing.T) {
	s := newSite(t, nil)
	noLoopbackProxies, err := netpolicy.New(netpolicy.Config{TargetAllow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, 1, func(g *gateway.Gateway) { g.Egress = noLoopbackProxies; g.MaxTries = 1 })
	for _, method := range []string{http.MethodGet, http.MethodConnect} {
		status, _, body := rawProxy(t, e.addr, method, s.addr, basicAuth("", token))
		if status != http.StatusBadGateway {
			t.Errorf("%s through a loopback upstream the policy denies: %d %q, want 502", method, status, body)
		}
		if strings.Contains(body, e.ups["crawl/p1"]) {
			t.Errorf("%s: the answer %q shows the upstream's address", method, body)
		}
	}
	if n := len(s.froms()); n != 0 {
		t.Errorf("the site saw %d requests, want none", n)
	}
	if got := testMetric(t, e, "proxy_operator_gateway_egress_denied_total", "upstream"); got < 2 {
		t.Errorf("egress_denied{hop=upstream} = %v, want at least 2", got)
	}
}
