package discovery_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/proxy-operator/proxy-operator/internal/clocktest"
	"github.com/proxy-operator/proxy-operator/internal/fleet"
	"github.com/proxy-operator/proxy-operator/internal/healthtest"
	"github.com/proxy-operator/proxy-operator/internal/verdict"
	"github.com/proxy-operator/proxy-operator/lease"
	"github.com/proxy-operator/proxy-operator/server/discovery"
	"github.com/proxy-operator/proxy-operator/server/discovery/access"
)

type fakeSites []discovery.SitePace

func (f fakeSites) Sites() []discovery.SitePace { return f }

// TestSites: GET /v1/sites shows the top sites by recent traffic (?limit=) and every site
// cooling, by traffic then host; a token sees only its namespaces' traffic and cooldowns;
// without a gateway the cooling sites are shown without a pace; a bad limit is a 400.
func TestSites(t *testing.T) {
	clock := clocktest.New(time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC))
	view, h := fleet.New(clock.Now, 0), &healthtest.Map{}
	for _, k := range []string{"a/p1", "b/p2"} {
		view.Upsert(fleet.Proxy{Key: k, UID: k, IP: "10.1.0.1", Port: 3128, MaxLeases: 5, Phase: "Ready"})
		h.SetState(k, verdict.Healthy, 10)
	}
	store := lease.NewMemory(lease.Config{Fleet: view, Health: h, Now: clock.Now})
	ctx := context.Background()
	for _, r := range []struct {
		ns  string
		rep lease.Report
	}{
		{"a", lease.Report{Result: lease.ResultRateLimited, Target: "slow.example", RetryAfter: 2 * time.Second}},
		{"a", lease.Report{Result: lease.ResultBanned, Target: "quiet.example"}},
		{"b", lease.Report{Result: lease.ResultBanned, Target: "secret-b.example"}},
	} {
		l, err := store.Acquire(ctx, lease.Request{TTL: time.Minute, Namespaces: []string{r.ns}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := store.Report(ctx, l.ID, r.rep); err != nil {
			t.Fatal(err)
		}
		_ = store.Release(ctx, l.ID)
	}
	tokens, err := access.New([]access.TokenSpec{
		{Name: "all", Token: "all-token-0123456789abc", Namespaces: []string{access.AllNamespaces}, Right: access.RightRead},
		{Name: "team-a", Token: "teama-token-0123456789abc", Namespaces: []string{"a"}, Right: access.RightRead},
	})
	if err != nil {
		t.Fatal(err)
	}
	sites := fakeSites{
		{Site: "busy.example", Rate: 4, Queue: 2, Traffic: map[string]float64{"a": 30, "b": 10}},
		{Site: "slow.example", Rate: 0.8, Ceiling: 1, Traffic: map[string]float64{"a": 5}},
		{Site: "b-only.example", Rate: 1, Traffic: map[string]float64{"b": 50}},
		{Site: "tiny.example", Rate: 1, Traffic: map[string]float64{"a": 1}},
	}
	get := func(t *testing.T, v discovery.SitesView, token, query string) (int, map[string]any) {
		t.Helper()
		d := &discovery.Discovery{Fleet: view, Health: h, Leases: store, Tokens: tokens, Now: clock.Now, Sites: v,
			Registerer: prometheus.NewRegistry(), Log: slog.New(slog.DiscardHandler)}
		srv := httptest.NewServer(d.Handler())
		defer srv.Close()
		req, _ := http.NewRequest("GET", srv.URL+"/v1/sites"+query, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var out map[string]any
		_ = json.Unmarshal(b, &out)
		return resp.StatusCode, out
	}
	hosts := func(out map[string]any) []string {
		var hs []string
		for _, s := range out["sites"].([]any) {
			hs = append(hs, s.(map[string]any)["host"].(string))
		}
		return hs
	}
	for _, tc := range []struct {
		name, token, query string
		view               discovery.SitesView
		want               []string
	}{
		{"every namespace", "all-token-0123456789abc", "", sites, []string{"b-only.example", "busy.example", "slow.example", "tiny.example", "quiet.example", "secret-b.example"}},
		{"limit keeps every cooling site", "all-token-0123456789abc", "?limit=1", sites, []string{"b-only.example", "slow.example", "quiet.example", "secret-b.example"}},
		{"one namespace", "teama-token-0123456789abc", "", sites, []string{"busy.example", "slow.example", "tiny.example", "quiet.example"}},
		{"no gateway", "teama-token-0123456789abc", "", nil, []string{"quiet.example", "slow.example"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out := get(t, tc.view, tc.token, tc.query)
			if code != http.StatusOK {
				t.Fatalf("status %d", code)
			}
			if diff := cmp.Diff(tc.want, hosts(out)); diff != "" {
				t.Errorf("sites mismatch (-want +got):\n%s", diff)
			}
		})
	}
	// The detail of one site: its pace, and its cooldown with reason and strikes.
	_, out := get(t, sites, "teama-token-0123456789abc", "")
	want := map[string]any{
		"host": "slow.example", "recentRequests": 5.0,
		"pace":      map[string]any{"ratePerUpstream": 0.8, "ceilingPerUpstream": 1.0, "queue": 0.0},
		"cooldowns": []any{map[string]any{"proxyId": "a/p1", "until": "2026-12-05T12:00:02Z", "reason": "rate_limited", "strikes": 0.0}},
	}
	if diff := cmp.Diff(want, out["sites"].([]any)[1]); diff != "" {
		t.Errorf("slow.example mismatch (-want +got):\n%s", diff)
	}
	if out["coolingTotal"] != 2.0 || out["coolingListed"] != 2.0 {
		t.Errorf("coolingTotal %v coolingListed %v, want 2 and 2", out["coolingTotal"], out["coolingListed"])
	}
	for _, q := range []string{"?limit=0", "?limit=1001", "?limit=x"} {
		if code, _ := get(t, sites, "all-token-0123456789abc", q); code != http.StatusBadRequest {
			t.Errorf("%s: status %d, want 400", q, code)
		}
	}
}
