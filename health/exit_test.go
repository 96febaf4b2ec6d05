package health

import (
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
	"github.com/proxy-operator/proxy-operator/health/geoip"
	"github.com/proxy-operator/proxy-operator/health/geoip/geoiptest"
	"github.com/proxy-operator/proxy-operator/internal/fleet"
	"github.com/proxy-operator/proxy-operator/internal/verdict"
	"github.com/proxy-operator/proxy-operator/providers/mock"
)

func TestParseEcho(t *testing.T) {
	for _, tc := range []struct {
		name, body, want string
		bad              bool
	}{
		{name: "text", body: "203.0.113.7\n", want: "203.0.113.7"},
		{name: "ours as JSON", body: `{"ip":"2001:db8::1"}`, want: "2001:db8::1"},
		{name: "httpbin origin with a chain", body: `{"origin": "198.51.100.2, 10.0.0.1"}`, want: "198.51.100.2"},
		{name: "ip-api query", body: `{"status":"success","query":"192.0.2.9"}`, want: "192.0.2.9"},
		{name: "mapped ipv4", body: "::ffff:192.0.2.1", want: "192.0.2.1"},
		{name: "empty", body: "  ", bad: true},
		{name: "html", body: "<html>blocked</html>", bad: true},
		{name: "JSON without address", body: `{"hello":"world"}`, bad: true},
		{name: "broken JSON", body: `{"ip":`, bad: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseEcho([]byte(tc.body))
			if tc.bad {
				if err == nil {
					t.Fatalf("ParseEcho(%q) = %s, want an error", tc.body, got)
				}
				return
			}
			if err != nil || got.String() != tc.want {
				t.Fatalf("ParseEcho(%q) = %s, %v; want %s", tc.body, got, err, tc.want)
			}
		})
	}
}

// echoServer serves EchoHandler on 127.0.0.1 and returns its URL.
func echoServer(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(EchoHandler())
	t.Cleanup(srv.Close)
	return srv.URL + "/ip"
}

func TestEchoHandlerAnswersTheConnectionsAddress(t *testing.T) {
	url := echoServer(t)
	for _, accept := range []string{"", "application/json"} {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		req.Header.Set("Accept", accept)
		// A header claiming another address must not be believed.
		req.Header.Set("X-Forwarded-For", "198.51.100.1")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var body [256]byte
		n, _ := res.Body.Read(body[:])
		res.Body.Close()
		got, err := ParseEcho(body[:n])
		if err != nil || got.String() != "127.0.0.1" {
			t.Errorf("Accept %q: echo said %q (%v), want 127.0.0.1", accept, body[:n], err)
		}
	}
}

// mockProxy runs a real mock forward proxy on addr (a 127.x address of its own).
func mockProxy(t *testing.T, addr string, cfg mock.ForwardConfig) string {
	t.Helper()
	stop, err := mock.ServeForwardProxyWith(addr, cfg)
	if err != nil {
		t.Skipf("cannot listen on %s (loopback aliases): %v", addr, err)
	}
	t.Cleanup(stop)
	return addr
}

// freePort is a port free on 127.0.0.1; the 127.0.6.x proxies use it too (nothing else there).
func freePort(t *testing.T) string {
	t.Helper()
	_, port, _ := net.SplitHostPort(closedAddr(t))
	return port
}

// waitExit polls until the verdict on key has an exit, and returns it.
func waitExit(t *testing.T, s *Scheduler, key string, ok func(verdict.Exit) bool) verdict.Exit {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var got verdict.Health
	for time.Now().Before(deadline) {
		if got = s.Health(key); got.Exit.IP != "" && ok(got.Exit) {
			return got.Exit
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("exit of %s: got %+v", key, got.Exit)
	return verdict.Exit{}
}

func anyExit(verdict.Exit) bool { return true }

// TestExitThroughMockProxies runs real mock proxies, each dialling out from its own 127.x
// address (one from another address, a leak), checks their exits against the operator's echo
// and a country/ASN database built with MaxMind's writer, and verifies each Proxy's spec.
func TestExitThroughMockProxies(t *testing.T) {
	echo := echoServer(t)
	dir := t.TempDir()
	countryDB, asnDB := filepath.Join(dir, "c.mmdb"), filepath.Join(dir, "a.mmdb")
	geoiptest.WriteCountry(t, countryDB,
		geoiptest.Network{CIDR: "127.0.6.0/28", Country: "US"},
		geoiptest.Network{CIDR: "127.0.6.16/28", Country: "DE"})
	geoiptest.WriteASN(t, asnDB, geoiptest.Network{CIDR: "127.0.6.0/24", ASN: 64500})
	geo, err := geoip.Open(geoip.Config{CountryPath: countryDB, ASNPath: asnDB})
	if err != nil {
		t.Fatal(err)
	}

	port := freePort(t)
	at := func(ip string) string { return net.JoinHostPort(ip, port) }
	good := mockProxy(t, at("127.0.6.1"), mock.ForwardConfig{})
	leaky := mockProxy(t, at("127.0.6.2"), mock.ForwardConfig{EgressIP: "127.0.6.9"})
	wrongGeo := mockProxy(t, at("127.0.6.17"), mock.ForwardConfig{})
	unknown := mockProxy(t, at("127.0.6.200"), mock.ForwardConfig{})
	external := mockProxy(t, at("127.0.6.3"), mock.ForwardConfig{})
	externalOK := mockProxy(t, at("127.0.6.4"), mock.ForwardConfig{})

	verifyGeo := &v1.VerifySpec{CountryAttribute: "geo", ASNAttribute: "asn"}
	managed := func(key, addr string, geoAttr string) fleet.Proxy {
		p := proxyAt(t, key, addr, echo, 10, 10, 1, 1)
		p.Mode = v1.ModeManaged
		p.Attributes = map[string]string{"geo": geoAttr, "asn": "AS64500"}
		p.Verify = verifyGeo
		return p
	}
	ext := func(key, addr string, expected ...string) fleet.Proxy {
		p := proxyAt(t, key, addr, echo, 10, 10, 1, 1)
		p.Mode = v1.ModeExternal
		p.Verify = &v1.VerifySpec{ExpectedExit: expected}
		return p
	}
	view := fleet.New(time.Now, 0)
	view.Upsert(managed("ns/good", good, "us"))
	view.Upsert(managed("ns/leaky", leaky, "us"))
	view.Upsert(managed("ns/wronggeo", wrongGeo, "us"))
	view.Upsert(managed("ns/unknown", unknown, "us"))
	view.Upsert(ext("ns/external", external, "203.0.113.0/24"))
	view.Upsert(ext("ns/external-ok", externalOK, "127.0.6.4"))

	s := startScheduler(t, view, NewHTTPProber(nil), nil, func(s *Scheduler) {
		s.exitURL, s.geo = echo, geo
	})
	for _, tc := range []struct {
		key      string
		want     verdict.Exit
		mismatch string // substring; "" wants none
	}{
		{key: "ns/good", want: verdict.Exit{IP: "127.0.6.1", Country: "US", ASN: 64500}},
		{key: "ns/leaky", want: verdict.Exit{IP: "127.0.6.9", Country: "US", ASN: 64500}, mismatch: "exit 127.0.6.9 differs from the proxy's IP 127.0.6.2"},
		{key: "ns/wronggeo", want: verdict.Exit{IP: "127.0.6.17", Country: "DE", ASN: 64500}, mismatch: "geo=us but exit 127.0.6.17 is in DE"},
		{key: "ns/unknown", want: verdict.Exit{IP: "127.0.6.200", ASN: 64500}, mismatch: "geo=us cannot be verified: exit 127.0.6.200 is not in the country database"},
		{key: "ns/external", want: verdict.Exit{IP: "127.0.6.3", Country: "US", ASN: 64500}, mismatch: "outside expectedExit 203.0.113.0/24"},
		{key: "ns/external-ok", want: verdict.Exit{IP: "127.0.6.4", Country: "US", ASN: 64500}},
	} {
		t.Run(tc.key, func(t *testing.T) {
			got := waitExit(t, s, tc.key, anyExit)
			if got.IP != tc.want.IP || got.Country != tc.want.Country || got.ASN != tc.want.ASN {
				t.Errorf("exit = %+v, want %+v", got, tc.want)
			}
			if tc.mismatch == "" && got.Mismatch != "" || !strings.Contains(got.Mismatch, tc.mismatch) {
				t.Errorf("mismatch = %q, want %q", got.Mismatch, tc.mismatch)
			}
		})
	}

	// Fixing the spec clears the mismatch at once, without another exit check.
	fixed := managed("ns/wronggeo", wrongGeo, "DE")
	view.Upsert(fixed)
	waitExit(t, s, "ns/wronggeo", func(e verdict.Exit) bool { return e.Mismatch == "" })
}

// TestExitThroughRealSquid checks the exit through a real Squid that sends its traffic out
// from another address (tcp_outgoing_address) and adds X-Forwarded-For, as Squid does by
// default: the check reports the address the connection came from, and flags the leak.
func TestExitThroughRealSquid(t *testing.T) {
	echo := echoServer(t)
	_, echoPort, _ := net.SplitHostPort(strings.TrimPrefix(strings.TrimSuffix(echo, "/ip"), "http://"))
	straight := startSquid(t, echoPort)
	leaky := startSquid(t, echoPort, "tcp_outgoing_address 127.0.0.2")

	view := fleet.New(time.Now, 0)
	for key, addr := range map[string]string{"ns/straight": straight, "ns/leaky": leaky} {
		p := proxyAt(t, key, addr, echo, 20, 20, 2, 1)
		p.Mode = v1.ModeManaged
		view.Upsert(p)
	}
	s := startScheduler(t, view, NewHTTPProber(nil), nil, func(s *Scheduler) { s.exitURL = echo })
	if got := waitExit(t, s, "ns/straight", anyExit); got.IP != "127.0.0.1" || got.Mismatch != "" {
		t.Errorf("straight Squid: exit %+v, want 127.0.0.1 and no mismatch", got)
	}
	if got := waitExit(t, s, "ns/leaky", anyExit); got.IP != "127.0.0.2" || !strings.Contains(got.Mismatch, "differs from the proxy's IP 127.0.0.1") {
		t.Errorf("leaky Squid: exit %+v, want 127.0.0.2 flagged", got)
	}
	if h := s.Health("ns/leaky"); h.State != verdict.Healthy {
		t.Errorf("a leaking proxy still works: health %s, want Healthy (the mismatch is apart)", h.State)
	}
}

// TestExitCheckPacing: one exit check per ExitInterval, not one per probe.
func TestExitCheckPacing(t *testing.T) {
	echo := echoServer(t)
	var probes, exits atomic.Int64
	view := fleet.New(time.Now, 0)
	view.Upsert(proxyAt(t, "ns/a", mockProxy(t, "127.0.6.30:"+freePort(t), mock.ForwardConfig{}), echo, 1, 1, 1, 1))
	startScheduler(t, view, NewHTTPProber(nil), nil, func(s *Scheduler) {
		s.exitURL, s.exitInterval = echo, time.Hour
		s.onResult = func(_ string, _, _ time.Time, r Result) {
			probes.Add(1)
			if r.Exit.IsValid() {
				exits.Add(1)
			}
		}
	})
	waitUntil(t, "five probes", func() bool { return probes.Load() >= 5 })
	if n := exits.Load(); n != 1 {
		t.Errorf("exit checks in 5+ probes with a 1h interval: %d, want 1", n)
	}
}
