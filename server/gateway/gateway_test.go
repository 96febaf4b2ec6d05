package gateway_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/internal/verdict"
	"github.com/proxy-operator/proxy-operator/lease"
	"github.com/proxy-operator/proxy-operator/server/gateway"
	"github.com/proxy-operator/proxy-operator/server/httpx"
)

func TestForwardThroughLeasedUpstream(t *testing.T) {
	e := newEnv(t, 1, nil)
	s := newSite(t, nil)
	req, _ := http.NewRequest(http.MethodGet, s.url("/page"), nil)
	req.Header.Set("Connection", "X-Hop")
	req.Header.Set("X-Hop", "must not reach the site")
	req.Header.Set("X-Kept", "yes")
	resp, err := e.client("", token).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != "hello from the site\n" {
		t.Fatalf("got %d %q, want 200 and the site's page", resp.StatusCode, body)
	}
	if got := resp.Header.Get(gateway.HeaderProxy); got != "crawl/p1" {
		t.Errorf("%s = %q, want crawl/p1", gateway.HeaderProxy, got)
	}
	if got := resp.Header.Get(gateway.HeaderTries); got != "1" {
		t.Errorf("%s = %q, want 1", gateway.HeaderTries, got)
	}
	if got := s.froms(); len(got) != 1 || got[0] != e.ups["crawl/p1"] {
		t.Errorf("site saw requests from %v, want one from the upstream %s", got, e.ups["crawl/p1"])
	}
	h := s.headers()[0]
	for _, k := range []string{"Proxy-Authorization", "X-Hop", "Proxy-Connection"} {
		if v := h.Get(k); v != "" {
			t.Errorf("site saw %s: %q, want it stripped", k, v)
		}
	}
	if h.Get("X-Kept") != "yes" {
		t.Errorf("site lost the end-to-end header X-Kept: %v", h)
	}
	for k, vs := range h {
		if strings.Contains(strings.Join(vs, " "), token) || strings.Contains(strings.Join(vs, " "), "pw-of-") {
			t.Errorf("site saw a secret in %s", k)
		}
	}
	waitFor(t, "the request's lease to be released", func() bool { return e.leases(t) == 0 })
}

func TestProxyAuthRefusals(t *testing.T) {
	// Every refusal from one address: the throttle (decision 0257) is set past them.
	e := newEnv(t, 1, func(g *gateway.Gateway) { g.Logins = &httpx.LoginThrottle{Free: 1000} })
	s := newSite(t, nil)
	cases := []struct {
		name, header, want string
	}{
		{"missing", "", "proxy authentication required"},
		{"bearer scheme", "Bearer " + token, "accepts Basic only"},
		{"not base64", "Basic %%%notbase64", "not valid base64"},
		{"no colon", "Basic " + basic64("justonepart"), "not USERNAME:PASSWORD"},
		{"empty password", basicAuth("pool-web", ""), "password is empty"},
		{"wrong token", basicAuth("pool-web", "not-a-token"), "not a valid discovery token"},
		{"read-only token", basicAuth("", readToken), "may read, not lease"},
		{"odd parts", basicAuth("pool-web-geo", token), "want key-value pairs"},
		{"empty key", basicAuth("pool-web--x", token), "empty key at part 3"},
		{"empty pair key", basicAuth("pool-web--eu-a-b", token), "empty key"},
		{"duplicate key", basicAuth("pool-web-pool-api", token), "key pool given twice"},
		{"bad session", basicAuth("session-a$b", token), "want 1 to 128 letters"},
		{"unknown key syntax", basicAuth("po%21ol-web", token), "unknown key"},
		{"bad escape", basicAuth("pool-w%zzeb", token), "bad percent-encoding"},
		{"namespace not granted", basicAuth("ns-other", teamToken), "may not lease in namespace other"},
		{"bad namespace", basicAuth("ns-Team", teamToken), "not a namespace name"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, method := range []string{http.MethodGet, http.MethodConnect} {
				status, hdr, body := rawProxy(t, e.addr, method, s.addr, tc.header)
				if status != http.StatusProxyAuthRequired {
					t.Fatalf("%s: status %d, want 407 (body %s)", method, status, body)
				}
				if !strings.Contains(hdr, "Proxy-Authenticate: Basic realm=") {
					t.Errorf("%s: no Proxy-Authenticate in %q", method, hdr)
				}
				if !strings.Contains(body, tc.want) {
					t.Errorf("%s: body %q does not say %q", method, body, tc.want)
				}
				if strings.Contains(body, token) || strings.Contains(body, readToken) || strings.Contains(body, teamToken) {
					t.Errorf("%s: the answer echoes a token: %q", method, body)
				}
			}
		})
	}
	if got := len(s.froms()); got != 0 {
		t.Errorf("the site saw %d requests from refused callers", got)
	}
	if strings.Contains(e.logs.String(), token) {
		t.Errorf("the log holds a token")
	}
}

func basic64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

// rawProxy sends one request over a raw connection and returns the status, the head and the
// body, so malformed credentials reach the gateway exactly as written.
func rawProxy(t testing.TB, gw, method, siteAddr, auth string) (int, string, string) {
	t.Helper()
	c, err := net.Dial("tcp", gw)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	target := "http://" + siteAddr + "/"
	if method == http.MethodConnect {
		target = siteAddr
	}
	req := fmt.Sprintf("%s %s HTTP/1.1\r\nHost: %s\r\n", method, target, siteAddr)
	if auth != "" {
		req += "Proxy-Authorization: " + auth + "\r\n"
	}
	if _, err := io.WriteString(c, req+"\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: method})
	if err != nil {
		t.Fatal(err)
	}
	var b []byte
	if method != http.MethodConnect || resp.StatusCode != http.StatusOK { // a tunnel has no body to end
		b, _ = io.ReadAll(resp.Body)
	}
	var head strings.Builder
	_ = resp.Header.Write(&head)
	return resp.StatusCode, head.String(), string(b)
}

func TestRateLimitRetriesOnAnotherUpstreamAndCoolsOnlyIt(t *testing.T) {
	e := newEnv(t, 2, nil)
	e.health.SetState("crawl/p1", verdict.Healthy, 1) // the first choice
	limited := e.ups["crawl/p1"]
	s := newSite(t, func(w http.ResponseWriter, r *http.Request, from string) {
		if from == limited {
			w.Header().Set("Retry-After", "120")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		_, _ = io.WriteString(w, "ok")
	})
	other := newSite(t, nil)
	resp, body := get(t, e.client("", token), s.url("/"))
	if resp.StatusCode != http.StatusOK || body != "ok" {
		t.Fatalf("got %d %q, want the page from the second upstream", resp.StatusCode, body)
	}
	if got, want := resp.Header.Get(gateway.HeaderTries), "2"; got != want {
		t.Errorf("tries %s, want %s", got, want)
	}
	if got, want := resp.Header.Get(gateway.HeaderProxy), "crawl/p2"; got != want {
		t.Errorf("proxy %s, want %s", got, want)
	}
	if got := s.froms(); len(got) != 2 || got[0] != limited || got[1] != e.ups["crawl/p2"] {
		t.Errorf("site saw %v, want p1 then p2", got)
	}
	// p1 is cooling for this site only, for the Retry-After the site asked.
	l, err := e.store.Acquire(context.Background(), lease.Request{TTL: time.Minute, Target: s.addr})
	if err != nil {
		t.Fatal(err)
	}
	if l.Proxy.Key != "crawl/p2" {
		t.Errorf("a lease for the limiting site got %s, want crawl/p2 (p1 cooling)", l.Proxy.Key)
	}
	_ = e.store.Release(context.Background(), l.ID)
	if _, err := e.store.Acquire(context.Background(), lease.Request{TTL: time.Minute, Target: s.addr,
		Selector: map[string]string{"pool": "web"}, Namespaces: []string{"crawl"}}); err != nil {
		t.Fatal(err)
	}
	_, err = e.store.Acquire(context.Background(), lease.Request{TTL: time.Minute, Target: s.addr})
	if !strings.Contains(fmt.Sprint(err), "1 cooling down for "+s.addr) {
		t.Errorf("with p2 leased for the site, the next lease says %v, want p1 cooling down for it", err)
	}
	resp, _ = get(t, e.client("", token), other.url("/"))
	if got := resp.Header.Get(gateway.HeaderProxy); got != "crawl/p1" {
		t.Errorf("another site went through %s, want crawl/p1 (cooling is per site)", got)
	}
}

func TestRetriesAreBoundedAndNeverReuseAnUpstream(t *testing.T) {
	e := newEnv(t, 4, func(g *gateway.Gateway) { g.MaxTries = 3 })
	s := newSite(t, func(w http.ResponseWriter, r *http.Request, from string) { w.WriteHeader(http.StatusTooManyRequests) })
	resp, _ := get(t, e.client("", token), s.url("/"))
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get(gateway.HeaderTries) != "3" {
		t.Fatalf("got %d after %s tries, want the last 429 after 3", resp.StatusCode, resp.Header.Get(gateway.HeaderTries))
	}
	seen := map[string]bool{}
	for _, ip := range s.froms() {
		if seen[ip] {
			t.Errorf("upstream %s tried twice: %v", ip, s.froms())
		}
		seen[ip] = true
	}
	if len(seen) != 3 {
		t.Errorf("site saw %d upstreams, want 3", len(seen))
	}
}

func TestNonIdempotentRequestIsNotRetried(t *testing.T) {
	e := newEnv(t, 2, nil)
	s := newSite(t, func(w http.ResponseWriter, r *http.Request, from string) { w.WriteHeader(http.StatusTooManyRequests) })
	resp, err := e.client("", token).Post(s.url("/form"), "text/plain", strings.NewReader("a=1"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get(gateway.HeaderTries) != "1" {
		t.Errorf("POST: %d after %s tries, want the 429 after 1", resp.StatusCode, resp.Header.Get(gateway.HeaderTries))
	}
	// Still reported: the next lease for the site avoids the limited upstream.
	l, err := e.store.Acquire(context.Background(), lease.Request{TTL: time.Minute, Target: s.addr})
	if err != nil {
		t.Fatal(err)
	}
	if l.Proxy.Key == resp.Header.Get(gateway.HeaderProxy) {
		t.Errorf("the rate-limited upstream %s was not reported", l.Proxy.Key)
	}
}

func TestBodyRuleAndRetryKeepsTheBody(t *testing.T) {
	rules, err := gateway.ParseRules([]byte(`
rules:
  - name: captcha
    hosts: ["127.0.0.1"]
    status: [200]
    bodyPattern: "(?i)solve the captcha"
    result: banned
`))
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, 2, func(g *gateway.Gateway) { g.Rules = rules })
	e.health.SetState("crawl/p1", verdict.Healthy, 1)
	banned := e.ups["crawl/p1"]
	var bodies []string
	s := newSite(t, func(w http.ResponseWriter, r *http.Request, from string) {
		b, _ := io.ReadAll(r.Body)
		bodies = append(bodies, string(b))
		if from == banned {
			_, _ = io.WriteString(w, "<html>Please SOLVE THE CAPTCHA</html>")
			return
		}
		_, _ = io.WriteString(w, "real content")
	})
	req, _ := http.NewRequest(http.MethodPut, s.url("/doc"), strings.NewReader("the document"))
	resp, err := e.client("", token).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "real content" || resp.Header.Get(gateway.HeaderTries) != "2" {
		t.Errorf("got %q after %s tries, want the real content after 2", b, resp.Header.Get(gateway.HeaderTries))
	}
	if len(bodies) != 2 || bodies[0] != "the document" || bodies[1] != "the document" {
		t.Errorf("site got bodies %q, want the document twice", bodies)
	}
	if got := testMetric(t, e, "proxy_operator_gateway_bans_total", "captcha"); got != 1 {
		t.Errorf("bans by rule captcha = %v, want 1", got)
	}
}

func TestStickySessionMovesOnlyAfterBan(t *testing.T) {
	e := newEnv(t, 3, nil)
	var bannedIP string
	s := newSite(t, func(w http.ResponseWriter, r *http.Request, from string) {
		if from == bannedIP {
			w.WriteHeader(http.StatusForbidden)
			return
		}
		_, _ = io.WriteString(w, "ok")
	})
	c := e.client("pool-web-session-s1", token)
	first, _ := get(t, c, s.url("/"))
	stuck := first.Header.Get(gateway.HeaderProxy)
	for i := range 5 {
		resp, _ := get(t, c, s.url(fmt.Sprintf("/%d", i)))
		if got := resp.Header.Get(gateway.HeaderProxy); got != stuck {
			t.Fatalf("request %d of session s1 went through %s, want %s", i, got, stuck)
		}
	}
	bannedIP = e.ups[stuck]
	resp, _ := get(t, c, s.url("/after-ban"))
	moved := resp.Header.Get(gateway.HeaderProxy)
	if resp.StatusCode != http.StatusOK || moved == stuck || resp.Header.Get(gateway.HeaderTries) != "2" {
		t.Fatalf("after the ban: %d through %s after %s tries, want 200 through another after 2", resp.StatusCode, moved, resp.Header.Get(gateway.HeaderTries))
	}
	if why := resp.Header.Get(gateway.HeaderSessionMoved); why != "banned" {
		t.Errorf("%s: %q after the ban, want banned", gateway.HeaderSessionMoved, why)
	}
	for i := range 3 {
		resp, _ := get(t, c, s.url(fmt.Sprintf("/moved/%d", i)))
		if got := resp.Header.Get(gateway.HeaderProxy); got != moved {
			t.Fatalf("request %d after the move went through %s, want %s", i, got, moved)
		}
	}
	// Another token's session of the same name is its own.
	other, _ := get(t, e.client("session-s1", teamToken), s.url("/"))
	if other.StatusCode != http.StatusNotFound || other.Header.Get(gateway.HeaderError) != gateway.ReasonNoMatch {
		t.Errorf("team token (namespace team, no proxies there): %d %q, want 404 no_match", other.StatusCode, other.Header.Get(gateway.HeaderError))
	}
}

func TestConcurrentRequestsOfASessionShareOneUpstream(t *testing.T) {
	e := newEnv(t, 3, nil)
	release := make(chan struct{})
	arrived := make(chan string, 8)
	s := newSite(t, func(w http.ResponseWriter, r *http.Request, from string) {
		arrived <- from
		<-release
		_, _ = io.WriteString(w, "ok")
	})
	c := e.client("session-par", token)
	errs := make(chan error, 4)
	for range 4 {
		go func() {
			resp, err := c.Get(s.url("/"))
			if err == nil {
				resp.Body.Close()
			}
			errs <- err
		}()
	}
	var froms []string
	for range 4 {
		froms = append(froms, <-arrived)
	}
	if e.leases(t) != 1 {
		t.Errorf("4 requests of one session in flight hold %d leases, want 1 shared", e.leases(t))
	}
	close(release)
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range froms {
		if f != froms[0] {
			t.Errorf("concurrent requests of one session came from %v, want one upstream", froms)
			break
		}
	}
	waitFor(t, "the shared lease to be released", func() bool { return e.leases(t) == 0 })
}

func TestNothingFitsIs503WithRetryAfter(t *testing.T) {
	e := newEnv(t, 2, func(g *gateway.Gateway) { g.AcquireWait = time.Millisecond })
	for _, k := range []string{"crawl/p1", "crawl/p2"} {
		e.health.SetState(k, verdict.Unhealthy, 0)
	}
	s := newSite(t, nil)
	resp, body := get(t, e.client("pool-web", token), s.url("/"))
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || !strings.Contains(body, "2 unhealthy") {
		t.Errorf("got %d Retry-After %q %q, want 503 with Retry-After saying 2 unhealthy", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	resp, body = get(t, e.client("pool-api", token), s.url("/"))
	if resp.StatusCode != http.StatusNotFound || resp.Header.Get(gateway.HeaderError) != gateway.ReasonNoMatch ||
		!strings.Contains(body, "no Proxy matches the selector") {
		t.Errorf("unmatched selector: %d %q, want 404 no_match saying no Proxy matches", resp.StatusCode, body)
	}
}

func TestOneUpstreamPerSiteWaitsThenAnswers503(t *testing.T) {
	e := newEnv(t, 1, func(g *gateway.Gateway) { g.AcquireWait, g.QueueWait = 200*time.Millisecond, 200*time.Millisecond })
	release := make(chan struct{})
	arrived := make(chan struct{}, 2)
	s := newSite(t, func(w http.ResponseWriter, r *http.Request, from string) {
		arrived <- struct{}{}
		<-release
	})
	done := make(chan int, 1)
	go func() {
		resp, err := e.client("", token).Get(s.url("/slow"))
		if err != nil {
			done <- 0
			return
		}
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	<-arrived
	resp, body := get(t, e.client("", token), s.url("/second"))
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, "already leased for") {
		t.Errorf("second concurrent request to the site: %d %q, want 503 (the one upstream is held for the site)", resp.StatusCode, body)
	}
	close(release)
	if got := <-done; got != http.StatusOK {
		t.Errorf("first request: %d, want 200", got)
	}
}

// tlsSite is a loopback HTTPS site with a self-signed certificate and a pool that trusts it.
func tlsSite(t testing.TB) (*httptest.Server, *x509.CertPool) {
	t.Helper()
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "secret page over TLS")
	}))
	t.Cleanup(srv.Close)
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	return srv, pool
}

func TestConnectTunnelToTLSSiteHoldsLeaseForItsLife(t *testing.T) {
	e := newEnv(t, 1, nil)
	srv, pool := tlsSite(t)
	c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		Proxy: http.ProxyURL(e.proxyURL("pool-web", token)), TLSClientConfig: &tls.Config{RootCAs: pool}}}
	resp, body := get(t, c, srv.URL+"/")
	if resp.StatusCode != http.StatusOK || body != "secret page over TLS" {
		t.Fatalf("got %d %q through the tunnel", resp.StatusCode, body)
	}
	// The keep-alive connection is the tunnel: its lease lives until it closes.
	if n := e.leases(t); n != 1 {
		t.Errorf("with the tunnel open: %d leases, want 1", n)
	}
	if got := testMetric(t, e, "proxy_operator_gateway_tunnels_active", ""); got != 1 {
		t.Errorf("tunnels_active = %v, want 1", got)
	}
	c.CloseIdleConnections()
	waitFor(t, "the tunnel's lease to be released", func() bool { return e.leases(t) == 0 })
}

func TestConnectRetriesWhenAnUpstreamRefuses(t *testing.T) {
	e := newEnv(t, 2, nil)
	e.health.SetState("crawl/p1", verdict.Healthy, 1)
	// p1's record carries a wrong password: the upstream answers 407 to the gateway's CONNECT.
	p, _ := e.view.Get("crawl/p1")
	p.Credentials = upstreamCreds("wrong")
	e.view.Upsert(p)
	srv, _ := tlsSite(t)
	host := strings.TrimPrefix(srv.URL, "https://")
	status, head, _ := rawProxy(t, e.addr, http.MethodConnect, host, basicAuth("", token))
	if status != http.StatusOK {
		t.Fatalf("CONNECT: %d, want 200 through the second upstream", status)
	}
	if !strings.Contains(head, gateway.HeaderTries+": 2") || !strings.Contains(head, gateway.HeaderProxy+": crawl/p2") {
		t.Errorf("CONNECT answer head %q, want tries 2 through crawl/p2", head)
	}
	if strings.Contains(e.logs.String(), "pw-of-") {
		t.Errorf("the log holds an upstream password")
	}
}

func TestConnectFailsWith502AfterEveryUpstreamRefuses(t *testing.T) {
	e := newEnv(t, 2, nil)
	for _, k := range []string{"crawl/p1", "crawl/p2"} {
		p, _ := e.view.Get(k)
		p.Credentials = upstreamCreds("wrong")
		e.view.Upsert(p)
	}
	status, head, body := rawProxy(t, e.addr, http.MethodConnect, "127.0.0.1:9", basicAuth("", token))
	if status != http.StatusBadGateway || !strings.Contains(head, gateway.HeaderTries+": 2") || !strings.Contains(body, "after 2 tries") {
		t.Errorf("got %d %q %q, want 502 after 2 tries", status, head, body)
	}
	if strings.Contains(body, "pw-of-") {
		t.Errorf("error page holds an upstream password: %q", body)
	}
}

func TestHealthzAndBadRequests(t *testing.T) {
	e := newEnv(t, 1, nil)
	resp, body := get(t, http.DefaultClient, "http://"+e.addr+"/healthz")
	if resp.StatusCode != http.StatusOK || body != "ok\n" {
		t.Errorf("/healthz: %d %q", resp.StatusCode, body)
	}
	resp, body = get(t, http.DefaultClient, "http://"+e.addr+"/other")
	_ = body
	if resp.StatusCode != http.StatusProxyAuthRequired {
		t.Errorf("origin-form without credentials: %d, want 407", resp.StatusCode)
	}
	status, _, body := rawProxy(t, e.addr, http.MethodConnect, "no-port-here", basicAuth("", token))
	if status != http.StatusBadRequest || !strings.Contains(body, "want host:port") {
		t.Errorf("CONNECT without a port: %d %q", status, body)
	}
}

func TestRequestsWithoutSessionRotate(t *testing.T) {
	e := newEnv(t, 3, nil)
	s := newSite(t, nil)
	c := e.client("pool-web", token) // one keep-alive connection: rotation must not depend on it
	var got []string
	for range 6 {
		resp, _ := get(t, c, s.url("/"))
		got = append(got, resp.Header.Get(gateway.HeaderProxy))
	}
	want := []string{"crawl/p1", "crawl/p2", "crawl/p3", "crawl/p1", "crawl/p2", "crawl/p3"}
	if !slices.Equal(got, want) {
		t.Errorf("6 requests went through %v, want a rotation %v", got, want)
	}
	froms := s.froms()
	for i := 1; i < len(froms); i++ {
		if froms[i] == froms[i-1] {
			t.Errorf("the site saw two requests in a row from %s: %v", froms[i], froms)
		}
	}
}

// TestBanInsideTLSReportedThroughTheSession follows docs/api.md: after the tunnel closes, a
// lease with the session's key for the site is the upstream that served the tunnel; a report on
// it moves the session's next tunnel.
func TestBanInsideTLSReportedThroughTheSession(t *testing.T) {
	e := newEnv(t, 3, nil)
	srv, _ := tlsSite(t)
	host := strings.TrimPrefix(srv.URL, "https://")
	status, head, _ := rawProxy(t, e.addr, http.MethodConnect, host, basicAuth("session-tls1", token))
	if status != http.StatusOK {
		t.Fatalf("CONNECT: %d", status)
	}
	var served string
	for _, line := range strings.Split(head, "\r\n") {
		if v, ok := strings.CutPrefix(line, gateway.HeaderProxy+": "); ok {
			served = v
		}
	}
	waitFor(t, "the tunnel's lease to end", func() bool { return e.leases(t) == 0 })
	ctx := context.Background()
	l, err := e.store.Acquire(ctx, lease.Request{TTL: time.Minute, Target: host, SessionKey: "gw|crawler|tls1"})
	if err != nil {
		t.Fatal(err)
	}
	if l.Proxy.Key != served {
		t.Fatalf("the session's lease is on %s, the tunnel went through %s", l.Proxy.Key, served)
	}
	if _, err := e.store.Report(ctx, l.ID, lease.Report{Result: lease.ResultBanned, Target: host}); err != nil {
		t.Fatal(err)
	}
	_ = e.store.Release(ctx, l.ID)
	_, head, _ = rawProxy(t, e.addr, http.MethodConnect, host, basicAuth("session-tls1", token))
	if strings.Contains(head, gateway.HeaderProxy+": "+served) {
		t.Errorf("the next tunnel of the session went through the reported upstream %s", served)
	}
}
