package server_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/proxy-operator/proxy-operator/internal/redistest"
	"github.com/proxy-operator/proxy-operator/server"
)

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestDiscoveryReplicaMetricsAndRedisChecks: a discovery-only replica serves its own /metrics
// (request counters by route and code, refusals), uses -lease-store-prefix, and warns when the
// real Redis it shares does not fsync every write; a missing password file is an error.
func TestDiscoveryReplicaMetricsAndRedisChecks(t *testing.T) {
	srv := redistest.Start(t)
	rc := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rc.Close()
	ctx := context.Background()
	if err := rc.ConfigSet(ctx, "appendfsync", "everysec").Err(); err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	cfg := server.DiscoveryConfig{Discovery: server.DiscoveryAPIConfig{Addr: "127.0.0.1:0", Insecure: true},
		Lease: server.DiscoveryDefaults().Lease, Log: slog.New(slog.NewTextHandler(&logs, nil))}
	cfg.Lease.Store, cfg.Lease.StorePrefix = "redis://"+srv.Addr+"/0", "{tenant-b}:"
	d, err := server.NewDiscovery(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"appendfsync=everysec", `prefix={tenant-b}:`} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, logs.String())
		}
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- d.Run(runCtx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	hc := &http.Client{Timeout: 10 * time.Second}
	base := "http://" + d.Addr()
	// No operator publishes into this Redis: the replica answers 503 (nothing to serve yet),
	// which its metrics count like any answer.
	res, err := hc.Post(base+"/v1/leases", "application/json", strings.NewReader(`{"selector":{"pool":"none"}}`))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	code := strconv.Itoa(res.StatusCode)
	res, err = hc.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	for _, want := range []string{
		`proxy_operator_discovery_requests_total{code="` + code + `",method="POST",route="/v1/leases"} 1`,
		`proxy_operator_lease_refused_total{reason="no_proxy"} 0`,
		`proxy_operator_discovery_request_duration_seconds_bucket{method="POST",route="/v1/leases"`,
		"go_goroutines",
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("replica /metrics lacks %q", want)
		}
	}
	keys, err := rc.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if !strings.HasPrefix(k, "{tenant-b}:") {
			t.Errorf("key %q outside the prefix", k)
		}
	}

	bad := cfg
	bad.Lease.PasswordFile = t.TempDir() + "/no-such-file"
	if _, err := server.NewDiscovery(bad); err == nil || !strings.Contains(err.Error(), "no-such-file does not exist") {
		t.Errorf("missing password file: %v, want an error naming it", err)
	}
}
