package gateway_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/internal/redistest"
	"github.com/proxy-operator/proxy-operator/server/gateway"
)

// benchLoad is one load phase's result.
type benchLoad struct {
	ops   int
	bytes int64
	dur   time.Duration
	lat   []time.Duration
}

func (l benchLoad) rate() float64 { return float64(l.ops) / l.dur.Seconds() }

func (l benchLoad) byteRate() float64 { return float64(l.bytes) / l.dur.Seconds() }

func (l benchLoad) p99() time.Duration {
	if len(l.lat) == 0 {
		return 0
	}
	s := slices.Clone(l.lat)
	slices.Sort(s)
	return s[len(s)*99/100]
}

func (l *benchLoad) add(o benchLoad) {
	l.ops += o.ops
	l.bytes += o.bytes
	l.dur += o.dur
	l.lat = append(l.lat, o.lat...)
}

// runLoad runs clients workers for d; worker i calls op(i) in a loop.
func runLoad(b *testing.B, clients int, d time.Duration, op func(i int) (int64, error)) benchLoad {
	var mu sync.Mutex
	var out benchLoad
	start := time.Now()
	deadline := start.Add(d)
	var wg sync.WaitGroup
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var lat []time.Duration
			var n int64
			for time.Now().Before(deadline) {
				t0 := time.Now()
				got, err := op(i)
				if err != nil {
					b.Errorf("client %d: %v", i, err)
					return
				}
				lat = append(lat, time.Since(t0))
				n += got
			}
			mu.Lock()
			out.ops += len(lat)
			out.bytes += n
			out.lat = append(out.lat, lat...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	out.dur = time.Since(start)
	return out
}

// benchPhase is each load phase's length: GATEWAY_BENCH_SECONDS (default 3).
func benchPhase() time.Duration {
	secs := 3
	if v, err := strconv.Atoi(os.Getenv("GATEWAY_BENCH_SECONDS")); err == nil && v > 0 {
		secs = v
	}
	return time.Duration(secs) * time.Second
}

// benchGateway is a gateway in front of one unthrottled mock upstream (pool bench), and that
// upstream's URL with its credential, for the same clients straight to it.
func benchGateway(b *testing.B) (*env, *url.URL) {
	e := newEnv(b, 0, nil)
	e.addUpstream(b, "crawl/bench", "127.0.0.41", map[string]string{"pool": "bench"}, 10000)
	p, _ := e.view.Get("crawl/bench")
	return e, p.Credentials.ProxyURL(net.JoinHostPort(p.IP, strconv.Itoa(int(p.Port))))
}

// connectOnce opens a tunnel through proxy to site, fetches a small page in it and closes.
func connectOnce(proxy *url.URL, site string) (int64, error) {
	c, err := net.DialTimeout("tcp", proxy.Host, 10*time.Second)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	pw, _ := proxy.User.Password()
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\nProxy-Authorization: %s\r\n\r\n", site, site, basicAuth(proxy.User.Username(), pw))
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		return 0, err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("CONNECT: %s", resp.Status)
	}
	fmt.Fprintf(c, "GET /small HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", site)
	resp, err = http.ReadResponse(br, nil)
	if err != nil {
		return 0, err
	}
	return io.Copy(io.Discard, resp.Body)
}

// BenchmarkGateway compares, in one run, the same clients through the gateway (token auth,
// a lease per request or tunnel, rules) and straight to the same mock upstream with its
// credential: small GETs (64 clients), CONNECT tunnels opened per second (64 clients), 1 MiB
// bodies (16 clients). Each client crawls its own loopback site, as a crawler's workers do (the
// store gives one upstream to one holder per site at a time). Phases alternate, twice each.
// make bench-gateway; GATEWAY_BENCH_SECONDS sets each phase's length (default 3).
func BenchmarkGateway(b *testing.B) {
	phase := benchPhase()
	e, upstream := benchGateway(b)
	gw := e.proxyURL("pool-bench", token)
	big := strings.Repeat("x", 1<<20)
	sites := make([]string, 64)
	for i := range sites {
		sites[i] = newSite(b, func(w http.ResponseWriter, r *http.Request, _ string) {
			if r.URL.Path == "/big" {
				_, _ = io.WriteString(w, big)
				return
			}
			_, _ = io.WriteString(w, "a small page of a site\n")
		}).addr
	}
	clientsFor := func(proxy *url.URL, n int) []*http.Client {
		cs := make([]*http.Client, n)
		for i := range cs {
			cs[i] = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(proxy), MaxIdleConnsPerHost: 2}}
		}
		return cs
	}
	getOp := func(cs []*http.Client, path string) func(int) (int64, error) {
		return func(i int) (int64, error) {
			resp, err := cs[i].Get("http://" + sites[i] + path)
			if err != nil {
				return 0, err
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return 0, fmt.Errorf("GET: %s", resp.Status)
			}
			return io.Copy(io.Discard, resp.Body)
		}
	}
	type row struct {
		name          string
		clients       int
		direct, viaGW func(int) (int64, error)
		bytes         bool
		directR, gwR  benchLoad
	}
	dc, gc := clientsFor(upstream, 64), clientsFor(gw, 64)
	rows := []*row{
		{name: "GET small page", clients: 64, direct: getOp(dc, "/small"), viaGW: getOp(gc, "/small")},
		{name: "CONNECT + small page", clients: 64,
			direct: func(i int) (int64, error) { return connectOnce(upstream, sites[i]) },
			viaGW:  func(i int) (int64, error) { return connectOnce(gw, sites[i]) }},
		{name: "GET 1 MiB", clients: 16, bytes: true, direct: getOp(dc, "/big"), viaGW: getOp(gc, "/big")},
	}
	// Sites new to the gateway start at its polite pace (1 request/s per upstream, decision
	// 0260) and reach unpaced within seconds: the first phase on them is reported on its own
	// row, and the rows below measure the gateway once it knows the sites.
	warm := 2 * phase
	if warm < 8*time.Second {
		warm = 8 * time.Second
	}
	cold := runLoad(b, 64, warm, rows[0].viaGW)
	b.ResetTimer()
	for range b.N {
		for _, r := range rows {
			for range 2 {
				r.directR.add(runLoad(b, r.clients, phase, r.direct))
				r.gwR.add(runLoad(b, r.clients, phase, r.viaGW))
			}
		}
	}
	b.StopTimer()
	var sb strings.Builder
	fmt.Fprintf(&sb, "\n| load | clients | direct | through the gateway | ratio | p99 direct | p99 gateway | added p99 |\n|---|---|---|---|---|---|---|---|\n")
	fmt.Fprintf(&sb, "| GET small page, sites new to the gateway (its first %v) | 64 | (as below) | %.0f/s | %.2fx | | %v | |\n",
		warm, cold.rate(), cold.rate()/rows[0].directR.rate(), cold.p99().Round(time.Microsecond*100))
	for _, r := range rows {
		d, g := r.directR.rate(), r.gwR.rate()
		unit := "/s"
		if r.bytes {
			d, g, unit = r.directR.byteRate()/(1<<20), r.gwR.byteRate()/(1<<20), " MiB/s"
		}
		fmt.Fprintf(&sb, "| %s | %d | %.0f%s | %.0f%s | %.2fx | %v | %v | %v |\n", r.name, r.clients, d, unit, g, unit, g/d,
			r.directR.p99().Round(time.Microsecond*100), r.gwR.p99().Round(time.Microsecond*100), (r.gwR.p99() - r.directR.p99()).Round(time.Microsecond*100))
		b.ReportMetric(g/d, strings.ReplaceAll(strings.ToLower(r.name), " ", "_")+"_ratio")
	}
	b.Log(sb.String())
}

// BenchmarkGatewayReplicas: requests/s of one gateway replica against three over one Redis
// store, each with its own Redis client and the shared pace book (issue 31: three replicas
// at least 2.5x one). The same 96 clients, each crawling its own loopback site with small
// GETs through 16 unthrottled mock upstreams, all on the one replica or spread over the three;
// phases alternate, twice each. Everything runs in this one process: on a machine with fewer
// cores than replicas the ratio measures the cores, not the replicas (docs/performance.md).
// make bench-gateway; GATEWAY_BENCH_SECONDS sets each phase's length (default 3).
func BenchmarkGatewayReplicas(b *testing.B) {
	phase := benchPhase()
	srv := redistest.Start(b)
	reps := bookedReplicas(b, srv.Addr, 3, 16, 60, map[string]string{"pool": "bench"}, 10000)
	const clients = 96
	sites := make([]string, clients)
	for i := range sites {
		sites[i] = newSite(b, func(w http.ResponseWriter, r *http.Request, _ string) {
			_, _ = io.WriteString(w, "a small page of a site\n")
		}).addr
	}
	through := func(spread int) []*http.Client {
		cs := make([]*http.Client, clients)
		for i := range cs {
			cs[i] = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
				Proxy: http.ProxyURL(reps[i%spread].proxyURL("pool-bench", token)), MaxIdleConnsPerHost: 2}}
		}
		return cs
	}
	op := func(cs []*http.Client) func(int) (int64, error) {
		return func(i int) (int64, error) {
			resp, err := cs[i].Get("http://" + sites[i] + "/small")
			if err != nil {
				return 0, err
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return 0, fmt.Errorf("GET: %s (%s)", resp.Status, resp.Header.Get(gateway.HeaderError))
			}
			return io.Copy(io.Discard, resp.Body)
		}
	}
	one, three := op(through(1)), op(through(3))
	// Every replica learns every site's pace first (a new site starts at 1 request/s per
	// upstream): the phases measure replicas that know the sites.
	runLoad(b, clients, 8*time.Second, one)
	runLoad(b, clients, 8*time.Second, three)
	var oneR, threeR benchLoad
	b.ResetTimer()
	for range b.N {
		for range 2 {
			oneR.add(runLoad(b, clients, phase, one))
			threeR.add(runLoad(b, clients, phase, three))
		}
	}
	b.StopTimer()
	b.Logf("\n| replicas over one Redis | clients | requests/s | p99 |\n|---|---|---|---|\n| 1 | %d | %.0f | %v |\n| 3 | %d | %.0f | %v |\nratio %.2fx on %d CPUs",
		clients, oneR.rate(), oneR.p99().Round(100*time.Microsecond), clients, threeR.rate(), threeR.p99().Round(100*time.Microsecond),
		threeR.rate()/oneR.rate(), runtime.NumCPU())
	b.ReportMetric(threeR.rate()/oneR.rate(), "three_replicas_ratio")
}

// socksOnce opens a SOCKS5 tunnel through the gateway's SOCKS5 listener to site, fetches a
// small page in it and closes: connectOnce's work over the other protocol.
func socksOnce(addr, user, pass, site string) (int64, error) {
	c, br, err := socksOpen(addr, user, pass, site)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	fmt.Fprintf(c, "GET /small HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", site)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return 0, err
	}
	return io.Copy(io.Discard, resp.Body)
}

// socksOpen logs in and opens a tunnel to site (host:port, an address), in one write as
// clients that pipeline do; the reader holds what follows the reply.
func socksOpen(addr, user, pass, site string) (net.Conn, *bufio.Reader, error) {
	host, port, _ := net.SplitHostPort(site)
	p, _ := strconv.Atoi(port)
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return nil, nil, err
	}
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := c.Write(append(socksLogin(user, pass), socksRequest(1, host, uint16(p))...)); err != nil {
		c.Close()
		return nil, nil, err
	}
	br := bufio.NewReaderSize(c, 4<<10)
	var ans [14]byte
	if _, err := io.ReadFull(br, ans[:]); err != nil {
		c.Close()
		return nil, nil, err
	}
	if ans[3] != 0 || ans[5] != gateway.SOCKSSucceeded {
		c.Close()
		return nil, nil, fmt.Errorf("SOCKS5: login status %d, reply %#x", ans[3], ans[5])
	}
	_ = c.SetDeadline(time.Time{})
	return c, br, nil
}

// connectOpen opens a CONNECT tunnel through proxy to site and leaves it open.
func connectOpen(proxy *url.URL, site string) (net.Conn, error) {
	c, err := net.DialTimeout("tcp", proxy.Host, 10*time.Second)
	if err != nil {
		return nil, err
	}
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	pw, _ := proxy.User.Password()
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\nProxy-Authorization: %s\r\n\r\n", site, site, basicAuth(proxy.User.Username(), pw))
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
	if err != nil || resp.StatusCode != http.StatusOK {
		c.Close()
		return nil, fmt.Errorf("CONNECT: %v %v", resp, err)
	}
	_ = c.SetDeadline(time.Time{})
	return c, nil
}

// inUse is the heap and the stacks in use, after collecting.
func inUse() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapInuse + m.StackInuse)
}

// BenchmarkGatewaySOCKS compares, in one run through the same gateway, SOCKS5 against HTTP
// CONNECT (issue 33: SOCKS5 tunnels/s at least 0.9x CONNECT's, an idle SOCKS5 tunnel's memory
// within 1.2x an idle CONNECT tunnel's). Tunnels/s: 64 clients, each opening a tunnel to its own
// loopback site, fetching a small page and closing; phases alternate, twice each. Memory: 500
// tunnels held open and idle, each to its own silent loopback listener, of each kind, and the
// same through the mock upstream straight (its share, the upstream's and the client's, is
// subtracted: the ratio is the gateway's cost per tunnel). Reported as ratios; figures from a
// loaded machine are not final. make bench-gateway; GATEWAY_BENCH_SECONDS sets each phase
// (default 3).
func BenchmarkGatewaySOCKS(b *testing.B) {
	phase := benchPhase()
	e, upstream := benchGateway(b)
	socksAddr := e.socks(b)
	gw := e.proxyURL("pool-bench", token)
	sites := make([]string, 64)
	for i := range sites {
		sites[i] = newSite(b, func(w http.ResponseWriter, r *http.Request, _ string) {
			_, _ = io.WriteString(w, "a small page of a site\n")
		}).addr
	}
	viaConnect := func(i int) (int64, error) { return connectOnce(gw, sites[i]) }
	viaSOCKS := func(i int) (int64, error) { return socksOnce(socksAddr, "pool-bench", token, sites[i]) }
	// New sites start at the polite pace for requests; tunnels are not paced, but the first
	// phase warms both paths (connections, leases) before the measured ones.
	runLoad(b, 64, phase, viaConnect)
	runLoad(b, 64, phase, viaSOCKS)

	const idle = 500
	silent := make([]string, idle)
	var held []net.Conn
	var heldMu sync.Mutex
	for i := range silent {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { ln.Close() })
		silent[i] = ln.Addr().String()
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				heldMu.Lock()
				held = append(held, c)
				heldMu.Unlock()
			}
		}()
	}
	b.Cleanup(func() {
		heldMu.Lock()
		defer heldMu.Unlock()
		for _, c := range held {
			c.Close()
		}
	})
	// perTunnel holds idle tunnels opened by open, and returns what each costs the process.
	perTunnel := func(open func(site string) (net.Conn, error)) float64 {
		before := inUse()
		cs := make([]net.Conn, 0, idle)
		for _, s := range silent {
			c, err := open(s)
			if err != nil {
				b.Fatal(err)
			}
			cs = append(cs, c)
		}
		waitFor(b, "the silent listeners to hold every tunnel", func() bool {
			heldMu.Lock()
			defer heldMu.Unlock()
			return len(held) >= idle
		})
		after := inUse()
		for _, c := range cs {
			c.Close()
		}
		heldMu.Lock()
		for _, c := range held {
			c.Close()
		}
		held = held[:0]
		heldMu.Unlock()
		waitFor(b, "the tunnels' leases released", func() bool { return e.leases(b) == 0 })
		return float64(after-before) / idle
	}
	var connectR, socksR benchLoad
	var directMem, connectMem, socksMem float64
	b.ResetTimer()
	for range b.N {
		for range 2 {
			connectR.add(runLoad(b, 64, phase, viaConnect))
			socksR.add(runLoad(b, 64, phase, viaSOCKS))
		}
		directMem = perTunnel(func(s string) (net.Conn, error) { return connectOpen(upstream, s) })
		connectMem = perTunnel(func(s string) (net.Conn, error) { return connectOpen(gw, s) })
		socksMem = perTunnel(func(s string) (net.Conn, error) {
			c, _, err := socksOpen(socksAddr, "pool-bench", token, s)
			return c, err
		})
	}
	b.StopTimer()
	rate := socksR.rate() / connectR.rate()
	mem := (socksMem - directMem) / (connectMem - directMem)
	b.Logf("\n| through the gateway | tunnels/s (64 clients) | p99 | idle tunnel, gateway's share |\n|---|---|---|---|\n"+
		"| HTTP CONNECT | %.0f | %v | %.1f KiB |\n| SOCKS5 | %.0f | %v | %.1f KiB |\n"+
		"ratios SOCKS5/CONNECT: tunnels/s %.2fx, idle memory %.2fx (a tunnel straight through the upstream: %.1f KiB; %d CPUs)",
		connectR.rate(), connectR.p99().Round(100*time.Microsecond), (connectMem-directMem)/1024,
		socksR.rate(), socksR.p99().Round(100*time.Microsecond), (socksMem-directMem)/1024,
		rate, mem, directMem/1024, runtime.NumCPU())
	b.ReportMetric(rate, "socks_tunnels_ratio")
	b.ReportMetric(mem, "socks_idle_memory_ratio")
}
