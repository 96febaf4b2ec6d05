package health

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/internal/netpolicy"
)

// TestHTTPProberEgressPolicy is the SSRF through the probe (issue 10, item 6): the operator
// must not connect to a proxy address the policy denies, whether it is given as an address
// or as a name that resolves to one, and the proxy must see no connection at all.
func TestHTTPProberEgressPolicy(t *testing.T) {
	target := newTLSTarget(t)
	proxy := newStubProxy(t)
	_, port, _ := net.SplitHostPort(proxy.addr())
	deny, err := netpolicy.New(netpolicy.Config{})
	if err != nil {
		t.Fatal(err)
	}
	allow, err := netpolicy.New(netpolicy.Config{AllowLoopback: true})
	if err != nil {
		t.Fatal(err)
	}
	own, err := netpolicy.New(netpolicy.Config{AllowLoopback: true, OwnListeners: []string{proxy.addr()}})
	if err != nil {
		t.Fatal(err)
	}
	mockOnly, err := netpolicy.New(netpolicy.Config{LoopbackProviders: []string{"mock"}})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		pol      *netpolicy.Policy
		proxy    string
		dest     netpolicy.Dest
		wantKind string
	}{
		{"loopback address denied", deny, proxy.addr(), netpolicy.Dest{Provider: "gcp"}, KindEgressDenied},
		{"name resolving to loopback denied", deny, net.JoinHostPort("localhost", port), netpolicy.Dest{External: true}, KindEgressDenied},
		{"the operator's own listener denied", own, proxy.addr(), netpolicy.Dest{}, KindEgressDenied},
		{"loopback allowed by config", allow, proxy.addr(), netpolicy.Dest{External: true}, ""},
		{"loopback allowed for the mock provider", mockOnly, proxy.addr(), netpolicy.Dest{Provider: "mock"}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			prober := NewHTTPProber(trusting(target), WithEgressPolicy(tc.pol))
			defer prober.Close()
			before := proxy.connect.Load()
			r := prober.Probe(context.Background(), Target{Proxy: tc.proxy, Dest: tc.dest, URL: target.url(), Timeout: 5 * time.Second, Expected: []int32{200, 204}})
			if r.Kind != tc.wantKind {
				t.Fatalf("probe kind %q (err %v), want %q", r.Kind, r.Err, tc.wantKind)
			}
			if got := proxy.connect.Load() - before; tc.wantKind != "" && got != 0 {
				t.Errorf("proxy saw %d CONNECTs from a denied probe", got)
			}
		})
	}
}
