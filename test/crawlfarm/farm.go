// Package crawlfarm is a farm of rate-limited target sites on loopback, for measuring how
// crawling strategies fare: each site listens on its own 127.x address and, per source IP,
// enforces a token bucket, answers 429 with Retry-After beyond it, and bans (403) an IP that
// keeps going after 429s, longer on a repeat. It counts what it served and refused, per site
// and per source IP. It knows nothing of proxies or of the operator.
package crawlfarm

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"time"
)

// MaxClientsPerSite bounds each site's per-IP table; an IP beyond it is refused 403 (and
// counted), so a run gone wrong cannot grow memory without end.
const MaxClientsPerSite = 1 << 16

// Site configures one site. All limits apply per source IP.
type Site struct {
	Name string
	// Addr is the listen address: a loopback IP with port 0 for any free port.
	Addr string
	// RPS and Burst are the token bucket: Burst requests at once, then RPS a second.
	RPS   float64
	Burst int
	// RetryAfter is what a 429 tells the client to wait (sent in whole seconds, at least 1).
	RetryAfter time.Duration
	// Tolerance is how many requests an IP may send while told to wait before it is banned.
	Tolerance int
	// Ban is the first ban's length; RepeatBan every later one's.
	Ban, RepeatBan time.Duration
	// Refuse are source ranges this site answers 403 whatever their rate (counted as Refused
	// and DCRefused), as a site that blocks datacenter ranges does: FleetRanges are the mock
	// fleet's addresses, while a vendor's residential exits (127.0.0.0/16) stay welcome.
	Refuse []netip.Prefix
}

// FleetRanges cover 127.1.0.0-127.255.255.255, every address a mock proxy dials from
// (providers/mock.Address), and none of 127.0.0.0/16, where the sites and the stand-in
// vendor's exits live.
func FleetRanges() []netip.Prefix {
	var out []netip.Prefix
	for bits := 16; bits >= 9; bits-- {
		second := byte(1 << (16 - bits)) // 127.1/16, 127.2/15, ... 127.128/9
		out = append(out, netip.PrefixFrom(netip.AddrFrom4([4]byte{127, second, 0, 0}), bits))
	}
	return out
}

// Validate says what is wrong with a site's parameters.
func (s Site) Validate() error {
	ap, err := netip.ParseAddrPort(s.Addr)
	switch {
	case s.Name == "":
		return errors.New("site: name is required")
	case err != nil:
		return fmt.Errorf("site %s: addr: %w", s.Name, err)
	case !ap.Addr().Is4() || !ap.Addr().IsLoopback():
		return fmt.Errorf("site %s: addr %s: want a 127.0.0.0/8 address", s.Name, s.Addr)
	case s.RPS <= 0 || s.Burst < 1:
		return fmt.Errorf("site %s: rps must be positive and burst at least 1", s.Name)
	case s.RetryAfter < time.Second:
		return fmt.Errorf("site %s: retryAfter %s: at least 1s (it is sent in seconds)", s.Name, s.RetryAfter)
	case s.Tolerance < 0 || s.Ban <= 0 || s.RepeatBan < s.Ban:
		return fmt.Errorf("site %s: tolerance must not be negative, ban positive, repeatBan at least ban", s.Name)
	}
	return nil
}

// Counts is what a site answered.
type Counts struct {
	Served  int64 // 200
	Limited int64 // 429
	Refused int64 // 403 (banned, or a datacenter address)
	Bans    int64 // bans imposed
	// DCRefused are the 403s answered to datacenter addresses (part of Refused).
	DCRefused int64
}

// Requests is every request answered.
func (c Counts) Requests() int64 { return c.Served + c.Limited + c.Refused }

func (c *Counts) add(o Counts) {
	c.Served += o.Served
	c.Limited += o.Limited
	c.Refused += o.Refused
	c.Bans += o.Bans
	c.DCRefused += o.DCRefused
}

// SiteStats is one site's counters.
type SiteStats struct {
	Name, Host string
	Counts
	// ByIP is per source IP.
	ByIP map[string]Counts
	// BannedNow are the IPs banned at the time of the snapshot, sorted.
	BannedNow []string
}

// Stats is a snapshot of the farm's counters.
type Stats struct {
	Sites []SiteStats
	Total Counts
	// ByIP sums every site per source IP.
	ByIP map[string]Counts
	// BannedNow are the IPs banned on at least one site at the time of the snapshot, sorted.
	BannedNow []string
}

// Farm is a set of running sites.
type Farm struct {
	sites []*site
	now   func() time.Time

	// treat is who every site treats as a datacenter (403 always) or answers slowly.
	tmu   sync.RWMutex
	treat Treatment
}

// Treatment degrades some source addresses on every site, as real sites do: addresses on a
// datacenter list are refused outright, and a congested or far-away exit is slow.
type Treatment struct {
	// Datacenter addresses get 403 on every request (counted as Refused and as DCRefused).
	Datacenter []string
	// Slow addresses are answered only after SlowDelay.
	Slow      []string
	SlowDelay time.Duration
}

// Treat sets the treatment every site applies from now on.
func (f *Farm) Treat(t Treatment) {
	f.tmu.Lock()
	f.treat = t
	f.tmu.Unlock()
}

// Treated says how the sites treat ip now.
func (f *Farm) Treated(ip string) (datacenter bool, delay time.Duration) {
	f.tmu.RLock()
	defer f.tmu.RUnlock()
	if slices.Contains(f.treat.Slow, ip) {
		delay = f.treat.SlowDelay
	}
	return slices.Contains(f.treat.Datacenter, ip), delay
}

type site struct {
	cfg  Site
	host string
	srv  *http.Server
	done chan struct{}

	mu      sync.Mutex
	clients map[string]*client
	counts  Counts
}

type client struct {
	tokens       float64
	last         time.Time
	limitedUntil time.Time
	violations   int
	banUntil     time.Time
	Counts
}

// Start listens on every site's address and serves until Close.
func Start(sites []Site) (*Farm, error) {
	return start(sites, time.Now)
}

func start(sites []Site, now func() time.Time) (*Farm, error) {
	f := &Farm{now: now}
	for _, cfg := range sites {
		if err := cfg.Validate(); err != nil {
			f.Close()
			return nil, err
		}
		ln, err := net.Listen("tcp", cfg.Addr)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("site %s: %w", cfg.Name, err)
		}
		s := &site{cfg: cfg, host: ln.Addr().String(), clients: map[string]*client{}, done: make(chan struct{})}
		s.srv = &http.Server{
			Handler:           http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { s.serve(w, r, f) }),
			ReadHeaderTimeout: 5 * time.Second,
			ReadTimeout:       10 * time.Second,
			WriteTimeout:      10 * time.Second,
			IdleTimeout:       30 * time.Second,
			MaxHeaderBytes:    16 << 10,
		}
		go func() { defer close(s.done); _ = s.srv.Serve(ln) }()
		f.sites = append(f.sites, s)
	}
	return f, nil
}

// Hosts are the sites' host:port, in the order given to Start.
func (f *Farm) Hosts() []string {
	out := make([]string, len(f.sites))
	for i, s := range f.sites {
		out[i] = s.host
	}
	return out
}

// Close stops every site.
func (f *Farm) Close() {
	for _, s := range f.sites {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		if s.srv.Shutdown(ctx) != nil {
			_ = s.srv.Close()
		}
		cancel()
		<-s.done
	}
}

func (s *site) serve(w http.ResponseWriter, r *http.Request, f *Farm) {
	ip, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		ip = r.RemoteAddr
	}
	dc, delay := f.Treated(ip)
	if a, err := netip.ParseAddr(ip); err == nil && slices.ContainsFunc(s.cfg.Refuse, func(p netip.Prefix) bool { return p.Contains(a.Unmap()) }) {
		dc = true
	}
	if delay > 0 {
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		}
	}
	code, retryAfter := http.StatusForbidden, 0
	if dc {
		s.refuseDatacenter(ip)
	} else {
		code, retryAfter = s.admit(ip, f.now())
	}
	switch code {
	case http.StatusOK:
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprintf(w, "%s %s\n", s.cfg.Name, r.URL.Path)
	case http.StatusTooManyRequests:
		w.Header().Set("Retry-After", strconv.Itoa(retryAfter))
		http.Error(w, "too many requests", code)
	default:
		http.Error(w, "forbidden", code)
	}
}

// refuseDatacenter counts a 403 to a datacenter address: refused whatever its rate.
func (s *site) refuseDatacenter(ip string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := Counts{Refused: 1, DCRefused: 1}
	s.counts.add(d)
	if c := s.clients[ip]; c != nil {
		c.add(d)
	} else if len(s.clients) < MaxClientsPerSite {
		c = &client{}
		c.add(d)
		s.clients[ip] = c
	}
}

// admit decides one request from ip at now and counts it.
func (s *site) admit(ip string, now time.Time) (code, retryAfter int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.clients[ip]
	if c == nil {
		if len(s.clients) >= MaxClientsPerSite {
			s.counts.Refused++
			return http.StatusForbidden, 0
		}
		c = &client{tokens: float64(s.cfg.Burst), last: now}
		s.clients[ip] = c
	}
	var d Counts
	defer func() { c.add(d); s.counts.add(d) }()
	if now.Before(c.banUntil) {
		d.Refused++
		return http.StatusForbidden, 0
	}
	c.tokens = math.Min(float64(s.cfg.Burst), c.tokens+now.Sub(c.last).Seconds()*s.cfg.RPS)
	c.last = now
	if c.tokens >= 1 {
		c.tokens--
		c.violations = 0
		d.Served++
		return http.StatusOK, 0
	}
	if now.Before(c.limitedUntil) {
		// Told to wait and did not: past the tolerance, that is a ban.
		if c.violations++; c.violations > s.cfg.Tolerance {
			ban := s.cfg.Ban
			if c.Bans > 0 {
				ban = s.cfg.RepeatBan
			}
			c.banUntil, c.violations = now.Add(ban), 0
			d.Bans++
			d.Refused++
			return http.StatusForbidden, 0
		}
	}
	c.limitedUntil = now.Add(s.cfg.RetryAfter)
	d.Limited++
	return http.StatusTooManyRequests, int(math.Ceil(s.cfg.RetryAfter.Seconds()))
}

// Stats snapshots the counters.
func (f *Farm) Stats() Stats {
	now := f.now()
	out := Stats{ByIP: map[string]Counts{}}
	banned := map[string]bool{}
	for _, s := range f.sites {
		s.mu.Lock()
		ss := SiteStats{Name: s.cfg.Name, Host: s.host, Counts: s.counts, ByIP: make(map[string]Counts, len(s.clients))}
		for ip, c := range s.clients {
			ss.ByIP[ip] = c.Counts
			t := out.ByIP[ip]
			t.add(c.Counts)
			out.ByIP[ip] = t
			if now.Before(c.banUntil) {
				ss.BannedNow = append(ss.BannedNow, ip)
				banned[ip] = true
			}
		}
		s.mu.Unlock()
		slices.Sort(ss.BannedNow)
		out.Total.add(ss.Counts)
		out.Sites = append(out.Sites, ss)
	}
	for ip := range banned {
		out.BannedNow = append(out.BannedNow, ip)
	}
	slices.Sort(out.BannedNow)
	return out
}

// Strict and Lenient are the two kinds of site of the benchmark's farm (docs/performance.md).
func Strict(name, addr string) Site {
	return Site{Name: name, Addr: addr, RPS: 1, Burst: 3, RetryAfter: 2 * time.Second, Tolerance: 2, Ban: 15 * time.Second, RepeatBan: time.Minute}
}

// Lenient is a site that allows five times the rate and tolerates more.
func Lenient(name, addr string) Site {
	return Site{Name: name, Addr: addr, RPS: 5, Burst: 10, RetryAfter: time.Second, Tolerance: 10, Ban: 5 * time.Second, RepeatBan: 20 * time.Second}
}

// RateLimited is issue 31's site: 1 request/s per source IP (burst 1), faster gets 429 with
// Retry-After 2 s, and an IP that sends a 6th request while told to wait is banned (403) for
// 60 s. The pacing benchmarks (Go and the real clients of make bench-naive) crawl it.
func RateLimited(name, addr string) Site {
	return Site{Name: name, Addr: addr, RPS: 1, Burst: 1, RetryAfter: 2 * time.Second, Tolerance: 5, Ban: time.Minute, RepeatBan: time.Minute}
}

// MostlyStrict is k sites on 127.0.10.1.. (port 0), the first strict of them strict and the
// rest lenient. 127.0.0.0/16 is never a mock proxy's address.
func MostlyStrict(k, strict int) []Site {
	out := make([]Site, k)
	for i := range out {
		name, addr := fmt.Sprintf("site-%02d", i+1), fmt.Sprintf("127.0.10.%d:0", i+1)
		if i < strict {
			out[i] = Strict(name, addr)
		} else {
			out[i] = Lenient(name, addr)
		}
	}
	return out
}
