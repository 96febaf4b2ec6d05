package httpx_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/server/httpx"
)

func from(addr string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "/v1/proxies", nil)
	r.RemoteAddr = addr
	return r
}

// TestLoginThrottle: Free failures cost nothing, then each doubles the wait up to MaxWait; an
// address quiet for Forget starts over; other addresses are not affected; an IPv6 /64 is one
// address.
func TestLoginThrottle(t *testing.T) {
	now := time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)
	th := &httpx.LoginThrottle{Now: func() time.Time { return now }, Free: 3, Backoff: time.Second, MaxWait: 4 * time.Second, Forget: time.Minute}
	a := from("10.0.0.1:5000")
	var waits []time.Duration
	for range 7 {
		th.Failed(a, "invalid_token")
		waits = append(waits, th.Wait(a))
	}
	want := []time.Duration{0, 0, 0, time.Second, 2 * time.Second, 4 * time.Second, 4 * time.Second}
	if fmt.Sprint(waits) != fmt.Sprint(want) {
		t.Errorf("waits %v, want %v", waits, want)
	}
	if got := th.Wait(from("10.0.0.2:5000")); got != 0 {
		t.Errorf("another address waits %v", got)
	}
	if got := th.Wait(from("10.0.0.1:6000")); got != 4*time.Second {
		t.Errorf("the same address from another port waits %v, want 4s", got)
	}
	now = now.Add(2 * time.Minute)
	th.Failed(a, "invalid_token")
	if got := th.Wait(a); got != 0 {
		t.Errorf("after Forget, the first failure waits %v", got)
	}
	for range 4 {
		th.Failed(from("[2001:db8::1]:1"), "invalid_token")
	}
	if got := th.Wait(from("[2001:db8::ffff:1]:2")); got != time.Second {
		t.Errorf("the same /64 waits %v, want 1s", got)
	}
	if got := th.Wait(from("[2001:db8:0:1::1]:2")); got != 0 {
		t.Errorf("another /64 waits %v", got)
	}
	if got := httpx.RetryAfter(1500 * time.Millisecond); got != 2 {
		t.Errorf("RetryAfter(1.5s) = %d, want 2", got)
	}
}

// TestLoginThrottleBounded: many addresses hold at most MaxAddrs entries, and the address
// failing now keeps its count while others come and go.
func TestLoginThrottleBounded(t *testing.T) {
	th := &httpx.LoginThrottle{MaxAddrs: 100, Free: 2}
	for i := range 10000 {
		th.Failed(from(fmt.Sprintf("10.%d.%d.%d:1", i>>16&255, i>>8&255, i&255)), "invalid_token")
		if i%10 == 0 {
			th.Failed(from("192.0.2.1:1"), "invalid_token")
		}
	}
	if got := th.Addresses(); got > 100 {
		t.Errorf("%d addresses held, want at most 100", got)
	}
	if th.Wait(from("192.0.2.1:1")) == 0 {
		t.Error("the address failing all along is not throttled")
	}
}

// TestLoginThrottleLogSampled: a flood logs the burst, then one line per LogEvery, each with
// the remote address and how many lines were left out.
func TestLoginThrottleLogSampled(t *testing.T) {
	now := time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)
	var buf bytes.Buffer
	th := &httpx.LoginThrottle{Listener: "discovery", Log: slog.New(slog.NewTextHandler(&buf, nil)),
		Now: func() time.Time { return now }, LogBurst: 3, LogEvery: time.Second}
	for range 1000 {
		th.Failed(from("10.0.0.9:1"), "invalid_token")
	}
	now = now.Add(time.Second)
	th.Failed(from("10.0.0.9:1"), "invalid_token")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 4 {
		t.Fatalf("%d log lines, want 4:\n%s", len(lines), buf.String())
	}
	for _, want := range []string{"remote=10.0.0.9:1", "listener=discovery", "suppressed=997", "reason=invalid_token"} {
		if !strings.Contains(lines[3], want) {
			t.Errorf("last line %q lacks %q", lines[3], want)
		}
	}
}

func TestLoginThrottleNil(t *testing.T) {
	var th *httpx.LoginThrottle
	th.Failed(from("10.0.0.1:1"), "x")
	if th.Wait(from("10.0.0.1:1")) != 0 || th.Addresses() != 0 {
		t.Error("a nil throttle throttles")
	}
}
