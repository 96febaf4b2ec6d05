package httpx_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
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
