package reliability

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// attackForgedHooks: anyone who reached the hook port controlled the fleet (issue 21, item 4):
// a forged /finalize with a victim's name and uid deleted its instance, a forged /sync with an
// External endpoint of the attacker's changed what team-a's leases handed out. The hooks now
// serve TLS and demand the bearer token: every forged call, without a token or with a wrong
// one, is 401, logged and counted, and changes nothing; plain HTTP to the TLS port is not
// served. 16 workers forge calls for dur while the legitimate traffic runs.
func attackForgedHooks(t *testing.T, c *child, good proxyDesc, dur time.Duration) {
	if c.hookTLS == nil {
		t.Fatal("the forged-hook attack needs the hooks as shipped (TLS and a token)")
	}
	// What the forgers send: the legitimate Proxy's own name and uid, finalizing (deletes its
	// instance), and a sync that turns it External on an endpoint of the attacker's.
	evilSpec := map[string]any{"mode": "External", "endpoint": map[string]any{"host": "192.0.2.66", "port": 3128}, "attributes": map[string]any{"geo": "legit"}}
	evil := good
	evil.spec = evilSpec
	pool := []byte(`{"parent":{"apiVersion":"crawl.example.com/v1alpha1","kind":"ProxyPool","metadata":{"name":"p","namespace":"team-a","uid":"u"},"spec":{"replicas":1000}},"children":{}}`)
	forged := []struct {
		path, token string
		body        []byte
	}{
		{"/sync", "", evil.body(false, nil)},
		{"/finalize", "", good.body(true, nil)},
		{"/customize", "", []byte(`{"controller":{},"parent":{}}`)},
		{"/pools/sync", "", pool},
		{"/pools/finalize", "", pool},
		{"/sync", "wrong-token-0123456789abcdef", evil.body(false, nil)},
		{"/finalize", "Basic " + attackHookToken, good.body(true, nil)},
		{"/finalize", attackHookToken + "x", good.body(true, nil)},
	}
	for _, f := range forged {
		code, b, err := forgedPost(c, f.path, f.token, f.body)
		if err != nil || code != http.StatusUnauthorized {
			t.Errorf("forged %s (token %q): %d %v %.200s, want 401", f.path, redact(f.token), code, err, b)
		}
	}
	// Plain HTTP to the TLS listener: no hook answers it.
	if conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", c.hookPort), 10*time.Second); err == nil {
		_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
		body := string(good.body(true, nil))
		fmt.Fprintf(conn, "POST /finalize HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		if res, err := http.ReadResponse(bufio.NewReader(conn), nil); err == nil {
			res.Body.Close()
			if res.StatusCode < 400 {
				t.Errorf("plain HTTP /finalize to the TLS hook port: %d, want it refused", res.StatusCode)
			}
		}
		conn.Close()
	}

	c.resetPeak()
	l := c.startLegit(good)
	var cs codes
	var sent atomic.Int64
	deadline := time.Now().Add(dur)
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; time.Now().Before(deadline); i++ {
				f := forged[i%len(forged)]
				code, _, err := forgedPost(c, f.path, f.token, f.body)
				if err != nil {
					if isConnClosed(err) {
						continue
					}
					t.Errorf("forged %s: %v", f.path, err)
					return
				}
				sent.Add(1)
				cs.add(code)
			}
		}()
	}
	wg.Wait()
	t.Logf("ATTACK %-22s %d forged calls in %v", "forged hooks", sent.Load(), dur)
	cs.check(t, "forged hooks", http.StatusUnauthorized, http.StatusTooManyRequests)
	l.finish(t, "forged hooks", c)

	// Nothing changed: the legitimate Proxy is still Ready on its instance, listed with its
	// own address, and no instance was deleted.
	after := c.syncUntil(t, &good, "answered", func(syncAnswer) bool { return true })
	if after.Status.Phase != "Ready" || after.Status.IP == "192.0.2.66" {
		t.Errorf("legit after the forged calls: %+v, want Ready on its own instance", after.Status)
	}
	code, b, err := get(c.discURL+"/v1/proxies?attr.geo=legit", adminToken)
	if err != nil || code != http.StatusOK || !strings.Contains(string(b), `"team-a/legit"`) || strings.Contains(string(b), "192.0.2.66") {
		t.Errorf("list after the forged calls: %d %v %.300s, want team-a/legit on its own address", code, err, b)
	}
	for _, line := range strings.Split(c.log.String(), "\n") {
		if strings.Contains(line, "instance delete started") && strings.Contains(line, `"team-a/legit"`) {
			t.Errorf("the legitimate Proxy's instance was deleted: %s", line)
		}
	}
	if !strings.Contains(c.log.String(), "hook call unauthorized") {
		t.Error("no 401 was logged")
	}
	// /metrics is open (a GET without a token) and served over TLS like every hook path.
	var m strings.Builder
	if res, err := c.hookClient.Get(c.hookURL + "/metrics"); err != nil {
		t.Errorf("GET /metrics: %v", err)
	} else {
		sc := bufio.NewScanner(res.Body)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "proxy_operator_hook_unauthorized_total") {
				m.WriteString(sc.Text() + "; ")
			}
		}
		res.Body.Close()
	}
	t.Logf("ATTACK %-22s counted: %s", "forged hooks", m.String())
	if ms := m.String(); !strings.Contains(ms, `reason="missing_token"`) || strings.Contains(ms, `reason="missing_token"} 0;`) {
		t.Errorf("the 401s were not counted: %s", ms)
	}
}

// forgedPost is a hook call over TLS (the listener's CA: the attacker reached the port, the
// certificate is public) with the given Authorization value: "" none, a bare value "Bearer X".
func forgedPost(c *child, path, auth string, body []byte) (int, []byte, error) {
	cl := forgedClient(c.hookTLS)
	if auth != "" && !strings.Contains(auth, " ") {
		auth = "Bearer " + auth
	}
	req, err := http.NewRequest(http.MethodPost, c.hookURL+path, strings.NewReader(string(body)))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	res, err := cl.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	var sb strings.Builder
	_, err = bufio.NewReader(res.Body).WriteTo(&sb)
	return res.StatusCode, []byte(sb.String()), err
}

var (
	forgedOnce sync.Once
	forgedCl   *http.Client
)

func forgedClient(cfg *tls.Config) *http.Client {
	forgedOnce.Do(func() {
		// The attacker's own address: its failed logins are throttled (decision 0257), the
		// legitimate callers on 127.0.0.1 are not.
		forgedCl = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg, MaxIdleConnsPerHost: 16,
			DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}).DialContext}}
	})
	return forgedCl
}

func redact(tok string) string {
	if strings.Contains(tok, attackHookToken) {
		return strings.ReplaceAll(tok, attackHookToken, "<the token>")
	}
	return tok
}
