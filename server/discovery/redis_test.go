package discovery_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/proxy-operator/proxy-operator/client"
	"github.com/proxy-operator/proxy-operator/internal/fleet"
	"github.com/proxy-operator/proxy-operator/internal/healthtest"
	"github.com/proxy-operator/proxy-operator/internal/redistest"
	"github.com/proxy-operator/proxy-operator/internal/verdict"
	"github.com/proxy-operator/proxy-operator/lease/redisstore"
	"github.com/proxy-operator/proxy-operator/server/discovery"
)

// TestDiscoveryOnRedis serves the API from the Redis store and a reader of the published fleet,
// as a discovery replica does: it lists and leases; with Redis killed every route answers 503
// with Retry-After (never 500), and after Redis is back it answers again.
func TestDiscoveryOnRedis(t *testing.T) {
	srv := redistest.Start(t)
	rc, err := redisstore.NewClient(redisstore.ClientConfig{URL: "redis://" + srv.Addr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rc.Close() })
	// Timeouts roomy enough for a loaded 2-core machine: with Redis killed calls fail at once
	// (connection refused), so they do not slow the outage phase.
	store, err := redisstore.New(redisstore.Config{Client: rc, Timeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	view := fleet.New(time.Now, 0)
	health := &healthtest.Map{}
	for _, k := range []string{"crawl/a", "crawl/b"} {
		view.Upsert(fleet.Proxy{Key: k, IP: "10.0.0.1", Port: 3128, MaxLeases: 2, Attributes: map[string]string{"geo": "eu"}})
		health.Set(k, verdict.Health{State: verdict.Healthy, LatencyMillis: 10})
	}
	ctx := context.Background()
	if err := redisstore.NewPublisher(redisstore.PublisherConfig{Store: store, Fleet: view, Health: health}).Sync(ctx); err != nil {
		t.Fatal(err)
	}
	reader := redisstore.NewReader(redisstore.ReaderConfig{Store: store, StaleAfter: time.Second})
	if err := reader.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	d := &discovery.Discovery{Fleet: reader, Health: reader, Leases: store, Insecure: true, Log: slog.New(slog.DiscardHandler), Registerer: reg}
	hs := httptest.NewServer(d.Handler())
	t.Cleanup(hs.Close)
	call := func(method, path, body string) (int, string, string) {
		t.Helper()
		req, _ := http.NewRequest(method, hs.URL+path, strings.NewReader(body))
		res, err := hs.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, res.Header.Get("Retry-After"), string(b)
	}

	code, _, body := call(http.MethodPost, "/v1/leases", `{"selector":{"geo":"eu"},"ttlSeconds":60}`)
	var l client.Lease
	if code != http.StatusOK || json.Unmarshal([]byte(body), &l) != nil || l.Proxy.ID != "crawl/a" {
		t.Fatalf("lease: %d %s", code, body)
	}
	code, _, body = call(http.MethodGet, "/v1/proxies", "")
	if code != http.StatusOK || !strings.Contains(body, `"activeLeases":1`) || !strings.Contains(body, `"count":2`) {
		t.Fatalf("list: %d %s", code, body)
	}
	if got := activeGauge(t, reg); got != 1 {
		t.Errorf("leases_active gauge %v, want 1", got)
	}

	srv.Kill()
	// The reader's copy goes stale: the list refuses to serve it.
	_ = reader.Refresh(ctx)
	time.Sleep(1100 * time.Millisecond) // past StaleAfter since the last good refresh
	for _, c := range []struct{ method, path, body string }{
		{http.MethodGet, "/v1/proxies", ""},
		{http.MethodPost, "/v1/leases", `{"ttlSeconds":60}`},
		{http.MethodPost, "/v1/leases/" + l.ID + "/renew", `{}`},
		{http.MethodPost, "/v1/leases/" + l.ID + "/report", `{"result":"banned","target":"x.example"}`},
		{http.MethodDelete, "/v1/leases/" + l.ID, ""},
	} {
		code, retry, body := call(c.method, c.path, c.body)
		if code != http.StatusServiceUnavailable || retry == "" || strings.Contains(body, "127.0.0.1") {
			t.Errorf("%s %s with Redis down: %d Retry-After %q %s; want 503 with Retry-After and no internals", c.method, c.path, code, retry, body)
		}
	}
	if got := activeGauge(t, reg); got != 1 {
		t.Errorf("leases_active gauge with Redis down %v, want the last value 1", got)
	}

	srv.Restart()
	if err := reader.Refresh(ctx); err != nil {
		t.Fatalf("refresh after Redis is back: %v", err)
	}
	// The client's pool re-dials on its own schedule after the failed dials (go-redis retries
	// a broken pool in the background), so "comes back" is awaited, with a deadline.
	for _, c := range []struct{ name, method, path, body string }{
		{"renew", http.MethodPost, "/v1/leases/" + l.ID + "/renew", `{}`},
		{"list", http.MethodGet, "/v1/proxies", ""},
	} {
		deadline := time.Now().Add(15 * time.Second)
		code, _, body := call(c.method, c.path, c.body)
		for code == http.StatusServiceUnavailable && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
			_ = reader.Refresh(ctx)
			code, _, body = call(c.method, c.path, c.body)
		}
		if code != http.StatusOK {
			t.Errorf("%s after Redis is back: %d %s", c.name, code, body)
		}
	}
}

// activeGauge reads proxy_operator_leases_active from the registry.
func activeGauge(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "proxy_operator_leases_active" {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatal("no proxy_operator_leases_active")
	return 0
}
