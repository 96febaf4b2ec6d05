package server_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/internal/redistest"
	"github.com/proxy-operator/proxy-operator/providers/factory"
	"github.com/proxy-operator/proxy-operator/providers/mock"
	"github.com/proxy-operator/proxy-operator/server"
	"github.com/proxy-operator/proxy-operator/server/gateway"
)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	res, err := (&http.Client{Timeout: 10 * time.Second}).Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(res.Body, 1<<16))
	return res.StatusCode, string(b)
}

// TestNewRunStop: New binds both listeners (the ports are known at once), Run serves the hook
// and discovery routers, and a cancelled context stops it cleanly and frees the ports.
func TestNewRunStop(t *testing.T) {
	op, err := server.New(server.Config{Hooks: server.HooksConfig{Addr: "127.0.0.1:0"}, Discovery: server.DiscoveryAPIConfig{Addr: "127.0.0.1:0", Token: "t0ken-0123456789abcdef"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- op.Run(ctx) }()
	for _, u := range []string{op.HookAddr() + "/healthz", op.HookAddr() + "/readyz", op.DiscoveryAddr() + "/healthz"} {
		if code, body := get(t, "http://"+u); code != http.StatusOK {
			t.Errorf("GET %s: %d %s", u, code, body)
		}
	}
	if code, body := get(t, "http://"+op.HookAddr()+"/metrics"); code != http.StatusOK || !strings.Contains(body, "proxy_operator_proxies") {
		t.Errorf("GET /metrics: %d, lacks proxy_operator_proxies", code)
	}
	if code, _ := get(t, "http://"+op.DiscoveryAddr()+"/v1/proxies"); code != http.StatusUnauthorized {
		t.Errorf("discovery without the token: %d, want 401", code)
	}
	if e, ok := op.Providers().Lookup("mock"); !ok || e.Type != "mock" {
		t.Errorf("default providers: %+v, want one mock named mock", op.Providers().Entries())
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run after cancel: %v", err)
	}
	for _, a := range []string{op.HookAddr(), op.DiscoveryAddr()} {
		ln, err := net.Listen("tcp", a)
		if err != nil {
			t.Errorf("port %s still held after Run returned: %v", a, err)
			continue
		}
		ln.Close()
	}
}

// TestNewFailsCleanly: a setting out of range or a port in use is an error from New, and
// whatever New had bound is released.
func TestNewFailsCleanly(t *testing.T) {
	if _, err := server.New(server.Config{Hooks: server.HooksConfig{Addr: "127.0.0.1:0"}, Discovery: server.DiscoveryAPIConfig{Addr: "127.0.0.1:0"}, Health: server.HealthConfig{Workers: -1}}); err == nil ||
		!strings.Contains(err.Error(), "-probe-workers") {
		t.Errorf("negative probe workers: %v, want an error naming the flag", err)
	}
	if _, err := server.New(server.Config{Hooks: server.HooksConfig{Addr: "127.0.0.1:0"}, Discovery: server.DiscoveryAPIConfig{Addr: "127.0.0.1:0", Insecure: true},
		Quality: server.QualityConfig{GeoIPDB: filepath.Join(t.TempDir(), "absent.mmdb")}}); err == nil || !strings.Contains(err.Error(), "-geoip-db") {
		t.Errorf("missing country database: %v, want an error naming the flag", err)
	}
	if _, err := server.New(server.Config{Hooks: server.HooksConfig{Addr: "127.0.0.1:0"}, Discovery: server.DiscoveryAPIConfig{Addr: "127.0.0.1:0", Insecure: true},
		Quality: server.QualityConfig{ExitURL: "ftp://echo"}}); err == nil || !strings.Contains(err.Error(), "-exit-url") {
		t.Errorf("bad exit URL: %v, want an error naming the flag", err)
	}
	bad := factory.Config{Providers: []factory.Entry{{Name: "m", Type: "mock", Mock: &mock.Config{Faults: []mock.Fault{{Op: "reboot"}}}}}}
	if _, err := server.New(server.Config{Hooks: server.HooksConfig{Addr: "127.0.0.1:0"}, Discovery: server.DiscoveryAPIConfig{Addr: "127.0.0.1:0"}, Providers: server.ProvidersConfig{Parsed: &bad}}); err == nil ||
		!strings.Contains(err.Error(), `providers[0] (m): mock.faults[0]: fault op "reboot"`) {
		t.Errorf("bad providers config: %v", err)
	}
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	hook, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hookAddr := hook.Addr().String()
	hook.Close()
	if _, err := server.New(server.Config{Hooks: server.HooksConfig{Addr: hookAddr}, Discovery: server.DiscoveryAPIConfig{Addr: busy.Addr().String(), Insecure: true}}); err == nil ||
		!strings.Contains(err.Error(), "discovery listener") {
		t.Fatalf("discovery port in use: %v, want a discovery listener error", err)
	}
	ln, err := net.Listen("tcp", hookAddr)
	if err != nil {
		t.Fatalf("hook port kept after New failed: %v", err)
	}
	ln.Close()
}

// TestKubeconfigBroken: a kubeconfig that is named but unusable stops New, rather than the
// operator quietly running without its Kubernetes client.
func TestKubeconfigBroken(t *testing.T) {
	_, err := server.New(server.Config{Hooks: server.HooksConfig{Addr: "127.0.0.1:0"}, Discovery: server.DiscoveryAPIConfig{Addr: "127.0.0.1:0", Insecure: true}, Kube: server.KubeConfig{Kubeconfig: t.TempDir() + "/absent"}})
	if err == nil || !strings.Contains(err.Error(), "kubeconfig") {
		t.Errorf("New with a missing kubeconfig: %v, want an error naming it", err)
	}
}

// runOperator runs op until the test ends, then stops it and checks that Run returned cleanly;
// the context it returns ends with the run.
func runOperator(t *testing.T, op *server.Operator) context.Context {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- op.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return ctx
}

// TestOperatorServesSOCKSAndTokenPorts: with -gateway-socks-addr and a tokens file that gives a
// token ports of its own, the operator serves them all beside the gateway (decisions 0277,
// 0279) and frees them on stop; ports without -gateway-addr stop the start.
func TestOperatorServesSOCKSAndTokenPorts(t *testing.T) {
	file, httpPort, socksPort := tokenPortsFile(t)
	cfg := server.Config{Hooks: server.HooksConfig{Addr: "127.0.0.1:0"}, Discovery: server.DiscoveryAPIConfig{Addr: "127.0.0.1:0", TokenFile: file}}
	if _, err := server.New(cfg); err == nil || !strings.Contains(err.Error(), "-gateway-addr is off") {
		t.Errorf("token ports without the gateway: %v, want an error", err)
	}
	cfg.Gateway = gateway.Config{Addr: "127.0.0.1:0", SOCKSAddr: "127.0.0.1:0"}
	op, err := server.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- op.Run(ctx) }()
	checkTokenPorts(t, op.GatewayAddr(), op.GatewaySOCKSAddr(), httpPort, socksPort)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run after cancel: %v", err)
	}
	for _, a := range []string{op.GatewayAddr(), op.GatewaySOCKSAddr(), httpPort, socksPort} {
		ln, err := net.Listen("tcp", a)
		if err != nil {
			t.Errorf("port %s still held after Run returned: %v", a, err)
			continue
		}
		ln.Close()
	}
}

// tokenPortsFile writes a tokens file whose one token has an HTTP and a SOCKS5 port of its own
// on free loopback ports, and returns it and the ports.
func tokenPortsFile(t *testing.T) (file, httpPort, socksPort string) {
	t.Helper()
	free := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		return ln.Addr().String()
	}
	httpPort, socksPort = free(), free()
	file = filepath.Join(t.TempDir(), "tokens.yaml")
	if err := os.WriteFile(file, []byte("tokens:\n  - {name: team, token: team-token-0123456789, namespaces: [\"*\"], right: lease,\n"+
		"     ports: [{addr: \""+httpPort+"\", protocol: http, username: pool-web}, {addr: \""+socksPort+"\", protocol: socks5}]}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return file, httpPort, socksPort
}

// checkTokenPorts: without credentials the shared listeners refuse (407; SOCKS5 no acceptable
// method) and the token's ports let the client in (SOCKS5 "no authentication" chosen; HTTP
// anything but 407, the fleet being empty or warming up).
func checkTokenPorts(t *testing.T, shared, sharedSOCKS, httpPort, socksPort string) {
	t.Helper()
	greet := func(addr string) string {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write([]byte{5, 1, 0}); err != nil {
			t.Fatal(err)
		}
		b := make([]byte, 2)
		n, _ := io.ReadFull(c, b)
		return string(b[:n])
	}
	if sharedSOCKS != "" {
		if got := greet(sharedSOCKS); got != "\x05\xff" {
			t.Errorf("the shared SOCKS5 listener without authentication: %q, want no acceptable method", got)
		}
	}
	if got := greet(socksPort); got != "\x05\x00" {
		t.Errorf("the token's SOCKS5 port without authentication: %q, want it accepted", got)
	}
	status := func(proxy string) int {
		c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: proxy})}}
		resp, err := c.Get("http://127.0.0.1:9/")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := status(shared); got != http.StatusProxyAuthRequired {
		t.Errorf("the shared listener without credentials: %d, want 407", got)
	}
	if got := status(httpPort); got == http.StatusProxyAuthRequired {
		t.Errorf("the token's HTTP port without credentials: 407, want the token's answer")
	}
}

// TestGatewayProcessOpensTokenPorts: the gateway subcommand opens the ports the tokens file
// gives a token too (decision 0279).
func TestGatewayProcessOpensTokenPorts(t *testing.T) {
	srv := redistest.Start(t)
	file, httpPort, socksPort := tokenPortsFile(t)
	g, err := server.NewGateway(server.GatewayConfig{Gateway: gateway.Config{Addr: "127.0.0.1:0"}, TokenFile: file,
		Lease: server.LeaseConfig{Store: "redis://" + srv.Addr}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	checkTokenPorts(t, g.Addr(), g.SOCKSAddr(), httpPort, socksPort)
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}
