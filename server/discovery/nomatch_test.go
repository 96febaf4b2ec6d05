package discovery_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/proxy-operator/proxy-operator/client"
	"github.com/proxy-operator/proxy-operator/internal/verdict"
)

// noMatchWhen is the part of a 409 body that says when to come back.
type noMatchWhen struct {
	CoolingForTarget  int        `json:"coolingForTarget"`
	LeasedForTarget   int        `json:"leasedForTarget"`
	AvailableAt       *time.Time `json:"availableAt"`
	RetryAfterSeconds int64      `json:"retryAfterSeconds"`
}

// TestDiscoveryConflictSaysWhen: a 409 carries Retry-After and availableAt: a proxy leased
// for the target may be released any moment (2 s, though its lease runs 300 s), a cooling one
// frees when its cooldown ends, and with nothing known the answer is 5 s. Each refusal is
// counted by its reason, and every answer by route and status.
func TestDiscoveryConflictSaysWhen(t *testing.T) {
	f := newDiscFixture(t, discOpts{token: discToken})
	f.add("p1", nil, 4, verdict.Healthy, 10)
	now := f.clock.Now()
	at := func(d time.Duration) *time.Time { v := now.Add(d).UTC(); return &v }
	body := `{"target":"shop.example","ttlSeconds":300}`
	l := decodeAs[client.Lease](t, f.do(t, "POST", "/v1/leases", discToken, body))

	check := func(name, body, header string, want noMatchWhen) {
		t.Helper()
		r := f.do(t, "POST", "/v1/leases", discToken, body)
		if r.code != 409 {
			t.Fatalf("%s: %d %s, want 409", name, r.code, r.body)
		}
		if got := r.header.Get("Retry-After"); got != header {
			t.Errorf("%s: Retry-After %q, want %q", name, got, header)
		}
		if diff := cmp.Diff(want, decodeAs[noMatchWhen](t, r)); diff != "" {
			t.Errorf("%s: 409 body mismatch (-want +got):\n%s", name, diff)
		}
	}
	check("leased for the target", body, "2", noMatchWhen{LeasedForTarget: 1, AvailableAt: at(300 * time.Second), RetryAfterSeconds: 2})

	if r := f.do(t, "POST", "/v1/leases/"+l.ID+"/report", discToken, `{"result":"rate_limited","target":"shop.example","retryAfterSeconds":90}`); r.code != 200 {
		t.Fatalf("report: %d %s", r.code, r.body)
	}
	if r := f.do(t, "DELETE", "/v1/leases/"+l.ID, discToken, ""); r.code != 204 {
		t.Fatalf("release: %d", r.code)
	}
	check("cooling", body, "90", noMatchWhen{CoolingForTarget: 1, AvailableAt: at(90 * time.Second), RetryAfterSeconds: 90})
	f.clock.Advance(89*time.Second + 500*time.Millisecond)
	check("cooling, half a second left", body, "1", noMatchWhen{CoolingForTarget: 1, AvailableAt: at(90 * time.Second), RetryAfterSeconds: 1})
	check("nothing matches", `{"selector":{"geo":"mars"}}`, "5", noMatchWhen{RetryAfterSeconds: 5})
	f.clock.Advance(time.Second)
	if r := f.do(t, "POST", "/v1/leases", discToken, body); r.code != 200 {
		t.Fatalf("lease after the cooldown: %d %s", r.code, r.body)
	}

	for reason, want := range map[string]float64{"leased_for_target": 1, "cooling": 2, "no_proxy": 1, "at_capacity": 0} {
		if got := counterValue(t, f.reg, "proxy_operator_lease_refused_total", reason); got != want {
			t.Errorf("refused{reason=%s} = %v, want %v", reason, got, want)
		}
	}
	for _, c := range []struct {
		route, method, code string
		want                float64
	}{
		{"/v1/leases", "POST", "409", 4},
		{"/v1/leases", "POST", "200", 2},
		{"/v1/leases/{id}/report", "POST", "200", 1},
		{"/v1/leases/{id}", "DELETE", "204", 1},
	} {
		got := requestsValue(t, f.reg, c.route, c.method, c.code)
		if got != c.want {
			t.Errorf("requests{route=%s,method=%s,code=%s} = %v, want %v", c.route, c.method, c.code, got, c.want)
		}
	}
	if r := f.do(t, "GET", "/v1/nowhere", discToken, ""); r.code != 404 {
		t.Fatalf("unknown route: %d", r.code)
	}
	if got := requestsValue(t, f.reg, "other", "GET", "404"); got != 1 {
		t.Errorf("requests{route=other,code=404} = %v, want 1", got)
	}
	if n := testutil.CollectAndCount(f.reg, "proxy_operator_discovery_request_duration_seconds"); n != 4 {
		t.Errorf("%d duration series, want 4 (one per route and method seen)", n)
	}
}

// requestsValue is proxy_operator_discovery_requests_total for one route, method and code (0
// when that series does not exist).
func requestsValue(t *testing.T, reg *prometheus.Registry, route, method, code string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "proxy_operator_discovery_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			if l["route"] == route && l["method"] == method && l["code"] == code {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// ignoreWhen leaves a 409's when (TestDiscoveryConflictSaysWhen's subject) out of comparisons
// of its counts.
var ignoreWhen = cmpopts.IgnoreFields(client.ErrorBody{}, "AvailableAt", "RetryAfterSeconds")

// TestDayLongCooldownSaysTheTrueTime: during a 24 h cooldown the API's 409 says so to the
// second (Retry-After 86400, availableAt the cooldown's end), as the gateway's 503 does
// (gateway.TestCoolingRefusalSaysTheTrueTime): issue 31's refusal said 10 s through the gateway.
func TestDayLongCooldownSaysTheTrueTime(t *testing.T) {
	f := newDiscFixture(t, discOpts{token: discToken})
	f.add("p1", nil, 4, verdict.Healthy, 10)
	end := f.clock.Now().Add(24 * time.Hour).UTC()
	body := `{"target":"shop.example","ttlSeconds":300}`
	l := decodeAs[client.Lease](t, f.do(t, "POST", "/v1/leases", discToken, body))
	if r := f.do(t, "POST", "/v1/leases/"+l.ID+"/report", discToken, `{"result":"rate_limited","target":"shop.example","retryAfterSeconds":86400}`); r.code != 200 {
		t.Fatalf("report: %d %s", r.code, r.body)
	}
	if r := f.do(t, "DELETE", "/v1/leases/"+l.ID, discToken, ""); r.code != 204 {
		t.Fatalf("release: %d", r.code)
	}
	r := f.do(t, "POST", "/v1/leases", discToken, body)
	got := decodeAs[noMatchWhen](t, r)
	if r.code != 409 || r.header.Get("Retry-After") != "86400" || got.AvailableAt == nil || !got.AvailableAt.Equal(end) {
		t.Fatalf("%d Retry-After %q availableAt %v, want 409, 86400 and %s", r.code, r.header.Get("Retry-After"), got.AvailableAt, end)
	}
}
