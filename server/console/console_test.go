package console_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/proxy-operator/proxy-operator/internal/clocktest"
	"github.com/proxy-operator/proxy-operator/internal/fleet"
	"github.com/proxy-operator/proxy-operator/internal/healthtest"
	"github.com/proxy-operator/proxy-operator/internal/verdict"
	"github.com/proxy-operator/proxy-operator/lease"
	"github.com/proxy-operator/proxy-operator/server/console"
	"github.com/proxy-operator/proxy-operator/server/discovery"
	"github.com/proxy-operator/proxy-operator/server/discovery/access"
)

// Tokens of the tests: an admin of every namespace, a reader of namespace a, a leaser of b,
// an admin of namespace a.
const (
	adminToken  = "admin-token-0123456789abcdef"
	adminAToken = "admin-a-token-0123456789abcd"
	readerToken = "reader-a-token-0123456789abc"
	leaserToken = "leaser-b-token-0123456789abc"
	xss         = `<script>alert(1)</script>`
)

// env is the real console over the real discovery API, a real fleet view and lease store.
type env struct {
	srv     *httptest.Server
	view    *fleet.View
	health  *healthtest.Map
	store   *lease.Memory
	clock   *clocktest.Clock
	disc    *discovery.Discovery
	console *console.Console
}

func newEnv(t testing.TB, proxies int, kube *console.Kube, tls bool) *env {
	t.Helper()
	clock := clocktest.New(time.Date(2026, 12, 6, 4, 0, 0, 0, time.UTC))
	e := &env{view: fleet.New(clock.Now, 0), health: &healthtest.Map{}, clock: clock}
	add := func(key string, attrs map[string]string, state verdict.State, ms int64) {
		e.view.Upsert(fleet.Proxy{Key: key, UID: "uid-" + key, IP: "10.1.0.1", Port: 3128, MaxLeases: 4, Phase: "Ready", Attributes: attrs})
		e.health.Set(key, verdict.Health{State: state, LatencyMillis: ms, Band: "Good",
			Exit: verdict.Exit{IP: "203.0.113.9", Country: "DE", ASN: 64500}})
	}
	if proxies == 0 {
		add("a/p1", map[string]string{"pool": "web", "note": xss}, verdict.Healthy, 30)
		add("b/p2", map[string]string{"pool": "web"}, verdict.Healthy, 10)
		add("b/p3", map[string]string{"secret-b": "yes"}, verdict.Unhealthy, 90)
	}
	for i := range proxies {
		add(fmt.Sprintf("ns%d/proxy-%05d", i%10, i), map[string]string{"pool": fmt.Sprintf("pool-%d", i%20), "geo": "eu"}, verdict.Healthy, int64(i%500))
	}
	e.store = lease.NewMemory(lease.Config{Fleet: e.view, Health: e.health, Now: clock.Now, MaxLeasesPerHolder: 100})
	tokens, err := access.New([]access.TokenSpec{
		{Name: "admin", Token: adminToken, Namespaces: []string{access.AllNamespaces}, Right: access.RightAdmin},
		{Name: "reader-a", Token: readerToken, Namespaces: []string{"a"}, Right: access.RightRead},
		{Name: "leaser-b", Token: leaserToken, Namespaces: []string{"b"}, Right: access.RightLease},
		{Name: "admin-a", Token: adminAToken, Namespaces: []string{"a"}, Right: access.RightAdmin},
	})
	if err != nil {
		t.Fatal(err)
	}
	e.disc = &discovery.Discovery{Fleet: e.view, Health: e.health, Leases: e.store, Tokens: tokens, Now: clock.Now,
		Registerer: prometheus.NewRegistry(), Log: slog.New(slog.DiscardHandler)}
	e.console = &console.Console{Discovery: e.disc, Tokens: tokens, Kube: kube, Now: clock.Now, Log: slog.New(slog.DiscardHandler)}
	e.disc.Console = e.console
	if tls {
		e.srv = httptest.NewTLSServer(e.disc.Handler())
	} else {
		e.srv = httptest.NewServer(e.disc.Handler())
	}
	t.Cleanup(e.srv.Close)
	return e
}

// client is a browser-like client: a cookie jar, redirects followed, Origin sent on POSTs.
func (e *env) client(t testing.TB) *http.Client {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	c := *e.srv.Client()
	c.Jar = jar
	return &c
}

func (e *env) post(t testing.TB, c *http.Client, path string, form url.Values, origin string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", e.srv.URL+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	return do(t, c, req)
}

func (e *env) get(t testing.TB, c *http.Client, path string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", e.srv.URL+path, nil)
	return do(t, c, req)
}

func do(t testing.TB, c *http.Client, req *http.Request) (*http.Response, string) {
	t.Helper()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// login logs c in with token and returns the session's form token.
func (e *env) login(t testing.TB, c *http.Client, token string) string {
	t.Helper()
	resp, body := e.post(t, c, "/ui/login", url.Values{"token": {token}}, e.srv.URL)
	if resp.StatusCode != 200 || resp.Request.URL.Path != "/ui/fleet" {
		t.Fatalf("login: %d at %s, want 200 at /ui/fleet:\n%s", resp.StatusCode, resp.Request.URL.Path, body)
	}
	return csrfOf(t, body)
}

// csrfOf is the session's form token in a page.
func csrfOf(t testing.TB, body string) string {
	t.Helper()
	return hexField(t, body, "csrf")
}

// leaseHandle is the first lease handle of a Leases page.
func leaseHandle(t testing.TB, body string) string {
	t.Helper()
	return hexField(t, body, "lease")
}

// hexField is the hex value of the first hidden field name in body.
func hexField(t testing.TB, body, name string) string {
	t.Helper()
	m := regexp.MustCompile(`name="` + name + `" value="([0-9a-f]+)"`).FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no %s field in:\n%s", name, body)
	}
	return m[1]
}

// acquire takes a lease of the store for req and, with a target in report, reports it
// rate limited there for an hour.
func (e *env) acquire(t testing.TB, req lease.Request, report string) lease.Lease {
	t.Helper()
	ctx := context.Background()
	req.TTL = time.Minute
	l, err := e.store.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if report != "" {
		if _, err := e.store.Report(ctx, l.ID, lease.Report{Result: lease.ResultRateLimited, Target: report, RetryAfter: time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	return l
}

func noRedirect(c *http.Client) *http.Client {
	cc := *c
	cc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &cc
}

// TestContentSecurityPolicy: every answer, page, asset, error or redirect, carries the policy.
func TestContentSecurityPolicy(t *testing.T) {
	e := newEnv(t, 0, nil, false)
	c := noRedirect(e.client(t))
	e.login(t, e.client(t), adminToken)
	for _, path := range []string{"/ui/login", "/ui/static/console.css", "/ui/static/sort.js", "/ui/nothing", "/ui/fleet", "/ui"} {
		resp, _ := e.get(t, c, path)
		if got := resp.Header.Get("Content-Security-Policy"); got != console.ContentSecurityPolicy {
			t.Errorf("%s (%d): Content-Security-Policy %q, want %q", path, resp.StatusCode, got, console.ContentSecurityPolicy)
		}
		if got := resp.Header.Get("X-Frame-Options"); got != "DENY" {
			t.Errorf("%s: X-Frame-Options %q", path, got)
		}
	}
	// No page holds inline script: every <script> has a src.
	c = e.client(t)
	e.login(t, c, adminToken)
	for _, path := range []string{"/ui/fleet", "/ui/pools", "/ui/sites", "/ui/leases", "/ui/traffic", "/ui/login"} {
		_, body := e.get(t, c, path)
		for _, m := range regexp.MustCompile(`<script[^>]*>`).FindAllString(body, -1) {
			if !strings.Contains(m, `src="/ui/static/`) {
				t.Errorf("%s: inline script %s", path, m)
			}
		}
	}
}

// TestLoginLogout: a bad token is refused without a cookie; a good one gets a session cookie
// (HttpOnly, SameSite=Strict, Secure over TLS, never the token); logout ends the session.
func TestLoginLogout(t *testing.T) {
	for _, tls := range []bool{false, true} {
		t.Run(fmt.Sprintf("tls=%v", tls), func(t *testing.T) {
			e := newEnv(t, 0, nil, tls)
			c := noRedirect(e.client(t))
			resp, _ := e.get(t, c, "/ui/fleet")
			if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), "/ui/login") {
				t.Fatalf("fleet without a session: %d to %q, want 303 to the login", resp.StatusCode, resp.Header.Get("Location"))
			}
			resp, body := e.post(t, c, "/ui/login", url.Values{"token": {"wrong-token-0123456789abcdef"}}, "")
			if resp.StatusCode != http.StatusUnauthorized || len(resp.Cookies()) != 0 || !strings.Contains(body, "not accepted") {
				t.Fatalf("bad token: %d, cookies %v", resp.StatusCode, resp.Cookies())
			}
			resp, _ = e.post(t, c, "/ui/login", url.Values{"token": {adminToken}, "next": {"/ui/sites"}}, "")
			if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/ui/sites" {
				t.Fatalf("login: %d to %q, want 303 to /ui/sites", resp.StatusCode, resp.Header.Get("Location"))
			}
			ck := resp.Cookies()
			if len(ck) != 1 {
				t.Fatalf("cookies %v, want one", ck)
			}
			got := ck[0]
			if got.Name != console.CookieName || !got.HttpOnly || got.SameSite != http.SameSiteStrictMode || got.Secure != tls || got.Path != "/ui/" {
				t.Errorf("cookie %+v: want HttpOnly, SameSite=Strict, Secure=%v, Path=/ui/", got, tls)
			}
			if strings.Contains(got.Value, adminToken) || len(got.Value) != 64 {
				t.Errorf("cookie value %q: want a random 64-hex session id, never the token", got.Value)
			}
			resp, body = e.get(t, c, "/ui/fleet")
			if resp.StatusCode != 200 || strings.Contains(body, adminToken) {
				t.Fatalf("fleet after login: %d (or the token is rendered)", resp.StatusCode)
			}
			resp, _ = e.post(t, c, "/ui/logout", url.Values{"csrf": {csrfOf(t, body)}}, "")
			if resp.StatusCode != http.StatusSeeOther || len(resp.Cookies()) != 1 || resp.Cookies()[0].MaxAge >= 0 {
				t.Fatalf("logout: %d, cookies %v: want 303 clearing the cookie", resp.StatusCode, resp.Cookies())
			}
			// The old session id is dead on the server, even if a client kept the cookie.
			req, _ := http.NewRequest("GET", e.srv.URL+"/ui/fleet", nil)
			req.AddCookie(&http.Cookie{Name: console.CookieName, Value: got.Value})
			resp, _ = do(t, noRedirect(e.srv.Client()), req)
			if resp.StatusCode != http.StatusSeeOther {
				t.Fatalf("fleet with the logged-out session: %d, want 303 to the login", resp.StatusCode)
			}
		})
	}
}

// TestOpenRedirect: the login's next never leaves the console.
func TestOpenRedirect(t *testing.T) {
	e := newEnv(t, 0, nil, false)
	c := noRedirect(e.client(t))
	for _, next := range []string{"https://evil.example/", "//evil.example/ui/", "/ui/\\evil", "javascript:alert(1)"} {
		resp, _ := e.post(t, c, "/ui/login", url.Values{"token": {adminToken}, "next": {next}}, "")
		if got := resp.Header.Get("Location"); got != "/ui/fleet" {
			t.Errorf("next %q: Location %q, want /ui/fleet", next, got)
		}
	}
}

// TestLoginThrottle: failed console logins count in the discovery API's throttle (0257).
func TestLoginThrottle(t *testing.T) {
	e := newEnv(t, 0, nil, false)
	c := e.client(t)
	codes := map[int]int{}
	for range 15 {
		resp, _ := e.post(t, c, "/ui/login", url.Values{"token": {"wrong-token-0123456789abcdef"}}, "")
		codes[resp.StatusCode]++
	}
	if codes[http.StatusTooManyRequests] == 0 {
		t.Fatalf("15 failed logins: %v, want some 429", codes)
	}
	// The API on the same listener from the same address is throttled too.
	req, _ := http.NewRequest("GET", e.srv.URL+"/v1/proxies", nil)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	if resp, _ := do(t, c, req); resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("API after failed console logins: %d, want 429", resp.StatusCode)
	}
}

// TestEscaping: names and attributes are user-written and rendered escaped.
func TestEscaping(t *testing.T) {
	e := newEnv(t, 0, nil, false)
	c := e.client(t)
	e.login(t, c, adminToken)
	l, err := e.store.Acquire(context.Background(), lease.Request{TTL: time.Minute, Namespaces: []string{"a"}, Target: xss + ".example", SessionKey: xss, Holder: "admin"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.Report(context.Background(), l.ID, lease.Report{Result: lease.ResultBanned, Target: xss}); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/ui/fleet", "/ui/fleet?q=" + url.QueryEscape(xss), "/ui/sites", "/ui/leases", "/ui/fleet?pool=" + url.QueryEscape(`"><script>x</script>`)} {
		resp, body := e.get(t, c, path)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d", path, resp.StatusCode)
		}
		if strings.Contains(body, "<script>alert(1)") || strings.Contains(body, "<script>x") {
			t.Errorf("%s renders a script unescaped:\n%s", path, body)
		}
		if path != "/ui/fleet?pool=%22%3E%3Cscript%3Ex%3C%2Fscript%3E" && !strings.Contains(body, "&lt;script&gt;alert(1)&lt;/script&gt;") {
			t.Errorf("%s: the escaped attribute is missing", path)
		}
	}
}

// TestNamespaceScope: a token scoped to namespace a sees only a on every page, cannot act,
// and an action on another namespace's proxy is answered as for one that does not exist.
func TestNamespaceScope(t *testing.T) {
	e := newEnv(t, 0, nil, false)
	ctx := context.Background()
	lb, err := e.store.Acquire(ctx, lease.Request{TTL: time.Minute, Namespaces: []string{"b"}, Holder: "leaser-b", Target: "secret-b.example"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.Report(ctx, lb.ID, lease.Report{Result: lease.ResultBanned, Target: "secret-b.example"}); err != nil {
		t.Fatal(err)
	}
	c := e.client(t)
	token := e.login(t, c, readerToken)
	for _, path := range []string{"/ui/fleet", "/ui/fleet?ns=b", "/ui/fleet?q=yes", "/ui/pools", "/ui/sites", "/ui/leases", "/ui/leases?ns=b", "/ui/traffic"} {
		resp, body := e.get(t, c, path)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d", path, resp.StatusCode)
		}
		for _, secret := range []string{"p2", "p3", "secret-b", "leaser-b", ">b<", "b/web"} {
			if strings.Contains(body, secret) {
				t.Errorf("%s shows %q of namespace b to a token of a", path, secret)
			}
		}
	}
	if _, body := e.get(t, c, "/ui/fleet"); !strings.Contains(body, ">p1<") {
		t.Error("the token's own proxy a/p1 is not shown")
	}
	for _, tc := range []struct {
		path string
		form url.Values
		want int
	}{
		{"/ui/proxies/drain", url.Values{"proxy": {"b/p2"}, "drain": {"true"}}, http.StatusNotFound},
		{"/ui/sites/clear", url.Values{"proxy": {"b/p2"}, "target": {"secret-b.example"}}, http.StatusNotFound},
		{"/ui/proxies/drain", url.Values{"proxy": {"a/p1"}, "drain": {"true"}}, http.StatusForbidden},
		{"/ui/leases/release", url.Values{"lease": {"00"}}, http.StatusNotFound},
	} {
		tc.form.Set("csrf", token)
		resp, body := e.post(t, c, tc.path, tc.form, "")
		if resp.StatusCode != tc.want {
			t.Errorf("%s %v: %d, want %d:\n%s", tc.path, tc.form, resp.StatusCode, tc.want, body)
		}
		if strings.Contains(body, "secret-b") {
			t.Errorf("%s: the refusal names another namespace's data", tc.path)
		}
	}
	if got, _ := e.store.Cooling(ctx, lease.CoolingQuery{}); got.Total != 1 {
		t.Fatalf("a refused clear changed the cooldowns: %d", got.Total)
	}
}

// TestClearCooldown: an admin clears one proxy's cooldown for one site from the Sites page.
func TestClearCooldown(t *testing.T) {
	e := newEnv(t, 0, nil, false)
	ctx := context.Background()
	l, err := e.store.Acquire(ctx, lease.Request{TTL: time.Minute, Namespaces: []string{"b"}, Holder: "leaser-b"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.Report(ctx, l.ID, lease.Report{Result: lease.ResultRateLimited, Target: "shop.example", RetryAfter: time.Hour}); err != nil {
		t.Fatal(err)
	}
	c := e.client(t)
	token := e.login(t, c, adminToken)
	_, body := e.get(t, c, "/ui/sites")
	if !strings.Contains(body, "shop.example") || !strings.Contains(body, l.Proxy.Key+": rate_limited") {
		t.Fatalf("the Sites page does not show the cooldown:\n%s", body)
	}
	resp, body := e.post(t, c, "/ui/sites/clear", url.Values{"csrf": {token}, "proxy": {l.Proxy.Key}, "target": {"shop.example"}}, e.srv.URL)
	if resp.StatusCode != 200 || strings.Contains(body, "rate_limited") {
		t.Fatalf("after clear: %d, the page still shows a cooldown:\n%s", resp.StatusCode, body)
	}
	if got, _ := e.store.Cooling(ctx, lease.CoolingQuery{}); got.Total != 0 {
		t.Fatalf("cooldowns after clear: %d, want 0", got.Total)
	}
}

// TestDrainWithoutKube: with no Kubernetes client, the page says why there is no drain and
// a POST is refused.
func TestDrainWithoutKube(t *testing.T) {
	e := newEnv(t, 0, nil, false)
	c := e.client(t)
	token := e.login(t, c, adminToken)
	_, body := e.get(t, c, "/ui/fleet")
	if !strings.Contains(body, "Drain unavailable: no Kubernetes client") {
		t.Errorf("the fleet page does not say why drain is unavailable:\n%s", body)
	}
	resp, _ := e.post(t, c, "/ui/proxies/drain", url.Values{"csrf": {token}, "proxy": {"a/p1"}, "drain": {"true"}}, "")
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("drain without kube: %d, want 503", resp.StatusCode)
	}
}

var rowNameRE = regexp.MustCompile(`<td class="name">([^<]+)</td>`)

// TestFleetQuery: filters, sort and pages are in the query string, so a view is a link.
func TestFleetQuery(t *testing.T) {
	e := newEnv(t, 0, nil, false)
	c := e.client(t)
	e.login(t, c, adminToken)
	names := func(path string) string {
		t.Helper()
		resp, body := e.get(t, c, path)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d:\n%s", path, resp.StatusCode, body)
		}
		var out []string
		for _, m := range rowNameRE.FindAllStringSubmatch(body, -1) {
			out = append(out, m[1])
		}
		return strings.Join(out, ",")
	}
	for _, tc := range []struct{ path, want string }{
		{"/ui/fleet", "p1,p2,p3"},
		{"/ui/fleet?sort=latency&dir=desc", "p3,p1,p2"},
		{"/ui/fleet?sort=latency", "p2,p1,p3"},
		{"/ui/fleet?ns=b", "p2,p3"},
		{"/ui/fleet?pool=web", "p1,p2"},
		{"/ui/fleet?health=unhealthy", "p3"},
		{"/ui/fleet?q=SECRET", "p3"},
		{"/ui/fleet?per=1&page=2", "p2"},
		{"/ui/fleet?per=2&page=2&sort=name&dir=desc", "p1"},
	} {
		if got := names(tc.path); got != tc.want {
			t.Errorf("%s: rows %s, want %s", tc.path, got, tc.want)
		}
	}
	for _, path := range []string{"/ui/fleet?sort=nope", "/ui/fleet?per=0", "/ui/fleet?health=x", "/ui/fleet?page=-1"} {
		if resp, _ := e.get(t, c, path); resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%s: %d, want 400", path, resp.StatusCode)
		}
	}
}

// BenchmarkFleetPage: the first page of a 10,000-Proxy fleet, sorted by latency, in server
// time (the handler alone, no network).
func BenchmarkFleetPage(b *testing.B) {
	e := newEnv(b, 10_000, nil, false)
	c := e.client(b)
	e.login(b, c, adminToken)
	ck := c.Jar.Cookies(mustURL(b, e.srv.URL+"/ui/"))
	h := e.disc.Handler()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		req := httptest.NewRequest("GET", "/ui/fleet?sort=latency&dir=desc", nil)
		for _, k := range ck {
			req.AddCookie(k)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != 200 {
			b.Fatalf("%d", w.Code)
		}
	}
}

func mustURL(t testing.TB, s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// staleFleet is a fleet read from a shared store that fell behind.
type staleFleet struct{ *fleet.View }

func (staleFleet) Err() error {
	return fmt.Errorf("fleet from the lease store: %w", lease.ErrUnavailable)
}

// TestStaleFleet: while the fleet cannot be read, the Fleet page answers 503 with
// Retry-After, as GET /v1/proxies does, rather than an old copy.
func TestStaleFleet(t *testing.T) {
	e := newEnv(t, 0, nil, false)
	c := e.client(t)
	e.login(t, c, adminToken)
	e.disc.Fleet = staleFleet{e.view}
	resp, body := e.get(t, c, "/ui/fleet")
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "1" || !strings.Contains(body, "unavailable") {
		t.Fatalf("fleet page on a stale fleet: %d, Retry-After %q:\n%s", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
}
