package discovery_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/proxy-operator/proxy-operator/client"
	"github.com/proxy-operator/proxy-operator/internal/clocktest"
	"github.com/proxy-operator/proxy-operator/internal/fleet"
	"github.com/proxy-operator/proxy-operator/internal/healthtest"
	"github.com/proxy-operator/proxy-operator/internal/verdict"
	"github.com/proxy-operator/proxy-operator/lease"
	"github.com/proxy-operator/proxy-operator/server/discovery"
	"github.com/proxy-operator/proxy-operator/server/discovery/access"
)

const tokensYAML = `tokens:
  - {name: team-a, token: tok-team-a-0123456789, namespaces: [team-a], right: lease}
  - {name: dash, token: tok-dash-0123456789, namespaces: ["*"], right: read}
  - {name: admin, token: tok-admin-0123456789, namespaces: ["*"], right: lease}
`

// scopedFixture is a discovery server with scoped tokens over two namespaces' proxies and a
// store with a small cooldown bound.
func scopedFixture(t *testing.T) (*discFixture, *prometheus.Registry) {
	t.Helper()
	toks, err := access.Parse([]byte(tokensYAML))
	if err != nil {
		t.Fatal(err)
	}
	clock := clocktest.New(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	f := &discFixture{clock: clock, view: fleet.New(clock.Now, 0), health: &healthtest.Map{}}
	f.store = lease.NewMemory(lease.Config{Fleet: f.view, Health: f.health, Now: clock.Now, MaxCooldownsPerProxy: 2})
	reg := prometheus.NewRegistry()
	d := &discovery.Discovery{Fleet: f.view, Health: f.health, Leases: f.store, Tokens: toks, Now: clock.Now, Registerer: reg}
	f.srv = httptest.NewServer(d.Handler())
	t.Cleanup(f.srv.Close)
	for _, key := range []string{"team-a/p1", "team-b/p1"} {
		f.view.Upsert(fleet.Proxy{Key: key, UID: key, IP: "10.0.0.1", Port: 3128, Attributes: map[string]string{"geo": "eu"}, MaxLeases: 10, Phase: "Ready"})
		f.health.SetState(key, verdict.Healthy, 10)
	}
	return f, reg
}

// TestScopedTokens is issue 10, item 5: teams sharing a cluster cannot see or lease each
// other's proxies, and a read-only token cannot lease.
func TestScopedTokens(t *testing.T) {
	f, _ := scopedFixture(t)
	for _, tc := range []struct {
		name, method, path, token, body string
		code                            int
		has, lacks                      string
	}{
		{"team list", "GET", "/v1/proxies", "tok-team-a-0123456789", "", 200, "team-a/p1", "team-b/"},
		{"admin list", "GET", "/v1/proxies", "tok-admin-0123456789", "", 200, "team-b/p1", ""},
		{"dashboard list", "GET", "/v1/proxies", "tok-dash-0123456789", "", 200, "team-b/p1", ""},
		{"team lease stays in its namespace", "POST", "/v1/leases", "tok-team-a-0123456789", `{"selector":{"geo":"eu"}}`, 200, "team-a/p1", "team-b/"},
		{"dashboard cannot lease", "POST", "/v1/leases", "tok-dash-0123456789", `{}`, 403, "may read, not lease", ""},
		{"dashboard cannot release", "DELETE", "/v1/leases/x", "tok-dash-0123456789", "", 403, "", ""},
		{"unknown token", "GET", "/v1/proxies", "tok-nobody", "", 401, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := f.do(t, tc.method, tc.path, tc.token, tc.body)
			if r.code != tc.code || !strings.Contains(string(r.body), tc.has) || tc.lacks != "" && strings.Contains(string(r.body), tc.lacks) {
				t.Errorf("%d %s; want %d containing %q and not %q", r.code, r.body, tc.code, tc.has, tc.lacks)
			}
		})
	}
	// team-a's only proxy is full for it: team-b's is never offered.
	for range 9 {
		f.do(t, "POST", "/v1/leases", "tok-team-a-0123456789", `{"selector":{"geo":"eu"}}`)
	}
	if r := f.do(t, "POST", "/v1/leases", "tok-team-a-0123456789", `{"selector":{"geo":"eu"}}`); r.code != http.StatusConflict || !strings.Contains(string(r.body), `"matching":1`) {
		t.Errorf("team-a with its proxy full: %d %s, want 409 over its 1 proxy", r.code, r.body)
	}
}

// TestCooldownBoundAnswers429 is issue 10, item 1 at the API: beyond the bound a report is a
// 429 naming the limit, counted by the refused metric.
func TestCooldownBoundAnswers429(t *testing.T) {
	f, reg := scopedFixture(t)
	l := decodeAs[client.Lease](t, f.do(t, "POST", "/v1/leases", "tok-admin-0123456789", `{"selector":{"geo":"eu"},"ttlSeconds":600}`))
	codes := map[int]int{}
	var last resp
	for _, target := range []string{"a.example", "b.example", "c.example", "d.example"} {
		last = f.do(t, "POST", "/v1/leases/"+l.ID+"/report", "tok-admin-0123456789", `{"result":"rate_limited","target":"`+target+`"}`)
		codes[last.code]++
	}
	if codes[200] != 2 || codes[429] != 2 {
		t.Fatalf("answers %v, want 2 recorded and 2 refused", codes)
	}
	if !strings.Contains(string(last.body), "2 cooldowns, the per-proxy limit") {
		t.Errorf("refusal %s does not name the limit", last.body)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var refused, remembered float64
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch mf.GetName() {
			case "proxy_operator_lease_reports_refused_total":
				for _, lp := range m.GetLabel() {
					if lp.GetValue() == "per_proxy" {
						refused = m.GetCounter().GetValue()
					}
				}
			case "proxy_operator_lease_cooldowns":
				remembered = m.GetGauge().GetValue()
			}
		}
	}
	if refused != 2 || remembered != 2 {
		t.Errorf("refused %v, cooldowns %v; want 2 and 2", refused, remembered)
	}
}

// TestMalformedQueryIs400 is issue 10, item 8: a query that does not parse dropped its filter
// and answered the whole fleet.
func TestMalformedQueryIs400(t *testing.T) {
	f, _ := scopedFixture(t)
	for _, q := range []string{"attr.geo=%zz", "healthy=%", "attr.geo=eu&x=%g0", "attr.geo=a;b"} {
		if r := f.do(t, "GET", "/v1/proxies?"+q, "tok-admin-0123456789", ""); r.code != http.StatusBadRequest {
			t.Errorf("?%s: %d %s, want 400", q, r.code, r.body)
		}
	}
}

// TestLeasesPerToken is issue 21 (item 4, per token): with more than one token, one token
// holds at most its share of live leases in a namespace; beyond it the answer is 429 with a
// Retry-After of when its first lease there ends, and another token still leases there.
func TestLeasesPerToken(t *testing.T) {
	toks, err := access.Parse([]byte(tokensYAML))
	if err != nil {
		t.Fatal(err)
	}
	clock := clocktest.New(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	f := &discFixture{clock: clock, view: fleet.New(clock.Now, 0), health: &healthtest.Map{}}
	f.store = lease.NewMemory(lease.Config{Fleet: f.view, Health: f.health, Now: clock.Now, MaxLeasesPerHolder: 2})
	reg := prometheus.NewRegistry()
	d := &discovery.Discovery{Fleet: f.view, Health: f.health, Leases: f.store, Tokens: toks, Now: clock.Now, Registerer: reg}
	f.srv = httptest.NewServer(d.Handler())
	t.Cleanup(f.srv.Close)
	f.view.Upsert(fleet.Proxy{Key: "team-a/p1", UID: "p1", IP: "10.0.0.1", Port: 3128, MaxLeases: 10, Phase: "Ready"})
	f.health.SetState("team-a/p1", verdict.Healthy, 10)

	const team = "tok-team-a-0123456789"
	for i := range 2 {
		if r := f.do(t, "POST", "/v1/leases", team, `{"ttlSeconds":120}`); r.code != http.StatusOK {
			t.Fatalf("team-a lease %d: %d %s", i, r.code, r.body)
		}
		clock.Advance(10 * time.Second)
	}
	r := f.do(t, "POST", "/v1/leases", team, `{"ttlSeconds":120}`)
	// The first lease ends at 120 s; 20 s have passed.
	if r.code != http.StatusTooManyRequests || r.header.Get("Retry-After") != "100" ||
		!strings.Contains(string(r.body), "token team-a already holds 2 live leases") || !strings.Contains(string(r.body), "-lease-max-per-token") {
		t.Errorf("team-a beyond its share: %d Retry-After %q %s; want 429, 100, naming the token and the flag", r.code, r.header.Get("Retry-After"), r.body)
	}
	if got := counterValue(t, reg, "proxy_operator_lease_refused_total", "token_share"); got != 1 {
		t.Errorf("refused{token_share} = %v, want 1", got)
	}
	if r := f.do(t, "POST", "/v1/leases", "tok-admin-0123456789", `{}`); r.code != http.StatusOK {
		t.Errorf("admin beside team-a at its share: %d %s, want 200", r.code, r.body)
	}
}

// TestFairSharesHoldWhateverTheScope is issue 30 part 5: a token scoped to every namespace
// flooded leases and took every slot of a small namespace (the per-token bound, 256, was above
// its capacity). Its share there is now the namespace's capacity over the tokens that may
// lease in it: admin and team-a each get half of team-a's 4 slots.
func TestFairSharesHoldWhateverTheScope(t *testing.T) {
	toks, err := access.Parse([]byte(tokensYAML))
	if err != nil {
		t.Fatal(err)
	}
	clock := clocktest.New(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	f := &discFixture{clock: clock, view: fleet.New(clock.Now, 0), health: &healthtest.Map{}}
	f.store = lease.NewMemory(lease.Config{Fleet: f.view, Health: f.health, Now: clock.Now, MaxLeasesPerHolder: lease.DefaultMaxLeasesPerHolder})
	d := &discovery.Discovery{Fleet: f.view, Health: f.health, Leases: f.store, Tokens: toks, Now: clock.Now, Registerer: prometheus.NewRegistry()}
	f.srv = httptest.NewServer(d.Handler())
	t.Cleanup(f.srv.Close)
	f.view.Upsert(fleet.Proxy{Key: "team-a/p1", UID: "p1", IP: "10.0.0.1", Port: 3128, MaxLeases: 4, Phase: "Ready"})
	f.health.SetState("team-a/p1", verdict.Healthy, 10)

	const admin, team = "tok-admin-0123456789", "tok-team-a-0123456789"
	for i := range 2 {
		if r := f.do(t, "POST", "/v1/leases", admin, `{"ttlSeconds":3600}`); r.code != http.StatusOK {
			t.Fatalf("admin lease %d: %d %s", i, r.code, r.body)
		}
	}
	if r := f.do(t, "POST", "/v1/leases", admin, `{"ttlSeconds":3600}`); r.code != http.StatusTooManyRequests ||
		!strings.Contains(string(r.body), "token admin already holds 2 live leases") {
		t.Fatalf("admin beyond its share of team-a: %d %s, want 429 naming the share of 2", r.code, r.body)
	}
	for i := range 2 {
		if r := f.do(t, "POST", "/v1/leases", team, `{"ttlSeconds":3600}`); r.code != http.StatusOK {
			t.Fatalf("team-a's own lease %d beside admin's flood: %d %s, want 200", i, r.code, r.body)
		}
	}
}
