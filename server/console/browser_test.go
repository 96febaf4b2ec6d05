package console_test

import (
	"context"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"

	"github.com/proxy-operator/proxy-operator/client"
	"github.com/proxy-operator/proxy-operator/internal/browsertest"
	"github.com/proxy-operator/proxy-operator/internal/kube"
	"github.com/proxy-operator/proxy-operator/server"
	"github.com/proxy-operator/proxy-operator/server/gateway"
	"github.com/proxy-operator/proxy-operator/test/crawlfarm"
)

// The browser test drives Debian's headless Chromium with chromedp (decision 0291) against a
// real operator with its demo fleet and -console: log in, see the fleet, sort it, see that
// drain is unavailable without a cluster and release a crawler's lease instead, and see a site
// of the crawl farm cooling after it answered the gateway 429; and, against a real
// kube-apiserver, drain a Proxy from the page. With CONSOLE_SCREENSHOTS=1 they write a
// screenshot of every page to docs/console/ (the README links them).

const crawlerToken = "crawler-token-0123456789abcdef"

// startOperator runs the real operator in process: a demo fleet of 3, no cluster, the
// console on the discovery listener, an admin token and a crawler's lease token, and the
// gateway, which may reach loopback targets (the crawl farm's sites).
func startOperator(t *testing.T) *server.Operator {
	t.Helper()
	t.Setenv("KUBECONFIG", "")
	tokens := filepath.Join(t.TempDir(), "tokens.yaml")
	if err := os.WriteFile(tokens, []byte("tokens:\n"+
		"  - {name: on-call, token: "+adminToken+", namespaces: [\"*\"], right: admin}\n"+
		"  - {name: crawler, token: "+crawlerToken+", namespaces: [\"*\"], right: lease}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	op, err := server.New(server.Config{Hooks: server.HooksConfig{Addr: "127.0.0.1:0"},
		Discovery: server.DiscoveryAPIConfig{Addr: "127.0.0.1:0", TokenFile: tokens, Console: true},
		Demo:      server.DemoConfig{Proxies: 3},
		Gateway:   gateway.Config{Addr: "127.0.0.1:0"},
		Egress:    server.EgressConfig{TargetAllow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- op.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return op
}

// waitFor polls cond until it holds: the readiness of something asynchronous, never a time.
func waitFor(t *testing.T, what string, limit time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, limit)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// newBrowser starts Chromium for the console on 127.0.0.1 and the other loopback addresses
// given (a hostile page's origin).
func newBrowser(t *testing.T, also ...string) context.Context {
	t.Helper()
	rules := "MAP * ~NOTFOUND , EXCLUDE 127.0.0.1"
	for _, a := range also {
		rules += " , EXCLUDE " + a
	}
	bctx, _ := browsertest.Start(t, chromedp.WindowSize(1400, 900),
		// Loopback only: Chromium's own calls go to a proxy that is not there and resolve no
		// name; the console on 127.0.0.1 bypasses the proxy, as loopback always does.
		chromedp.ProxyServer("http://127.0.0.1:9"),
		chromedp.Flag("host-resolver-rules", rules))
	ctx, cancel := context.WithTimeout(bctx, 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// doer runs chromedp steps in ctx and fails the test naming what they were doing.
func doer(t *testing.T, ctx context.Context) func(what string, steps ...chromedp.Action[chromedp.Void]) {
	return func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, steps...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
}

func TestBrowser(t *testing.T) {
	browsertest.Chromium(t) // skip before starting an operator
	op := startOperator(t)
	base := "http://" + op.DiscoveryAddr()
	ctx := newBrowser(t)
	crawler, err := client.New(base, client.WithToken(crawlerToken))
	if err != nil {
		t.Fatal(err)
	}
	yes := true
	waitFor(t, "the demo fleet healthy", 2*time.Minute, func() bool {
		l, err := crawler.List(ctx, client.ListOptions{Healthy: &yes})
		return err == nil && l.Count == 3
	})
	shots := os.Getenv("CONSOLE_SCREENSHOTS") == "1"
	shot := func(name string) {
		t.Helper()
		if !shots {
			return
		}
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join("..", "..", "docs", "console", name+".png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	text := func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("text of %s: %v", sel, err)
		}
		return s
	}
	do := doer(t, ctx)

	// Log in: the fleet without a session sends the browser to the login page.
	do("open the console", chromedp.Navigate(base+"/ui/fleet?sort=latency"), chromedp.WaitVisible(chromedp.CSS(`input[name=token]`)))
	shot("login")
	do("log in", chromedp.SendKeys(chromedp.CSS(`input[name=token]`), adminToken), chromedp.Submit(chromedp.CSS(`form.login`)),
		chromedp.WaitVisible(chromedp.CSS(`table#fleet`)))
	if loc, _ := chromedp.Run(ctx, chromedp.Location()); !strings.HasSuffix(loc, "/ui/fleet?sort=latency") {
		t.Errorf("after login at %s, want back at the page asked for", loc)
	}
	rows, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("table#fleet tbody tr").length`))
	if err != nil || rows != 3 {
		t.Fatalf("fleet rows %d (%v), want the 3 demo proxies", rows, err)
	}
	if got := text("body"); !strings.Contains(got, "Drain unavailable: no Kubernetes client") || !strings.Contains(got, "on-call") {
		t.Errorf("the fleet page does not say who is logged in or why drain is unavailable:\n%s", got)
	}
	shot("fleet")

	// Sort by name, descending: the server sorts, through the column's link.
	do("sort by name", chromedp.Click(chromedp.CSS(`table#fleet thead th:first-child a`)), chromedp.WaitVisible(chromedp.CSS(`th[aria-sort=ascending]`)),
		chromedp.Click(chromedp.CSS(`table#fleet thead th:first-child a`)), chromedp.WaitVisible(chromedp.CSS(`th[aria-sort=descending]`)))
	names, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll("table#fleet td.name")).map(td => td.textContent)`))
	if err != nil || !slices.IsSortedFunc(names, func(a, b string) int { return strings.Compare(b, a) }) || len(names) != 3 {
		t.Errorf("names after sorting descending: %v (%v)", names, err)
	}

	// A crawler fetches a rate-limited site of the crawl farm through the gateway, faster than
	// it allows: the site answers 429, the gateway reports it, and the Sites page shows the
	// site cooling on the proxy that was refused. (No session in the username: a session keeps
	// its upstream through a 429 and no cooldown is recorded, decision 0269.)
	// Stricter than the gateway's first pace (one a second per upstream) so that it gets 429s
	// before it learns, with a Retry-After that outlasts the page's load.
	limited := crawlfarm.Site{Name: "issue-34", Addr: "127.0.10.34:0", RPS: 0.2, Burst: 1, RetryAfter: time.Minute,
		Tolerance: 5, Ban: time.Minute, RepeatBan: time.Minute}
	farm, err := crawlfarm.Start([]crawlfarm.Site{limited})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(farm.Close)
	site := farm.Hosts()[0]
	viaGateway := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{
		Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: op.GatewayAddr(), User: url.UserPassword("any", crawlerToken)})}}
	// Six at once: the site allows one per 5 s per source address, the demo proxies are three.
	var wg sync.WaitGroup
	for range 6 {
		wg.Go(func() {
			resp, err := viaGateway.Get("http://" + site + "/page")
			if err != nil {
				t.Errorf("through the gateway: %v", err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		})
	}
	wg.Wait()
	if st := farm.Stats().Total; st.Limited == 0 {
		t.Fatalf("6 requests at once through the gateway, no 429 from the farm: %+v", st)
	}
	waitFor(t, "the gateway's report of the 429", 10*time.Second, func() bool {
		sl, err := crawler.Sites(ctx, 0)
		return err == nil && sl.CoolingTotal > 0
	})
	do("open sites", chromedp.Navigate(base+"/ui/sites"), chromedp.WaitVisible(chromedp.CSS(`div.cooldown`)))
	if got := text("tbody"); !strings.Contains(got, site) || !strings.Contains(got, ": rate_limited") {
		t.Errorf("the Sites page %q: want %s cooling (rate_limited)", got, site)
	}
	shot("sites")

	l, err := crawler.Lease(ctx, client.LeaseRequest{Selector: map[string]string{"demo": "true"}, Target: "shop.example"})
	if err != nil {
		t.Fatal(err)
	}

	// The Leases page shows the crawler's lease by token; release it from the console.
	do("open leases", chromedp.Navigate(base+"/ui/leases"), chromedp.WaitVisible(chromedp.CSS(`form[action="/ui/leases/release"]`)))
	if got := text("main"); !strings.Contains(got, "crawler") || strings.Contains(got, l.ID) {
		t.Errorf("the Leases page: want the holder's token name and never the lease ID:\n%s", got)
	}
	shot("leases")
	do("release", chromedp.Click(chromedp.CSS(`form[action="/ui/leases/release"] button`)), chromedp.WaitVisible(chromedp.CSS(`h1`)))
	waitFor(t, "the release", 10*time.Second, func() bool {
		_, err := crawler.Renew(ctx, l.ID, 0)
		return err != nil
	})

	do("open pools", chromedp.Navigate(base+"/ui/pools"), chromedp.WaitVisible(chromedp.CSS(`h1`)))
	shot("pools")
	do("open traffic", chromedp.Navigate(base+"/ui/traffic"), chromedp.WaitVisible(chromedp.CSS(`h1`)))
	if shots {
		// The first point comes one sampling interval after start: wait for a chart.
		waitFor(t, "a traffic chart", time.Minute, func() bool {
			_ = chromedp.Do(ctx, chromedp.Reload())
			n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("figure.chart polyline[points*=' ']").length`))
			return err == nil && n > 0
		})
	}
	shot("traffic")

	// Log out: the session ends, the fleet asks for a login again.
	do("log out", chromedp.Click(chromedp.CSS(`form.who button`)), chromedp.WaitVisible(chromedp.CSS(`input[name=token]`)),
		chromedp.Navigate(base+"/ui/fleet"), chromedp.WaitVisible(chromedp.CSS(`input[name=token]`)))
}

// TestBrowserDrain: in the browser, an admin drains a Proxy of a real kube-apiserver from the
// Fleet page; the label appears on the object, the Proxy's next sync through the real hook
// takes it out of the lease rotation, and the page then offers Undrain.
func TestBrowserDrain(t *testing.T) {
	browsertest.Chromium(t)
	d := newDrainEnv(t) // skips without KUBEBUILDER_ASSETS
	ctx := newBrowser(t)
	do := doer(t, ctx)
	do("log in", chromedp.Navigate(d.srv.URL+"/ui/fleet?ns=crawl"), chromedp.WaitVisible(chromedp.CSS(`input[name=token]`)),
		chromedp.SendKeys(chromedp.CSS(`input[name=token]`), adminToken), chromedp.Submit(chromedp.CSS(`form.login`)),
		chromedp.WaitVisible(chromedp.CSS(`table#fleet form[action="/ui/proxies/drain"] button`)))
	do("drain", chromedp.Click(chromedp.CSS(`table#fleet form[action="/ui/proxies/drain"] button`)))
	waitFor(t, "the draining label on the Proxy", 30*time.Second, func() bool {
		u, err := d.dyn.Resource(kube.ProxyResource).Namespace("crawl").Get(ctx, "px-1", metav1.GetOptions{})
		return err == nil && u.GetLabels()[v1.PoolDrainingLabel] == "true"
	})
	d.sync(t)
	if d.leasable(t) {
		t.Fatal("the drained Proxy is still leased after its sync")
	}
	do("reload", chromedp.Navigate(d.srv.URL+"/ui/fleet?ns=crawl"), chromedp.WaitVisible(chromedp.CSS(`table#fleet`)))
	got, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`table#fleet tbody`)))
	if err != nil || !strings.Contains(got, "Undrain") || !strings.Contains(got, "yes") {
		t.Fatalf("the fleet row after the drain: %q (%v), want draining yes and an Undrain button", got, err)
	}
	if os.Getenv("CONSOLE_SCREENSHOTS") == "1" {
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join("..", "..", "docs", "console", "fleet-drain.png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
