package gateway_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/server/discovery/access"
	"github.com/proxy-operator/proxy-operator/server/gateway"
)

// allowlistEnv is a gateway whose "office" token allowlists 127.0.0.1: connections from there
// need no proxy password; from 127.0.0.2 they do. mods adjust the gateway after that.
func allowlistEnv(t *testing.T, mods ...func(*gateway.Gateway)) *env {
	t.Helper()
	return newEnv(t, 2, func(g *gateway.Gateway) {
		tk, err := access.New([]access.TokenSpec{
			{Name: "crawler", Token: token, Namespaces: []string{access.AllNamespaces}, Right: access.RightLease},
			{Name: "office", Token: "office-token-5e1f0a9", Namespaces: []string{access.AllNamespaces}, Right: access.RightLease,
				Allowlist: []string{"127.0.0.1/32"}},
		})
		if err != nil {
			t.Fatal(err)
		}
		g.Tokens = tk
		for _, mod := range mods {
			mod(g)
		}
	})
}

// from is a dialer whose connections leave from the loopback address ip.
func from(ip string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 10 * time.Second}
	return d.DialContext
}

// TestAllowlistedSourceNeedsNoPassword (decision 0278): over HTTP, a request without
// credentials from an allowlisted source is its token's, and a username with an empty password
// still selects; from another source both are refused as before.
func TestAllowlistedSourceNeedsNoPassword(t *testing.T) {
	e := allowlistEnv(t)
	s := newSite(t, nil)
	client := func(ip, user string) *http.Client {
		proxy := &url.URL{Scheme: "http", Host: e.addr}
		if user != "" {
			proxy.User = url.User(user) // sent as Basic "user:", an empty password
		}
		return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DialContext: from(ip), Proxy: http.ProxyURL(proxy)}}
	}
	for _, tc := range []struct {
		name, ip, user string
		want           int
	}{
		{"allowlisted, no credentials", "127.0.0.1", "", http.StatusOK},
		{"allowlisted, a username without password", "127.0.0.1", "pool-web", http.StatusOK},
		{"allowlisted, a username that selects nothing", "127.0.0.1", "pool-api", http.StatusNotFound},
		{"elsewhere, no credentials", "127.0.0.2", "", http.StatusProxyAuthRequired},
		{"elsewhere, a username without password", "127.0.0.2", "pool-web", http.StatusProxyAuthRequired},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := client(tc.ip, tc.user).Get(s.url("/"))
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Errorf("%d, want %d", resp.StatusCode, tc.want)
			}
		})
	}
}

// TestAllowlistedSourceSOCKSWithoutAuth: over SOCKS5, "no authentication" is accepted from an
// allowlisted source only; username/password with an empty password selects there too.
func TestAllowlistedSourceSOCKSWithoutAuth(t *testing.T) {
	e := allowlistEnv(t)
	addr := e.socks(t)
	s := newSite(t, nil)
	_, port := hostPort(t, s.addr)
	noAuth := func(ip string) string {
		c, err := from(ip)(context.Background(), "tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(30 * time.Second))
		if _, err := c.Write(append([]byte{5, 1, 0}, socksRequest(1, "127.0.0.1", port)...)); err != nil {
			t.Fatal(err)
		}
		b := make([]byte, 12)
		n, _ := io.ReadFull(c, b)
		return string(b[:n])
	}
	if got := noAuth("127.0.0.1"); got != "\x05\x00\x05\x00\x00\x01\x00\x00\x00\x00\x00\x00" {
		t.Errorf("no authentication from the allowlisted source: %q, want the method and a tunnel", got)
	}
	if got := noAuth("127.0.0.2"); got != "\x05\xff" {
		t.Errorf("no authentication from elsewhere: %q, want no acceptable method", got)
	}
	if _, _, reply := socksDial(t, addr, "pool-web", "", "127.0.0.1", port); reply != gateway.SOCKSSucceeded {
		t.Errorf("a username without password from the allowlisted source: reply %#x", reply)
	}
}

// teamCaller is the identity the team ports of these tests carry (decision 0279).
var teamCaller = &access.Caller{Name: "team", Namespaces: []string{access.AllNamespaces}, Right: access.RightLease}

// teamPort opens one of the gateway's per-token ports (proto "http" or "socks5") for
// teamCaller with the username preset user, and returns its address.
func (e *env) teamPort(t testing.TB, proto, user string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	pl, err := e.gw.PortListener(ln, access.Port{PortSpec: access.PortSpec{Addr: ln.Addr().String(), Protocol: proto, Username: user}, Caller: teamCaller})
	if err != nil {
		t.Fatal(err)
	}
	if proto == "http" {
		srv := e.gw.Server()
		go func() { _ = srv.Serve(pl) }()
		t.Cleanup(func() { _ = srv.Close() })
	} else {
		srv := e.gw.SOCKSServer()
		go func() { _ = srv.Serve(pl) }()
		t.Cleanup(func() { _ = srv.Close() })
	}
	return ln.Addr().String()
}

// TestTokenPortsNeedNoPassword (decision 0279): a token's own ports, HTTP and SOCKS5, take
// connections without a password as the token's, with the port's username unless the client
// gives one; a port whose username the grammar refuses does not open.
func TestTokenPortsNeedNoPassword(t *testing.T) {
	e := allowlistEnv(t)
	s := newSite(t, nil)
	_, sitePort := hostPort(t, s.addr)
	httpPort := e.teamPort(t, "http", "pool-web")
	fetch := func(user string) int {
		proxy := &url.URL{Scheme: "http", Host: httpPort}
		if user != "" {
			proxy.User = url.User(user)
		}
		// From 127.0.0.2: no allowlist helps, the port does.
		c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DialContext: from("127.0.0.2"), Proxy: http.ProxyURL(proxy)}}
		resp, err := c.Get(s.url("/"))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := fetch(""); got != http.StatusOK {
		t.Errorf("HTTP port without credentials: %d, want 200", got)
	}
	if got := fetch("pool-api"); got != http.StatusNotFound {
		t.Errorf("HTTP port with a username of its own selecting nothing: %d, want 404", got)
	}
	if got := testMetric(t, e, "proxy_operator_gateway_requests_total", "ok"); got < 1 {
		t.Errorf("requests_total ok = %v", got)
	}
	socksPort := e.teamPort(t, "socks5", "pool-web-session-s9")
	c, err := from("127.0.0.2")(context.Background(), "tcp", socksPort)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := c.Write(append([]byte{5, 1, 0}, socksRequest(1, "127.0.0.1", sitePort)...)); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 12)
	n, _ := io.ReadFull(c, b)
	if got := string(b[:n]); got != "\x05\x00\x05\x00\x00\x01\x00\x00\x00\x00\x00\x00" {
		t.Errorf("SOCKS5 port without authentication: %q, want the method and a tunnel", got)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if _, err := e.gw.PortListener(ln, access.Port{PortSpec: access.PortSpec{Addr: ":1", Protocol: "http", Username: "pool-web-pool-api"}, Caller: teamCaller}); err == nil {
		t.Error("a port with a username the grammar refuses opened")
	}
}
