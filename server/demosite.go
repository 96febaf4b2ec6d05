package server

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// The demo site (-demo-site-addr, with -demo-proxies): a small site on loopback for the first
// crawl through the gateway, rate limited per source address as the sites crawlers meet are,
// so `make run` shows what the gateway does about a 429 without any traffic leaving the machine.
const (
	// DefaultDemoSiteAddr is where `make run` and the quickstart serve the demo site.
	DefaultDemoSiteAddr = "127.0.0.1:8092"
	// DemoSitePages is how many pages the demo site has (/page/1 to /page/DemoSitePages).
	DemoSitePages = 50
	// DemoSiteRate is the requests per second the demo site serves one source address (burst
	// the same); beyond it answers 429 with Retry-After: 1.
	DemoSiteRate = 2
	// demoSiteMaxSources bounds the per-address table (each mock proxy leaves from its own
	// 127.x address; anything beyond the bound is refused, never remembered).
	demoSiteMaxSources = 1024
)

// demoSite is the demo site's handler: pages, a per-source limit and what it served to whom.
type demoSite struct {
	mu      sync.Mutex
	sources map[string]*demoSource
}

type demoSource struct {
	lim         *rate.Limiter
	served, got int // pages served, 429s answered
}

// demoSiteStats is GET /stats: the site's own view, per source address.
type demoSiteStats struct {
	RatePerSource int                       `json:"ratePerSource"`
	Sources       map[string]demoSiteSource `json:"sources"`
}

type demoSiteSource struct {
	Served      int `json:"served"`
	RateLimited int `json:"rateLimited"`
}

func newDemoSite() *demoSite { return &demoSite{sources: map[string]*demoSource{}} }

func (s *demoSite) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		http.Error(w, "the demo site answers GET and HEAD", http.StatusMethodNotAllowed)
		return
	}
	if r.URL.Path == "/stats" {
		s.stats(w)
		return
	}
	page := 0
	switch {
	case r.URL.Path == "/":
	case strings.HasPrefix(r.URL.Path, "/page/"):
		n, err := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/page/"))
		if err != nil || n < 1 || n > DemoSitePages {
			http.NotFound(w, r)
			return
		}
		page = n
	default:
		http.NotFound(w, r)
		return
	}
	src, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		src = r.RemoteAddr
	}
	if !s.admit(src) {
		w.Header().Set("Retry-After", "1")
		http.Error(w, fmt.Sprintf("rate limited: at most %d requests per second from %s", DemoSiteRate, src), http.StatusTooManyRequests)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if page == 0 {
		fmt.Fprintf(w, "<!doctype html><title>demo site</title><h1>demo site</h1><p>%d pages, at most %d requests/s per source address; you came from %s</p><ul>\n", DemoSitePages, DemoSiteRate, src)
		for i := 1; i <= DemoSitePages; i++ {
			fmt.Fprintf(w, "<li><a href=\"/page/%d\">page %d</a>\n", i, i)
		}
		fmt.Fprint(w, "</ul>\n")
		return
	}
	fmt.Fprintf(w, "<!doctype html><title>page %d</title><h1>page %d of %d</h1><p>served to %s</p>\n", page, page, DemoSitePages, src)
}

// admit counts one request from src against its limit.
func (s *demoSite) admit(src string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.sources[src]
	if e == nil {
		if len(s.sources) >= demoSiteMaxSources {
			return false
		}
		e = &demoSource{lim: rate.NewLimiter(DemoSiteRate, DemoSiteRate)}
		s.sources[src] = e
	}
	if !e.lim.Allow() {
		e.got++
		return false
	}
	e.served++
	return true
}

func (s *demoSite) stats(w http.ResponseWriter) {
	s.mu.Lock()
	st := demoSiteStats{RatePerSource: DemoSiteRate, Sources: make(map[string]demoSiteSource, len(s.sources))}
	for k, e := range s.sources {
		st.Sources[k] = demoSiteSource{Served: e.served, RateLimited: e.got}
	}
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(st)
}

// demoSiteServer is the demo site's server, with every timeout set.
func demoSiteServer() *http.Server {
	return &http.Server{Handler: newDemoSite(), ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: 10 * time.Second, IdleTimeout: time.Minute, MaxHeaderBytes: 16 << 10}
}
