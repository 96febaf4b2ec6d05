package gateway_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/chromedp"

	"github.com/proxy-operator/proxy-operator/internal/browsertest"
	"github.com/proxy-operator/proxy-operator/internal/netpolicy"
	"github.com/proxy-operator/proxy-operator/server/gateway"
)

// These tests drive Debian's headless Chromium with chromedp (decision 0291) through the
// gateway the three ways a browser can use it without a local relay: an HTTP proxy whose 407
// the automation protocol answers, an allowlisted source, and a team port; and SOCKS5 from an
// allowlisted source to a self-signed TLS site.

// browserLogin is what a browser answers a proxy's 407 with, through CDP's Fetch domain.
type browserLogin struct{ user, pass string }

// browse starts a fresh headless Chromium (a new empty profile) whose proxy is proxy, loads
// pageURL and returns the page's text and how many times the proxy asked for credentials.
// With login, the 407 is answered from the automation protocol; without, nothing answers it.
func browse(t *testing.T, proxy string, login *browserLogin, pageURL string, flags ...chromedp.ExecAllocatorOption) (string, int) {
	t.Helper()
	bctx, out := browsertest.Start(t, slices.Concat([]chromedp.ExecAllocatorOption{
		chromedp.ProxyServer(proxy),
		// Chromium bypasses any proxy for loopback unless told otherwise; the test sites are there.
		chromedp.Flag("proxy-bypass-list", "<-loopback>"),
	}, flags)...)
	ctx, cancel := context.WithTimeout(bctx, 60*time.Second)
	defer cancel()
	var asked atomic.Int32
	if login != nil {
		// The listener must not call the browser itself: it hands each answer to a goroutine.
		err := chromedp.Listen(bctx, func(ev any) {
			switch ev := ev.(type) {
			case *fetch.EventAuthRequired:
				asked.Add(1)
				resp := &fetch.AuthChallengeResponse{Response: fetch.AuthChallengeResponseResponseCancelAuth}
				if ev.AuthChallenge != nil && ev.AuthChallenge.Source == fetch.AuthChallengeSourceProxy {
					// Only the proxy's challenge is ours to answer.
					resp = &fetch.AuthChallengeResponse{Response: fetch.AuthChallengeResponseResponseProvideCredentials,
						Username: login.user, Password: login.pass}
				}
				go func() {
					_, _ = chromedp.Call(ctx, fetch.ContinueWithAuth, fetch.ContinueWithAuthParams{RequestID: ev.RequestID, AuthChallengeResponse: resp})
				}()
			case *fetch.EventRequestPaused:
				go func() {
					_, _ = chromedp.Call(ctx, fetch.ContinueRequest, fetch.ContinueRequestParams{RequestID: ev.RequestID})
				}()
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		handle := true
		if _, err := chromedp.Call(ctx, fetch.Enable, fetch.EnableParams{HandleAuthRequests: &handle}); err != nil {
			t.Fatalf("Fetch.enable: %v", err)
		}
	}
	// Navigate returns once the page has loaded: the readiness, no fixed sleep.
	if err := chromedp.Do(ctx, chromedp.Navigate(pageURL)); err != nil {
		t.Fatalf("chromium through %s loading %s: %v\nchromium's output:\n%s", proxy, pageURL, err, out.String())
	}
	text, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText`))
	if err != nil {
		t.Fatalf("the page's text: %v", err)
	}
	return text, int(asked.Load())
}

// quietEgress is the browser tests' egress policy: loopbackPolicy's, and names under .com,
// .net and .org refused by name. Whatever its flags say, Chromium still calls Google's hosts
// (sign-in, variations, updates) through its proxy; the gateway refuses them before any upstream
// would look the names up, so nothing leaves loopback, not even a DNS query.
func quietEgress(t *testing.T) func(*gateway.Gateway) {
	t.Helper()
	cfg := loopbackConfig()
	cfg.ClusterSuffixes = append(slices.Clone(netpolicy.DefaultClusterSuffixes), "com", "net", "org")
	p, err := netpolicy.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return func(g *gateway.Gateway) { g.Egress = p }
}

// wantOnlyLoopbackTargets checks that every target the gateway logged (its refusals and
// failures) is a test site's, or a name quietEgress refused: no other name reached an upstream.
func wantOnlyLoopbackTargets(t *testing.T, e *env) {
	t.Helper()
	for _, line := range strings.Split(e.logs.String(), "\n") {
		if strings.Contains(line, "egress policy") {
			continue
		}
		for _, m := range targetInLog.FindAllStringSubmatch(line, -1) {
			if host := m[1]; host != "127.0.0.1" && host != "localhost" {
				t.Errorf("a target beyond loopback reached the upstreams: %s", line)
			}
		}
	}
}

var targetInLog = regexp.MustCompile(`(?:target=|tunnel to |not for )"?\[?([^ :"\]]+)`)

// wantFromUpstreams checks that the site saw every request from one of e's upstreams, never
// from the browser directly (127.0.0.1).
func wantFromUpstreams(t *testing.T, e *env, s *site) {
	t.Helper()
	var ups []string
	for _, ip := range e.ups {
		ups = append(ups, ip)
	}
	from := s.froms()
	if len(from) == 0 {
		t.Fatal("the site saw no request")
	}
	for _, ip := range from {
		if !slices.Contains(ups, ip) {
			t.Errorf("the site saw a request from %s, not an upstream (%v)", ip, ups)
		}
	}
}

// TestBrowserProxyPasswordFromCDP: Chromium takes no proxy password on its command line; the
// automation protocol answers the gateway's 407 (Fetch.authRequired) with the username grammar
// and a discovery token.
func TestBrowserProxyPasswordFromCDP(t *testing.T) {
	e := newEnv(t, 2, quietEgress(t))
	s := newSite(t, nil)
	text, asked := browse(t, "http://"+e.addr, &browserLogin{user: "pool-web-session-b1", pass: token}, s.url("/"))
	if strings.TrimSpace(text) != "hello from the site" {
		t.Errorf("page text %q", text)
	}
	if asked < 1 {
		t.Error("the proxy never asked for credentials: the 407 path was not taken")
	}
	wantFromUpstreams(t, e, s)
	wantOnlyLoopbackTargets(t, e)
}

// TestBrowserAllowlistedSource: from an allowlisted source (decision 0278) Chromium needs no
// credentials at all.
func TestBrowserAllowlistedSource(t *testing.T) {
	e := allowlistEnv(t, quietEgress(t))
	s := newSite(t, nil)
	text, _ := browse(t, "http://"+e.addr, nil, s.url("/"))
	if strings.TrimSpace(text) != "hello from the site" {
		t.Errorf("page text %q", text)
	}
	wantFromUpstreams(t, e, s)
	wantOnlyLoopbackTargets(t, e)
}

// TestBrowserTeamPort: a token's own HTTP port with a username preset (decision 0279) takes
// Chromium without credentials; the gateway allowlists nothing, so the port is what admits it.
func TestBrowserTeamPort(t *testing.T) {
	e := newEnv(t, 2, quietEgress(t))
	s := newSite(t, nil)
	port := e.teamPort(t, "http", "pool-web")
	text, _ := browse(t, "http://"+port, nil, s.url("/"))
	if strings.TrimSpace(text) != "hello from the site" {
		t.Errorf("page text %q", text)
	}
	wantFromUpstreams(t, e, s)
	wantOnlyLoopbackTargets(t, e)
}

// TestBrowserSOCKSAllowlistedTLS: Chromium cannot authenticate to SOCKS5, so from an
// allowlisted source it loads a self-signed HTTPS site through the gateway's SOCKS5 listener.
func TestBrowserSOCKSAllowlistedTLS(t *testing.T) {
	e := allowlistEnv(t, quietEgress(t))
	addr := e.socks(t)
	srv, _ := tlsSite(t)
	// By address: Chromium sends it as a name (ATYP 3), which the gateway takes as the address
	// it spells (decision 0292; 0277 refused it with 0x08, and no site by address loaded).
	text, _ := browse(t, "socks5://"+addr, nil, "https://"+srv.Listener.Addr().String()+"/", chromedp.Flag("ignore-certificate-errors", true))
	if strings.TrimSpace(text) != "secret page over TLS" {
		t.Errorf("page text %q", text)
	}
	wantOnlyLoopbackTargets(t, e)
}

// TestBrowserREADMEExamples runs the README's Playwright and Puppeteer examples
// (clients/browser/*.mjs, in the README byte for byte) with Node.js against the gateway, each
// answering the 407 its own way: Playwright's proxy username and password, Puppeteer's
// page.authenticate. `npm ci --prefix clients/browser` installs the pinned playwright-core and
// puppeteer-core (.ci/run does); they drive Debian's Chromium, they download no browser.
func TestBrowserREADMEExamples(t *testing.T) {
	chromium := need(t, "chromium", "/usr/bin/chromium")
	node := need(t, "node")
	dir := filepath.Join("..", "..", "clients", "browser")
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, lib := range []string{"playwright-core", "puppeteer-core"} {
		if _, err := os.Stat(filepath.Join(dir, "node_modules", lib, "package.json")); err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("%s not installed and CI is set: .ci/run runs npm ci --prefix clients/browser", lib)
			}
			t.Skipf("%s not installed: npm ci --prefix clients/browser (CI makes this a failure)", lib)
		}
	}
	e := newEnv(t, 2, quietEgress(t))
	s := newSite(t, nil)
	for _, script := range []string{"playwright.mjs", "puppeteer.mjs"} {
		t.Run(script, func(t *testing.T) {
			src, err := os.ReadFile(filepath.Join(dir, script))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(readme), "```js\n"+string(src)+"```\n") {
				t.Errorf("README.md does not show clients/browser/%s byte for byte in a js block: copy it in", script)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, node, script, s.url("/"))
			cmd.Dir = dir
			cmd.Env = append(os.Environ(), "GATEWAY="+e.addr, "DISCOVERY_TOKEN="+token, "CHROMIUM="+chromium)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("node %s: %v\n%s", script, err, out)
			}
			// "200 <upstream> <page text>": the upstream that carried it, as the gateway names it.
			f := strings.Fields(string(out))
			if len(f) < 2 || f[0] != "200" || !strings.Contains(string(out), "hello from the site") {
				t.Errorf("node %s printed %q, want 200, the upstream and the page", script, out)
			}
		})
	}
	wantFromUpstreams(t, e, s)
	wantOnlyLoopbackTargets(t, e)
}
