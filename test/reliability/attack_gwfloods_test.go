package reliability

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// Issue 30's gateway rows, each against the operator binary of TestHostileInput with its
// gateway (-gateway-addr), the legitimate Metacontroller, crawler and gateway crawler running
// beside it (startLegit), peak RSS and legitimate p99 checked by legit.finish. The counts are
// the when a flood lasts 60 s (make attack) and scale down with ATTACK_SECONDS, to a
// tenth at least (make test's 2 s). Connections come from their own loopback source address
// per row, so no row runs out of ephemeral ports for another.

// legitSiteBody is what the legitimate site answers: a gateway answer without it came from
// somewhere else.
const legitSiteBody = "legit-site"

// startGatewayLegit starts the site the legitimate crawler fetches through the gateway at
// gwAddr, and waits until the gateway relays to it (the fleet's first healthy upstream).
func (c *child) startGatewayLegit(t *testing.T, gwAddr string) {
	t.Helper()
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, legitSiteBody)
	}))
	t.Cleanup(site.Close)
	c.gwAddr, c.siteURL = gwAddr, site.URL+"/page"
	// A tenant's crawler: team-a's token as the proxy password, any upstream of team-a. A
	// connection per request, as legitDisc (idle keep-alives are the gateway's to evict).
	proxy := &url.URL{Scheme: "http", Host: gwAddr, User: url.UserPassword("", teamAToken)}
	c.gwClient = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(proxy), DisableKeepAlives: true}}
}

// legitGateway is one legitimate fetch through the gateway: "" when it was answered 200 by the
// legitimate site through one of team-a's upstreams, else what went wrong.
func (c *child) legitGateway() string {
	res, err := c.gwClient.Get(c.siteURL)
	if err != nil {
		return fmt.Sprintf("gateway fetch: %v", err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, 4096))
	up := res.Header.Get("X-Proxy-Operator-Proxy")
	switch {
	case err != nil || res.StatusCode != http.StatusOK:
		return fmt.Sprintf("gateway fetch: %d %v %.200s", res.StatusCode, err, b)
	case string(b) != legitSiteBody:
		return fmt.Sprintf("gateway fetch: answered %.200q, not the legitimate site's page (cross-tenant?)", b)
	case !strings.HasPrefix(up, "team-a/"):
		return fmt.Sprintf("gateway fetch: team-a's request went through upstream %q, not one of team-a's (cross-tenant)", up)
	}
	return ""
}

// waitGateway waits until the legitimate crawler's gateway fetch succeeds (the gateway sees
// the fleet's health a moment after the syncs).
func (c *child) waitGateway(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		bad := c.legitGateway()
		if bad == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the gateway does not relay the legitimate crawler's fetch: %s", bad)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// shed counts the gateway's own 503s by why (X-Proxy-Operator-Error; "conn_limit" for the
// listener's answer at its connection limit), which codes.check would take for failures: a
// 503 the gateway did not explain is counted in cs, and fails the row.
type shed struct {
	mu sync.Mutex
	m  map[string]int
}

func (s *shed) add(cs *codes, res *http.Response, body []byte) {
	why := res.Header.Get("X-Proxy-Operator-Error")
	if why == "" && bytes.Contains(body, []byte("connection limit")) {
		why = "conn_limit"
	}
	switch why {
	case "at_capacity", "queue_full", "conn_limit":
	default:
		cs.add(res.StatusCode)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]int{}
	}
	s.m[why]++
}

// attackCount is n, the count for a 60 s flood, scaled to dur (a tenth at least).
func attackCount(n int, dur time.Duration) int {
	return max(1, int(float64(n)*min(1, max(0.1, dur.Seconds()/60))))
}

// heldRoom is how many connections the test process may hold at once: its own descriptor
// limit (Go raises the soft limit to the hard one) less 1024 for everything else it opens.
func heldRoom() int {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 1024
	}
	return max(256, int(min(rl.Cur, 1<<20))-1024)
}

// held is the connections an attack keeps open, at most room: beyond, the oldest is closed
// (an attacker recycling its descriptors).
type held struct {
	mu    sync.Mutex
	room  int
	conns []net.Conn
	peak  int
}

func (h *held) add(cn net.Conn) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.conns) >= h.room {
		h.conns[0].Close()
		h.conns = h.conns[1:]
	}
	h.conns = append(h.conns, cn)
	h.peak = max(h.peak, len(h.conns))
}

func (h *held) closeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, cn := range h.conns {
		cn.Close()
	}
	h.conns = nil
}

// flood runs fn(i) for i in [0, n) on 32 workers.
func flood(n int, fn func(i int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				fn(i)
			}
		}()
	}
	wg.Wait()
}

// holdUntil sleeps until start+dur, so a flood is held for its whole duration.
func holdUntil(start time.Time, dur time.Duration) {
	if d := time.Until(start.Add(dur)); d > 0 {
		time.Sleep(d)
	}
}

// gatewayDialer dials the gateway from the loopback address ip, 5 s at most: a flood past the
// listen backlog may see its SYNs dropped.
func gatewayDialer(ip string) *net.Dialer {
	d := fromAddr(ip)
	d.Timeout = 5 * time.Second
	return d
}

// attackGatewayIdle407: 15,000 connections each send one request without credentials, read
// the 407 and stay open, idle (issue 30: 489 MiB, held for the 2 min idle timeout). They are
// the first evicted, and each closes after a short idle.
func attackGatewayIdle407(t *testing.T, c *child, good proxyDesc, dur time.Duration) {
	n := attackCount(15000, dur)
	h := &held{room: heldRoom()}
	defer h.closeAll()
	c.resetPeak()
	l := c.startLegit(good)
	start := time.Now()
	var cs codes
	var sh shed
	var failed atomic.Int64
	d := gatewayDialer("127.0.0.10")
	flood(n, func(int) {
		cn, err := d.Dial("tcp", c.gwAddr)
		if err != nil {
			failed.Add(1)
			return
		}
		h.add(cn)
		_ = cn.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.WriteString(cn, "GET http://site.example/ HTTP/1.1\r\nHost: site.example\r\n\r\n"); err != nil {
			failed.Add(1)
			return
		}
		res, err := http.ReadResponse(bufio.NewReader(cn), nil)
		if err != nil {
			failed.Add(1) // evicted before its answer
			return
		}
		b, _ := io.ReadAll(io.LimitReader(res.Body, 4096))
		res.Body.Close()
		if res.StatusCode == http.StatusServiceUnavailable {
			sh.add(&cs, res, b)
		} else {
			cs.add(res.StatusCode)
		}
		_ = cn.SetDeadline(time.Time{})
	})
	holdUntil(start, dur)
	t.Logf("ATTACK %-22s %d connections, at most %d held at once, %d closed or refused before an answer", "gateway idle after 407", n, h.peak, failed.Load())
	// The gateway at its connection limit with nothing left to evict answers 503 (counted apart).
	t.Logf("ATTACK %-22s gateway 503s by reason %v", "gateway idle after 407", sh.m)
	cs.check(t, "gateway idle after 407", http.StatusProxyAuthRequired)
	l.finish(t, "gateway idle after 407", c)
}

// attackGatewayConns: 20,000 connections that send nothing, more than the connection cap the
// operator derives from its descriptor limit (issue 30: at -gateway-max-conns 20,000 the
// process reached the descriptor limit and hooks, discovery and gateway stalled).
func attackGatewayConns(t *testing.T, c *child, good proxyDesc, dur time.Duration) {
	attackIdleConns(t, c, good, dur, "gateway connections", c.gwAddr, 20, nil)
}

// attackSOCKSIdle: 20,000 connections to the gateway's SOCKS5 listener (issue 33) each offer
// username/password in a greeting, read the method choice and never log in. They share the
// gateway's connection bound and memory budget with its HTTP listener; the legitimate crawler
// (over HTTP) and the other listeners must not notice.
func attackSOCKSIdle(t *testing.T, c *child, good proxyDesc, dur time.Duration) {
	attackIdleConns(t, c, good, dur, "socks idle greetings", c.socksAddr, 40, func(cn net.Conn) bool {
		_ = cn.SetDeadline(time.Now().Add(10 * time.Second))
		reply := make([]byte, 2)
		if _, err := cn.Write([]byte{5, 1, 2}); err != nil {
			return false
		}
		if _, err := io.ReadFull(cn, reply); err != nil || reply[0] != 5 || reply[1] != 2 {
			return false // evicted, or refused at the limit
		}
		return cn.SetDeadline(time.Time{}) == nil
	})
}

// attackIdleConns holds 20,000 connections to addr from four sources from 127.0.0.<ip>, each
// after greet (nil: sending nothing) succeeded, for dur while the legitimate callers measure.
func attackIdleConns(t *testing.T, c *child, good proxyDesc, dur time.Duration, name, addr string, ip int, greet func(net.Conn) bool) {
	n := attackCount(20000, dur)
	h := &held{room: heldRoom()}
	defer h.closeAll()
	c.resetPeak()
	l := c.startLegit(good)
	start := time.Now()
	var dialed, failed, ungreeted atomic.Int64
	dialers := make([]*net.Dialer, 4)
	for i := range dialers {
		dialers[i] = gatewayDialer(fmt.Sprintf("127.0.0.%d", ip+i))
	}
	flood(n, func(i int) {
		cn, err := dialers[i*len(dialers)/n].Dial("tcp", addr)
		if err != nil {
			failed.Add(1)
			return
		}
		dialed.Add(1)
		h.add(cn)
		if greet != nil && !greet(cn) {
			ungreeted.Add(1)
		}
	})
	holdUntil(start, dur)
	t.Logf("ATTACK %-22s %d dialled (%d failed to connect, %d cut before their greeting was answered), at most %d held at once", name, dialed.Load(), failed.Load(), ungreeted.Load(), h.peak)
	if greet != nil && ungreeted.Load() == dialed.Load() {
		t.Errorf("%s: no greeting was ever answered: the listener did not answer", name)
	}
	if strings.Contains(c.log.String(), "too many open files") {
		t.Errorf("%s: the operator ran out of descriptors", name)
	}
	l.finish(t, name, c)
}

// attackGatewayHeads: 8,000 connections without credentials each send 30 KB of a request head
// and never finish it (issue 30: 609 MiB, hook p99 199 ms).
func attackGatewayHeads(t *testing.T, c *child, good proxyDesc, dur time.Duration) {
	n := attackCount(8000, dur)
	h := &held{room: heldRoom()}
	defer h.closeAll()
	head := []byte("GET http://site.example/ HTTP/1.1\r\nHost: site.example\r\nX-Pad: " + strings.Repeat("a", 30<<10))
	c.resetPeak()
	l := c.startLegit(good)
	start := time.Now()
	var sent, cut atomic.Int64
	d := gatewayDialer("127.0.0.30")
	flood(n, func(int) {
		cn, err := d.Dial("tcp", c.gwAddr)
		if err != nil {
			cut.Add(1)
			return
		}
		h.add(cn)
		_ = cn.SetWriteDeadline(time.Now().Add(10 * time.Second))
		if _, err := cn.Write(head); err != nil {
			cut.Add(1) // evicted, or refused at the limit
			return
		}
		sent.Add(1)
	})
	holdUntil(start, dur)
	t.Logf("ATTACK %-22s %d heads of %d KiB sent whole, %d cut, at most %d held at once", "gateway unfinished heads", sent.Load(), len(head)>>10, cut.Load(), h.peak)
	l.finish(t, "gateway unfinished heads", c)
}

// attackGatewayPuts: 600 concurrent 1 MiB PUTs with one token for dur (issue 30: the retry
// buffer was read before a lease was sought: 1.33 GiB, gateway p99 2.8 s). The sink checks
// every body it receives is the one sent, whole.
func attackGatewayPuts(t *testing.T, c *child, good proxyDesc, dur time.Duration) {
	n := attackCount(600, dur)
	body := bytes.Repeat([]byte("attacker-body-0123456789abcdef\n"), (1<<20)/31+1)[:1<<20]
	var received, corrupt atomic.Int64
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err == nil {
			received.Add(1)
			if !bytes.Equal(b, body) {
				corrupt.Add(1)
			}
		}
		_, _ = io.WriteString(w, "sink")
	}))
	defer sink.Close()
	d := gatewayDialer("127.0.0.40")
	proxy := &url.URL{Scheme: "http", Host: c.gwAddr, User: url.UserPassword("", attackerToken)}
	cl := &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(proxy), DialContext: d.DialContext,
		DisableKeepAlives: true, MaxConnsPerHost: 0}}
	c.resetPeak()
	l := c.startLegit(good)
	var cs codes
	var sh shed
	var cut atomic.Int64
	deadline := time.Now().Add(dur)
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				req, _ := http.NewRequest(http.MethodPut, sink.URL+"/upload", bytes.NewReader(body))
				res, err := cl.Do(req)
				if err != nil {
					cut.Add(1) // refused at the connection limit, or evicted
					time.Sleep(10 * time.Millisecond)
					continue
				}
				b, _ := io.ReadAll(io.LimitReader(res.Body, 4096))
				res.Body.Close()
				if res.StatusCode == http.StatusServiceUnavailable {
					sh.add(&cs, res, b)
				} else {
					cs.add(res.StatusCode)
				}
				if res.StatusCode == http.StatusOK && string(b) != "sink" {
					t.Errorf("gateway retry buffers: the attacker's PUT was answered %.100q, not by its own sink", b)
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("ATTACK %-22s %d workers: %d PUTs received whole by the sink, %d cut", "gateway retry buffers", n, received.Load(), cut.Load())
	if corrupt.Load() > 0 {
		t.Errorf("gateway retry buffers: %d PUT bodies reached the sink altered", corrupt.Load())
	}
	// 503 at_capacity or queue_full: no upstream free for the site in time; conn_limit: the
	// connection limit (counted apart); 429: the token's requests in flight.
	t.Logf("ATTACK %-22s gateway 503s by reason %v", "gateway retry buffers", sh.m)
	cs.check(t, "gateway retry buffers", http.StatusOK, http.StatusTooManyRequests)
	l.finish(t, "gateway retry buffers", c)
}

// listAll pages through GET /v1/proxies with token: the ids, and the largest page's size.
func listAll(c *child, token string) ([]string, int, error) {
	var ids []string
	largest := 0
	cont := ""
	for range 1000 {
		u := c.discURL + "/v1/proxies"
		if cont != "" {
			u += "?continue=" + url.QueryEscape(cont)
		}
		code, b, err := get(u, token)
		if err != nil || code != http.StatusOK {
			return ids, largest, fmt.Errorf("list: %d %v %.200s", code, err, b)
		}
		largest = max(largest, len(b))
		var page struct {
			Proxies []struct {
				ID        string `json:"id"`
				MaxLeases int    `json:"maxLeases"`
			} `json:"proxies"`
			Continue string `json:"continue"`
		}
		if err := json.Unmarshal(b, &page); err != nil {
			return ids, largest, err
		}
		for _, p := range page.Proxies {
			ids = append(ids, p.ID)
		}
		if page.Continue == "" {
			return ids, largest, nil
		}
		cont = page.Continue
	}
	return ids, largest, fmt.Errorf("list: more than 1000 pages")
}

// attackPagedLists: 600 Proxies of 32 attributes of 256 characters (CRD-valid) in a namespace
// of their own, and 8 readers listing them all, page by page (issue 30: 6.1 MB unpaged answers,
// 282 MiB, p99 0.4-1.3 s). Four read with a wide read token, four with team-a's, which must see
// team-a's proxies only.
func attackPagedLists(t *testing.T, c *child, good proxyDesc, dur time.Duration) {
	n := attackCount(600, dur)
	bulk := make([]proxyDesc, n)
	flood(n, func(i int) {
		attrs := map[string]any{}
		for k := range 32 {
			attrs[fmt.Sprintf("attr-%02d", k)] = strings.Repeat(string(rune('a'+k%26)), 256)
		}
		bulk[i] = proxyDesc{ns: "bulk", name: fmt.Sprintf("bulk-%d", i), uid: fmt.Sprintf("uid-bulk-%d", i),
			spec: map[string]any{"mode": "External", "endpoint": map[string]any{"host": "192.0.2.1", "port": 3128}, "attributes": attrs}}
		if code, b, err := c.hookPost("/sync", bulk[i].body(false, nil)); err != nil || code != http.StatusOK {
			t.Errorf("sync bulk-%d: %d %v %.200s", i, code, err, b)
		}
	})
	defer flood(n, func(i int) { _, _, _ = c.hookPost("/finalize", bulk[i].body(true, nil)) })
	c.resetPeak()
	l := c.startLegit(good)
	var largest, lists atomic.Int64
	deadline := time.Now().Add(dur)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			token := readToken
			if w%2 == 1 {
				token = teamAToken
			}
			for time.Now().Before(deadline) {
				ids, big, err := listAll(c, token)
				if err != nil {
					t.Errorf("paged lists: %v", err)
					return
				}
				lists.Add(1)
				if int64(big) > largest.Load() {
					largest.Store(int64(big))
				}
				bulkSeen := 0
				for _, id := range ids {
					if token == teamAToken && !strings.HasPrefix(id, "team-a/") {
						t.Errorf("paged lists: team-a's list shows %s (cross-tenant read)", id)
						return
					}
					if strings.HasPrefix(id, "bulk/") {
						bulkSeen++
					}
				}
				if token == readToken && bulkSeen != n {
					t.Errorf("paged lists: the pages showed %d of the %d bulk proxies", bulkSeen, n)
					return
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("ATTACK %-22s %d proxies of 32 x 256 chars; %d whole lists read, largest page %d bytes", "gateway paged lists", n, lists.Load(), largest.Load())
	// Decision 0256: pages of at most about 1 MiB.
	if largest.Load() > 5<<20/4 {
		t.Errorf("paged lists: a page of %d bytes, want about 1 MiB at most", largest.Load())
	}
	l.finish(t, "gateway paged lists", c)
}

// attackWideLeaseFlood: the attacker's token, scoped to every namespace, leases for an hour as
// fast as it can (issue 30: it took every slot of team-b too; the per-token default 256 was above
// the namespace's capacity). It must hold at most its fair share of team-b, the namespace's
// capacity over the tokens that may lease there (admin, team-b, attacker; decision 0259), and
// team-b's own token must still lease its share there.
func attackWideLeaseFlood(t *testing.T, c *child, good proxyDesc, dur time.Duration) {
	for i := range 2 {
		p := proxyDesc{ns: "team-b", name: fmt.Sprintf("fair-%d", i), uid: fmt.Sprintf("uid-fair-%d", i), spec: attackMockSpec(c.probeURL, "fair-b")}
		c.syncUntil(t, &p, "Ready", func(a syncAnswer) bool { return a.Status.Phase == "Ready" })
	}
	// team-b's capacity, as the shares see it: every team-b proxy's maxLeases.
	code, b, err := get(c.discURL+"/v1/proxies?limit=1000", teamBToken)
	if err != nil || code != http.StatusOK {
		t.Fatalf("team-b list: %d %v %.200s", code, err, b)
	}
	var list struct {
		Proxies []struct {
			ID        string `json:"id"`
			MaxLeases int    `json:"maxLeases"`
		} `json:"proxies"`
	}
	_ = json.Unmarshal(b, &list)
	capB := 0
	for _, p := range list.Proxies {
		capB += p.MaxLeases
	}
	const holdersB = 3 // admin, team-b, attacker (dashboards only reads)
	shareB := (capB + holdersB - 1) / holdersB

	c.resetPeak()
	l := c.startLegit(good)
	var cs codes
	var mu sync.Mutex
	var taken []string
	inB := 0
	deadline := time.Now().Add(dur)
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				code, b, err := post(c.discURL+"/v1/leases", attackerToken, []byte(`{"ttlSeconds":3600}`))
				if err != nil {
					t.Errorf("attacker lease: %v", err)
					return
				}
				cs.add(code)
				if code != http.StatusOK {
					if code == http.StatusTooManyRequests {
						return // at its share everywhere
					}
					continue
				}
				var lj struct {
					LeaseID string `json:"leaseID"`
					Proxy   struct {
						ID string `json:"id"`
					} `json:"proxy"`
				}
				_ = json.Unmarshal(b, &lj)
				mu.Lock()
				taken = append(taken, lj.LeaseID)
				if strings.HasPrefix(lj.Proxy.ID, "team-b/") {
					inB++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	defer releaseAll(t, attackerToken, c, taken)
	var own []string
	defer func() { releaseAll(t, teamBToken, c, own) }()
	for range shareB {
		code, b, err := post(c.discURL+"/v1/leases", teamBToken, []byte(`{"ttlSeconds":60}`))
		if err != nil || code != http.StatusOK {
			t.Errorf("gateway fair shares: team-b's own lease %d beside the flood: %d %v %.200s, want 200 (its share is %d)", len(own)+1, code, err, b, shareB)
			break
		}
		var lj struct {
			LeaseID string `json:"leaseID"`
		}
		_ = json.Unmarshal(b, &lj)
		own = append(own, lj.LeaseID)
	}
	t.Logf("ATTACK %-22s the attacker took %d leases, %d of them in team-b (capacity %d, share %d); team-b leased %d", "gateway fair shares",
		len(taken), inB, capB, shareB, len(own))
	if inB > shareB {
		t.Errorf("gateway fair shares: the attacker holds %d leases in team-b, over its share %d", inB, shareB)
	}
	cs.check(t, "gateway fair shares", http.StatusOK, http.StatusConflict, http.StatusTooManyRequests)
	l.finish(t, "gateway fair shares", c)
}

// attackRefusedTargets: ~16 requests and tunnels to internal targets through the gateway
// (issue 30: the upstream's own 403 matched the default 403 rule: 48 one-hour bans, every proxy
// fell to band Poor). The gateway refuses each with 403 target_denied before leasing: no
// cooldown, no ban, no band change.
func attackRefusedTargets(t *testing.T, c *child, good proxyDesc) {
	c.waitGateway(t)
	logBefore := c.log.String()
	coolingBefore := cooling(t, c)
	c.resetPeak()
	l := c.startLegit(good)
	hook := fmt.Sprintf("127.0.0.1:%d", c.hookPort)
	disc := strings.TrimPrefix(c.discURL, "http://")
	targets := []string{
		"169.254.169.254:80", "2852039166:80", "0xa9fea9fe:80", "169.254.169.254.:80", "metadata.google.internal:80",
		"10.0.0.1:80", "172.16.0.1:80", "192.168.1.1:80", "100.64.0.1:80", "[fd00::1]:80", "[::1]:80",
		"localhost:80", "kubernetes.default.svc.cluster.local:443", "redis.proxy-operator.svc:6379", hook, disc,
	}
	auth := "Basic " + basicAuth("", teamAToken)
	for i, dest := range targets {
		method := http.MethodGet
		if i%2 == 1 {
			method = http.MethodConnect
		}
		cn, err := fromAddr("127.0.0.50").Dial("tcp", c.gwAddr)
		if err != nil {
			t.Fatal(err)
		}
		_ = cn.SetDeadline(time.Now().Add(30 * time.Second))
		if method == http.MethodConnect {
			fmt.Fprintf(cn, "CONNECT %s HTTP/1.1\r\nHost: %s\r\nProxy-Authorization: %s\r\n\r\n", dest, dest, auth)
		} else {
			fmt.Fprintf(cn, "GET http://%s/ HTTP/1.1\r\nHost: %s\r\nProxy-Authorization: %s\r\nConnection: close\r\n\r\n", dest, dest, auth)
		}
		res, err := http.ReadResponse(bufio.NewReader(cn), &http.Request{Method: method})
		if err != nil {
			cn.Close()
			t.Errorf("%s %s through the gateway: %v", method, dest, err)
			continue
		}
		b, _ := io.ReadAll(io.LimitReader(res.Body, 4096))
		res.Body.Close()
		cn.Close()
		if res.StatusCode != http.StatusForbidden || res.Header.Get("X-Proxy-Operator-Error") != "target_denied" {
			t.Errorf("%s %s through the gateway: %d %q %.200s, want 403 target_denied", method, dest, res.StatusCode, res.Header.Get("X-Proxy-Operator-Error"), b)
		}
	}
	if after := cooling(t, c); after > coolingBefore {
		t.Errorf("gateway refused targets: %d cooldowns in force after the refused targets, %d before (a refusal reported as a ban)", after, coolingBefore)
	}
	logged := strings.TrimPrefix(c.log.String(), logBefore)
	for _, bad := range []string{"upstream banned by site", `"band":"Poor"`} {
		if strings.Contains(logged, bad) {
			t.Errorf("gateway refused targets: the operator logged %q", bad)
		}
	}
	t.Logf("ATTACK %-22s %d internal targets refused", "gateway refused targets", len(targets))
	l.finish(t, "gateway refused targets", c)
}

// cooling is how many cooldowns are in force in every namespace (GET /v1/sites).
func cooling(t *testing.T, c *child) int {
	t.Helper()
	code, b, err := get(c.discURL+"/v1/sites?limit=1", readToken)
	if err != nil || code != http.StatusOK {
		t.Fatalf("sites: %d %v %.200s", code, err, b)
	}
	var s struct {
		CoolingTotal int `json:"coolingTotal"`
	}
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	return s.CoolingTotal
}
