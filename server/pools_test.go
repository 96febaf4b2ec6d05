package server_test

import (
	"bytes"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/internal/redistest"
	"github.com/proxy-operator/proxy-operator/server"
)

// TestPoolHooksServed: the operator serves the pools CompositeController's hooks on the hook
// listener, and a pool sync shows in the pool metrics at /metrics.
func TestPoolHooksServed(t *testing.T) {
	op, err := server.New(server.Config{Hooks: server.HooksConfig{Addr: "127.0.0.1:0"}, Discovery: server.DiscoveryAPIConfig{Addr: "127.0.0.1:0", Token: "t0ken-0123456789abcdef"}})
	if err != nil {
		t.Fatal(err)
	}
	runOperator(t, op)
	body, err := os.ReadFile(filepath.Join("..", "testdata", "pools-sync", "steady", "request.json"))
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Timeout: 10 * time.Second}
	res, err := client.Post("http://"+op.HookAddr()+"/pools/sync", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	res.Body.Close()
	if res.StatusCode != http.StatusOK || !strings.Contains(string(b), `"desiredReplicas":3`) {
		t.Fatalf("POST /pools/sync: %d %.300s", res.StatusCode, b)
	}
	code, metrics := get(t, "http://"+op.HookAddr()+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("GET /metrics: %d", code)
	}
	for _, want := range []string{
		`proxy_operator_pool_members{pool="crawl/web",state="healthy"} 3`,
		`proxy_operator_pool_desired_members{pool="crawl/web"} 3`,
		`proxy_operator_hook_duration_seconds_count{hook="pools-sync"} 1`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// TestPoolHooksReadRedis: with -lease-store the pool hooks read the pools' lease view from
// Redis: a sync answers while Redis is up, and a 503 with Retry-After while it is down, rather
// than deciding on no leases (which would scale down or drain members crawlers hold).
func TestPoolHooksReadRedis(t *testing.T) {
	srv := redistest.Start(t)
	op, err := server.New(server.Config{Hooks: server.HooksConfig{Addr: "127.0.0.1:0"}, Discovery: server.DiscoveryAPIConfig{Addr: "127.0.0.1:0", Token: "t0ken-0123456789abcdef"},
		Lease: server.LeaseConfig{Store: "redis://" + srv.Addr}})
	if err != nil {
		t.Fatal(err)
	}
	runOperator(t, op)
	body, err := os.ReadFile(filepath.Join("..", "testdata", "pools-sync", "steady", "request.json"))
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Timeout: 10 * time.Second}
	sync := func() (int, string, string) {
		t.Helper()
		res, err := client.Post("http://"+op.HookAddr()+"/pools/sync", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(io.LimitReader(res.Body, 1<<20))
		res.Body.Close()
		return res.StatusCode, res.Header.Get("Retry-After"), string(b)
	}
	if code, _, b := sync(); code != http.StatusOK || !strings.Contains(b, `"desiredReplicas":3`) {
		t.Fatalf("POST /pools/sync with Redis up: %d %.300s", code, b)
	}
	srv.Kill()
	if code, ra, b := sync(); code != http.StatusServiceUnavailable || ra == "" {
		t.Errorf("POST /pools/sync with Redis down: %d (Retry-After %q) %.300s, want 503 with Retry-After", code, ra, b)
	}
	srv.Restart()
	if code, _, b := sync(); code != http.StatusOK {
		t.Errorf("POST /pools/sync with Redis back: %d %.300s", code, b)
	}
}
