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
			s := newSite(t, func(w http.ResponseWriter, r *http.Request, _ string) {
				n, _ := io.Copy(io.Discard, r.Body)
				fmt.Fprintf(w, "got %d\n", n)
			})
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
			if got := testMetric(t, e, "proxy_operator_gateway_retry_bodies_total", tc.fate); got != 1 {
				t.Errorf("retry bodies %s = %v, want 1", tc.fate, got)
			}
			if got := e.gw.Budget.InUse(); got > 2*connCost {
				t.Errorf("%d bytes of budget held after the request, want only connections", got)
			}
		})
	}
}
