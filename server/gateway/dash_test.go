package gateway_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/proxy-operator/proxy-operator/server/gateway"
)

// TestDashInsideAValueAsCurlSendsIt (issue 30): curl and requests percent-decode a proxy URL's
// userinfo once before they Basic-encode it, so `-x http://pool-eu%252Dwest:TOKEN@gw` reaches the
// gateway as `pool-eu%2Dwest:TOKEN` and `-x http://pool-eu%2Dwest:TOKEN@gw` as
// `pool-eu-west:TOKEN` (both read off the wire from curl 8 and requests 2). The gateway decodes
// the credential once: `%2D` in it is a dash inside a value and selects pool=eu-west; `%252D` in
// it is the text "%2D" (no second decoding); the decoded URL form is three parts, refused with
// a 407 that says to write %252D in a proxy URL, not the %2D the client has already decoded.
func TestDashInsideAValueAsCurlSendsIt(t *testing.T) {
	e := newEnv(t, 0, nil)
	e.addUpstream(t, "crawl/eu", "127.0.0.21", map[string]string{"pool": "eu-west"}, 100)
	s := newSite(t, nil)
	for _, method := range []string{http.MethodGet, http.MethodConnect} {
		// curl -x 'http://pool-eu%252Dwest:TOKEN@gw' sends this header.
		status, hdr, body := rawProxy(t, e.addr, method, s.addr, "Basic "+basic64("pool-eu%2Dwest:"+token))
		if status != http.StatusOK {
			t.Errorf("%s with pool-eu%%2Dwest in the credential: %d %q, want 200 through the eu-west upstream", method, status, body)
		} else if method == http.MethodGet && !strings.Contains(hdr, gateway.HeaderProxy+": crawl/eu") {
			t.Errorf("GET with pool-eu%%2Dwest: head %q, want it served by crawl/eu", hdr)
		}
		// curl -x 'http://pool-eu%2Dwest:TOKEN@gw' sends this one: the client decoded the %2D.
		status, _, body = rawProxy(t, e.addr, method, s.addr, "Basic "+basic64("pool-eu-west:"+token))
		if status != http.StatusProxyAuthRequired || !strings.Contains(body, "%252D") {
			t.Errorf("%s with pool-eu-west: %d %q, want 407 saying to write %%252D in a proxy URL", method, status, body)
		}
		// Decoded once, not twice: %252D in the credential is the text %2D, which no Proxy has.
		status, _, body = rawProxy(t, e.addr, method, s.addr, "Basic "+basic64("pool-eu%252Dwest:"+token))
		if status != http.StatusNotFound {
			t.Errorf("%s with pool-eu%%252Dwest in the credential: %d %q, want 404 (pool \"eu%%2Dwest\" matches nothing)", method, status, body)
		}
	}
	// Go's own client sends url.UserPassword's username as it is: the credential's form.
	resp, _ := get(t, e.client("pool-eu%2Dwest", token), s.url("/"))
	if resp.StatusCode != http.StatusOK {
		t.Errorf("Go client with username pool-eu%%2Dwest: %d, want 200", resp.StatusCode)
	}
}
