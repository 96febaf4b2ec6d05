package hooks_test

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/proxy-operator/proxy-operator/server/hooks"
)

// TestBigBodyLane is decision 0240: with the one lane held by a big body still arriving, a
// second big body (declared, or without a Content-Length) gets 429 with Retry-After after
// BigBodyWait and is counted (so does one declared over the limit), while a small sync is answered at once; the first body, once
// complete, is answered, and the lane is free again afterwards. Without the lane the second
// big body would be read and answered 200.
func TestBigBodyLane(t *testing.T) {
	h := newHooks(t, newMock(t))
	reg := prometheus.NewRegistry()
	h.Registerer = reg
	h.BigBodyLanes = 1
	h.BigBodyWait = 100 * time.Millisecond
	srv := httptest.NewServer(h.Handler())
	defer srv.Close()

	small := fixtureBody(t, "sync/managed-ready-steady")
	// JSON allows trailing whitespace: the same sync, over the threshold.
	big := append(append([]byte{}, small...), bytes.Repeat([]byte(" "), hooks.DefaultBigBodyBytes+1)...)

	// The lane's occupant: a big body of which half has arrived.
	c, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	half := len(big) / 2
	if _, err := io.WriteString(c, "POST /sync HTTP/1.1\r\nHost: x\r\nContent-Length: "+itoa(len(big))+"\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(big[:half]); err != nil {
		t.Fatal(err)
	}
	for h.Budget.InUse() == 0 { // reading it: the lane is held
		time.Sleep(time.Millisecond)
	}

	post := func(what string, body io.Reader) *http.Response {
		t.Helper()
		res, err := http.Post(srv.URL+"/sync", "application/json", body)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res
	}
	if res := post("small sync beside the lane", bytes.NewReader(small)); res.StatusCode != http.StatusOK {
		t.Fatalf("small sync while the lane is held: %d, want 200", res.StatusCode)
	}
	for _, tc := range []struct {
		name string
		body io.Reader
	}{
		{"declared big", bytes.NewReader(big)},
		// Not a *bytes.Reader: sent chunked, no Content-Length, so counted as big.
		{"undeclared", io.MultiReader(bytes.NewReader(small))},
	} {
		res := post(tc.name, tc.body)
		if res.StatusCode != http.StatusTooManyRequests || res.Header.Get("Retry-After") == "" {
			t.Fatalf("%s body while the lane is held: %d Retry-After %q, want 429 with Retry-After", tc.name, res.StatusCode, res.Header.Get("Retry-After"))
		}
	}
	// Declared over the 4 MiB limit: 413 at once once it has a slot, but it waits for one too.
	over, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer over.Close()
	if _, err := io.WriteString(over, "POST /sync HTTP/1.1\r\nHost: x\r\nContent-Length: "+itoa(hooks.DefaultMaxBodyBytes+1)+"\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	if r, err := http.ReadResponse(bufioReader(over), nil); err != nil || r.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("body declared over the limit while the lane is held: %v %v, want 429", r, err)
	}
	if got := gather(t, reg, "proxy_operator_hook_shed_total", "big_body"); got != 3 {
		t.Errorf("shed big_body = %v, want 3", got)
	}

	if _, err := c.Write(big[half:]); err != nil {
		t.Fatal(err)
	}
	r, err := http.ReadResponse(bufioReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	if r.StatusCode != http.StatusOK {
		t.Fatalf("the lane's occupant: %d, want 200", r.StatusCode)
	}
	if res := post("big after the lane freed", bytes.NewReader(big)); res.StatusCode != http.StatusOK {
		t.Errorf("big body after the lane freed: %d, want 200", res.StatusCode)
	}
}
