package mock_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/providers/mock"
)

// freePort is a port just seen free on 127.0.0.1 (almost surely free on 127.x.y.z too).
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// echoServer accepts connections on addr and echoes every byte.
func echoServer(t *testing.T, addr string) string {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("cannot listen on %s: %v", addr, err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	return ln.Addr().String()
}

// connect opens a CONNECT tunnel to dest through the proxy at proxyAddr and returns the
// connection and the proxy's status.
func connect(t *testing.T, proxyAddr, dest string) (net.Conn, *bufio.Reader, int) {
	t.Helper()
	c, err := net.DialTimeout("tcp", proxyAddr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", dest, dest)
	br := bufio.NewReader(c)
	res, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatalf("CONNECT answer: %v", err)
	}
	return c, br, res.StatusCode
}

// TestTunnelClosedOnDelete (issue 10, item 10): a CONNECT tunnel must not outlive its
// deleted instance.
func TestTunnelClosedOnDelete(t *testing.T) {
	echo := echoServer(t, "127.0.0.1:0")
	port := freePort(t)
	p, c := newMock(t, mock.Config{ServeProxies: true, ProvisioningDelay: mock.Duration(time.Second)})
	r := req("u1")
	r.Port = int32(port)
	id, err := p.Create(context.Background(), r)
	if err != nil {
		t.Skipf("cannot listen on the instance's loopback address: %v", err)
	}
	c.add(time.Second)
	inst, err := p.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	conn, br, status := connect(t, net.JoinHostPort(inst.IP, fmt.Sprint(port)), echo)
	if status != http.StatusOK {
		t.Fatalf("CONNECT status %d, want 200", status)
	}
	if _, err := io.WriteString(conn, "ping\n"); err != nil {
		t.Fatal(err)
	}
	if line, err := br.ReadString('\n'); err != nil || line != "ping\n" {
		t.Fatalf("echo through the tunnel: %q, %v", line, err)
	}
	if err := p.Delete(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	// The deadline only bounds a failing test: a closed tunnel answers EOF at once.
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := br.ReadByte(); err != io.EOF && !strings.Contains(fmt.Sprint(err), "reset") {
		t.Fatalf("read from the tunnel after Delete: %v, want EOF (tunnel closed)", err)
	}
}

// TestRelayOnlyToLoopback: by default the mock proxy relays to loopback only; the destination
// here is this host's own non-loopback address, so the test sends nothing off the machine.
func TestRelayOnlyToLoopback(t *testing.T) {
	var local netip.Addr
	ifs, _ := net.InterfaceAddrs()
	for _, a := range ifs {
		if pn, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(pn.IP); ok && ip.Is4() && !ip.IsLoopback() && !ip.IsLinkLocalUnicast() {
				local = ip
				break
			}
		}
	}
	if !local.IsValid() {
		t.Skip("no non-loopback IPv4 address on this host")
	}
	dest := echoServer(t, net.JoinHostPort(local.String(), "0"))
	loop := echoServer(t, "127.0.0.1:0")
	tests := []struct {
		name   string
		cfg    mock.ForwardConfig
		dest   string
		status int
	}{
		{"loopback relayed", mock.ForwardConfig{}, loop, http.StatusOK},
		{"elsewhere refused", mock.ForwardConfig{}, dest, http.StatusForbidden},
		{"elsewhere relayed when allowed", mock.ForwardConfig{RelayAnywhere: true}, dest, http.StatusOK},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
			stop, err := mock.ServeForwardProxyWith(addr, tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer stop()
			if _, _, status := connect(t, addr, tc.dest); status != tc.status {
				t.Errorf("CONNECT %s: status %d, want %d", tc.dest, status, tc.status)
			}
			// The same rule holds for absolute-URI requests.
			pc, err := net.DialTimeout("tcp", addr, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer pc.Close()
			fmt.Fprintf(pc, "GET http://%s/ HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", tc.dest, tc.dest)
			res, err := http.ReadResponse(bufio.NewReader(pc), nil)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if tc.status == http.StatusForbidden && res.StatusCode != http.StatusForbidden {
				t.Errorf("GET via %s: status %d, want 403", tc.dest, res.StatusCode)
			}
		})
	}
}

// TestRelayRefusesOwnListeners (issue 21): a crawler holding a lease on a mock proxy asked it
// to CONNECT (or GET) to the operator's hook port on loopback, and reached the hooks. The
// destinations Refuse names are refused, loopback or not, relayAnywhere or not; other
// loopback destinations are still relayed.
func TestRelayRefusesOwnListeners(t *testing.T) {
	own := echoServer(t, "127.0.0.1:0")
	other := echoServer(t, "127.0.0.1:0")
	ownAP := netip.MustParseAddrPort(own)
	refuse := func(ap netip.AddrPort) bool { return ap == ownAP }
	for _, anywhere := range []bool{false, true} {
		addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
		stop, err := mock.ServeForwardProxyWith(addr, mock.ForwardConfig{RelayAnywhere: anywhere, Refuse: refuse})
		if err != nil {
			t.Fatal(err)
		}
		defer stop()
		if _, _, status := connect(t, addr, own); status != http.StatusForbidden {
			t.Errorf("relayAnywhere=%v: CONNECT to an own listener: status %d, want 403", anywhere, status)
		}
		if _, _, status := connect(t, addr, other); status != http.StatusOK {
			t.Errorf("relayAnywhere=%v: CONNECT to another loopback address: status %d, want 200", anywhere, status)
		}
		pc, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range []string{"GET /sync", "POST /sync", "GET /healthz?x=1", "POST /healthz"} {
			method, path, _ := strings.Cut(r, " ")
			fmt.Fprintf(pc, "%s http://%s%s HTTP/1.1\r\nHost: %s\r\nContent-Length: 2\r\n\r\n{}", method, own, path, own)
			res, err := http.ReadResponse(bufio.NewReader(pc), nil)
			if err != nil {
				t.Fatalf("%s: %v", r, err)
			}
			res.Body.Close()
			if res.StatusCode != http.StatusForbidden {
				t.Errorf("relayAnywhere=%v: %s via an own listener: status %d, want 403", anywhere, r, res.StatusCode)
			}
			pc.Close()
			if pc, err = net.DialTimeout("tcp", addr, 5*time.Second); err != nil {
				t.Fatal(err)
			}
		}
		pc.Close()
	}
}
