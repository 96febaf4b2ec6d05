package gateway_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/proxy-operator/proxy-operator/server/gateway"
)

// TestSessionKeepsItsUpstreamThrough429: a 429 on a session's upstream is a pace to keep, not
// a reason to move: the retry waits for that upstream's pace (Retry-After) and goes through
// it again, no cooldown is started, and the session's later requests stay on it.
func TestSessionKeepsItsUpstreamThrough429(t *testing.T) {
	e := newEnv(t, 3, nil)
	var (
		mu      sync.Mutex
		limited = map[string]bool{} // upstream addresses that got their one 429
	)
	s := newSite(t, func(w http.ResponseWriter, r *http.Request, from string) {
		mu.Lock()
		first := !limited[from]
		limited[from] = true
		mu.Unlock()
		if first && r.URL.Path == "/limited" {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		_, _ = io.WriteString(w, "ok")
	})
	c := e.client("pool-web-session-k1", token)
	resp, _ := get(t, c, s.url("/"))
	stuck := resp.Header.Get(gateway.HeaderProxy)
	mu.Lock()
	delete(limited, e.ups[stuck]) // the session's upstream gets one 429 on /limited
	mu.Unlock()

	resp, _ = get(t, c, s.url("/limited"))
	if resp.StatusCode != http.StatusOK || resp.Header.Get(gateway.HeaderProxy) != stuck || resp.Header.Get(gateway.HeaderTries) != "2" {
		t.Fatalf("after a 429: %d through %s in %s tries, want 200 through %s in 2", resp.StatusCode,
			resp.Header.Get(gateway.HeaderProxy), resp.Header.Get(gateway.HeaderTries), stuck)
	}
	if m := resp.Header.Get(gateway.HeaderSessionMoved); m != "" {
		t.Errorf("%s: %q after a 429, want none", gateway.HeaderSessionMoved, m)
	}
	for i := range 3 {
		resp, _ := get(t, c, s.url(fmt.Sprintf("/after/%d", i)))
		if got := resp.Header.Get(gateway.HeaderProxy); got != stuck {
			t.Fatalf("request %d after the 429 went through %s, want %s", i, got, stuck)
		}
	}
	if logs := e.logs.String(); strings.Contains(logs, "cooldown_until") || !strings.Contains(logs, "the session keeps its upstream") {
		t.Errorf("after a session's 429 the log says:\n%s\nwant the session kept and no cooldown reported", logs)
	}
	if got := testMetric(t, e, "proxy_operator_gateway_bans_total", "rate_limited"); got != 1 {
		t.Errorf("rule rate_limited matched %v times, want 1", got)
	}
}

// TestDistinctSessionsTakeDistinctUpstreams: while there are enough upstreams, each live
// session gets its own, and keeps it.
func TestDistinctSessionsTakeDistinctUpstreams(t *testing.T) {
	e := newEnv(t, 3, nil)
	s := newSite(t, func(w http.ResponseWriter, r *http.Request, from string) { _, _ = io.WriteString(w, "ok") })
	got := map[string]string{}
	for round := range 3 {
		for _, name := range []string{"a", "b", "c"} {
			resp, _ := get(t, e.client("pool-web-session-"+name, token), s.url("/"))
			up := resp.Header.Get(gateway.HeaderProxy)
			if round > 0 && got[name] != up {
				t.Fatalf("session %s moved from %s to %s in round %d", name, got[name], up, round)
			}
			got[name] = up
		}
	}
	if got["a"] == got["b"] || got["b"] == got["c"] || got["a"] == got["c"] {
		t.Errorf("three sessions on three upstreams share: %v", got)
	}
}
