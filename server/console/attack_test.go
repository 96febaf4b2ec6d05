package console_test

import (
	"bytes"
	"context"
	"fmt"
	"mime/multipart"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/proxy-operator/proxy-operator/internal/browsertest"
	"github.com/proxy-operator/proxy-operator/internal/fleet"
	"github.com/proxy-operator/proxy-operator/internal/verdict"
	"github.com/proxy-operator/proxy-operator/lease"
	"github.com/proxy-operator/proxy-operator/server/console"
)

// The attack pass (docs/reliability.md, "Attack pass"): the console driven as an adversarial
// tenant and as a hostile web page would, through the real discovery listener's handler.

// payloads break out of every context a string can land in: HTML body, a quoted or unquoted
// attribute, a URL, CSS, script, SVG.
var payloads = []string{
	`<script>alert(1)</script>`,
	`"><img src=x onerror=alert(2)>`,
	`' onmouseover='alert(3)`,
	`javascript:alert(4)`,
	`</style><script>alert(5)</script>`,
	`]]></svg><svg onload=alert(6)>`,
	`{{.CSRF}}`,
}

// hostileEnv is newEnv plus a tenant of namespace a whose every user-written string is a
// payload: Proxy name, attribute keys and values, pool, exit country, a site host, a lease's
// session key and a traffic series label.
func hostileEnv(t *testing.T) *env {
	t.Helper()
	e := newEnv(t, 0, nil, false)
	for i, p := range payloads {
		key := "a/evil-" + strconv.Itoa(i) + p
		e.view.Upsert(fleet.Proxy{Key: key, UID: "uid-evil-" + strconv.Itoa(i), IP: "10.1.0.9", Port: 3128, MaxLeases: 4, Phase: "Ready",
			Attributes: map[string]string{"pool": p, "k" + p: p}})
		e.health.Set(key, verdict.Health{State: verdict.Healthy, Band: "Good", Exit: verdict.Exit{IP: "203.0.113.7", Country: p, ASN: 64501}})
	}
	for _, p := range payloads {
		e.acquire(t, lease.Request{Namespaces: []string{"a"}, Target: p, SessionKey: p, Holder: "admin"}, p)
	}
	reg := prometheus.NewRegistry()
	bytesVec := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "proxy_operator_gateway_bytes_total", Help: "h"}, []string{"direction", "pool", "proxy"})
	reg.MustRegister(bytesVec)
	tr := &console.Traffic{Gatherer: reg}
	tr.Sample()
	for _, p := range payloads {
		bytesVec.WithLabelValues("in", p, "").Add(10)
	}
	tr.Sample()
	e.console.Traffic = tr
	return e
}

var (
	tagRE = regexp.MustCompile(`<[a-zA-Z][^>]*>`)
	// The elements the console writes: a payload's <img>, <svg onload> or <style> is none.
	consoleTags = "a b body button code div figcaption figure form h1 h2 head header html input label link main meta nav option p polyline rect select span svg table tbody td th thead title tr"
	// Inside a tag, its quoted values taken out (escaped text holds no '"'): an event handler,
	// or an attribute unquoted (a value broken out of).
	handlerRE = regexp.MustCompile(`(?i)\son[a-z]+\s*=|=[^"\s>]`)
	quotedRE  = regexp.MustCompile(`="[^"]*"`)
	jsURLRE   = regexp.MustCompile(`(?i)(href|src|action|formaction|xlink:href)\s*=\s*"\s*javascript:`)
)

// checkInert fails if body holds markup a payload made. Escaped text holds no '<', so every
// tag in body is one the server wrote: each must be an element the console writes, with no
// event handler and no javascript: URL (an attribute broken out of shows as one of those),
// and a script must be the console's own file.
func checkInert(t *testing.T, where, body string) {
	t.Helper()
	for _, tag := range tagRE.FindAllString(body, -1) {
		name := strings.ToLower(strings.FieldsFunc(tag[1:], func(r rune) bool { return r == ' ' || r == '>' || r == '/' })[0])
		switch {
		case name == "script":
			if tag != `<script src="/ui/static/sort.js" defer>` {
				t.Errorf("%s: a script the console did not write: %s", where, tag)
			}
		case !slices.Contains(strings.Fields(consoleTags), name):
			t.Errorf("%s: an element the console does not write: %s", where, tag)
		case handlerRE.MatchString(quotedRE.ReplaceAllString(tag, `=""`)) || jsURLRE.MatchString(tag):
			t.Errorf("%s: an event handler or javascript: URL in %s", where, tag)
		}
	}
}

// TestAttackXSS: every page that renders a user-written string, with each payload in it, and
// every query parameter echoed into a link or a form field, serves inert bytes.
func TestAttackXSS(t *testing.T) {
	e := hostileEnv(t)
	c := e.client(t)
	e.login(t, c, adminToken)
	paths := []string{"/ui/fleet?per=500", "/ui/pools", "/ui/sites", "/ui/leases", "/ui/traffic"}
	for _, p := range payloads {
		q := url.QueryEscape(p)
		paths = append(paths,
			"/ui/fleet?q="+q, "/ui/fleet?pool="+q, "/ui/fleet?ns="+q, "/ui/fleet?health="+q, "/ui/fleet?sort="+q,
			"/ui/fleet?dir="+q, "/ui/fleet?page="+q, "/ui/fleet?per="+q, "/ui/leases?ns="+q, "/ui/sites?limit="+q,
			"/ui/"+url.PathEscape(p), "/ui/login?next=/ui/"+q, "/ui/login?next="+q)
	}
	for _, path := range paths {
		resp, body := e.get(t, c, path)
		if resp.StatusCode >= 500 {
			t.Errorf("%s: %d", path, resp.StatusCode)
		}
		checkInert(t, path, body)
	}
	// The strings are there, escaped: the test looked where they are.
	_, body := e.get(t, c, "/ui/fleet?per=500")
	for _, want := range []string{"evil-0&lt;script&gt;alert(1)&lt;/script&gt;", "&lt;/style&gt;&lt;script&gt;alert(5)", "k&#34;&gt;&lt;img src=x onerror=alert(2)&gt;"} {
		if !strings.Contains(body, want) {
			t.Errorf("the fleet page lacks the escaped %q", want)
		}
	}
	if _, body := e.get(t, c, "/ui/traffic"); !strings.Contains(body, "Gateway bytes, pool &lt;script&gt;") {
		t.Errorf("the traffic page lacks the hostile pool's chart, escaped:\n%.3000s", body)
	}
	// Error messages that echo input.
	token := csrfOf(t, body)
	for _, p := range payloads {
		for _, path := range []string{"/ui/proxies/drain", "/ui/sites/clear", "/ui/leases/release"} {
			_, body := e.post(t, c, path, url.Values{"csrf": {token}, "proxy": {"a/" + p}, "lease": {p}, "target": {p}, "back": {p}}, "")
			checkInert(t, path+" "+p, body)
		}
		_, body := e.post(t, e.client(t), "/ui/login", url.Values{"token": {"wrong-token-0123456789abcdef"}, "next": {"/ui/" + p}}, "")
		checkInert(t, "failed login "+p, body)
	}
}

// TestAttackCSRF: every state-changing route refuses a request without the session's form
// token, with another session's, from another origin or a null one, as a GET, or with a body
// a cross-site form can send without the token; nothing changes.
func TestAttackCSRF(t *testing.T) {
	e := newEnv(t, 0, nil, false)
	ctx := context.Background()
	l := e.acquire(t, lease.Request{Namespaces: []string{"a"}, Holder: "admin", Target: "shop.example"}, "shop.example")
	e.acquire(t, lease.Request{Namespaces: []string{"a"}, Holder: "admin"}, "")
	c := e.client(t)
	token := e.login(t, c, adminToken)
	other := e.login(t, e.client(t), adminToken)
	_, body := e.get(t, c, "/ui/leases")
	handle := leaseHandle(t, body)
	forms := map[string]url.Values{
		"/ui/proxies/drain":  {"proxy": {"a/p1"}, "drain": {"true"}},
		"/ui/leases/release": {"lease": {handle}},
		"/ui/sites/clear":    {"proxy": {l.Proxy.Key}, "target": {"shop.example"}},
		"/ui/logout":         {},
	}
	send := func(path, method, ctype string, body []byte, origin, referer string) int {
		t.Helper()
		req, _ := http.NewRequest(method, e.srv.URL+path, bytes.NewReader(body))
		if ctype != "" {
			req.Header.Set("Content-Type", ctype)
		}
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		if referer != "" {
			req.Header.Set("Referer", referer)
		}
		resp, _ := do(t, noRedirect(c), req)
		return resp.StatusCode
	}
	urlencoded := "application/x-www-form-urlencoded"
	for path, form := range forms {
		with := func(csrf string) []byte {
			f := url.Values{}
			for k, v := range form {
				f[k] = v
			}
			if csrf != "" {
				f.Set("csrf", csrf)
			}
			return []byte(f.Encode())
		}
		var mp bytes.Buffer
		mw := multipart.NewWriter(&mp)
		for k, v := range form {
			_ = mw.WriteField(k, v[0])
		}
		_ = mw.Close()
		for _, tc := range []struct {
			name, method, ctype string
			body                []byte
			origin, referer     string
			want                int
		}{
			{"no form token", "POST", urlencoded, with(""), "", "", http.StatusForbidden},
			{"another session's token", "POST", urlencoded, with(other), "", "", http.StatusForbidden},
			{"a wrong token", "POST", urlencoded, with(strings.Repeat("0", len(token))), "", "", http.StatusForbidden},
			{"a cross-site origin", "POST", urlencoded, with(token), "https://evil.example", "", http.StatusForbidden},
			{"Origin: null (a sandboxed frame, a data: URL)", "POST", urlencoded, with(token), "null", "", http.StatusForbidden},
			{"a cross-site referer", "POST", urlencoded, with(token), "", "https://evil.example/x", http.StatusForbidden},
			{"the host as a suffix of the attacker's", "POST", urlencoded, with(token), "http://" + e.srv.Listener.Addr().String() + ".evil.example", "", http.StatusForbidden},
			{"a GET with the token in the query", "GET", "", nil, "", "", http.StatusMethodNotAllowed},
			{"text/plain (a cross-site form's enctype)", "POST", "text/plain", []byte("csrf=" + token + "\n"), "", "", http.StatusForbidden},
			{"multipart without the token", "POST", mw.FormDataContentType(), mp.Bytes(), "", "", http.StatusForbidden},
			{"the token in the query string", "POST", urlencoded, with(""), "", "", http.StatusForbidden},
		} {
			p := path
			if tc.name == "the token in the query string" || tc.method == "GET" {
				p += "?csrf=" + token
			}
			if got := send(p, tc.method, tc.ctype, tc.body, tc.origin, tc.referer); got != tc.want {
				t.Errorf("%s, %s: %d, want %d", path, tc.name, got, tc.want)
			}
		}
	}
	// Nothing changed: the lease lives, the cooldown holds, the session is logged in.
	if n, _ := e.store.Count(ctx); n != 2 {
		t.Errorf("%d live leases after refused releases, want 2", n)
	}
	if cl, _ := e.store.Cooling(ctx, lease.CoolingQuery{}); cl.Total != 1 {
		t.Errorf("%d cooldowns after refused clears, want 1", cl.Total)
	}
	if resp, _ := e.get(t, noRedirect(c), "/ui/fleet"); resp.StatusCode != 200 {
		t.Errorf("the session ended after refused logouts: %d", resp.StatusCode)
	}
	// The same-origin form with its token works, and from a multipart body too.
	var mp bytes.Buffer
	mw := multipart.NewWriter(&mp)
	_ = mw.WriteField("csrf", token)
	_ = mw.WriteField("lease", handle)
	_ = mw.Close()
	if got := send("/ui/leases/release", "POST", mw.FormDataContentType(), mp.Bytes(), e.srv.URL, ""); got != http.StatusSeeOther {
		t.Errorf("a same-origin release with its token: %d, want 303", got)
	}
}

// TestAttackLoginCSRF: a login form posted from another origin (or a null one) does not log
// the victim's browser in as the attacker: no cookie is set.
func TestAttackLoginCSRF(t *testing.T) {
	e := newEnv(t, 0, nil, false)
	for _, origin := range []string{"https://evil.example", "null"} {
		c := noRedirect(e.client(t))
		resp, _ := e.post(t, c, "/ui/login", url.Values{"token": {readerToken}}, origin)
		if resp.StatusCode != http.StatusForbidden || len(resp.Cookies()) != 0 {
			t.Errorf("a login posted from %s: %d, cookies %v; want 403 and none", origin, resp.StatusCode, resp.Cookies())
		}
	}
}

// TestAttackCrossNamespace: a token of namespace a reads nothing of b on any page with any
// filter or sort, and an admin of a acts on nothing of b, names guessed or taken from an
// admin's page; a read-only token acts on nothing, its own namespace included.
func TestAttackCrossNamespace(t *testing.T) {
	e := newEnv(t, 0, nil, false)
	ctx := context.Background()
	lb := e.acquire(t, lease.Request{Namespaces: []string{"b"}, Holder: "leaser-b", Target: "secret-b.example", SessionKey: "secret-b-session"}, "secret-b.example")
	la := e.acquire(t, lease.Request{Namespaces: []string{"a"}, Holder: "admin", Target: "shop.example"}, "")
	// The handle of b's lease, as an admin of every namespace sees it.
	admin := e.client(t)
	e.login(t, admin, adminToken)
	_, body := e.get(t, admin, "/ui/leases?ns=b")
	handleB := leaseHandle(t, body)

	secrets := []string{"p2", "p3", "secret-b", "leaser-b", ">b<", "b/web", handleB}
	var paths []string
	for _, col := range []string{"name", "namespace", "phase", "health", "band", "exit", "country", "asn", "leases", "latency", "draining"} {
		for _, dir := range []string{"asc", "desc"} {
			paths = append(paths, "/ui/fleet?sort="+col+"&dir="+dir)
		}
	}
	for _, f := range []string{"ns=b", "pool=web", "health=unhealthy", "health=draining", "health=healthy", "q=b/", "q=secret", "q=yes", "per=500", "page=2&per=1"} {
		paths = append(paths, "/ui/fleet?"+f)
	}
	paths = append(paths, "/ui/pools", "/ui/sites", "/ui/sites?limit=1000", "/ui/leases", "/ui/leases?ns=b", "/ui/traffic")
	for _, tok := range []string{readerToken, adminAToken} {
		c := e.client(t)
		csrf := e.login(t, c, tok)
		for _, path := range paths {
			resp, body := e.get(t, c, path)
			if resp.StatusCode != 200 && resp.StatusCode != 400 {
				t.Fatalf("%s: %d", path, resp.StatusCode)
			}
			for _, s := range secrets {
				if strings.Contains(body, s) {
					t.Errorf("%s shows %q of namespace b to a token of a", path, s)
				}
			}
		}
		own := http.StatusNotFound // guessed names of b: as for what does not exist
		// A key whose namespace part is a: the reader is told it may not act on a, the admin of a
		// that there is no such Proxy. Neither says anything of b.
		dotted := map[string]int{readerToken: http.StatusForbidden, adminAToken: http.StatusNotFound}[tok]
		for _, tc := range []struct {
			path string
			form url.Values
			want int
		}{
			{"/ui/proxies/drain", url.Values{"proxy": {"b/p2"}, "drain": {"true"}}, own},
			{"/ui/proxies/drain", url.Values{"proxy": {"b/nonexistent"}, "drain": {"true"}}, own},
			{"/ui/proxies/drain", url.Values{"proxy": {"a/../b/p2"}, "drain": {"true"}}, dotted},
			{"/ui/proxies/drain", url.Values{"proxy": {"b"}, "drain": {"true"}}, own},
			{"/ui/sites/clear", url.Values{"proxy": {lb.Proxy.Key}, "target": {"secret-b.example"}}, own},
			{"/ui/sites/clear", url.Values{"proxy": {la.Proxy.Key}, "target": {"secret-b.example"}}, map[string]int{readerToken: http.StatusForbidden, adminAToken: http.StatusSeeOther}[tok]},
			{"/ui/leases/release", url.Values{"lease": {handleB}}, own},
		} {
			tc.form.Set("csrf", csrf)
			resp, body := e.post(t, noRedirect(c), tc.path, tc.form, "")
			if resp.StatusCode != tc.want {
				t.Errorf("%s %v: %d, want %d", tc.path, tc.form, resp.StatusCode, tc.want)
			}
			for _, s := range []string{"secret-b-session", "secret-b.example:", "leaser-b"} { // the handle is the attacker's own input
				if strings.Contains(body, s) {
					t.Errorf("%s: the answer names %q of namespace b", tc.path, s)
				}
			}
		}
	}
	// A read-only token acts on nothing, in its own namespace neither.
	c := e.client(t)
	csrf := e.login(t, c, readerToken)
	_, body = e.get(t, admin, "/ui/leases?ns=a")
	handleA := leaseHandle(t, body)
	for _, tc := range []struct {
		path string
		form url.Values
	}{
		{"/ui/proxies/drain", url.Values{"proxy": {"a/p1"}, "drain": {"true"}}},
		{"/ui/leases/release", url.Values{"lease": {handleA}}},
	} {
		tc.form.Set("csrf", csrf)
		if resp, _ := e.post(t, noRedirect(c), tc.path, tc.form, ""); resp.StatusCode != http.StatusForbidden && resp.StatusCode != http.StatusNotFound {
			t.Errorf("reader %s: %d, want 403 or 404", tc.path, resp.StatusCode)
		}
	}
	if _, body := e.get(t, c, "/ui/leases"); strings.Contains(body, "/ui/leases/release") || strings.Contains(body, "/ui/sites/clear") {
		t.Error("a read-only token is offered an action")
	}
	if n, _ := e.store.Count(ctx); n != 2 {
		t.Errorf("%d live leases, want both", n)
	}
	if cl, _ := e.store.Cooling(ctx, lease.CoolingQuery{Namespaces: []string{"b"}}); cl.Total != 1 {
		t.Errorf("b's cooldown: %d, want it kept", cl.Total)
	}
}

// TestAttackSessions: a cookie set before the login is not kept (fixation), a forged or
// ended session is a login page, an expired one too, and the form's failed logins are
// throttled (TestLoginThrottle) while a too-large form is not counted as one.
func TestAttackSessions(t *testing.T) {
	e := newEnv(t, 0, nil, false)
	planted := strings.Repeat("ab", 32)
	c := noRedirect(e.client(t))
	u := mustURL(t, e.srv.URL+"/ui/")
	c.Jar.SetCookies(u, []*http.Cookie{{Name: console.CookieName, Value: planted, Path: "/ui/"}})
	resp, _ := e.post(t, c, "/ui/login", url.Values{"token": {adminToken}}, "")
	var got string
	for _, ck := range resp.Cookies() {
		if ck.Name == console.CookieName {
			got = ck.Value
		}
	}
	if got == "" || got == planted {
		t.Fatalf("login kept the planted session id (or set none): %q", got)
	}
	req, _ := http.NewRequest("GET", e.srv.URL+"/ui/fleet", nil)
	req.AddCookie(&http.Cookie{Name: console.CookieName, Value: planted})
	if resp, _ := do(t, noRedirect(e.srv.Client()), req); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("the planted id after the victim's login: %d, want 303 to the login", resp.StatusCode)
	}
	// Expired: past the session's TTL, the cookie the browser still holds is worth nothing.
	if resp, _ := e.get(t, c, "/ui/fleet"); resp.StatusCode != 200 {
		t.Fatalf("fleet in session: %d", resp.StatusCode)
	}
	e.clock.Advance(console.DefaultSessionTTL)
	if resp, _ := e.get(t, c, "/ui/fleet"); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("fleet past the session's TTL: %d, want 303 to the login", resp.StatusCode)
	}
	// A form over the limit is a clear 413 and not a failed login: 20 of them leave the
	// address unthrottled.
	big := url.Values{"token": {strings.Repeat("x", 20<<10)}}
	for range 20 {
		resp, body := e.post(t, c, "/ui/login", big, "")
		if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(body, "form over") {
			t.Fatalf("an over-limit login form: %d, want 413 saying so:\n%.500s", resp.StatusCode, body)
		}
	}
	if resp, _ := e.post(t, c, "/ui/login", url.Values{"token": {adminToken}}, ""); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("login after over-limit forms: %d, want 303 (they are not failed logins)", resp.StatusCode)
	}
}

// TestAttackHeaders: the policy and no-framing headers on every answer, the refused and the
// unknown included, and no secret in any page or asset.
func TestAttackHeaders(t *testing.T) {
	e := newEnv(t, 0, nil, false)
	e.view.Upsert(fleet.Proxy{Key: "a/cred", UID: "uid-cred", IP: "10.1.0.2", Port: 3128, MaxLeases: 4, Phase: "Ready",
		Credentials: &fleet.Credentials{Username: "upstream-user-x", Password: "upstream-pw-secret"}})
	e.health.Set("a/cred", verdict.Health{State: verdict.Healthy})
	l := e.acquire(t, lease.Request{Holder: "admin"}, "")
	c := e.client(t)
	csrf := e.login(t, c, adminToken)
	nr := noRedirect(c)
	for _, tc := range []struct{ method, path string }{
		{"GET", "/ui/static/"}, {"GET", "/ui/static/nothing.js"}, {"GET", "/ui/static/../session.go"}, {"GET", "/ui/fleet?sort=x"},
		{"GET", "/ui/proxies/drain"}, {"POST", "/ui/fleet"}, {"POST", "/ui/proxies/drain"}, {"GET", "/ui/nothing"},
		{"GET", "/ui/fleet"}, {"GET", "/ui/pools"}, {"GET", "/ui/sites"}, {"GET", "/ui/leases"}, {"GET", "/ui/traffic"},
		{"GET", "/ui/static/console.css"}, {"GET", "/ui/static/sort.js"}, {"GET", "/ui/login"},
	} {
		req, _ := http.NewRequest(tc.method, e.srv.URL+tc.path, nil)
		resp, body := do(t, nr, req)
		h := resp.Header
		if h.Get("Content-Security-Policy") != console.ContentSecurityPolicy || h.Get("X-Frame-Options") != "DENY" ||
			h.Get("X-Content-Type-Options") != "nosniff" || !strings.Contains(h.Get("Content-Security-Policy"), "frame-ancestors 'none'") {
			t.Errorf("%s %s (%d): headers %v", tc.method, tc.path, resp.StatusCode, h)
		}
		for _, s := range []string{adminToken, readerToken, "upstream-pw-secret", "upstream-user-x", l.ID, csrf + csrf} {
			if strings.Contains(body, s) {
				t.Errorf("%s %s renders a secret", tc.method, tc.path)
			}
		}
	}
	// The form token is in the session's own pages only, never in a cacheable answer.
	resp, _ := e.get(t, nr, "/ui/fleet")
	if resp.Header.Get("Cache-Control") != "no-store" {
		t.Errorf("a page with the form token is cacheable: %q", resp.Header.Get("Cache-Control"))
	}
}

// TestAttackBounds: huge and many query parameters, pages out of range and a form over the
// limit get clear answers.
func TestAttackBounds(t *testing.T) {
	e := newEnv(t, 0, nil, false)
	c := e.client(t)
	csrf := e.login(t, c, adminToken)
	many := strings.Repeat("ns=b&", 20_000)
	for _, tc := range []struct {
		path string
		want int
		says string
	}{
		{"/ui/fleet?q=" + strings.Repeat("x", 300), 400, "longer than"},
		{"/ui/leases?ns=" + strings.Repeat("x", 300), 400, "longer than"},
		{"/ui/fleet?page=99999", 200, "past the last page of this view: <a href=\"/ui/fleet\">go to page 1</a>"},
		{"/ui/fleet?page=1048577", 400, "want 1.."},
		{"/ui/fleet?page=99999999999999999999999", 400, "want 1.."},
		{"/ui/fleet?per=501", 400, "want 1.."},
		{"/ui/sites?limit=0", 400, "want 1.."},
		{"/ui/fleet?" + many, 200, "Fleet"},
		{"/ui/fleet?q=" + strings.Repeat("%FF", 80), 200, "0 matching"},
	} {
		resp, body := e.get(t, c, tc.path)
		if resp.StatusCode != tc.want || !strings.Contains(body, tc.says) {
			t.Errorf("%.60s: %d, want %d saying %q:\n%.300s", tc.path, resp.StatusCode, tc.want, tc.says, body)
		}
	}
	for _, path := range []string{"/ui/proxies/drain", "/ui/leases/release", "/ui/sites/clear", "/ui/logout"} {
		resp, body := e.post(t, c, path, url.Values{"csrf": {csrf}, "pad": {strings.Repeat("x", 20<<10)}}, "")
		if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(body, fmt.Sprintf("form over %d bytes", 16<<10)) {
			t.Errorf("%s with a 20 KiB form: %d, want 413 saying so", path, resp.StatusCode)
		}
	}
}

// TestBrowserAttackXSS: the hostile tenant's pages in Chromium run no script of a payload: no
// dialog opens, and no Content-Security-Policy violation is reported (which would mean markup
// was injected and only the policy stopped it).
func TestBrowserAttackXSS(t *testing.T) {
	browsertest.Chromium(t)
	e := hostileEnv(t)
	ctx := newBrowser(t)
	var mu sync.Mutex
	var dialogs []string
	dismiss := make(chan struct{}, 16)
	if err := chromedp.Listen(ctx, func(ev any) {
		if d, ok := ev.(*page.EventJavascriptDialogOpening); ok {
			mu.Lock()
			dialogs = append(dialogs, d.Message)
			mu.Unlock()
			select {
			case dismiss <- struct{}{}:
			default:
			}
		}
	}); err != nil {
		t.Fatal(err)
	}
	go func() {
		for range dismiss { // a dialog blocks the page: close it so the test fails, not hangs
			_, _ = chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: false})
		}
	}()
	t.Cleanup(func() { close(dismiss) })
	// Recorded by the protocol, which the page's policy does not govern.
	if _, err := chromedp.Call(ctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{
		Source: `window.__violations = []; document.addEventListener("securitypolicyviolation", e => window.__violations.push(e.violatedDirective + " " + e.sample));`}); err != nil {
		t.Fatal(err)
	}
	do := doer(t, ctx)
	next := url.QueryEscape("/ui/" + payloads[1])
	do("log in", chromedp.Navigate(e.srv.URL+"/ui/login?next="+next), chromedp.WaitVisible(chromedp.CSS(`input[name=token]`)),
		chromedp.SendKeys(chromedp.CSS(`input[name=token]`), adminToken), chromedp.Submit(chromedp.CSS(`form.login`)),
		chromedp.WaitVisible(chromedp.CSS(`h1`)))
	paths := []string{"/ui/fleet?per=500", "/ui/pools", "/ui/sites", "/ui/leases", "/ui/traffic"}
	for _, p := range payloads {
		paths = append(paths, "/ui/fleet?q="+url.QueryEscape(p)+"&pool="+url.QueryEscape(p), "/ui/"+url.PathEscape(p))
	}
	for _, path := range paths {
		do(path, chromedp.Navigate(e.srv.URL+path), chromedp.WaitVisible(chromedp.CSS(`h1`)))
		// Hover every cell and input, for the handlers a broken-out attribute would add.
		if _, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("td,input,figure").forEach(n => n.dispatchEvent(new MouseEvent("mouseover", {bubbles: true}))); 0`)); err != nil {
			t.Fatalf("%s: hover: %v", path, err)
		}
		// Violations are reported in tasks of their own: read them two tasks later.
		v, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`new Promise(r => setTimeout(() => setTimeout(() => r(window.__violations), 0), 0))`, chromedp.EvalAwaitPromise))
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if len(v) > 0 {
			t.Errorf("%s: policy violations %v: markup was injected", path, v)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(dialogs) > 0 {
		t.Errorf("a payload ran: dialogs %q", dialogs)
	}
	if rows, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("img,iframe").length`)); err != nil || rows != 0 {
		t.Errorf("injected elements on the last page: %d (%v)", rows, err)
	}
}

// TestBrowserAttackCSRF: in Chromium, a page of another origin (127.0.0.2) that auto-submits
// forms to the console: its login form does not log the victim in as the attacker's token,
// and its release forms (urlencoded and text/plain, without the form token it cannot read)
// release nothing.
func TestBrowserAttackCSRF(t *testing.T) {
	browsertest.Chromium(t)
	e := newEnv(t, 0, nil, false)
	e.acquire(t, lease.Request{Namespaces: []string{"b"}, Holder: "leaser-b"}, "")
	admin := e.client(t)
	e.login(t, admin, adminToken)
	_, body := e.get(t, admin, "/ui/leases")
	handle := leaseHandle(t, body) // the attacker may know it: a handle is no secret
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	pages := map[string]string{
		"/login":   `<form method="post" action="` + e.srv.URL + `/ui/login"><input name="token" value="` + readerToken + `"></form>`,
		"/release": `<form method="post" action="` + e.srv.URL + `/ui/leases/release"><input name="lease" value="` + handle + `"></form>`,
		"/plain":   `<form method="post" enctype="text/plain" action="` + e.srv.URL + `/ui/leases/release"><input name="lease" value="` + handle + `"></form>`,
	}
	evil := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, `<!doctype html><body>`+pages[r.URL.Path]+`<script>document.forms[0].submit()</script>`)
	})}
	go func() { _ = evil.Serve(ln) }()
	t.Cleanup(func() { _ = evil.Close() })
	evilURL := "http://" + ln.Addr().String()

	ctx := newBrowser(t, "127.0.0.2")
	do := doer(t, ctx)
	do("log in", chromedp.Navigate(e.srv.URL+"/ui/leases"), chromedp.WaitVisible(chromedp.CSS(`input[name=token]`)),
		chromedp.SendKeys(chromedp.CSS(`input[name=token]`), adminToken), chromedp.Submit(chromedp.CSS(`form.login`)),
		chromedp.WaitVisible(chromedp.CSS(`form[action="/ui/leases/release"]`)))
	for _, path := range []string{"/login", "/release", "/plain"} {
		do(path, chromedp.Navigate(evilURL+path), chromedp.WaitVisible(chromedp.CSS(`main h1`)))
		got, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`main`)))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(got, "403") && !strings.Contains(got, "401") {
			t.Errorf("the attacker's %s form: the console answered %q, want a refusal", path, got)
		}
	}
	do("back to the console", chromedp.Navigate(e.srv.URL+"/ui/leases"), chromedp.WaitVisible(chromedp.CSS(`form.who`)))
	if who, _ := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`form.who b`))); who != "admin" {
		t.Errorf("after the attacker's login form the browser is logged in as %q, want still admin", who)
	}
	if n, _ := e.store.Count(context.Background()); n != 1 {
		t.Errorf("%d live leases after the attacker's release forms, want 1", n)
	}
}
