package server_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/client"
	"github.com/proxy-operator/proxy-operator/internal/kube"
	"github.com/proxy-operator/proxy-operator/server"
)

// TestDemoFleet: with DemoProxies the process defines its own mock Proxies and syncs them to
// Ready through its own hooks, so the discovery API lists them, marked as a demo, a lease
// succeeds and a request through its proxyURL works: the first `make run`, without a cluster.
func TestDemoFleet(t *testing.T) {
	t.Setenv("KUBECONFIG", "")
	op, err := server.New(server.Config{Hooks: server.HooksConfig{Addr: "127.0.0.1:0"}, Discovery: server.DiscoveryAPIConfig{Addr: "127.0.0.1:0", Insecure: true},
		Demo: server.DemoConfig{Proxies: 3}, GC: server.GCConfig{Interval: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- op.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	c, err := client.New("http://" + op.DiscoveryAddr())
	if err != nil {
		t.Fatal(err)
	}
	yes := true
	// Wait for the condition, not for a time: a bound only so a broken demo fails.
	deadline := time.Now().Add(2 * time.Minute)
	var list *client.ProxyList
	for {
		if list, err = c.List(ctx, client.ListOptions{Healthy: &yes}); err == nil && list.Count == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("demo fleet not healthy within 2 minutes: %+v, %v", list, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, p := range list.Proxies {
		if !strings.HasPrefix(p.ID, server.DemoNamespace+"/demo-") || p.Attributes["demo"] != "true" {
			t.Errorf("proxy %s %v: want a demo/demo-N id and demo=true", p.ID, p.Attributes)
		}
	}
	l, err := c.Lease(ctx, client.LeaseRequest{Selector: map[string]string{"demo": "true"}, Target: "example.com"})
	if err != nil {
		t.Fatal(err)
	}
	pu, err := url.Parse(l.ProxyURL)
	if err != nil || pu.User == nil {
		t.Fatalf("proxyURL %q: %v, want credentials in it", l.ProxyURL, err)
	}
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(pu)}}
	res, err := hc.Get("http://" + op.HookAddr() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET through the demo proxy: %d", res.StatusCode)
	}
}

// TestDemoFleetRefusals: a demo fleet needs no cluster and a mock provider named mock.
func TestDemoFleetRefusals(t *testing.T) {
	t.Setenv("KUBECONFIG", "")
	if _, err := server.New(server.Config{Hooks: server.HooksConfig{Addr: "127.0.0.1:0"}, Discovery: server.DiscoveryAPIConfig{Addr: "127.0.0.1:0", Insecure: true},
		Demo: server.DemoConfig{Proxies: 3}, Kube: server.KubeConfig{Clients: &kube.Clients{}}}); err == nil || !strings.Contains(err.Error(), "without a cluster") {
		t.Errorf("demo with a Kubernetes client: %v, want a refusal", err)
	}
	if _, err := server.New(server.Config{Hooks: server.HooksConfig{Addr: "127.0.0.1:0"}, Discovery: server.DiscoveryAPIConfig{Addr: "127.0.0.1:0", Insecure: true},
		Demo: server.DemoConfig{Proxies: 1000}}); err == nil || !strings.Contains(err.Error(), "-demo-proxies 1000") {
		t.Errorf("1000 demo proxies: %v, want a refusal", err)
	}
}
