package httpx_test

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/server/httpx"
)

// TestConnLimit drives a real server: idle keep-alive connections make room for a new caller;
// busy ones do not, and the new connection is closed instead.
func TestConnLimit(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/block" {
			<-release
		}
		_, _ = io.WriteString(w, "ok")
	}))
	limit := httpx.NewConnLimit(4)
	srv.Config.ConnState = limit.ConnState
	srv.Start()
	defer srv.Close()
	// Unblock the handlers before Close waits for them, also when the test fails midway.
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	defer unblock()
	addr := srv.Listener.Addr().String()

	// request sends one keep-alive GET on c and reads its answer; c stays open.
	request := func(c net.Conn, path string) (*http.Response, error) {
		if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			return nil, err
		}
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err == nil {
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
		}
		return res, err
	}
	dial := func() net.Conn {
		t.Helper()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	for range 4 {
		if _, err := request(dial(), "/"); err != nil {
			t.Fatal(err)
		}
	}
	// The client reads an answer before the server marks its connection idle: wait for that,
	// or a new caller can meet four connections still active.
	waitFor(t, func() bool { return limit.Open() == 4 && limit.Idle() == 4 })
	// A fifth caller gets in: an idle connection makes room.
	if res, err := request(dial(), "/"); err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("a new caller beside 4 idle connections: %v %v", res, err)
	}
	if limit.Evicted() != 1 {
		t.Errorf("evicted %d idle connections, want 1", limit.Evicted())
	}

	waitFor(t, func() bool { return limit.Idle() == 4 })
	// Four busy connections: the next one is closed.
	busy := make([]net.Conn, 4)
	for i := range busy {
		busy[i] = dial()
		if _, err := io.WriteString(busy[i], "GET /block HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, func() bool { return limit.Open() == 4 && limit.Evicted() == 1+4 })
	refused := dial()
	_ = refused.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := request(refused, "/"); err == nil {
		t.Errorf("a new connection beside 4 busy ones was served")
	}
	if limit.Refused() != 1 {
		t.Errorf("refused %d, want 1", limit.Refused())
	}
	unblock()
	for _, c := range busy {
		if _, err := http.ReadResponse(bufio.NewReader(c), nil); err != nil {
			t.Errorf("a busy call was cut: %v", err)
		}
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 30s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestTrickledRefusalsDoNotLockOutCallers drives a real server as discovery's: callers without
// a token trickle POST bodies from another address and are refused (401, then the throttle's
// 429) after the head, and re-dial at once; a legitimate caller opening a fresh connection per
// call is never cut. Issue 30: every refused connection stayed active for net/http's
// half-second linger after its answer (the body still arriving), the limit filled with them,
// and ConnLimit closed the legitimate caller's new connections unanswered (EOF).
func TestTrickledRefusalsDoNotLockOutCallers(t *testing.T) {
	logins := &httpx.LoginThrottle{}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") == "Bearer good" {
			_, _ = io.WriteString(w, "ok")
			return
		}
		if wait := logins.Wait(r); wait > 0 {
			httpx.WriteThrottled(w, r, wait)
			return
		}
		logins.Failed(r, "missing_token")
		httpx.CloseAfterAnswer(w, r)
		httpx.WriteError(w, httpx.Errorf(http.StatusUnauthorized, "missing bearer token"))
	}))
	limit := httpx.NewConnLimit(64)
	srv.Config.ConnState = limit.ConnState
	srv.Config.ConnContext = limit.ConnContext
	srv.Config.ReadTimeout = 10 * time.Second
	srv.Start()
	defer srv.Close()
	addr := srv.Listener.Addr().String()

	ctx, cancel := context.WithCancel(context.Background())
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.3")}}
	var wg sync.WaitGroup
	var refusals atomic.Int64
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				c, err := d.Dial("tcp", addr)
				if err != nil {
					continue
				}
				_ = c.SetDeadline(time.Now().Add(20 * time.Second))
				fmt.Fprintf(c, "POST /v1/leases HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n{")
				done := make(chan struct{})
				go func() { // the trickle, until the answer comes
					for {
						select {
						case <-done:
							return
						case <-time.After(100 * time.Millisecond):
						}
						if _, err := c.Write([]byte(" ")); err != nil {
							return
						}
					}
				}()
				if res, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil {
					res.Body.Close()
					refusals.Add(1)
				}
				close(done)
				c.Close()
			}
		}()
	}
	defer func() { cancel(); wg.Wait() }()
	waitUntil(t, "the flood refused 1,000 times", func() bool { return refusals.Load() >= 1000 })

	legit := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	bad := 0
	var first error
	for range 200 {
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/v1/proxies", nil)
		req.Header.Set("Authorization", "Bearer good")
		res, err := legit.Do(req)
		if err != nil {
			bad++
			first = cmp.Or(first, err)
			continue
		}
		res.Body.Close()
	}
	t.Logf("refused %d new connections, evicted %d", limit.Refused(), limit.Evicted())
	if bad > 0 {
		t.Errorf("%d of 200 legitimate calls failed during the flood, the first: %v", bad, first)
	}
}

// waitUntil polls cond until it holds or 20 s pass (no fixed sleeps).
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
