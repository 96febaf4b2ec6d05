package reliability

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/internal/redistest"
)

// TestGatewayReachesNothingInside runs issue 30's critical chain against the operator binary:
// a tenant's token -> the gateway -> a leased mock upstream -> the Redis lease store, the hook
// port and the discovery port. Loopback targets are allowed (as in tests and `make run`, the
// worst case): the store's and the operator's own addresses must stay refused at the gateway,
// while a loopback canary site is reached through the same chain (so the refusal is the
// policy's, not a broken chain). Any reach fails the test.
func TestGatewayReachesNothingInside(t *testing.T) {
	rs := redistest.Start(t)
	tokens := filepath.Join(t.TempDir(), "tokens.yaml")
	if err := os.WriteFile(tokens, []byte(attackTokens()), 0o600); err != nil {
		t.Fatal(err)
	}
	gwAddr := fmt.Sprintf("127.0.0.1:%d", freeLoopbackPort(t))
	c := startChild(t, true, "-discovery-token-file", tokens, "-lease-store", "redis://"+rs.Addr,
		"-gateway-addr", gwAddr, "-gateway-allow-target-cidrs", "127.0.0.0/8")
	c.ready(t)
	p := proxyDesc{ns: "team-a", name: "gw-up", uid: "uid-gw-up", spec: attackMockSpec(c.probeURL, "gw")}
	c.syncUntil(t, &p, "Ready", func(a syncAnswer) bool { return a.Status.Phase == "Ready" })

	canary, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer canary.Close()
	go func() {
		for {
			conn, err := canary.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				// Answers whatever comes first (a tunnel sends a Redis PING before its GET).
				if _, err := bufio.NewReader(conn).ReadByte(); err == nil {
					fmt.Fprint(conn, "HTTP/1.1 200 OK\r\nContent-Length: 6\r\nConnection: close\r\n\r\ncanary")
				}
			}()
		}
	}()

	auth := "Basic " + basicAuth("", teamAToken)
	// through sends one request or tunnel through the gateway. A tunnel that opens gets what
	// the attacker would send next: a Redis PING and an HTTP GET; what comes back says whether
	// the destination was reached.
	through := func(method, dest string) (int, string) {
		t.Helper()
		conn, err := net.DialTimeout("tcp", gwAddr, 10*time.Second)
		if err != nil {
			t.Fatalf("dial the gateway: %v", err)
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
		br := bufio.NewReader(conn)
		if method == http.MethodConnect {
			fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\nHost: %s\r\nProxy-Authorization: %s\r\n\r\n", dest, dest, auth)
			res, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
			if err != nil {
				return 0, "CONNECT: " + err.Error()
			}
			if res.StatusCode != http.StatusOK {
				b, _ := io.ReadAll(io.LimitReader(res.Body, 4096))
				return res.StatusCode, string(b)
			}
			fmt.Fprintf(conn, "*1\r\n$4\r\nPING\r\nGET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", dest)
			b, _ := io.ReadAll(io.LimitReader(br, 4096))
			return res.StatusCode, "tunnel answered " + string(b)
		}
		fmt.Fprintf(conn, "GET http://%s/metrics HTTP/1.1\r\nHost: %s\r\nProxy-Authorization: %s\r\nConnection: close\r\n\r\n", dest, dest, auth)
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			return 0, "GET: " + err.Error()
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(res.Body, 4096))
		return res.StatusCode, string(b)
	}

	// The chain works: the canary is reached through the gateway and the leased upstream. The
	// gateway learns the proxy's health from the fleet view, a moment after the sync that made it
	// Ready: until then it answers 503 or 404 (no healthy match), so those are retried.
	for _, m := range []string{http.MethodGet, http.MethodConnect} {
		deadline := time.Now().Add(60 * time.Second)
		for {
			code, body := through(m, canary.Addr().String())
			if code == http.StatusOK && strings.Contains(body, "canary") {
				break
			}
			if (code != http.StatusServiceUnavailable && code != http.StatusNotFound) || time.Now().After(deadline) {
				t.Fatalf("%s to the loopback canary through the gateway: %d %.200q, want 200 canary", m, code, body)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	_, redisPort, _ := net.SplitHostPort(rs.Addr)
	hook := fmt.Sprintf("127.0.0.1:%d", c.hookPort)
	disc := strings.TrimPrefix(c.discURL, "http://")
	_, discPort, _ := net.SplitHostPort(disc)
	inside := []string{
		rs.Addr, "127.1:" + redisPort, "2130706433:" + redisPort, "0x7f000001:" + redisPort, "[::ffff:127.0.0.1]:" + redisPort,
		"localhost:" + redisPort, hook, disc, "[::ffff:7f00:1]:" + discPort, gwAddr,
	}
	for _, dest := range inside {
		for _, m := range []string{http.MethodConnect, http.MethodGet} {
			code, body := through(m, dest)
			if code != http.StatusForbidden {
				t.Errorf("%s %s through the gateway: %d %.300q, want 403 (reached inside)", m, dest, code, body)
			}
		}
	}
}
