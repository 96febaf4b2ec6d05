package discovery_test

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestUnauthenticatedTrickledBodyAnsweredAtOnce: a POST without a token that declares a body
// and sends a few bytes of it gets its 401 as soon as its head is read, and the connection is
// closed; net/http would otherwise read the rest of the body first, for as long as the caller
// trickles it (issue 30: 401 only after 10 s).
func TestUnauthenticatedTrickledBodyAnsweredAtOnce(t *testing.T) {
	f := newDiscFixture(t, discOpts{token: discToken})
	c, err := net.Dial("tcp", strings.TrimPrefix(f.srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := fmt.Fprintf(c, "POST /v1/leases HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{\"sel"); err != nil {
		t.Fatal(err)
	}
	// An upper bound, not a wait: the answer comes at once or the test fails.
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer while the body trickles: %v", err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusUnauthorized || !res.Close {
		t.Errorf("answer %d, close %v; want 401 and close", res.StatusCode, res.Close)
	}
}

// TestFailedLoginsThrottled: past 10 failures from one address, every request from it gets
// 429 with Retry-After, the right token included; another address is served.
func TestFailedLoginsThrottled(t *testing.T) {
	f := newDiscFixture(t, discOpts{token: discToken})
	for i := range 11 {
		if r := f.do(t, "GET", "/v1/proxies", "wrong-token-7d1e0b5a9c", ""); r.code != http.StatusUnauthorized {
			t.Fatalf("failure %d: %d, want 401", i+1, r.code)
		}
	}
	r := f.do(t, "GET", "/v1/proxies", discToken, "")
	if r.code != http.StatusTooManyRequests || r.header.Get("Retry-After") != "1" {
		t.Errorf("after 11 failures: %d Retry-After %q, want 429 and 1", r.code, r.header.Get("Retry-After"))
	}
	other := &http.Client{Transport: &http.Transport{DialContext: (&net.Dialer{
		LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}).DialContext}}
	req, _ := http.NewRequest("GET", f.srv.URL+"/v1/proxies", nil)
	req.Header.Set("Authorization", "Bearer "+discToken)
	res, err := other.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Errorf("another address: %d, want 200", res.StatusCode)
	}
	if got := strings.Count(f.logs.String(), "discovery request unauthorized"); got != 5 {
		t.Errorf("%d log lines for 11 failures, want 5 (sampled)", got)
	}
}
