package vendortest

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/proxy-operator/proxy-operator/internal/clocktest"
)

func TestParseUsername(t *testing.T) {
	tests := []struct {
		name, user, customer, zone string
		want                       Target
		wantErr                    bool
	}{
		{name: "oxylabs bare", user: "customer-acme", customer: "acme", want: Target{Format: Oxylabs}},
		{name: "oxylabs full", user: "customer-acme-cc-us-city-london-sessid-a1-sesstime-10", customer: "acme",
			want: Target{Format: Oxylabs, Country: "US", City: "london", Session: "a1", Lifetime: 10 * time.Minute}},
		{name: "bright data full", user: "brd-customer-hl_1-zone-resi-country-us-asn-7922-session-x9", customer: "hl_1", zone: "resi",
			want: Target{Format: BrightData, Country: "US", ASN: "7922", Session: "x9"}},
		{name: "oxylabs key of bright data", user: "customer-acme-session-x", wantErr: true},
		{name: "bright data without zone", user: "brd-customer-x-country-us", wantErr: true},
		{name: "odd pairs", user: "customer-acme-cc", wantErr: true},
		{name: "bad sesstime", user: "customer-acme-sesstime-0", wantErr: true},
		{name: "neither", user: "user-acme", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			customer, zone, got, err := ParseUsername(tt.user)
			if (err != nil) != tt.wantErr {
				t.Fatalf("ParseUsername(%q) error %v, want error %v", tt.user, err, tt.wantErr)
			}
			if tt.wantErr {
				return
			}
			if customer != tt.customer || zone != tt.zone {
				t.Errorf("account %q/%q, want %q/%q", customer, zone, tt.customer, tt.zone)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("target mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// site answers every request with the address it came from.
func site(t *testing.T) string {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		_, _ = io.WriteString(w, host)
	}))
	t.Cleanup(s.Close)
	return s.URL
}

func start(t *testing.T, clock *clocktest.Clock) *Vendor {
	t.Helper()
	v, err := Start(Config{Customer: "acme", Zone: "resi", Password: "pw", Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(v.Close)
	return v
}

// get fetches target through v as user and returns what the site saw as the source address.
func get(t *testing.T, v *Vendor, user, pass, target string) (int, string) {
	t.Helper()
	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: v.Addr(), User: url.UserPassword(user, pass)})}}
	defer c.CloseIdleConnections()
	resp, err := c.Get(target)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == http.StatusOK && resp.Header.Get(HeaderExit) != string(b) {
		t.Errorf("%s %q, the site saw %q", HeaderExit, resp.Header.Get(HeaderExit), b)
	}
	return resp.StatusCode, string(b)
}

func TestSessionsStickAndExpire(t *testing.T) {
	for _, f := range []struct {
		name string
		user func(session string) string
		life time.Duration
	}{
		{"oxylabs", func(s string) string { return "customer-acme-cc-us-sessid-" + s + "-sesstime-5" }, 5 * time.Minute},
		{"bright data", func(s string) string { return "brd-customer-acme-zone-resi-country-us-session-" + s }, 10 * time.Minute},
	} {
		t.Run(f.name, func(t *testing.T) {
			clock := clocktest.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
			v := start(t, clock)
			target := site(t)
			_, a1 := get(t, v, f.user("a"), "pw", target)
			_, a2 := get(t, v, f.user("a"), "pw", target)
			_, b := get(t, v, f.user("b"), "pw", target)
			if !strings.HasPrefix(a1, "127.0.200.") {
				t.Fatalf("session a left from %s, want 127.0.200.x", a1)
			}
			if a1 != a2 {
				t.Errorf("session a left from %s, then %s: want one exit", a1, a2)
			}
			if b == a1 {
				t.Errorf("sessions a and b both left from %s", a1)
			}
			clock.Advance(f.life - time.Second)
			if _, a3 := get(t, v, f.user("a"), "pw", target); a3 != a1 {
				t.Errorf("before its lifetime, session a left from %s, want %s", a3, a1)
			}
			clock.Advance(time.Second)
			if _, a4 := get(t, v, f.user("a"), "pw", target); a4 == a1 {
				t.Errorf("after its lifetime, session a still left from %s", a4)
			}
		})
	}
}

func TestRefusesBadCredentials(t *testing.T) {
	v := start(t, clocktest.New(time.Now()))
	target := site(t)
	for _, c := range []struct{ user, pass string }{
		{"customer-acme", "wrong"},
		{"customer-other", "pw"},
		{"brd-customer-acme-zone-other", "pw"},
		{"acme", "pw"},
	} {
		if code, _ := get(t, v, c.user, c.pass, target); code != http.StatusProxyAuthRequired {
			t.Errorf("%s:%s got %d, want 407", c.user, c.pass, code)
		}
	}
	if v.Refused() != 4 || v.Usage().Requests != 0 {
		t.Errorf("refused %d, requests %d; want 4 and 0", v.Refused(), v.Usage().Requests)
	}
}

func TestCountsBytes(t *testing.T) {
	v := start(t, clocktest.New(time.Now()))
	body := strings.Repeat("x", 1000)
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, body)
	}))
	defer s.Close()
	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: v.Addr(), User: url.UserPassword("customer-acme", "pw")})}}
	defer c.CloseIdleConnections()
	resp, err := c.Post(s.URL, "text/plain", strings.NewReader(strings.Repeat("y", 300)))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()

	// A tunnel: 5 bytes out, the site's raw HTTP answer in.
	conn, err := net.Dial("tcp", v.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	host := strings.TrimPrefix(s.URL, "http://")
	fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\nHost: %s\r\nProxy-Authorization: Basic Y3VzdG9tZXItYWNtZTpwdw==\r\n\r\n", host, host)
	br := bufio.NewReader(conn)
	tr, err := http.ReadResponse(br, nil)
	if err != nil || tr.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT: %v %v", tr, err)
	}
	req := "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
	_, _ = io.WriteString(conn, req)
	raw, _ := io.ReadAll(br)
	conn.Close()
	var got Usage
	deadline := time.Now().Add(5 * time.Second)
	want := Usage{BytesIn: 1000 + int64(len(raw)), BytesOut: 300 + int64(len(req)), Requests: 2}
	for got = v.Usage(); got != want && time.Now().Before(deadline); got = v.Usage() {
		time.Sleep(10 * time.Millisecond) // the tunnel's counts land as its copies end
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("usage mismatch (-want +got):\n%s", diff)
	}
}
