package gateway_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/server/gateway"
	"github.com/proxy-operator/proxy-operator/server/hooks/membudget"
)

// connCost mirrors budget.go's charge for MaxHeaderBytes of 4 KiB.
const connCost = 2*4096 + 32<<10

// TestFailedLoginConnectionClosesSoon: a keep-alive connection idle after a 407 for a wrong
// token is closed after FailedLoginIdle, not the 2 min idle timeout (issue 30: 15,000 such
// connections held 489 MiB for two minutes).
func TestFailedLoginConnectionClosesSoon(t *testing.T) {
	e := newEnv(t, 1, func(g *gateway.Gateway) { g.FailedLoginIdle = 200 * time.Millisecond })
	c, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET http://site.test/ HTTP/1.1\r\nHost: site.test\r\nProxy-Authorization: %s\r\n\r\n", basicAuth("", "wrong-token-0123456789"))
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second)) // an upper bound, far below 2 min
	br := bufio.NewReader(c)
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusProxyAuthRequired || res.Close {
		t.Fatalf("answer %d close %v, want a keep-alive 407", res.StatusCode, res.Close)
	}
	start := time.Now()
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("read after the 407: %v, want EOF (closed by the gateway)", err)
	}
	t.Logf("closed %v after the 407", time.Since(start))
}

// TestBudgetEvictsUnauthenticatedFirst: with room for three connections, three that never
// send a head are evicted for a crawler's connection, which is served.
func TestBudgetEvictsUnauthenticatedFirst(t *testing.T) {
	e := newEnv(t, 1, func(g *gateway.Gateway) {
		g.MaxHeaderBytes = 4096
		g.Budget = membudget.New(3*connCost, 1)
	})
	s := newSite(t, nil)
	var idle []net.Conn
	for range 3 {
		c, err := net.Dial("tcp", e.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		idle = append(idle, c)
	}
	waitFor(t, "three connections counted", func() bool { return testMetric(t, e, "proxy_operator_gateway_connections", "") == 3 })
	resp, body := get(t, e.client("", token), s.url("/"))
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "hello") {
		t.Fatalf("crawler: %d %q, want 200 from the site", resp.StatusCode, body)
	}
	if got := testMetric(t, e, "proxy_operator_gateway_connections_evicted_total", ""); got < 1 {
		t.Errorf("evicted %v, want at least 1", got)
	}
	// The oldest silent connection was the one evicted.
	_ = idle[0].SetReadDeadline(time.Now().Add(20 * time.Second))
	if _, err := idle[0].Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("the oldest silent connection: %v, want EOF", err)
	}
}

// TestRetryBodyOnlyWithinBudget: an idempotent body is kept for retries when the budget holds
// it, and streamed once (the request still served) when it does not.
func TestRetryBodyOnlyWithinBudget(t *testing.T) {
	for _, tc := range []struct {
		name   string
		budget int64
		fate   string
	}{
		{"room", 2*connCost + 200_000, "kept"},
		{"no room", 2*connCost + 50_000, "streamed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, 1, func(g *gateway.Gateway) {
				g.MaxHeaderBytes = 4096
				g.Budget = membudget.New(tc.budget, 1)
			})
			putWhole(t, e, newCountingSite(t), tc.fate)
			if got := e.gw.Budget.InUse(); got > 2*connCost {
				t.Errorf("%d bytes of budget held after the request, want only connections", got)
			}
		})
	}
}

// TestOneTokenCannotFillTheBudget: a token's requests and tunnels in flight hold at most its
// fair share of the memory budget (decision 0274); past it they are answered 429 memory_share,
// so another token's crawler still connects and is served (issue 30: 600 PUTs with one token
// filled the budget with busy connections and legitimate connections were cut).
func TestOneTokenCannotFillTheBudget(t *testing.T) {
	e := newEnv(t, 8, func(g *gateway.Gateway) {
		g.MaxHeaderBytes = 4096
		g.Budget = membudget.New(8*connCost, 1)
	})
	e.addUpstream(t, "team/p9", "127.0.0.19", map[string]string{"pool": "web"}, 100)
	srv, _ := tlsSite(t)
	host := strings.TrimPrefix(srv.URL, "https://")
	open, refused := 0, 0
	for i := range 8 {
		c, err := net.Dial("tcp", e.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\nProxy-Authorization: %s\r\n\r\n", host, host, basicAuth(fmt.Sprintf("session-f%d", i), token))
		resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
		if err != nil {
			t.Fatalf("tunnel %d: %v", i, err)
		}
		switch {
		case resp.StatusCode == http.StatusOK:
			open++
		case resp.StatusCode == http.StatusTooManyRequests && resp.Header.Get(gateway.HeaderError) == gateway.ReasonMemoryShare:
			refused++
		default:
			t.Fatalf("tunnel %d: %d %s, want 200 or 429 %s", i, resp.StatusCode, resp.Header.Get(gateway.HeaderError), gateway.ReasonMemoryShare)
		}
	}
	if refused == 0 {
		t.Errorf("one token opened %d tunnels filling the whole budget; want those past its share refused", open)
	}
	s := newSite(t, nil)
	status, _, body := rawProxy(t, e.addr, http.MethodGet, s.addr, basicAuth("", teamToken))
	if status != http.StatusOK || !strings.Contains(body, "hello") {
		t.Errorf("another token's crawler beside them: %d %q, want 200 from the site", status, body)
	}
}

// TestRetryBufferEvictsNoConnection: a retry buffer takes only free budget: a crawler's
// connection whose head is not read yet is not evicted to keep another request's body; that
// body streams once instead (issue 30: the retry buffers of 600 PUTs evicted legitimate
// connections before their heads were read).
func TestRetryBufferEvictsNoConnection(t *testing.T) {
	e := newEnv(t, 1, func(g *gateway.Gateway) {
		g.MaxHeaderBytes = 4096
		g.Budget = membudget.New(3*connCost+50_000, 1)
	})
	s := newCountingSite(t)
	slow, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	waitFor(t, "the slow crawler's connection counted", func() bool {
		return testMetric(t, e, "proxy_operator_gateway_connections", "") == 1
	})
	putWhole(t, e, s, "streamed")
	servedOn(t, slow, s, "the slow crawler's request")
}

// TestNewConnectionOutlivesIdleOnes: within its grace a new connection, whose head the gateway
// has not read yet, is evicted only after idle keep-alive connections (decision 0274): a
// crawler's fresh connection is not cut for a newcomer while an idle one could go.
func TestNewConnectionOutlivesIdleOnes(t *testing.T) {
	e := newEnv(t, 1, func(g *gateway.Gateway) {
		g.MaxHeaderBytes = 4096
		g.Budget = membudget.New(2*connCost, 1)
	})
	e.gw.SetNewConnGrace(time.Hour)
	s := newSite(t, nil)
	idle := e.client("", token) // keeps its connection idle after the answer
	if resp, body := get(t, idle, s.url("/")); resp.StatusCode != http.StatusOK {
		t.Fatalf("keep-alive crawler: %d %q", resp.StatusCode, body)
	}
	waitFor(t, "the keep-alive connection idle", func() bool { return e.gw.IdleConns() == 1 })
	fresh, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	waitFor(t, "two connections counted", func() bool { return testMetric(t, e, "proxy_operator_gateway_connections", "") == 2 })
	newcomer, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer newcomer.Close()
	waitFor(t, "one connection evicted", func() bool {
		return testMetric(t, e, "proxy_operator_gateway_connections_evicted_total", "") == 1
	})
	servedOn(t, fresh, s, "the fresh connection's request")
}

// newCountingSite is a site that answers how many body bytes it received.
func newCountingSite(t *testing.T) *site {
	return newSite(t, func(w http.ResponseWriter, r *http.Request, _ string) {
		n, _ := io.Copy(io.Discard, r.Body)
		fmt.Fprintf(w, "got %d\n", n)
	})
}

// putWhole PUTs 100,000 bytes to s through the gateway with the crawler's token, checks they
// arrived whole, and that the retry body's fate was counted once.
func putWhole(t *testing.T, e *env, s *site, fate string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPut, s.url("/put"), bytes.NewReader(make([]byte, 100_000)))
	resp, err := e.client("", token).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(b) != "got 100000\n" {
		t.Fatalf("PUT: %d %q, want the whole body relayed", resp.StatusCode, b)
	}
	if got := testMetric(t, e, "proxy_operator_gateway_retry_bodies_total", fate); got != 1 {
		t.Errorf("retry bodies %s = %v, want 1", fate, got)
	}
}

// servedOn sends a GET for s on c, a connection opened earlier and kept silent, and checks it
// is answered 200: the connection was not evicted meanwhile.
func servedOn(t *testing.T, c net.Conn, s *site, what string) {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\nProxy-Authorization: %s\r\n\r\n", s.url("/"), s.addr, basicAuth("", token))
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("%s: %v, want an answer (was its connection evicted?)", what, err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Errorf("%s: %d, want 200", what, res.StatusCode)
	}
}
