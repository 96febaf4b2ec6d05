package gateway_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/proxy-operator/proxy-operator/internal/fleet"
	"github.com/proxy-operator/proxy-operator/internal/squidtest"
	"github.com/proxy-operator/proxy-operator/internal/verdict"
	"github.com/proxy-operator/proxy-operator/providers"
	"github.com/proxy-operator/proxy-operator/server/gateway"
)

// need finds a program the test drives; a missing one skips the test, except in CI (CI set),
// where .ci/run installs it and its absence is a broken image.
func need(t *testing.T, names ...string) string {
	t.Helper()
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("%s not found and CI is set: .ci/run installs it", names[0])
	}
	t.Skipf("%s not found: skipping (CI makes this a failure)", names[0])
	return ""
}

// needPython is Debian's python3 with the given modules (python3-requests, python3-scrapy).
func needPython(t *testing.T, modules ...string) string {
	t.Helper()
	py := need(t, "/usr/bin/python3")
	for _, m := range modules {
		if err := exec.Command(py, "-c", "import "+m).Run(); err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("python module %s missing and CI is set", m)
			}
			t.Skipf("python module %s missing (apt-get install python3-%s)", m, m)
		}
	}
	return py
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.Env = append(os.Environ(), "NO_PROXY=", "no_proxy=")
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %v: %v\nstdout: %s\nstderr: %s", name, args, err, out.String(), errb.String())
	}
	return out.String()
}

// caFile writes the TLS site's certificate where a client can trust it.
func caFile(t *testing.T, der []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "site-ca.pem")
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCurlThroughTheGateway(t *testing.T) {
	curl := need(t, "curl")
	e := newEnv(t, 2, nil)
	s := newSite(t, nil)
	tlsSrv, _ := tlsSite(t)
	ca := caFile(t, tlsSrv.Certificate().Raw)
	proxy := "http://" + e.addr
	out := run(t, curl, "-sS", "-D", "-", "--proxy", proxy, "--proxy-user", "pool-web:"+token, s.url("/plain"))
	if !strings.Contains(out, "200 OK") || !strings.Contains(out, "hello from the site") || !strings.Contains(out, gateway.HeaderProxy+": crawl/p") {
		t.Errorf("curl plain HTTP through the gateway:\n%s", out)
	}
	out = run(t, curl, "-sS", "--cacert", ca, "--proxy", proxy, "--proxy-user", "pool-web-session-c1:"+token, tlsSrv.URL+"/")
	if out != "secret page over TLS" {
		t.Errorf("curl HTTPS through a CONNECT tunnel: %q", out)
	}
	out = run(t, curl, "-sS", "-o", "/dev/null", "-w", "%{http_code}", "--proxy", proxy, "--proxy-user", "pool-web:wrong-token", s.url("/"))
	if out != "407" {
		t.Errorf("curl with a wrong token: %s, want 407", out)
	}
}

const requestsScript = `
import json, sys, requests
proxy, plain, tls, ca, bad = sys.argv[1:6]
s = requests.Session()
s.proxies = {"http": proxy, "https": proxy}
out = {}
r = s.get(plain, timeout=30)
out["plain"] = [r.status_code, r.text, r.headers.get("X-Proxy-Operator-Proxy", "")]
r = s.get(tls, timeout=30, verify=ca)
out["tls"] = [r.status_code, r.text]
r = requests.get(plain, proxies={"http": bad}, timeout=30)
out["bad"] = [r.status_code, r.headers.get("Proxy-Authenticate", ""), r.text]
print(json.dumps(out))
`

func TestPythonRequestsThroughTheGateway(t *testing.T) {
	py := needPython(t, "requests")
	e := newEnv(t, 2, nil)
	s := newSite(t, nil)
	tlsSrv, _ := tlsSite(t)
	ca := caFile(t, tlsSrv.Certificate().Raw)
	proxy := e.proxyURL("pool-web-session-py", token).String()
	bad := e.proxyURL("pool-web-pool-api", token).String()
	var got struct {
		Plain []any `json:"plain"`
		TLS   []any `json:"tls"`
		Bad   []any `json:"bad"`
	}
	out := run(t, py, "-c", requestsScript, proxy, s.url("/"), tlsSrv.URL+"/", ca, bad)
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if fmt.Sprint(got.Plain[:2]) != "[200 hello from the site\n]" || !strings.HasPrefix(got.Plain[2].(string), "crawl/p") {
		t.Errorf("requests plain HTTP: %v", got.Plain)
	}
	if fmt.Sprint(got.TLS) != "[200 secret page over TLS]" {
		t.Errorf("requests HTTPS through a tunnel: %v", got.TLS)
	}
	if got.Bad[0] != 407.0 || !strings.Contains(got.Bad[1].(string), "Basic") || !strings.Contains(got.Bad[2].(string), "key pool given twice") {
		t.Errorf("requests with a malformed username: %v", got.Bad)
	}
}

const scrapyScript = `
import json, sys, scrapy
from scrapy.crawler import CrawlerProcess
proxy, urls = sys.argv[1], sys.argv[2:]
results = []
class GatewaySpider(scrapy.Spider):
    name = "gateway"
    custom_settings = {"LOG_LEVEL": "ERROR", "RETRY_ENABLED": False, "ROBOTSTXT_OBEY": False,
                       "TELNETCONSOLE_ENABLED": False, "HTTPERROR_ALLOW_ALL": True}
    def start_requests(self):
        for u in urls:
            # HttpProxyMiddleware turns the URL's credentials into Proxy-Authorization.
            yield scrapy.Request(u, meta={"proxy": proxy}, dont_filter=True)
    def parse(self, response):
        results.append({"url": response.url, "status": response.status, "body": response.text,
                        "proxy": response.headers.get("X-Proxy-Operator-Proxy", b"").decode()})
p = CrawlerProcess()
p.crawl(GatewaySpider)
p.start()
print(json.dumps(sorted(results, key=lambda r: r["url"])))
`

func TestScrapyThroughTheGateway(t *testing.T) {
	py := needPython(t, "scrapy")
	e := newEnv(t, 3, nil)
	s := newSite(t, nil)
	tlsSrv, _ := tlsSite(t)
	proxy := e.proxyURL("pool-web", token).String()
	out := run(t, py, "-c", scrapyScript, proxy, s.url("/a"), s.url("/b"), s.url("/c"), tlsSrv.URL+"/tls")
	var got []struct {
		URL, Body, Proxy string
		Status           int
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(out[strings.LastIndex(strings.TrimSpace(out), "\n")+1:])), &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if len(got) != 4 {
		t.Fatalf("scrapy fetched %d pages, want 4: %s", len(got), out)
	}
	for _, r := range got[:3] {
		if r.Status != 200 || r.Body != "hello from the site\n" || !strings.HasPrefix(r.Proxy, "crawl/p") {
			t.Errorf("scrapy plain page %s: %d %q via %q", r.URL, r.Status, r.Body, r.Proxy)
		}
	}
	if got[3].Status != 200 || got[3].Body != "secret page over TLS" {
		t.Errorf("scrapy HTTPS page through a tunnel: %+v", got[3])
	}
	if n := len(s.froms()); n != 3 {
		t.Errorf("site saw %d requests, want 3", n)
	}
}

func TestRealSquidUpstreamWithBasicAuth(t *testing.T) {
	// A queue wait shorter than Squid's 30 s cooldown: the request after the 429 is refused
	// rather than waiting it out.
	e := newEnv(t, 0, func(g *gateway.Gateway) { g.QueueWait = 5 * time.Second })
	tlsSrv, pool := tlsSite(t)
	_, tlsPort, _ := net.SplitHostPort(strings.TrimPrefix(tlsSrv.URL, "https://"))
	hash, err := bcrypt.GenerateFromPassword([]byte("squid-secret"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	dir := squidtest.Dir(t)
	htpasswd := filepath.Join(dir, "htpasswd")
	if err := os.WriteFile(htpasswd, []byte("gw:"+string(hash)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := squidtest.Start(t, squidtest.Options{Htpasswd: htpasswd, ConnectPorts: []string{tlsPort}})
	host, port, _ := net.SplitHostPort(addr)
	p, _ := strconv.Atoi(port)
	e.view.Upsert(fleet.Proxy{Key: "crawl/squid", UID: "squid", IP: host, Port: int32(p), MaxLeases: 10, Phase: "Ready",
		Attributes: map[string]string{"pool": "squid"}, Credentials: &providers.Credentials{Username: "gw", Password: "squid-secret"}})
	e.health.SetState("crawl/squid", verdict.Healthy, 5)
	var limited bool
	s := newSite(t, func(w http.ResponseWriter, r *http.Request, from string) {
		if limited {
			w.Header().Set("Retry-After", "30")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		_, _ = w.Write([]byte("via squid"))
	})
	c := e.client("pool-squid", token)
	resp, body := get(t, c, s.url("/"))
	if resp.StatusCode != http.StatusOK || body != "via squid" || resp.Header.Get(gateway.HeaderProxy) != "crawl/squid" {
		t.Fatalf("plain HTTP through Squid: %d %q via %q", resp.StatusCode, body, resp.Header.Get(gateway.HeaderProxy))
	}
	if h := s.headers()[0]; h.Get("Proxy-Authorization") != "" {
		t.Errorf("Squid passed a Proxy-Authorization to the site")
	}
	tc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		Proxy: http.ProxyURL(e.proxyURL("pool-squid", token)), TLSClientConfig: tlsConfig(pool)}}
	resp, body = get(t, tc, tlsSrv.URL+"/")
	if resp.StatusCode != http.StatusOK || body != "secret page over TLS" {
		t.Errorf("HTTPS through a tunnel via Squid: %d %q", resp.StatusCode, body)
	}
	// A rate limit through Squid, with nowhere else to go: the 429 reaches the client and
	// Squid cools for the site.
	limited = true
	resp, _ = get(t, c, s.url("/again"))
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get(gateway.HeaderTries) != "1" {
		t.Errorf("429 through Squid: %d after %s tries, want the 429 after 1", resp.StatusCode, resp.Header.Get(gateway.HeaderTries))
	}
	resp, body = get(t, c, s.url("/cooling"))
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, "cooling down for "+s.addr) {
		t.Errorf("after the 429: %d %q, want 503 with Squid cooling for the site", resp.StatusCode, body)
	}
}

func tlsConfig(pool *x509.CertPool) *tls.Config { return &tls.Config{RootCAs: pool} }
