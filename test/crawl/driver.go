// Package crawl is the crawl benchmark: the same job (URLs over a farm of rate-limited sites,
// a fixed number of workers, one fleet of mock proxies from a running operator, one time
// budget) crawled with four proxy strategies, random, rotating, leases and the gateway, and what each
// achieved as the farm counted it. It knows the operator only through its discovery API and
// its wiring (StartOperator), and the farm only through its counters.
package crawl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/proxy-operator/proxy-operator/client"
)

// Job is the crawl every strategy runs.
type Job struct {
	// Sites are the farm's host:port.
	Sites []string
	// URLsPerSite pages are fetched from every site (M = URLsPerSite x len(Sites)).
	URLsPerSite int
	// Workers fetch concurrently, one request at a time each.
	Workers int
	// Budget ends the run if the job is not done by then.
	Budget time.Duration
}

// Result is what a strategy achieved, as the crawler saw it.
type Result struct {
	Strategy string
	Pages    int64 // 200s: pages fetched
	Sent     int64 // requests sent through a proxy
	Limited  int64 // 429s seen
	Banned   int64 // 403s seen
	// Failed are requests that got no answer from the site (proxy or transport errors).
	Failed   int64
	Elapsed  time.Duration
	Finished bool // every page fetched within the budget
	// Lease strategy only: leases granted and lease requests that found nothing to lease.
	Leases, NoMatch int64
}

// PagesPerMinute is pages over the elapsed time.
func (r Result) PagesPerMinute() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Pages) / r.Elapsed.Minutes()
}

// Answered is every request the sites answered (200, 429 or 403).
func (r Result) Answered() int64 { return r.Pages + r.Limited + r.Banned }

// strategy picks a proxy for each request and learns from each answer. Methods are called
// by one worker at a time for its own state, concurrently across workers.
type strategy interface {
	name() string
	// start runs background work (list refreshes) until ctx ends.
	start(ctx context.Context) error
	// pick returns the proxy for a request to site, or wait > 0 if the worker should try
	// another site (or come back) after that long.
	pick(ctx context.Context, worker, site int) (proxy *url.URL, wait time.Duration, err error)
	// answered tells what site answered through proxy: its status and Retry-After.
	answered(ctx context.Context, worker, site int, proxy *url.URL, code int, retryAfter time.Duration)
	// finish releases what the worker holds.
	finish(ctx context.Context, worker int)
}

// queue holds the URLs not fetched yet, per site.
type queue struct {
	mu      sync.Mutex
	pending [][]int // per site, page numbers
	left    int     // pages not yet fetched (pending or in flight)
}

func newQueue(sites, perSite int) *queue {
	q := &queue{pending: make([][]int, sites), left: sites * perSite}
	for s := range q.pending {
		for i := range perSite {
			q.pending[s] = append(q.pending[s], i)
		}
	}
	return q
}

// next takes a page from the first site at or after start (cyclically) that has pending
// pages and is not blocked; ok false with done true when every page is fetched.
func (q *queue) next(start int, blocked func(site int) bool) (site, page int, ok, done bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.left == 0 {
		return 0, 0, false, true
	}
	n := len(q.pending)
	for i := range n {
		s := (start + i) % n
		if p := q.pending[s]; len(p) > 0 && !blocked(s) {
			q.pending[s] = p[1:]
			return s, p[0], true, false
		}
	}
	return 0, 0, false, false
}

func (q *queue) fetched() {
	q.mu.Lock()
	q.left--
	q.mu.Unlock()
}

func (q *queue) retry(site, page int) {
	q.mu.Lock()
	q.pending[site] = append(q.pending[site], page)
	q.mu.Unlock()
}

// transports keeps one HTTP client per proxy URL, shared by the workers.
type transports struct {
	mu sync.Mutex
	m  map[string]*http.Client
}

func (t *transports) get(u *url.URL) *http.Client {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = map[string]*http.Client{}
	}
	k := u.String()
	c := t.m[k]
	if c == nil {
		c = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
			Proxy: http.ProxyURL(u), MaxIdleConnsPerHost: 256, IdleConnTimeout: 30 * time.Second,
			ResponseHeaderTimeout: 30 * time.Second,
		}}
		t.m[k] = c
	}
	return c
}

func (t *transports) close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, c := range t.m {
		c.CloseIdleConnections()
	}
}

// run crawls job with s and returns what it achieved.
func run(ctx context.Context, job Job, s strategy) (Result, error) {
	if job.Workers < 1 || job.URLsPerSite < 1 || len(job.Sites) == 0 || job.Budget <= 0 {
		return Result{}, fmt.Errorf("crawl: job needs workers, sites, URLs and a budget: %+v", job)
	}
	ctx, cancel := context.WithTimeout(ctx, job.Budget)
	defer cancel()
	bg, stopBG := context.WithCancel(ctx)
	defer stopBG()
	if err := s.start(bg); err != nil {
		return Result{}, fmt.Errorf("crawl: %s: %w", s.name(), err)
	}
	var (
		q                                          = newQueue(len(job.Sites), job.URLsPerSite)
		tr                                         transports
		pages, sent, limited, banned, failed, errs atomic.Int64
		firstErr                                   atomic.Pointer[error]
		wg                                         sync.WaitGroup
	)
	defer tr.close()
	start := time.Now()
	for w := range job.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer s.finish(context.WithoutCancel(ctx), w)
			blockedUntil := make([]time.Time, len(job.Sites))
			next := w % len(job.Sites)
			for ctx.Err() == nil {
				now := time.Now()
				site, page, ok, done := q.next(next, func(s int) bool { return now.Before(blockedUntil[s]) })
				if done {
					return
				}
				if !ok {
					// Every site with work is blocked for this worker: wait for the first.
					wait := 50 * time.Millisecond
					for _, b := range blockedUntil {
						if d := b.Sub(now); d > 0 && d < wait {
							wait = d
						}
					}
					sleep(ctx, wait)
					continue
				}
				next = (site + 1) % len(job.Sites)
				proxy, wait, err := s.pick(ctx, w, site)
				if err != nil || proxy == nil {
					q.retry(site, page)
					if err != nil && ctx.Err() == nil {
						errs.Add(1)
						e := err
						firstErr.CompareAndSwap(nil, &e)
						wait = max(wait, 100*time.Millisecond)
					}
					blockedUntil[site] = time.Now().Add(max(wait, time.Millisecond))
					continue
				}
				// A request sent is seen through even past the budget (the client's timeout bounds
				// it), so the crawler's counts and the farm's agree.
				code, retryAfter, err := fetch(context.WithoutCancel(ctx), tr.get(proxy), fmt.Sprintf("http://%s/page/%d", job.Sites[site], page))
				sent.Add(1)
				switch {
				case err != nil:
					failed.Add(1)
					q.retry(site, page)
					if code == http.StatusServiceUnavailable {
						// A gateway with no upstream for the site now: come back when it says.
						blockedUntil[site] = time.Now().Add(max(retryAfter, 100*time.Millisecond))
					}
					continue
				case code == http.StatusOK:
					pages.Add(1)
					q.fetched()
				case code == http.StatusTooManyRequests:
					limited.Add(1)
					q.retry(site, page)
				case code == http.StatusForbidden:
					banned.Add(1)
					q.retry(site, page)
				default:
					failed.Add(1)
					q.retry(site, page)
				}
				s.answered(ctx, w, site, proxy, code, retryAfter)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	r := Result{Strategy: s.name(), Pages: pages.Load(), Sent: sent.Load(), Limited: limited.Load(), Banned: banned.Load(),
		Failed: failed.Load(), Elapsed: min(elapsed, job.Budget), Finished: pages.Load() == int64(len(job.Sites)*job.URLsPerSite)}
	if ls, ok := s.(*leases); ok {
		r.Leases, r.NoMatch = ls.granted.Load(), ls.noMatch.Load()
	}
	if e := firstErr.Load(); e != nil && errs.Load() > int64(job.Workers) {
		// A few errors at the budget's edge are expected; more means the strategy is broken.
		return r, fmt.Errorf("crawl: %s: %d errors picking a proxy, first: %w", s.name(), errs.Load(), *e)
	}
	return r, nil
}

// fetch GETs u through c and returns the status and Retry-After; err when the site did not
// answer (a 502 from the proxy, a transport error).
func fetch(ctx context.Context, c *http.Client, u string) (int, time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, 0, err
	}
	res, err := c.Do(req)
	if err != nil {
		return 0, 0, err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 1<<20))
	res.Body.Close()
	switch res.StatusCode {
	case http.StatusOK, http.StatusTooManyRequests, http.StatusForbidden:
		return res.StatusCode, client.ParseRetryAfter(res.Header.Get("Retry-After"), time.Now()), nil
	}
	return res.StatusCode, client.ParseRetryAfter(res.Header.Get("Retry-After"), time.Now()), fmt.Errorf("status %d from the proxy", res.StatusCode)
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// pool is the healthy proxies as a pool API serves them: listed from the discovery API and
// refreshed every few seconds. Random and rotating read it.
type pool struct {
	c        *client.Client
	selector map[string]string
	// auth, when set, gives a proxy's credentials by ID, as a pool API hands them out with
	// the address (the discovery list never carries them).
	auth func(id string) *url.Userinfo
	mu   sync.RWMutex
	urls []*url.URL
}

const poolRefresh = 2 * time.Second

func (p *pool) start(ctx context.Context) error {
	if err := p.refresh(ctx); err != nil {
		return err
	}
	go func() {
		t := time.NewTicker(poolRefresh)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				_ = p.refresh(ctx) // keep the last list on a failed refresh, as a pool client would
			}
		}
	}()
	return nil
}

func (p *pool) refresh(ctx context.Context) error {
	yes := true
	l, err := p.c.List(ctx, client.ListOptions{Selector: p.selector, Healthy: &yes})
	if err != nil {
		return err
	}
	if len(l.Proxies) == 0 {
		return errors.New("no healthy proxy listed")
	}
	urls := make([]*url.URL, len(l.Proxies))
	for i, px := range l.Proxies {
		urls[i] = &url.URL{Scheme: "http", Host: px.Address()}
		if p.auth != nil {
			urls[i].User = p.auth(px.ID)
		}
	}
	p.mu.Lock()
	p.urls = urls
	p.mu.Unlock()
	return nil
}

func (p *pool) list() []*url.URL {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.urls
}

// random: a random healthy proxy per request, no memory of answers (a pool API's "get").
type random struct{ pool }

func (r *random) name() string { return "random" }

func (r *random) pick(context.Context, int, int) (*url.URL, time.Duration, error) {
	l := r.list()
	return l[rand.IntN(len(l))], 0, nil
}

func (r *random) answered(context.Context, int, int, *url.URL, int, time.Duration) {}
func (r *random) finish(context.Context, int)                                      {}

// rotating: round-robin over the pool; a proxy that sees 403 or 429 is dead for every site
// for a full-jitter exponential backoff, good again after a 200; when all are dead, all are
// revived (TeamHG-Memex/scrapy-rotating-proxies, rotating_proxies/expire.py: Proxies,
// exp_backoff_full_jitter, and the middleware's reset when no proxy is available).
type rotating struct {
	pool
	base, cap time.Duration

	mu    sync.Mutex
	next  int
	state map[string]*rotState
}

type rotState struct {
	deadUntil time.Time
	attempts  int
}

func (r *rotating) name() string { return "rotating" }

func (r *rotating) pick(context.Context, int, int) (*url.URL, time.Duration, error) {
	l := r.list()
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	for range 2 {
		for range l {
			u := l[r.next%len(l)]
			r.next++
			if st := r.state[u.Host]; st == nil || !now.Before(st.deadUntil) {
				return u, 0, nil
			}
		}
		// No proxy available: mark all unchecked (the middleware's reset).
		for _, st := range r.state {
			st.deadUntil = time.Time{}
		}
	}
	return nil, 0, errors.New("rotating: empty pool")
}

func (r *rotating) answered(_ context.Context, _, _ int, proxy *url.URL, code int, _ time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.state[proxy.Host]
	if st == nil {
		st = &rotState{}
		r.state[proxy.Host] = st
	}
	if code == http.StatusOK {
		st.attempts, st.deadUntil = 0, time.Time{}
		return
	}
	// exp_backoff: min(cap, base * 2^attempt), then full jitter.
	b := r.base
	for i := 0; i < st.attempts && b < r.cap; i++ {
		b *= 2
	}
	b = min(b, r.cap)
	st.deadUntil = time.Now().Add(rand.N(b + 1))
	st.attempts++
}

func (r *rotating) finish(context.Context, int) {}

// leases: the operator's API through the Go client. Each worker holds a lease per site with
// the site as target, kept alive while used; a 429 or 403 is reported with the site's
// Retry-After and the lease released, and the next request for that site leases again.
type leases struct {
	label    string
	c        *client.Client
	selector map[string]string
	sites    []string
	ttl      time.Duration

	granted, noMatch atomic.Int64
	mu               sync.Mutex
	held             map[[2]int]*heldLease
	// backoff per worker and site after a no-match, doubled up to maxNoMatchWait.
	wait map[[2]int]time.Duration
	// pagesPerLease, when positive, releases a lease after that many pages, as a crawler
	// that takes a fresh lease per batch does (0: held until a 429 or 403).
	pagesPerLease int
}

type heldLease struct {
	pages int // answered 200 through it
	l     *client.Lease
	ka    *client.KeepAlive
	url   *url.URL
}

const (
	minNoMatchWait = 100 * time.Millisecond
	maxNoMatchWait = 2 * time.Second
)

func (l *leases) name() string                { return l.label }
func (l *leases) start(context.Context) error { return nil }

func (l *leases) get(worker, site int) *heldLease {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.held[[2]int{worker, site}]
}

func (l *leases) pick(ctx context.Context, worker, site int) (*url.URL, time.Duration, error) {
	if h := l.get(worker, site); h != nil {
		return h.url, 0, nil
	}
	k := [2]int{worker, site}
	got, err := l.c.Lease(ctx, client.LeaseRequest{Selector: l.selector, TTL: l.ttl, Target: l.sites[site]})
	var nm *client.NoMatchError
	if errors.As(err, &nm) {
		l.noMatch.Add(1)
		l.mu.Lock()
		w := min(max(2*l.wait[k], minNoMatchWait), maxNoMatchWait)
		l.wait[k] = w
		l.mu.Unlock()
		return nil, w, nil
	}
	if err != nil {
		return nil, 0, err
	}
	u, err := got.URL()
	if err != nil {
		_ = l.c.Release(ctx, got.ID)
		return nil, 0, err
	}
	l.granted.Add(1)
	h := &heldLease{l: got, ka: l.c.KeepAlive(context.WithoutCancel(ctx), *got), url: u}
	l.mu.Lock()
	l.held[k] = h
	delete(l.wait, k)
	l.mu.Unlock()
	return u, 0, nil
}

func (l *leases) answered(ctx context.Context, worker, site int, _ *url.URL, code int, retryAfter time.Duration) {
	var result client.Result
	k := [2]int{worker, site}
	switch code {
	case http.StatusTooManyRequests:
		result = client.ResultRateLimited
	case http.StatusForbidden:
		result = client.ResultBanned
	case http.StatusOK:
		if l.pagesPerLease <= 0 {
			return
		}
		l.mu.Lock()
		h := l.held[k]
		done := h != nil && h.pages+1 >= l.pagesPerLease
		if h != nil {
			h.pages++
		}
		if done {
			delete(l.held, k)
		}
		l.mu.Unlock()
		if done {
			// A crawler that takes part in the quality score says how the batch went.
			ctx = context.WithoutCancel(ctx)
			_, _ = l.c.Report(ctx, h.l.ID, client.Report{Result: client.ResultOK, Target: l.sites[site]})
			_ = h.ka.Release(ctx)
		}
		return
	default:
		return
	}
	l.mu.Lock()
	h := l.held[k]
	delete(l.held, k)
	l.mu.Unlock()
	if h == nil {
		return
	}
	ctx = context.WithoutCancel(ctx)
	_, _ = l.c.Report(ctx, h.l.ID, client.Report{Result: result, Target: l.sites[site], RetryAfter: retryAfter})
	_ = h.ka.Release(ctx)
}

func (l *leases) finish(ctx context.Context, worker int) {
	l.mu.Lock()
	var mine []*heldLease
	for k, h := range l.held {
		if k[0] == worker {
			mine = append(mine, h)
			delete(l.held, k)
		}
	}
	l.mu.Unlock()
	for _, h := range mine {
		_ = h.ka.Release(ctx)
	}
}

// viaGateway: a naive crawler with no client library: every request goes to the operator's
// gateway as a plain HTTP proxy with the session-less username, and a 429 or 403 that still
// reaches it (the gateway retried on other upstreams already) pauses that site for the worker.
type viaGateway struct {
	proxy *url.URL
	pause time.Duration

	mu    sync.Mutex
	until map[[2]int]time.Time
}

func (g *viaGateway) name() string                { return "gateway" }
func (g *viaGateway) start(context.Context) error { return nil }

func (g *viaGateway) pick(_ context.Context, worker, site int) (*url.URL, time.Duration, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if d := time.Until(g.until[[2]int{worker, site}]); d > 0 {
		return nil, d, nil
	}
	return g.proxy, 0, nil
}

func (g *viaGateway) answered(_ context.Context, worker, site int, _ *url.URL, code int, retryAfter time.Duration) {
	if code != http.StatusTooManyRequests && code != http.StatusForbidden {
		return
	}
	g.mu.Lock()
	g.until[[2]int{worker, site}] = time.Now().Add(max(g.pause, retryAfter))
	g.mu.Unlock()
}

func (g *viaGateway) finish(context.Context, int) {}
