package server

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/internal/fleet"
	"github.com/proxy-operator/proxy-operator/internal/healthtest"
	"github.com/proxy-operator/proxy-operator/internal/redistest"
	"github.com/proxy-operator/proxy-operator/internal/verdict"
	"github.com/proxy-operator/proxy-operator/lease/redisstore"
	"github.com/proxy-operator/proxy-operator/providers"
	"github.com/proxy-operator/proxy-operator/providers/mock"
	"github.com/proxy-operator/proxy-operator/server/gateway"
)

// TestGatewayProcessesOverOneRedis runs two gateway-only processes (NewGateway and Run, as
// `proxy-operator gateway` does) over one real redis-server that an operator's publisher
// fills: a session sticks to one upstream whichever replica serves it, each serves its
// metrics, and the SOCKS5 listener (-gateway-socks-addr) serves beside the HTTP one.
func TestGatewayProcessesOverOneRedis(t *testing.T) {
	srv := redistest.Start(t)
	client, err := redisstore.NewClient(redisstore.ClientConfig{URL: "redis://" + srv.Addr})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	store, err := redisstore.New(redisstore.Config{Client: client})
	if err != nil {
		t.Fatal(err)
	}
	view := fleet.New(time.Now, 0)
	h := &healthtest.Map{}
	for i, ip := range []string{"127.0.0.61", "127.0.0.62", "127.0.0.63"} {
		ln, err := net.Listen("tcp", ip+":0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		creds := &providers.Credentials{Username: "u", Password: "upstream-pw-" + strconv.Itoa(i)}
		stop, err := mock.ServeForwardProxy(addr, creds)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(stop)
		_, port, _ := net.SplitHostPort(addr)
		p, _ := strconv.Atoi(port)
		key := "crawl/up" + strconv.Itoa(i)
		view.Upsert(fleet.Proxy{Key: key, IP: ip, Port: int32(p), MaxLeases: 10, Phase: "Ready", Credentials: creds,
			Attributes: map[string]string{"pool": "web"}})
		h.Set(key, verdict.Health{State: verdict.Healthy, LatencyMillis: int64(10 + i)})
	}
	if err := redisstore.NewPublisher(redisstore.PublisherConfig{Store: store, Fleet: view, Health: h}).Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	site := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "page")
	})}
	siteLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = site.Serve(siteLn) }()
	defer site.Close()

	ctx, cancel := context.WithCancel(context.Background())
	var gws []*Gateway
	done := make(chan error, 2)
	for range 2 {
		g, err := NewGateway(GatewayConfig{Gateway: gateway.Config{Addr: "127.0.0.1:0", SOCKSAddr: "127.0.0.1:0"}, MetricsAddr: "127.0.0.1:0",
			Token: "gateway-process-token", Lease: LeaseConfig{Store: "redis://" + srv.Addr},
			// the proxies live on 127.0.0.6x, the site on loopback too
			Egress: EgressConfig{AllowLoopback: true, TargetAllow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}})
		if err != nil {
			t.Fatal(err)
		}
		gws = append(gws, g)
		go func() { done <- g.Run(ctx) }()
	}
	fetch := func(g *Gateway) (*http.Response, string) {
		t.Helper()
		c := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{
			Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: g.Addr(), User: url.UserPassword("pool-web-session-k", "gateway-process-token")})}}
		resp, err := c.Get("http://" + siteLn.Addr().String() + "/")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	// The readers fill from Redis as they start: wait for both to serve.
	deadline := time.Now().Add(20 * time.Second)
	for _, g := range gws {
		for {
			resp, _ := fetch(g)
			if resp.StatusCode == http.StatusOK {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("gateway %s never served: %d", g.Addr(), resp.StatusCode)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	first, _ := fetch(gws[0])
	stuck := first.Header.Get(gateway.HeaderProxy)
	for i := range 4 {
		resp, body := fetch(gws[i%2])
		if got := resp.Header.Get(gateway.HeaderProxy); resp.StatusCode != http.StatusOK || body != "page" || got != stuck {
			t.Fatalf("request %d through replica %d: %d %q via %s, want the session's %s", i, i%2, resp.StatusCode, body, got, stuck)
		}
	}
	if got := socksFetch(t, gws[1].SOCKSAddr(), "pool-web-session-k", "gateway-process-token", siteLn.Addr().String()); got != "page" {
		t.Errorf("through the SOCKS5 listener: %q", got)
	}
	resp, err := http.Get("http://" + gws[1].MetricsAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), `proxy_operator_gateway_requests_total{kind="request",outcome="ok"}`) ||
		!strings.Contains(string(b), `proxy_operator_gateway_requests_total{kind="socks",outcome="ok"} 1`) || strings.Contains(string(b), "upstream-pw") {
		t.Errorf("replica metrics lack the request counter or hold a password:\n%.2000s", b)
	}
	cancel()
	for range 2 {
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
}

// socksFetch logs in to a SOCKS5 listener, opens a tunnel to site (an IPv4 host:port) and
// returns the body of GET / through it.
func socksFetch(t *testing.T, addr, user, pass, site string) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	ap := netip.MustParseAddrPort(site)
	msg := append([]byte{5, 1, 2, 1, byte(len(user))}, user...)
	msg = append(append(msg, byte(len(pass))), pass...)
	ip := ap.Addr().As4()
	msg = append(append([]byte(msg), 5, 1, 0, 1), ip[:]...)
	msg = append(msg, byte(ap.Port()>>8), byte(ap.Port()))
	if _, err := c.Write(msg); err != nil {
		t.Fatal(err)
	}
	var ans [14]byte
	if _, err := io.ReadFull(c, ans[:]); err != nil || ans[3] != 0 || ans[5] != 0 {
		t.Fatalf("SOCKS5 handshake: %x %v", ans, err)
	}
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: "+site+"\r\nConnection: close\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}
