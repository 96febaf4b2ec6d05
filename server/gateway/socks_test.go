package gateway_test

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/server/gateway"
	"github.com/proxy-operator/proxy-operator/server/httpx"
)

// socks starts the gateway's SOCKS5 listener beside its HTTP one and returns its address.
func (e *env) socks(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := e.gw.SOCKSServer()
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

// asName before a host makes socksRequest send it as a name (ATYP 3) even when it spells an
// address, as Chromium sends every destination.
const asName = "name:"

// socksRequest is the raw bytes of a SOCKS5 CONNECT request for host (a name or an address)
// and port, with cmd (1 CONNECT, 2 BIND, 3 UDP ASSOCIATE).
func socksRequest(cmd byte, host string, port uint16) []byte {
	b := []byte{5, cmd, 0}
	if n, ok := strings.CutPrefix(host, asName); ok {
		b = append(append(b, 3, byte(len(n))), n...)
	} else if a, err := netip.ParseAddr(host); err == nil {
		if a.Is4() {
			b = append(append(b, 1), a.AsSlice()...)
		} else {
			b = append(append(b, 4), a.AsSlice()...)
		}
	} else {
		b = append(append(b, 3, byte(len(host))), host...)
	}
	return binary.BigEndian.AppendUint16(b, port)
}

// socksLogin is a greeting offering username/password and RFC 1929's credentials.
func socksLogin(user, pass string) []byte {
	b := []byte{5, 1, 2, 1, byte(len(user))}
	b = append(b, user...)
	return append(append(b, byte(len(pass))), pass...)
}

// socksDial logs in and asks for a tunnel to host:port; it returns the connection and the
// reply code (0xff: the login was refused, the connection closed).
func socksDial(t testing.TB, addr, user, pass, host string, port uint16) (net.Conn, *bufio.Reader, byte) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := c.Write(append(socksLogin(user, pass), socksRequest(1, host, port)...)); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(c)
	var ans [4]byte
	if _, err := io.ReadFull(r, ans[:]); err != nil {
		t.Fatalf("SOCKS5 method and login answers: %v", err)
	}
	if ans != [4]byte{5, 2, 1, 0} {
		if ans[3] == 0 {
			t.Fatalf("SOCKS5 answers %x, want method 2 and login status 0 or 1", ans)
		}
		return c, r, 0xff
	}
	var reply [10]byte
	if _, err := io.ReadFull(r, reply[:]); err != nil {
		t.Fatalf("SOCKS5 reply: %v", err)
	}
	_ = c.SetDeadline(time.Time{})
	return c, r, reply[1]
}

func hostPort(t testing.TB, addr string) (string, uint16) {
	t.Helper()
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(p)
	return h, uint16(n)
}

// TestSOCKSTunnelLeasesLikeConnect: a SOCKS5 CONNECT, to an address and to a name, reaches the
// site through a leased upstream, holds the lease for the tunnel's life and is counted under
// kind socks; a session sticks to one upstream as through the HTTP listener.
func TestSOCKSTunnelLeasesLikeConnect(t *testing.T) {
	e := newEnv(t, 3, nil)
	addr := e.socks(t)
	s := newSite(t, nil)
	_, port := hostPort(t, s.addr)
	for _, host := range []string{"127.0.0.1", "localhost", asName + "127.0.0.1"} {
		c, r, reply := socksDial(t, addr, "pool-web-session-s1", token, host, port)
		if reply != gateway.SOCKSSucceeded {
			t.Fatalf("%s: reply %#x, want 0", host, reply)
		}
		if n := e.leases(t); n != 1 {
			t.Errorf("%s: with the tunnel open: %d leases, want 1", host, n)
		}
		fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", s.addr)
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		if string(body) != "hello from the site\n" {
			t.Errorf("%s: through the tunnel: %q", host, body)
		}
		c.Close()
		waitFor(t, "the tunnel's lease released", func() bool { return e.leases(t) == 0 })
	}
	if from := s.froms(); len(from) != 3 || from[0] != from[1] || from[1] != from[2] || !strings.HasPrefix(from[0], "127.0.0.1") {
		t.Errorf("site saw %v: want one upstream three times (the session)", from)
	}
	if got := testMetric(t, e, "proxy_operator_gateway_requests_total", "socks"); got != 3 {
		t.Errorf("requests_total{kind=socks} = %v, want 3", got)
	}
}

// TestSOCKSRefusals: each refusal has its RFC 1928 reply, and nothing is leased for it.
func TestSOCKSRefusals(t *testing.T) {
	e := newEnv(t, 1, nil)
	addr := e.socks(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String() // a site that refuses connections
	ln.Close()
	_, deadPort := hostPort(t, dead)
	for _, tc := range []struct {
		name, user, pass, host string
		port                   uint16
		want                   byte
	}{
		{"internal IP target", "pool-web", token, "10.1.2.3", 80, gateway.SOCKSNotAllowed},
		{"internal IP sent as a name", "pool-web", token, asName + "10.1.2.3", 80, gateway.SOCKSNotAllowed},
		{"metadata address sent as a name", "", token, asName + "169.254.169.254", 80, gateway.SOCKSNotAllowed},
		{"metadata address", "", token, "169.254.169.254", 80, gateway.SOCKSNotAllowed},
		{"cluster-internal name", "", token, "kubernetes.default.svc.cluster.local", 443, gateway.SOCKSNotAllowed},
		{"port 0", "", token, "example.com", 0, gateway.SOCKSNotAllowed},
		{"no upstream matches", "pool-api", token, "127.0.0.1", deadPort, gateway.SOCKSGeneralFailure},
		{"target refuses", "pool-web", token, "127.0.0.1", deadPort, gateway.SOCKSHostUnreachable},
		{"wrong token", "pool-web", "nope", "127.0.0.1", 80, 0xff},
		{"read-only token", "pool-web", readToken, "127.0.0.1", 80, 0xff},
		{"username grammar", "pool-web-pool-api", token, "127.0.0.1", 80, 0xff},
		{"namespace not the token's", "ns-other", teamToken, "127.0.0.1", 80, 0xff},
		{"empty password", "pool-web", "", "127.0.0.1", 80, 0xff},
		{"longest username, not the grammar", strings.Repeat("a", 255), token, "127.0.0.1", 80, 0xff},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _, reply := socksDial(t, addr, tc.user, tc.pass, tc.host, tc.port)
			if reply != tc.want {
				t.Errorf("reply %#x, want %#x", reply, tc.want)
			}
			if b := waitClosed(t, c); b != "" {
				t.Errorf("after the refusal the gateway sent %q", b)
			}
		})
	}
	if n := e.leases(t); n != 0 {
		t.Errorf("%d leases left", n)
	}
}

// TestSOCKSHostileHandshakes: malformed greetings, no acceptable method, BIND and UDP
// ASSOCIATE, unknown address types and truncated messages are each answered where SOCKS5 has
// an answer and closed.
func TestSOCKSHostileHandshakes(t *testing.T) {
	e := newEnv(t, 1, nil)
	addr := e.socks(t)
	login := socksLogin("pool-web", token)
	for _, tc := range []struct {
		name string
		send []byte
		want string // the gateway's whole answer before it closes
	}{
		{"SOCKS4", []byte{4, 1, 0, 80, 127, 0, 0, 1, 0}, ""},
		{"HTTP on the SOCKS port", []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), ""},
		{"zero methods", []byte{5, 0}, "\x05\xff"},
		{"no auth offered", []byte{5, 1, 0}, "\x05\xff"},
		{"GSSAPI only", []byte{5, 2, 1, 3}, "\x05\xff"},
		{"bad login version", []byte{5, 1, 2, 5, 1, 'a', 1, 'b'}, "\x05\x02\x01\x01"},
		{"login cut short", []byte{5, 1, 2, 1, 200, 'a'}, "\x05\x02\x01\x01"},
		{"BIND", slices.Concat(login, socksRequest(2, "127.0.0.1", 80)), "\x05\x02\x01\x00\x05\x07\x00\x01\x00\x00\x00\x00\x00\x00"},
		{"UDP ASSOCIATE", slices.Concat(login, socksRequest(3, "127.0.0.1", 80)), "\x05\x02\x01\x00\x05\x07\x00\x01\x00\x00\x00\x00\x00\x00"},
		{"unknown address type", slices.Concat(login, []byte{5, 1, 0, 9, 1, 2, 3, 4, 0, 80}), "\x05\x02\x01\x00\x05\x08\x00\x01\x00\x00\x00\x00\x00\x00"},
		{"empty name", slices.Concat(login, []byte{5, 1, 0, 3, 0, 0, 80}), "\x05\x02\x01\x00\x05\x01\x00\x01\x00\x00\x00\x00\x00\x00"},
		{"zoned address as a name", slices.Concat(login, append([]byte{5, 1, 0, 3, 12}, "fe80::1%eth0\x00\x50"...)), "\x05\x02\x01\x00\x05\x08\x00\x01\x00\x00\x00\x00\x00\x00"},
		{"bracketed address as a name", slices.Concat(login, append([]byte{5, 1, 0, 3, 5}, "[::1]\x00\x50"...)), "\x05\x02\x01\x00\x05\x08\x00\x01\x00\x00\x00\x00\x00\x00"},
		{"name with a bad byte", slices.Concat(login, []byte{5, 1, 0, 3, 3, 'a', '/', 'b', 0, 80}), "\x05\x02\x01\x00\x05\x04\x00\x01\x00\x00\x00\x00\x00\x00"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := c.Write(tc.send); err != nil {
				t.Fatal(err)
			}
			if got := waitClosed(t, c); got != tc.want {
				t.Errorf("answer %q, want %q", got, tc.want)
			}
		})
	}
	if got := testMetric(t, e, "proxy_operator_gateway_auth_failures_total", "missing"); got != 3 {
		t.Errorf("auth_failures_total{reason=missing} = %v, want 3", got)
	}
}

// TestSOCKSFailedLoginsThrottled: after the throttle's free failures from one address, even
// the right token is refused there, as on the HTTP listener (decision 0257).
func TestSOCKSFailedLoginsThrottled(t *testing.T) {
	e := newEnv(t, 1, func(g *gateway.Gateway) {
		g.Logins = &httpx.LoginThrottle{Free: 2, Backoff: time.Minute, Listener: "gateway"}
	})
	addr := e.socks(t)
	for range 3 {
		if _, _, reply := socksDial(t, addr, "pool-web", "guess", "127.0.0.1", 80); reply != 0xff {
			t.Fatalf("a wrong token: reply %#x, want the login refused", reply)
		}
	}
	if _, _, reply := socksDial(t, addr, "pool-web", token, "127.0.0.1", 80); reply != 0xff {
		t.Errorf("the right token from a throttled address: reply %#x, want the login refused", reply)
	}
	if got := testMetric(t, e, "proxy_operator_gateway_auth_failures_total", "throttled"); got != 1 {
		t.Errorf("auth_failures_total{reason=throttled} = %v, want 1", got)
	}
}

// TestSOCKSSlowHandshakeCut: a handshake that stalls is closed at the handshake deadline
// (ReadHeaderTimeout), whatever part it stalls in.
func TestSOCKSSlowHandshakeCut(t *testing.T) {
	e := newEnv(t, 1, func(g *gateway.Gateway) { g.ReadHeaderTimeout = 200 * time.Millisecond })
	addr := e.socks(t)
	for _, part := range [][]byte{{5}, {5, 1, 2, 1, 10, 'p'}, append(socksLogin("pool-web", token), 5, 1)} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Write(part); err != nil {
			t.Fatal(err)
		}
		waitClosed(t, c)
	}
	waitFor(t, "the connection gauge to drop", func() bool {
		return testMetric(t, e, "proxy_operator_gateway_connections", "") == 0
	})
}

// TestSOCKSIdleFloodBounded: silent SOCKS5 connections count against the gateway's connection
// bound (shared with the HTTP listener); at the bound each new one evicts the oldest that never
// logged in, so a flood never locks a crawler out of either listener.
func TestSOCKSIdleFloodBounded(t *testing.T) {
	const limit = 20
	e := newEnv(t, 2, func(g *gateway.Gateway) { g.MaxConns = limit })
	addr := e.socks(t)
	var open []net.Conn
	defer func() {
		for _, c := range open {
			c.Close()
		}
	}()
	for range 3 * limit {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		open = append(open, c)
	}
	waitFor(t, "the flood to reach the bound", func() bool {
		return testMetric(t, e, "proxy_operator_gateway_connections_evicted_total", "") >= 2*limit-1
	})
	if got := testMetric(t, e, "proxy_operator_gateway_connections", ""); got > limit {
		t.Errorf("%v connections open, bound %d", got, limit)
	}
	s := newSite(t, nil)
	_, port := hostPort(t, s.addr)
	if _, _, reply := socksDial(t, addr, "pool-web", token, "127.0.0.1", port); reply != gateway.SOCKSSucceeded {
		t.Errorf("a crawler after the flood: reply %#x, want 0", reply)
	}
	resp, _ := get(t, e.client("pool-web", token), s.url("/"))
	if resp.StatusCode != http.StatusOK {
		t.Errorf("the HTTP listener after the SOCKS flood: %d", resp.StatusCode)
	}
}

// socksClientRig is what the real clients' tests drive: a gateway's SOCKS5 listener in front of
// two upstreams, a plain site, a self-signed TLS site and a file of its certificate.
func socksClientRig(t *testing.T) (addr string, s *site, port uint16, tlsSrv *httptest.Server, ca string) {
	t.Helper()
	e := newEnv(t, 2, nil)
	addr = e.socks(t)
	s = newSite(t, nil)
	_, port = hostPort(t, s.addr)
	tlsSrv, _ = tlsSite(t)
	return addr, s, port, tlsSrv, caFile(t, tlsSrv.Certificate().Raw)
}

func TestCurlThroughSOCKS(t *testing.T) {
	curl := need(t, "curl")
	addr, s, port, tlsSrv, ca := socksClientRig(t)
	// --socks5-hostname: the name goes to the gateway unresolved, and on to the upstream.
	out := run(t, curl, "-sS", "--socks5-hostname", addr, "--proxy-user", "pool-web:"+token, "http://localhost:"+strconv.Itoa(int(port))+"/plain")
	if out != "hello from the site\n" {
		t.Errorf("curl plain HTTP through SOCKS5: %q", out)
	}
	out = run(t, curl, "-sS", "--cacert", ca, "--socks5-hostname", addr, "--proxy-user", "pool-web-session-c1:"+token, tlsSrv.URL+"/")
	if out != "secret page over TLS" {
		t.Errorf("curl HTTPS (a self-signed site) through SOCKS5: %q", out)
	}
	// The proxy URL form, the token in it.
	out = run(t, curl, "-sS", "-k", "--proxy", "socks5h://pool-web:"+token+"@"+addr, tlsSrv.URL+"/")
	if out != "secret page over TLS" {
		t.Errorf("curl with a socks5h:// proxy URL: %q", out)
	}
	cmd := exec.Command(curl, "-sS", "--socks5-hostname", addr, "--proxy-user", "pool-web:wrong-token", s.url("/"))
	if b, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(b), "rejected") {
		t.Errorf("curl with a wrong token: %v %s, want an authentication failure", err, b)
	}
}

const requestsSOCKSScript = `
import json, sys, requests
proxy, plain, tls, ca, bad = sys.argv[1:6]
s = requests.Session()
s.proxies = {"http": proxy, "https": proxy}
out = {}
r = s.get(plain, timeout=30)
out["plain"] = [r.status_code, r.text]
r = s.get(tls, timeout=30, verify=ca)
out["tls"] = [r.status_code, r.text]
try:
    requests.get(plain, proxies={"http": bad}, timeout=30)
    out["bad"] = "no error"
except requests.exceptions.ConnectionError as e:
    out["bad"] = type(e).__name__ + ": " + str(e)
print(json.dumps(out))
`

func TestPythonRequestsThroughSOCKS(t *testing.T) {
	py := needPython(t, "requests", "socks")
	addr, _, port, tlsSrv, ca := socksClientRig(t)
	proxy := "socks5h://pool-web-session-py:" + token + "@" + addr
	bad := "socks5h://pool-web:wrong@" + addr
	out := run(t, py, "-c", requestsSOCKSScript, proxy, "http://localhost:"+strconv.Itoa(int(port))+"/", tlsSrv.URL+"/", ca, bad)
	var got struct {
		Plain []any  `json:"plain"`
		TLS   []any  `json:"tls"`
		Bad   string `json:"bad"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if fmt.Sprint(got.Plain) != "[200 hello from the site\n]" {
		t.Errorf("requests plain HTTP through SOCKS5: %v", got.Plain)
	}
	if fmt.Sprint(got.TLS) != "[200 secret page over TLS]" {
		t.Errorf("requests HTTPS through SOCKS5: %v", got.TLS)
	}
	if !strings.Contains(strings.ToLower(got.Bad), "auth") {
		t.Errorf("requests with a wrong token: %s, want an authentication error", got.Bad)
	}
}
