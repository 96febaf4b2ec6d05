package gateway_test

import (
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/proxy-operator/proxy-operator/server/gateway"
)

// TestUpstreamAddressNeverReachesTheClient (issue 30): when the upstream answers for itself (a
// mock proxy's relay failure, as Squid's error pages do), its page names its own address (the
// mock dials from it: "dial tcp 127.0.0.11:0->..."). The client gets the gateway's own answer
// instead, with the upstream's status and marker, naming the upstream by its Proxy id; no
// answer, plain or CONNECT, shows the upstream's address, port or credential.
func TestUpstreamAddressNeverReachesTheClient(t *testing.T) {
	e := newEnv(t, 1, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String() // a site that refuses connections
	ln.Close()
	upIP := e.ups["crawl/p1"]
	var upPort string
	for _, p := range e.view.List() {
		if p.Key == "crawl/p1" {
			upPort = strconv.Itoa(int(p.Port))
		}
	}
	if upIP == "" || upPort == "" {
		t.Fatal("no upstream address to look for")
	}
	secrets := []string{upIP, ":" + upPort, upstreamCreds("crawl/p1").Password, token}
	for _, method := range []string{http.MethodGet, http.MethodConnect} {
		status, hdr, body := rawProxy(t, e.addr, method, dead, "Basic "+basic64("pool-web:"+token))
		if status != http.StatusBadGateway {
			t.Errorf("%s to a dead site: %d %q, want 502", method, status, body)
		}
		for _, s := range secrets {
			if strings.Contains(body, s) || strings.Contains(hdr, s) {
				t.Errorf("%s: the answer shows %q:\n%s\n%s", method, s, hdr, body)
			}
		}
		if method == http.MethodGet {
			if !strings.Contains(body, "crawl/p1") || !strings.Contains(hdr, gateway.HeaderProxy+": crawl/p1") {
				t.Errorf("GET: the answer does not name the upstream by its id:\n%s\n%s", hdr, body)
			}
			if !strings.Contains(hdr, "X-Mock-Proxy-Error: relay") {
				t.Errorf("GET: the upstream's marker is gone, a client cannot tell it from the site's answer:\n%s", hdr)
			}
		}
	}
}
