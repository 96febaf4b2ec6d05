package reliability

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The attacks of issue 21's pass on main c50f2ea, each against the operator binary with the
// legitimate Metacontroller and crawler running beside it (see attack_test.go).

// attackPoolLowMax: a 617-byte /pools/sync body whose status.autoscale.lowMax is 2^31-1 drove
// RSS to 2 GiB in 8 s; the recorded size is now clamped to the spec's maxReplicas.
func attackPoolLowMax(t *testing.T, c *child, good proxyDesc, dur time.Duration) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "testdata", "pools-sync", "autoscale-down-after-window", "request.json"))
	if err != nil {
		t.Fatal(err)
	}
	var req map[string]any
	if err := json.Unmarshal(raw, &req); err != nil {
		t.Fatal(err)
	}
	st := req["parent"].(map[string]any)["status"].(map[string]any)
	st["autoscale"].(map[string]any)["lowMax"] = 2147483647
	st["autoscale"].(map[string]any)["lowSince"] = "2020-01-01T00:00:00Z"
	body, _ := json.Marshal(req)
	c.resetPeak()
	l := c.startLegit(good)
	var cs codes
	deadline := time.Now().Add(dur)
	for time.Now().Before(deadline) {
		code, b, err := c.hookPost("/pools/sync", body)
		if err != nil {
			t.Fatalf("pool sync: %v", err)
		}
		cs.add(code)
		var ans struct {
			Children []json.RawMessage `json:"children"`
		}
		if code == http.StatusOK {
			if err := json.Unmarshal(b, &ans); err != nil || len(ans.Children) > 8+1 {
				t.Fatalf("pool with lowMax 2^31-1: %d members asked for (%v), want at most maxReplicas 8 (+1 surge)", len(ans.Children), err)
			}
		}
	}
	cs.check(t, "pool lowMax", http.StatusOK, http.StatusTooManyRequests)
	l.finish(t, "pool lowMax", c)
}

// shapeBodies are the two shapes the budget misjudged: 4 MB of tiny pool children (662 MiB)
// and 4 MB of tiny parent attributes (299 MiB).
func shapeBodies(good proxyDesc) (children, attrs []byte) {
	objs := map[string]any{}
	for i := 0; len(objs)*40 < 4<<20-4096; i++ {
		name := fmt.Sprintf("p%d", i)
		objs[name] = map[string]any{"metadata": map[string]any{"name": name}}
	}
	pool := map[string]any{"apiVersion": "crawl.example.com/v1alpha1", "kind": "ProxyPool",
		"metadata": map[string]any{"name": "shape", "namespace": "team-a", "uid": "uid-shape", "generation": 1},
		"spec":     map[string]any{"replicas": 1, "template": map[string]any{"spec": map[string]any{"mode": "Managed", "provider": "mock"}}}}
	children, _ = json.Marshal(map[string]any{"parent": pool, "children": map[string]any{"Proxy.crawl.example.com/v1alpha1": objs}})
	for len(children) > 4<<20-1024 {
		for k := range objs {
			delete(objs, k)
			if len(objs)%1000 == 0 {
				break
			}
		}
		children, _ = json.Marshal(map[string]any{"parent": pool, "children": map[string]any{"Proxy.crawl.example.com/v1alpha1": objs}})
	}
	a := map[string]any{}
	for i := 0; len(a)*10 < 4<<20-4096; i++ {
		a[fmt.Sprintf("a%d", i)] = ""
	}
	p := good
	p.name, p.uid = "shape-attrs", "uid-shape-attrs"
	p.spec = map[string]any{"mode": "Managed", "provider": "mock", "attributes": a}
	attrs = p.body(false, nil)
	return children, attrs
}

// attackShapes: 16 workers send both shapes for dur.
func attackShapes(t *testing.T, c *child, good proxyDesc, dur time.Duration) {
	children, attrs := shapeBodies(good)
	t.Logf("ATTACK %-22s tiny children %.2f MiB, tiny attributes %.2f MiB", "shapes", float64(len(children))/(1<<20), float64(len(attrs))/(1<<20))
	c.resetPeak()
	l := c.startLegit(good)
	var cs codes
	deadline := time.Now().Add(dur)
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			path, body := "/pools/sync", children
			if w%2 == 1 {
				path, body = "/sync", attrs
			}
			for time.Now().Before(deadline) {
				code, _, err := c.hookPost(path, body)
				if err != nil {
					if isConnClosed(err) {
						continue
					}
					t.Errorf("shape body: %v", err)
					return
				}
				cs.add(code)
			}
		}()
	}
	wg.Wait()
	cs.check(t, "shapes", http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusTooManyRequests, http.StatusOK)
	l.finish(t, "shapes", c)
}

// attackAttributeBloat: 61 Proxies with 44 KB attribute values kept 254 MiB and four lists by
// a read-only token peaked at 985 MiB. Such a spec is now invalid: not listed, not leased.
func attackAttributeBloat(t *testing.T, c *child, good proxyDesc, dur time.Duration) {
	c.resetPeak()
	l := c.startLegit(good)
	var cs codes
	big := strings.Repeat("v", 44<<10)
	for i := range 61 {
		p := proxyDesc{ns: "team-a", name: fmt.Sprintf("bloat-%d", i), uid: fmt.Sprintf("uid-bloat-%d", i),
			spec: map[string]any{"mode": "External", "endpoint": map[string]any{"host": "192.0.2.1", "port": 3128},
				"attributes": map[string]any{"geo": "bloat", "a": big, "b": big, "c": big}}}
		code, _, err := c.hookPost("/sync", p.body(false, nil))
		if err != nil {
			t.Fatal(err)
		}
		cs.add(code)
	}
	deadline := time.Now().Add(dur)
	var wg sync.WaitGroup
	var listed atomic.Int64
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				code, b, err := get(c.discURL+"/v1/proxies", readToken)
				if err != nil {
					t.Errorf("list: %v", err)
					return
				}
				cs.add(code)
				listed.Store(max(listed.Load(), int64(len(b))))
			}
		}()
	}
	wg.Wait()
	t.Logf("ATTACK %-22s largest list answer %d bytes", "attribute bloat", listed.Load())
	if listed.Load() > 1<<20 {
		t.Errorf("a list answer of %d bytes: bloated attributes were listed", listed.Load())
	}
	cs.check(t, "attribute bloat", http.StatusOK)
	l.finish(t, "attribute bloat", c)
}

// attackConnFlood: 15,000 idle keep-alive connections after one /healthz each held 336 MiB
// for two minutes. Each listener now keeps a bounded number; idle ones make room.
func attackConnFlood(t *testing.T, c *child, good proxyDesc) {
	c.resetPeak()
	l := c.startLegit(good)
	var conns []net.Conn
	defer func() {
		for _, cn := range conns {
			cn.Close()
		}
	}()
	served, cut := 0, 0
	for i := range 6000 {
		var cn net.Conn
		var err error
		if i%4 == 0 {
			cn, err = c.dialHook()
		} else {
			cn, err = net.Dial("tcp", strings.TrimPrefix(c.discURL, "http://"))
		}
		if err != nil {
			if isConnClosed(err) {
				cut++ // the listener, at its limit, closed this one during the TLS handshake
				continue
			}
			t.Fatalf("dial %d: %v", i, err)
		}
		conns = append(conns, cn)
		_ = cn.SetDeadline(time.Now().Add(30 * time.Second))
		if _, err := io.WriteString(cn, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			cut++
			continue
		}
		res, err := http.ReadResponse(bufio.NewReader(cn), nil)
		if err != nil {
			cut++
			continue
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		served++
	}
	t.Logf("ATTACK %-22s 6000 connections: %d served /healthz, %d cut", "connection flood", served, cut)
	l.finish(t, "connection flood", c)
}

// attackQuotaStarvation: team-a filled the store-wide cooldown table; team-b's banned report
// was then refused (429) and its next lease for that site landed on the banned proxy. Each
// proxy remembers at most 1024 cooldowns and each namespace 8192, so team-a fills its share
// through nine proxies of its own.
func attackQuotaStarvation(t *testing.T, c *child, good proxyDesc) {
	other := proxyDesc{ns: "team-b", name: "victim", uid: "uid-victim-b", spec: attackMockSpec(c.probeURL, "victim-b")}
	c.syncUntil(t, &other, "Ready", func(a syncAnswer) bool { return a.Status.Phase == "Ready" })
	// team-a's own proxies: the legitimate crawler keeps the legit one's leases busy.
	const starvers = 9
	for i := range starvers {
		p := proxyDesc{ns: "team-a", name: fmt.Sprintf("starver-%d", i), uid: fmt.Sprintf("uid-starver-%d", i),
			spec: attackMockSpec(c.probeURL, fmt.Sprintf("starver-%d", i))}
		c.syncUntil(t, &p, "Ready", func(a syncAnswer) bool { return a.Status.Phase == "Ready" })
	}
	c.resetPeak()
	l := c.startLegit(good)
	leaseOn := func(token, geo string) string {
		code, b, err := post(c.discURL+"/v1/leases", token, []byte(`{"selector":{"geo":"`+geo+`"},"ttlSeconds":3600}`))
		if err != nil || code != http.StatusOK {
			t.Fatalf("lease on %s: %d %v %s", geo, code, err, b)
		}
		var lj struct {
			LeaseID string `json:"leaseID"`
		}
		_ = json.Unmarshal(b, &lj)
		return lj.LeaseID
	}
	var a string
	sent, share := 0, false
	for p := 0; p < starvers && !share; p++ {
		a = leaseOn(teamAToken, fmt.Sprintf("starver-%d", p))
		for i := 0; i <= 1024; i++ {
			code, b, err := post(c.discURL+"/v1/leases/"+a+"/report", teamAToken, fmt.Appendf(nil, `{"result":"rate_limited","target":"q%d-%d.example"}`, p, i))
			if err != nil {
				t.Fatal(err)
			}
			sent++
			if code == http.StatusTooManyRequests {
				if share = strings.Contains(string(b), "its share"); share {
					t.Logf("ATTACK %-22s team-a at its share after %d reports: %.160s", "quota starvation", sent, b)
				}
				break
			}
			if code != http.StatusOK {
				t.Fatalf("team-a report %d: %d %s", sent, code, b)
			}
		}
	}
	if !share {
		t.Fatalf("team-a sent %d rate_limited reports through %d proxies and never reached its namespace's share", sent, starvers)
	}
	b := leaseOn(adminToken, "victim-b")
	for _, r := range []string{"banned", "rate_limited"} {
		code, body, err := post(c.discURL+"/v1/leases/"+b+"/report", adminToken, []byte(`{"result":"`+r+`","target":"site-`+r+`.example"}`))
		if err != nil || code != http.StatusOK {
			t.Errorf("team-b %s report beside team-a at its share: %d %v %s", r, code, err, body)
		}
	}
	// team-b's next lease for the banned site must not land on the banned proxy (its only one).
	code, body, err := post(c.discURL+"/v1/leases", adminToken, []byte(`{"selector":{"geo":"victim-b"},"target":"site-banned.example","ttlSeconds":60}`))
	if err != nil || code != http.StatusConflict {
		t.Errorf("team-b lease for the site it reported banned: %d %v %s, want 409 (cooling)", code, err, body)
	}
	code, body, err = post(c.discURL+"/v1/leases/"+a+"/report", teamAToken, []byte(`{"result":"banned","target":"banned-at-quota.example"}`))
	if err != nil || code != http.StatusOK {
		t.Errorf("team-a banned report at its share: %d %v %s, want it recorded", code, err, body)
	}
	l.finish(t, "quota starvation", c)
}
