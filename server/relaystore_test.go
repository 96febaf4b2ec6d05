package server_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/client"
	"github.com/proxy-operator/proxy-operator/internal/redistest"
	"github.com/proxy-operator/proxy-operator/server"
)

// TestLeasedMockProxyRefusesTheLeaseStore (issue 30, decision 0251): a crawler holding a lease
// on a mock proxy of an operator whose lease store is Redis asks the proxy itself, not the
// gateway, to CONNECT to (or GET from) the store's address: the proxy refuses with 403, as it
// refuses the operator's own listeners, and still relays the probe's GET /healthz.
func TestLeasedMockProxyRefusesTheLeaseStore(t *testing.T) {
	t.Setenv("KUBECONFIG", "")
	srv := redistest.Start(t)
	op, err := server.New(server.Config{Hooks: server.HooksConfig{Addr: "127.0.0.1:0"}, Discovery: server.DiscoveryAPIConfig{Addr: "127.0.0.1:0", Insecure: true},
		Demo: server.DemoConfig{Proxies: 1}, Lease: server.LeaseConfig{Store: "redis://" + srv.Addr}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := runOperator(t, op)
	c, err := client.New("http://" + op.DiscoveryAddr())
	if err != nil {
		t.Fatal(err)
	}
	// Wait for the condition, not for a time: a bound only so a broken run fails.
	deadline := time.Now().Add(2 * time.Minute)
	var l *client.Lease
	for {
		if l, err = c.Lease(ctx, client.LeaseRequest{Selector: map[string]string{"demo": "true"}, Target: "example.com"}); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no lease within 2 minutes: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	pu, err := url.Parse(l.ProxyURL)
	if err != nil || pu.User == nil {
		t.Fatalf("proxyURL %q: %v, want credentials in it", l.ProxyURL, err)
	}
	through := func(req string) int {
		t.Helper()
		conn, err := net.DialTimeout("tcp", pu.Host, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
		pw, _ := pu.User.Password()
		r, err := http.NewRequest(http.MethodGet, "http://x/", nil)
		if err != nil {
			t.Fatal(err)
		}
		r.SetBasicAuth(pu.User.Username(), pw)
		fmt.Fprintf(conn, "%s\r\nProxy-Authorization: %s\r\n\r\n", req, r.Header.Get("Authorization"))
		method := http.MethodGet
		if req[:7] == "CONNECT" {
			method = http.MethodConnect
		}
		res, err := http.ReadResponse(bufio.NewReader(conn), &http.Request{Method: method})
		if err != nil {
			t.Fatalf("%s: %v", req, err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	store := srv.Addr
	for _, req := range []string{
		"CONNECT " + store + " HTTP/1.1\r\nHost: " + store,
		"GET http://" + store + "/ HTTP/1.1\r\nHost: " + store,
		"POST http://" + store + "/ HTTP/1.1\r\nHost: " + store + "\r\nContent-Length: 0",
	} {
		if code := through(req); code != http.StatusForbidden {
			t.Errorf("%q through the leased proxy: %d, want 403", req, code)
		}
	}
	rc := srv.Client()
	defer rc.Close()
	if n, err := rc.DBSize(context.Background()).Result(); err != nil || n == 0 {
		t.Errorf("the store after the refusals: %d keys, %v; the operator's records should be there", n, err)
	}
	healthz := op.HookAddr()
	if code := through("GET http://" + healthz + "/healthz HTTP/1.1\r\nHost: " + healthz); code != http.StatusOK {
		t.Errorf("GET /healthz through the leased proxy: %d, want 200 (the proxy relays)", code)
	}
}
