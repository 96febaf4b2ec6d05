package gateway_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/server/gateway"
	"github.com/proxy-operator/proxy-operator/server/hooks/membudget"
)

// waitClosed reads c until the gateway closes it (or answers and closes); it fails the test if
// nothing happens within a generous bound, far above the configured timeout.
func waitClosed(t *testing.T, c net.Conn) string {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	b, err := io.ReadAll(c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the gateway kept a stalled connection open for 30s (read %q)", b)
	}
	return string(b)
}

func TestSlowHeadersLoseTheirSlot(t *testing.T) {
	e := newEnv(t, 1, func(g *gateway.Gateway) { g.ReadHeaderTimeout = 200 * time.Millisecond })
	c, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Half a request head, then nothing: a slowloris.
	if _, err := io.WriteString(c, "GET http://127.0.0.1:9/ HTTP/1.1\r\nHost: 127.0.0.1:9\r\nX-Slow: "); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, c)
	waitFor(t, "the connection gauge to drop", func() bool {
		return testMetric(t, e, "proxy_operator_gateway_connections", "") == 0
	})
}

func TestHugeHeadersAre431(t *testing.T) {
	e := newEnv(t, 1, func(g *gateway.Gateway) { g.MaxHeaderBytes = 8 << 10 })
	c, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	head := "GET http://127.0.0.1:9/ HTTP/1.1\r\nHost: 127.0.0.1:9\r\nX-Big: " + strings.Repeat("a", 64<<10) + "\r\n\r\n"
	go func() { _, _ = io.WriteString(c, head) }()
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("64 KiB header: %d, want 431", resp.StatusCode)
	}
}

// TestConnectionFloodEvictsSilentConnections: at MaxConns, each new connection takes the
// place of the oldest one that never sent a head (decision 0255), so a flood of silent
// connections never locks a crawler out; the count stays at the limit.
func TestConnectionFloodEvictsSilentConnections(t *testing.T) {
	const limit = 20
	e := newEnv(t, 1, func(g *gateway.Gateway) { g.MaxConns = limit })
	var open []net.Conn
	defer func() {
		for _, c := range open {
			c.Close()
		}
	}()
	for range limit + 50 {
		c, err := net.Dial("tcp", e.addr)
		if err != nil {
			t.Fatal(err)
		}
		open = append(open, c)
	}
	waitFor(t, "50 silent connections evicted", func() bool {
		return testMetric(t, e, "proxy_operator_gateway_connections_evicted_total", "") == 50
	})
	if got := testMetric(t, e, "proxy_operator_gateway_connections", ""); got != limit {
		t.Errorf("connections = %v, want %d", got, limit)
	}
	if got := waitClosed(t, open[0]); got != "" {
		t.Errorf("the oldest silent connection got %q, want closed without an answer", got)
	}
	resp, _ := get(t, &http.Client{Timeout: 20 * time.Second}, "http://"+e.addr+"/healthz")
	if resp.StatusCode != http.StatusOK {
		t.Errorf("a crawler during the flood: %d, want 200", resp.StatusCode)
	}
}

// TestConnectionRefusedWhenNothingFits: a connection the budget cannot hold, with nothing to
// evict, is answered 503 at once and closed.
func TestConnectionRefusedWhenNothingFits(t *testing.T) {
	e := newEnv(t, 1, func(g *gateway.Gateway) { g.Budget = membudget.New(1<<10, 1) })
	for i := range 5 {
		c, err := net.Dial("tcp", e.addr)
		if err != nil {
			t.Fatal(err)
		}
		got := waitClosed(t, c)
		c.Close()
		if !strings.HasPrefix(got, "HTTP/1.1 503") || !strings.Contains(got, "connection limit") {
			t.Fatalf("connection %d got %q, want an immediate 503", i, got)
		}
	}
	if got := testMetric(t, e, "proxy_operator_gateway_connections_refused_total", ""); got != 5 {
		t.Errorf("refused connections = %v, want 5", got)
	}
}

func TestPerTokenLimit(t *testing.T) {
	e := newEnv(t, 3, func(g *gateway.Gateway) { g.MaxConnsPerToken = 2 })
	srv, _ := tlsSite(t)
	host := strings.TrimPrefix(srv.URL, "https://")
	var tunnels []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", e.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\nProxy-Authorization: %s\r\n\r\n", host, host, basicAuth("session-t"+strconv.Itoa(len(tunnels)), token))
		resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("tunnel %d: %v %v", len(tunnels), resp, err)
		}
		tunnels = append(tunnels, c)
	}
	status, hdr, body := rawProxy(t, e.addr, http.MethodConnect, host, basicAuth("", token))
	if status != http.StatusTooManyRequests || !strings.Contains(body, "token crawler has 2 requests and tunnels in flight") || !strings.Contains(hdr, "Retry-After") {
		t.Errorf("third tunnel of the token: %d %q %q, want 429 naming the limit", status, hdr, body)
	}
	// Another token is not held back by it.
	status, _, _ = rawProxy(t, e.addr, http.MethodConnect, host, basicAuth("ns-crawl", teamToken))
	if status == http.StatusTooManyRequests {
		t.Errorf("another token was refused by the first one's limit")
	}
	tunnels[0].Close()
	waitFor(t, "the token's slot to free", func() bool {
		status, _, _ := rawProxy(t, e.addr, http.MethodConnect, host, basicAuth("", token))
		return status == http.StatusOK
	})
}

// TestIdleConnectionsMemory opens thousands of idle keep-alive client connections and
// measures the process's resident memory per connection: the Deployment's limit is sized
// from it (10,000 connections must fit in it with room for traffic).
func TestIdleConnectionsMemory(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("opens thousands of connections; memory is not measured under the race detector")
	}
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	// Both ends live in this process, and the gateway takes no more than its descriptor cap.
	n := min(10000, (int(lim.Cur)-500)/2, gateway.ConnCapFor(int(lim.Cur)))
	if n < 1000 {
		t.Skipf("open-file limit %d allows only %d connections", lim.Cur, n)
	}
	// The memory budget would evict idle connections past its share of the default 1 GiB: this
	// test measures what n connections really cost, so the budget is a 64 GiB process's.
	e := newEnv(t, 1, func(g *gateway.Gateway) { g.Budget = gateway.BudgetFor(64 << 30) })
	runtime.GC()
	before := rss(t)
	conns := make([]net.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	req := []byte("GET /healthz HTTP/1.1\r\nHost: gw\r\n\r\n")
	buf := make([]byte, 256)
	for range n {
		c, err := net.Dial("tcp", e.addr)
		if err != nil {
			t.Fatalf("after %d connections: %v", len(conns), err)
		}
		conns = append(conns, c)
		// One request each, so the connection is an idle keep-alive one, as a crawler leaves it.
		if _, err := c.Write(req); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		if _, err := c.Read(buf); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "every connection to be counted", func() bool {
		return testMetric(t, e, "proxy_operator_gateway_connections", "") == float64(n)
	})
	runtime.GC()
	after := rss(t)
	per := (after - before) / int64(n)
	t.Logf("%d idle keep-alive connections: RSS %d MiB -> %d MiB, %d KiB per connection (both ends), %d MiB for 10,000",
		n, before>>20, after>>20, per>>10, per*10000>>20)
	// The Deployment's limit is 512Mi: 10,000 connections must leave half of it for traffic.
	if per*10000 > 256<<20 {
		t.Errorf("%d KiB per idle connection: 10,000 would take %d MiB, more than half the 512Mi limit", per>>10, per*10000>>20)
	}
}

// rss is the process's resident set size in bytes.
func rss(t testing.TB) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skip("no /proc/self/status")
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmRSS in /proc/self/status")
	return 0
}
