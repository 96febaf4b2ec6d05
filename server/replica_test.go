package server_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/proxy-operator/proxy-operator/internal/fleet"
	"github.com/proxy-operator/proxy-operator/internal/healthtest"
	"github.com/proxy-operator/proxy-operator/internal/logtest"
	"github.com/proxy-operator/proxy-operator/internal/redistest"
	"github.com/proxy-operator/proxy-operator/internal/verdict"
	"github.com/proxy-operator/proxy-operator/lease/redisstore"
	"github.com/proxy-operator/proxy-operator/server"
)

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
	var logs logtest.Buffer
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

// TestReplicaChecksRecordsWithItsEgressPolicy is issue 21 (point 6) at the process: a
// discovery replica checks every record it reads from Redis with its own egress policy, so a
// record on loopback (the replica's default policy denies it) is never leased, and is counted.
func TestReplicaChecksRecordsWithItsEgressPolicy(t *testing.T) {
	srv := redistest.Start(t)
	rc := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rc.Close()
	ctx := context.Background()
	const prefix = "{egress}:"
	store, err := redisstore.New(redisstore.Config{Client: rc, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	view, health := fleet.New(time.Now, 0), &healthtest.Map{}
	view.Upsert(fleet.Proxy{Key: "ns/loop", UID: "loop", IP: "127.0.0.1", Port: 3128, MaxLeases: 10, Phase: "Ready"})
	view.Upsert(fleet.Proxy{Key: "ns/far", UID: "far", IP: "10.0.0.9", Port: 3128, MaxLeases: 10, Phase: "Ready"})
	health.SetState("ns/loop", verdict.Healthy, 1) // the faster: chosen first by the script
	health.SetState("ns/far", verdict.Healthy, 50)
	if err := redisstore.NewPublisher(redisstore.PublisherConfig{Store: store, Fleet: view, Health: health}).Sync(ctx); err != nil {
		t.Fatal(err)
	}
	cfg := server.DiscoveryConfig{Discovery: server.DiscoveryAPIConfig{Addr: "127.0.0.1:0", Insecure: true},
		Lease: server.DiscoveryDefaults().Lease}
	cfg.Lease.Store, cfg.Lease.StorePrefix = "redis://"+srv.Addr+"/0", prefix
	d, err := server.NewDiscovery(cfg)
	if err != nil {
		t.Fatal(err)
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
	lease := func() (int, string) {
		res, err := hc.Post(base+"/v1/leases", "application/json", strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	// The replica serves once its reader has read the published fleet (503 until then).
	code, body := lease()
	for deadline := time.Now().Add(30 * time.Second); code == http.StatusServiceUnavailable && time.Now().Before(deadline); {
		<-time.After(50 * time.Millisecond)
		code, body = lease()
	}
	for i := range 3 {
		if code != http.StatusOK || !strings.Contains(body, `"ns/far"`) || strings.Contains(body, "127.0.0.1") {
			t.Fatalf("lease %d: %d %s; want ns/far, never the loopback record", i, code, body)
		}
		code, body = lease()
	}
	res, err := hc.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if !strings.Contains(string(metrics), "proxy_operator_lease_records_denied_total 1\n") {
		t.Errorf("replica /metrics lacks proxy_operator_lease_records_denied_total 1")
	}
}

// TestDiscoveryReplicaConsole: a replica with -console serves the console beside its API,
// reading the shared store: it logs in, lists leases and sites from Redis, and says why it
// cannot drain (no Kubernetes client).
func TestDiscoveryReplicaConsole(t *testing.T) {
	srv := redistest.Start(t)
	cfg := server.DiscoveryConfig{Discovery: server.DiscoveryAPIConfig{Addr: "127.0.0.1:0", Insecure: true, Console: true},
		Lease: server.DiscoveryDefaults().Lease}
	cfg.Lease.Store = "redis://" + srv.Addr + "/0"
	d, err := server.NewDiscovery(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	jar, _ := cookiejar.New(nil)
	hc := &http.Client{Timeout: 10 * time.Second, Jar: jar}
	base := "http://" + d.Addr()
	// Ready once the replica has read the (empty) fleet from Redis: the list stops answering 503.
	deadline := time.Now().Add(30 * time.Second)
	for {
		res, err := hc.Get(base + "/v1/proxies")
		if err == nil {
			res.Body.Close()
			if res.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the replica's fleet not readable within 30 s: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	res, err := hc.PostForm(base+"/ui/login", url.Values{"next": {"/ui/leases"}})
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || res.Request.URL.Path != "/ui/leases" || !strings.Contains(string(body), "Every lease (0 live") {
		t.Fatalf("login to the leases page: %d at %s:\n%s", res.StatusCode, res.Request.URL.Path, body)
	}
	for path, want := range map[string]string{
		"/ui/fleet":   "Drain unavailable: a discovery replica has no Kubernetes client",
		"/ui/sites":   "0 cooldowns in force",
		"/ui/traffic": "Traffic",
	} {
		res, err := hc.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 200 || !strings.Contains(string(body), want) {
			t.Errorf("%s: %d, want 200 with %q:\n%s", path, res.StatusCode, want, body)
		}
	}
}
