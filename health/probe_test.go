package health

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/proxy-operator/proxy-operator/providers"
	"github.com/proxy-operator/proxy-operator/providers/mock"
)

func TestHTTPProber(t *testing.T) {
	target := newTLSTarget(t)
	proxy := newStubProxy(t)
	deniedProxy := newStubProxy(t)
	deniedProxy.deny.Store(true)
	gone := closedAddr(t)
	hole := blackHole(t)
	prober := NewHTTPProber(trusting(target))
	defer prober.Close()

	type outcome struct {
		OK     bool
		Status int
		Kind   string
	}
	tests := []struct {
		name   string
		proxy  string
		url    string
		status int // the target's answer
		want   outcome
	}{
		{"healthy through a CONNECT tunnel", proxy.addr(), target.url(), http.StatusNoContent, outcome{OK: true, Status: 204}},
		{"200 is expected too", proxy.addr(), target.url(), http.StatusOK, outcome{OK: true, Status: 200}},
		{"unexpected status", proxy.addr(), target.url(), http.StatusServiceUnavailable, outcome{Status: 503, Kind: "status_503"}},
		{"target down", proxy.addr(), "https://" + gone + "/", http.StatusNoContent, outcome{Kind: KindUpstream}},
		{"proxy denies CONNECT", deniedProxy.addr(), target.url(), http.StatusNoContent, outcome{Kind: KindConnectDenied}},
		{"proxy port closed", gone, target.url(), http.StatusNoContent, outcome{Kind: KindRefused}},
		{"proxy accepts and never answers", hole, target.url(), http.StatusNoContent, outcome{Kind: KindTimeout}},
		{"no proxy address", "", target.url(), http.StatusNoContent, outcome{Kind: KindBadURL}},
		{"untrusted target certificate", proxy.addr(), untrustedTarget(t), http.StatusNoContent, outcome{Kind: KindTLS}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			target.status.Store(int64(tc.status))
			timeout := 500 * time.Millisecond
			r := prober.Probe(context.Background(), Target{Proxy: tc.proxy, URL: tc.url, Timeout: timeout, Expected: []int32{200, 204}})
			got := outcome{OK: r.OK, Status: r.Status, Kind: r.Kind}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("probe mismatch (-want +got):\n%s\nerr: %v", diff, r.Err)
			}
			if r.OK != (r.Err == nil) {
				t.Errorf("OK %v with err %v", r.OK, r.Err)
			}
			if tc.want.Kind == KindTimeout && r.Latency < timeout {
				t.Errorf("timeout after %v, before the %v timeout", r.Latency, timeout)
			}
		})
	}
}

func TestHTTPProberNeverReusesConnections(t *testing.T) {
	target := newTLSTarget(t)
	proxy := newStubProxy(t)
	prober := NewHTTPProber(trusting(target))
	defer prober.Close()
	const n = 3
	for range n {
		if r := prober.Probe(context.Background(), Target{Proxy: proxy.addr(), URL: target.url(), Timeout: 5 * time.Second, Expected: []int32{204}}); !r.OK {
			t.Fatalf("probe failed: %s: %v", r.Kind, r.Err)
		}
	}
	// Every probe must open its own tunnel: a reused one could hide a proxy that died.
	if got := proxy.connect.Load(); got != n {
		t.Errorf("CONNECTs: got %d, want %d", got, n)
	}
}

// TestHTTPProberAuthenticates: a proxy demanding a credential is probed with it, through a
// CONNECT tunnel and on a forwarded request; without it (or with a wrong one) the probe fails
// as proxy_auth, not as some other failure.
func TestHTTPProberAuthenticates(t *testing.T) {
	tlsTarget := newTLSTarget(t)
	plain := newPlainTarget(t)
	addr := closedAddr(t)
	creds := &providers.Credentials{Username: "crawler", Password: "s3cret-pass"}
	stop, err := mock.ServeForwardProxy(addr, creds)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	prober := NewHTTPProber(trusting(tlsTarget))
	defer prober.Close()
	for _, url := range []string{tlsTarget.url(), plain} {
		for _, tc := range []struct {
			name  string
			creds *providers.Credentials
			kind  string
		}{
			{"none", nil, KindProxyAuth},
			{"wrong", &providers.Credentials{Username: "crawler", Password: "nope"}, KindProxyAuth},
			{"right", creds, ""},
		} {
			r := prober.Probe(context.Background(), Target{Proxy: addr, URL: url, Timeout: 5 * time.Second,
				Expected: []int32{204}, Credentials: tc.creds})
			if r.Kind != tc.kind || r.OK != (tc.kind == "") {
				t.Errorf("%s via %s: kind %q ok %v (%v), want kind %q", tc.name, url, r.Kind, r.OK, r.Err, tc.kind)
			}
		}
	}
}

func TestHTTPProberThroughMockForwardProxy(t *testing.T) {
	target := newTLSTarget(t)
	// ServeForwardProxy does not report its address, so it listens on a port just seen free.
	addr := closedAddr(t)
	stop, err := mock.ServeForwardProxy(addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	prober := NewHTTPProber(trusting(target))
	defer prober.Close()
	r := prober.Probe(context.Background(), Target{Proxy: addr, URL: target.url(), Timeout: 5 * time.Second, Expected: []int32{204}})
	if !r.OK {
		t.Fatalf("probe through the mock forward proxy: %s: %v", r.Kind, r.Err)
	}
	// And a plain-HTTP probe URL goes through its absolute-URI path.
	plain := newPlainTarget(t)
	r = prober.Probe(context.Background(), Target{Proxy: addr, URL: plain, Timeout: 5 * time.Second, Expected: []int32{204}})
	if !r.OK {
		t.Fatalf("http:// probe through the mock forward proxy: %s: %v", r.Kind, r.Err)
	}
}
