package gateway_test

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/lease"
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
// relay to, marked X-Mock-Proxy-Error as Squid marks X-Squid-Error) reaches the client once
// and bans nobody.
func TestUpstreamRefusalIsNeverABan(t *testing.T) {
	e := newEnv(t, 2, nil)
	// Not loopback: the mock relays only loopback, and never dials 192.0.2.1 (TEST-NET-1).
	resp, body := get(t, e.client("", token), "http://192.0.2.1/")
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "mock proxy") || resp.Header.Get(gateway.HeaderTries) != "1" {
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
