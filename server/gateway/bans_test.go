package gateway_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/proxy-operator/proxy-operator/lease"
	"github.com/proxy-operator/proxy-operator/server/discovery"
	"github.com/proxy-operator/proxy-operator/server/gateway"
)

// coolingFor is how many of the env's upstreams cannot be leased for target (they cool for it).
func (e *env) coolingFor(t *testing.T, target string) int {
	t.Helper()
	var ids []string
	for range len(e.ups) {
		l, err := e.store.Acquire(context.Background(), lease.Request{TTL: time.Minute, Target: target})
		if err != nil {
			break
		}
		ids = append(ids, l.ID)
	}
	for _, id := range ids {
		_ = e.store.Release(context.Background(), id)
	}
	return len(e.ups) - len(ids)
}

// TestA403FromEveryUpstreamBansNone: a site that refuses the request itself (403 to every
// address) bans no upstream: the second upstream's 403 agrees with the first, the gateway stops
// after two tries and reports nothing (issue 30 part 6: refused targets poisoned the fleet).
func TestA403FromEveryUpstreamBansNone(t *testing.T) {
	e := newEnv(t, 3, nil)
	s := newSite(t, func(w http.ResponseWriter, r *http.Request, from string) { w.WriteHeader(http.StatusForbidden) })
	resp, _ := get(t, e.client("", token), s.url("/"))
	if resp.StatusCode != http.StatusForbidden || resp.Header.Get(gateway.HeaderTries) != "2" {
		t.Errorf("got %d after %s tries, want the 403 after 2", resp.StatusCode, resp.Header.Get(gateway.HeaderTries))
	}
	if n := e.coolingFor(t, s.addr); n != 0 {
		t.Errorf("%d upstreams cool for a site that refuses everyone, want 0", n)
	}
}

// TestA403OfOneAddressBansThatOne: a site that bans one address (the first upstream) lets the
// second in; the first, and only the first, is reported banned.
func TestA403OfOneAddressBansThatOne(t *testing.T) {
	e := newEnv(t, 3, nil)
	var first atomic.Value
	s := newSite(t, func(w http.ResponseWriter, r *http.Request, from string) {
		first.CompareAndSwap(nil, from)
		if first.Load() == from {
			w.WriteHeader(http.StatusForbidden)
		}
	})
	resp, _ := get(t, e.client("", token), s.url("/"))
	if resp.StatusCode != http.StatusOK || resp.Header.Get(gateway.HeaderTries) != "2" {
		t.Errorf("got %d after %s tries, want 200 after 2", resp.StatusCode, resp.Header.Get(gateway.HeaderTries))
	}
	if n := e.coolingFor(t, s.addr); n != 1 {
		t.Errorf("%d upstreams cool for the site, want the one it banned", n)
	}
}

// TestUpstreamRefusalIsNeverABan: the mock upstream's own 403 (a destination it will not
// relay to, marked X-Mock-Proxy-Error as Squid marks X-Squid-Error) reaches the client once,
// in the gateway's words (the upstream's page could name its address), and bans nobody.
func TestUpstreamRefusalIsNeverABan(t *testing.T) {
	e := newEnv(t, 2, nil)
	// Not loopback: the mock relays only loopback, and never dials 192.0.2.1 (TEST-NET-1).
	resp, body := get(t, e.client("", token), "http://192.0.2.1/")
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "answered 403 for itself") || resp.Header.Get(gateway.HeaderTries) != "1" {
		t.Errorf("got %d %q after %s tries, want the upstream's 403 after 1", resp.StatusCode, body, resp.Header.Get(gateway.HeaderTries))
	}
	if n := e.coolingFor(t, "192.0.2.1"); n != 0 {
		t.Errorf("%d upstreams cool after their own refusal, want 0", n)
	}
}

// TestHungSiteIsTriedOnce: a site that never answers costs one upstream's header timeout, not
// MaxTries of them, and the client gets 504.
func TestHungSiteIsTriedOnce(t *testing.T) {
	e := newEnv(t, 3, func(g *gateway.Gateway) { g.ResponseHeaderTimeout = 300 * time.Millisecond })
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	s := newSite(t, func(w http.ResponseWriter, r *http.Request, from string) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	resp, _ := get(t, e.client("", token), s.url("/hang"))
	if resp.StatusCode != http.StatusGatewayTimeout || resp.Header.Get(gateway.HeaderTries) != "1" {
		t.Errorf("got %d after %s tries, want 504 after 1", resp.StatusCode, resp.Header.Get(gateway.HeaderTries))
	}
	if got := len(s.froms()); got != 1 {
		t.Errorf("the site got the request %d times, want once", got)
	}
}

// TestCoolingRefusalSaysTheTrueTime: during a 24 h cooldown the 503 says so: Retry-After
// within 1 % of the cooldown's end (it said 10 s before), X-Proxy-Operator-Error site_cooling,
// and the JSON body's availableAt and reason; for CONNECT too.
func TestCoolingRefusalSaysTheTrueTime(t *testing.T) {
	e := newEnv(t, 1, nil)
	s := newSite(t, nil)
	l, err := e.store.Acquire(context.Background(), lease.Request{TTL: time.Minute, Target: s.addr})
	if err != nil {
		t.Fatal(err)
	}
	c, err := e.store.Report(context.Background(), l.ID, lease.Report{Result: lease.ResultRateLimited, Target: s.addr, RetryAfter: 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	_ = e.store.Release(context.Background(), l.ID)
	want := time.Until(c.Until).Seconds()
	check := func(what string, resp *http.Response, body string) {
		t.Helper()
		ra, _ := strconv.ParseFloat(resp.Header.Get("Retry-After"), 64)
		var b gateway.RefusalBody
		_ = json.Unmarshal([]byte(body), &b)
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get(gateway.HeaderError) != gateway.ReasonSiteCooling ||
			math.Abs(ra-want) > want/100 || b.Reason != gateway.ReasonSiteCooling || b.AvailableAt == nil || !b.AvailableAt.Equal(c.Until.UTC()) {
			t.Errorf("%s: %d %s=%q Retry-After %q body %s; want 503 site_cooling, Retry-After %.0f (1 %%), availableAt %s",
				what, resp.StatusCode, gateway.HeaderError, resp.Header.Get(gateway.HeaderError), resp.Header.Get("Retry-After"), body, want, c.Until)
		}
	}
	resp, body := get(t, e.client("", token), s.url("/"))
	check("GET", resp, body)

	conn, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, _ = fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\nHost: %s\r\nProxy-Authorization: %s\r\n\r\n", s.addr, s.addr, basicAuth("", token))
	cr, err := http.ReadResponse(bufio.NewReader(conn), &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatal(err)
	}
	cb, _ := io.ReadAll(cr.Body)
	check("CONNECT", cr, string(cb))
}

// TestLogsSayRateLimitedOrBanned: a 429 is logged as rate limiting at info, never as a ban;
// a ban (a 403 of one address while another is let in) is logged as banned at warn (issue 31
// part 6: a 429 was logged "ban detected", and operators chased bans that were not).
func TestLogsSayRateLimitedOrBanned(t *testing.T) {
	for _, tc := range []struct {
		name    string
		status  int
		wantMsg string
		wantLvl string
	}{
		{"429", http.StatusTooManyRequests, "gateway upstream rate limited by site", "INFO"},
		{"403 of one address", http.StatusForbidden, "gateway upstream banned by site", "WARN"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, 2, nil)
			var first atomic.Value
			s := newSite(t, func(w http.ResponseWriter, r *http.Request, from string) {
				first.CompareAndSwap(nil, from)
				if first.Load() == from {
					w.Header().Set("Retry-After", "60")
					w.WriteHeader(tc.status)
				}
			})
			resp, _ := get(t, e.client("", token), s.url("/"))
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("got %d, want the second upstream's 200", resp.StatusCode)
			}
			var got []string
			for line := range strings.SplitSeq(e.logs.String(), "\n") {
				if strings.Contains(line, "by site") || strings.Contains(strings.ToLower(line), "ban") {
					got = append(got, line)
				}
			}
			if len(got) != 1 {
				t.Fatalf("want one report line, got %d:\n%s", len(got), strings.Join(got, "\n"))
			}
			if !strings.Contains(got[0], "level="+tc.wantLvl) || !strings.Contains(got[0], fmt.Sprintf("msg=%q", tc.wantMsg)) {
				t.Errorf("logged %s\nwant level=%s msg=%q", got[0], tc.wantLvl, tc.wantMsg)
			}
		})
	}
}

// TestGatewayReportsAreCounted: the gateway's own reports are counted in the process's
// reports counter with source gateway (issue 31 part 6: they were not counted at all).
func TestGatewayReportsAreCounted(t *testing.T) {
	reports := discovery.NewReportCounter()
	e := newEnv(t, 2, func(g *gateway.Gateway) { g.Reports = reports })
	var first atomic.Value
	s := newSite(t, func(w http.ResponseWriter, r *http.Request, from string) {
		first.CompareAndSwap(nil, from)
		if first.Load() == from {
			w.Header().Set("Retry-After", "60")
			w.WriteHeader(http.StatusTooManyRequests)
		}
	})
	if resp, _ := get(t, e.client("", token), s.url("/")); resp.StatusCode != http.StatusOK {
		t.Fatalf("got %d, want the second upstream's 200", resp.StatusCode)
	}
	for _, tc := range []struct {
		result, source string
		want           float64
	}{
		{"rate_limited", "gateway", 1},
		{"rate_limited", "api", 0},
		{"banned", "gateway", 0},
	} {
		if got := testutil.ToFloat64(reports.WithLabelValues(tc.result, tc.source)); got != tc.want {
			t.Errorf("reports{result=%s,source=%s} = %v, want %v", tc.result, tc.source, got, tc.want)
		}
	}
}
