// Package client is the Go client of the discovery and lease API (docs/api.md): list proxies,
// lease one, renew, release and report what a target answered, keep a lease alive, and turn a
// lease into an http.Transport. It knows only the HTTP contract, nothing of the operator's
// internals, so a crawler imports it without the rest of the module's dependencies.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Defaults for options left unset.
const (
	DefaultTimeout     = 30 * time.Second
	DefaultMaxAttempts = 4
	DefaultMaxWait     = 30 * time.Second
	// DefaultLeaseWait is how long Lease keeps asking while the answer is 409 (nothing free).
	DefaultLeaseWait = 60 * time.Second
	// noMatchFallbackWait is the wait after a 409 without Retry-After (an older server).
	noMatchFallbackWait = 5 * time.Second
	initialBackoff      = 100 * time.Millisecond
	// Bounds on what is read from the server: a list of 10,000 proxies is about 2.5 MB.
	maxListBytes  = 32 << 20
	maxOtherBytes = 1 << 20
)

// Sentinel errors, matched with errors.Is. Every error from the server is an *APIError that
// unwraps to the sentinel for its status (when there is one).
var (
	// ErrNoMatch: nothing can be leased (409); errors.As gives a *NoMatchError with the counts.
	ErrNoMatch = errors.New("no proxy can be leased")
	// ErrNotFound: the lease is unknown, expired, released or its proxy left the fleet (404).
	ErrNotFound = errors.New("lease not found")
	// ErrUnauthorized: no or a wrong bearer token (401), or a token without the right (403).
	ErrUnauthorized = errors.New("not authorized")
	// ErrUnavailable: the server asks to come back later (429, 503), e.g. after a restart.
	ErrUnavailable = errors.New("discovery API unavailable")
	// ErrInvalid: the server rejected the request (400, 413, 422).
	ErrInvalid = errors.New("request rejected")
)

// APIError is an error answer of the discovery API.
type APIError struct {
	Method, Path string
	StatusCode   int
	// Message is the server's {"error": ...} text.
	Message string
	// RetryAfter is the Retry-After header, zero when absent.
	RetryAfter time.Duration
}

func (e *APIError) Error() string {
	return fmt.Sprintf("%s %s: %d %s", e.Method, e.Path, e.StatusCode, e.Message)
}

// Unwrap gives the sentinel for the status code.
func (e *APIError) Unwrap() error {
	switch e.StatusCode {
	case http.StatusConflict:
		return ErrNoMatch
	case http.StatusNotFound:
		return ErrNotFound
	case http.StatusUnauthorized, http.StatusForbidden:
		return ErrUnauthorized
	case http.StatusTooManyRequests, http.StatusServiceUnavailable:
		return ErrUnavailable
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusUnprocessableEntity:
		return ErrInvalid
	}
	return nil
}

// NoMatchError is the 409 answer to a lease request: why no proxy fits, with counts over the
// proxies matching the selector (each counted once, first of unhealthy, at capacity, cooling
// for the target, already leased for the target).
type NoMatchError struct {
	APIError
	Matching         int
	Unhealthy        int
	AtCapacity       int
	CoolingForTarget int
	LeasedForTarget  int
	Target           string
	// AvailableAt is the earliest time a matching proxy frees up by itself (a cooldown ends,
	// a lease expires); zero when the server knows none. RetryAfter (in APIError) is when to
	// ask again.
	AvailableAt time.Time
}

func (e *NoMatchError) Unwrap() error { return &e.APIError }

// ErrorBody is the JSON body of an error answer: the message, and on a 409 to a lease
// request the counts of why no proxy fits (as in NoMatchError).
type ErrorBody struct {
	Error            string `json:"error"`
	Matching         int    `json:"matching"`
	Unhealthy        int    `json:"unhealthy"`
	AtCapacity       int    `json:"atCapacity"`
	CoolingForTarget int    `json:"coolingForTarget"`
	LeasedForTarget  int    `json:"leasedForTarget"`
	Target           string `json:"target,omitempty"`
	// AvailableAt is when a matching proxy frees up by itself (absent when unknown);
	// RetryAfterSeconds repeats the 409's Retry-After header.
	AvailableAt       *time.Time `json:"availableAt,omitempty"`
	RetryAfterSeconds int64      `json:"retryAfterSeconds,omitempty"`
}

// Client talks to one discovery API. It is safe for concurrent use.
type Client struct {
	base        *url.URL
	token       string
	hc          *http.Client
	maxAttempts int
	maxWait     time.Duration
	leaseWait   time.Duration
	now         func() time.Time
	sleep       func(ctx context.Context, d time.Duration) error
}

// Option configures a Client.
type Option func(*Client)

// WithToken sends Authorization: Bearer token on every request.
func WithToken(token string) Option { return func(c *Client) { c.token = token } }

// WithHTTPClient replaces the HTTP client (default: a client with a 30 s timeout).
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.hc = hc } }

// WithRetry sets how often a call is tried in all when the server answers 429 or 503, or the
// request fails to reach it, and the longest single wait. A Retry-After longer than maxWait
// is not waited for: the error is returned with it. attempts 1 disables retries. A lease's
// 409 is retried by WithLeaseWait's rule instead.
func WithRetry(attempts int, maxWait time.Duration) Option {
	return func(c *Client) { c.maxAttempts, c.maxWait = attempts, maxWait }
}

// WithLeaseWait sets how long Lease keeps asking while nothing can be leased (409; default
// DefaultLeaseWait): it waits each answer's Retry-After and asks again, as long as the next
// ask falls within d of the call's start (and before ctx's deadline). An answer whose
// Retry-After reaches past that is returned at once. 0 never waits.
func WithLeaseWait(d time.Duration) Option {
	return func(c *Client) { c.leaseWait = max(d, 0) }
}

// New returns a client of the API at baseURL (for example http://127.0.0.1:8090).
func New(baseURL string, opts ...Option) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("client: base URL: %w", err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("client: base URL %q: want http(s)://host[:port]", baseURL)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	c := &Client{base: u, hc: &http.Client{Timeout: DefaultTimeout}, maxAttempts: DefaultMaxAttempts, maxWait: DefaultMaxWait,
		leaseWait: DefaultLeaseWait, now: time.Now, sleep: sleepCtx}
	for _, o := range opts {
		o(c)
	}
	if c.maxAttempts < 1 {
		c.maxAttempts = 1
	}
	if c.maxWait <= 0 {
		c.maxWait = DefaultMaxWait
	}
	return c, nil
}

// Proxy is one proxy as the API describes it.
type Proxy struct {
	ID         string            `json:"id"`
	IP         string            `json:"ip"`
	Port       int               `json:"port"`
	Attributes map[string]string `json:"attributes"`
	Phase      string            `json:"phase"`
	Healthy    bool              `json:"healthy"`
	// Draining is true while a ProxyPool drains this member: its leases run to their end, it
	// takes no new one.
	Draining      bool  `json:"draining,omitempty"`
	LatencyMillis int64 `json:"latencyMillis"`
	ActiveLeases  int   `json:"activeLeases"`
	MaxLeases     int   `json:"maxLeases"`
}

// Address is ip:port.
func (p Proxy) Address() string { return joinHostPort(p.IP, p.Port) }

// ProxyList is the answer to List.
type ProxyList struct {
	// Complete is false right after an operator restart: a missing proxy may exist.
	Complete   bool       `json:"complete"`
	CompleteAt *time.Time `json:"completeAt,omitempty"`
	// Count is len(Proxies): the proxies of this page (of all pages, from List without a Limit).
	Count   int     `json:"count"`
	Proxies []Proxy `json:"proxies"`
	// Continue, when not empty, asks for the next page (ListOptions.Continue): more proxies match.
	Continue string `json:"continue,omitempty"`
}

// ListOptions filter a list. Zero value: every proxy.
type ListOptions struct {
	// Selector keeps proxies whose attributes contain every pair.
	Selector map[string]string
	// Healthy, when set, keeps only healthy (true) or unhealthy (false) proxies.
	Healthy *bool
	// Limit, when above 0, asks for one page of at most Limit proxies (the server caps it at
	// 1,000 and at about 1 MiB of JSON), starting after Continue. Zero: List follows the pages
	// itself and returns every match.
	Limit    int
	Continue string
}

// maxListPages bounds the pages List follows: 1,000 pages of up to 1,000 proxies.
const maxListPages = 1000

// List lists proxies: one page when o.Limit is set, else every page.
func (c *Client) List(ctx context.Context, o ListOptions) (*ProxyList, error) {
	q := url.Values{}
	for k, v := range o.Selector {
		q.Set("attr."+k, v)
	}
	if o.Healthy != nil {
		q.Set("healthy", strconv.FormatBool(*o.Healthy))
	}
	if o.Limit > 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	all := ProxyList{Complete: true, Proxies: []Proxy{}}
	cont := o.Continue
	for range maxListPages {
		if cont != "" {
			q.Set("continue", cont)
		}
		var page ProxyList
		if err := c.do(ctx, http.MethodGet, "/v1/proxies", q, nil, &page, maxListBytes, idempotent); err != nil {
			return nil, err
		}
		if o.Limit > 0 {
			return &page, nil
		}
		all.Complete = all.Complete && page.Complete
		if page.CompleteAt != nil {
			all.CompleteAt = page.CompleteAt
		}
		all.Proxies = append(all.Proxies, page.Proxies...)
		all.Count = len(all.Proxies)
		if page.Continue == "" || page.Continue == cont {
			return &all, nil
		}
		cont = page.Continue
	}
	return nil, fmt.Errorf("list: more than %d pages", maxListPages)
}

// SiteList is GET /v1/sites' answer (docs/api.md): the top sites by recent gateway traffic
// and every site cooling, in the caller's namespaces, by recent traffic then host.
type SiteList struct {
	Sites []Site `json:"sites"`
	Count int    `json:"count"`
	// CoolingTotal is how many cooldowns are in force in the caller's namespaces;
	// CoolingListed how many of them the sites show (at most 1000).
	CoolingTotal  int `json:"coolingTotal"`
	CoolingListed int `json:"coolingListed"`
}

// Site is one site of a SiteList.
type Site struct {
	Host string `json:"host"`
	// RecentRequests are the sends through the gateway, each fading over five minutes.
	RecentRequests float64 `json:"recentRequests"`
	// Pace is nil when no gateway runs in the answering process or it never sent there.
	Pace      *SitePace      `json:"pace,omitempty"`
	Cooldowns []SiteCooldown `json:"cooldowns"`
	// Vendor is set while the gateway's waterfall sends the site to a vendor source.
	Vendor *SiteVendor `json:"vendor,omitempty"`
}

// SiteVendor is a site's time with a vendor source: since when, until when the gateway tries
// our own proxies again, and why (refused: two of ours got the same 403; cooling: every one
// of ours that fits is cooling or banned for the site).
type SiteVendor struct {
	Since  time.Time `json:"since"`
	Until  time.Time `json:"until"`
	Reason string    `json:"reason"`
}

// UsageList is GET /v1/usage's answer (docs/api.md): what the gateway relayed per team and
// source since it started.
type UsageList struct {
	Usage []Usage `json:"usage"`
	Count int     `json:"count"`
}

// Usage is one team's traffic through one source (fleet, or a vendor Proxy's namespace/name).
type Usage struct {
	Team   string `json:"team"`
	Source string `json:"source"`
	// Pool is the pool of the upstreams that carried it (empty: upstreams of no pool).
	Pool     string  `json:"pool"`
	BytesIn  int64   `json:"bytesIn"`
	BytesOut int64   `json:"bytesOut"`
	Requests int64   `json:"requests"`
	Cost     float64 `json:"cost"`
	// Budgets are the team's budgets that count this source.
	Budgets []UsageBudget `json:"budgets"`
}

// UsageBudget is one budget of a team's token and what its current period used.
type UsageBudget struct {
	Source string    `json:"source"`
	Period string    `json:"period"`
	Bytes  int64     `json:"bytes"`
	Used   int64     `json:"used"`
	Resets time.Time `json:"resets"`
}

// SitePace is the gateway's learned pace for a site.
type SitePace struct {
	RatePerUpstream float64 `json:"ratePerUpstream"`
	// CeilingPerUpstream is the site's limit as last measured: the rate of the last 429, or
	// the highest rate proven below it (nil before a 429).
	CeilingPerUpstream *float64 `json:"ceilingPerUpstream,omitempty"`
	Queue              int      `json:"queue"`
}

// SiteCooldown is one upstream cooling for a site: Reason is the result of the report that
// set Until (rate_limited or banned).
type SiteCooldown struct {
	ProxyID string    `json:"proxyId"`
	Until   time.Time `json:"until"`
	Reason  Result    `json:"reason"`
	Strikes int       `json:"strikes"`
}

// Sites lists the sites the crawl meets (GET /v1/sites): the top limit by recent traffic (0:
// the server's default, 100; at most 1000) and every site cooling.
func (c *Client) Sites(ctx context.Context, limit int) (*SiteList, error) {
	q := url.Values{}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var out SiteList
	if err := c.do(ctx, http.MethodGet, "/v1/sites", q, nil, &out, maxListBytes, idempotent); err != nil {
		return nil, err
	}
	return &out, nil
}

// LeaseRequest asks for a lease. Zero value: any healthy proxy for the server's default TTL.
type LeaseRequest struct {
	Selector map[string]string
	// TTL is rounded up to whole seconds; zero: the server's default (300 s).
	TTL time.Duration
	// Target is the host (or host:port) the crawler will fetch: proxies cooling for it are skipped.
	Target string
	// SessionKey asks for the proxy the same key got last, while it still fits.
	SessionKey string
}

// Lease is a granted lease.
type Lease struct {
	ID         string    `json:"leaseID"`
	Proxy      Proxy     `json:"proxy"`
	ExpiresAt  time.Time `json:"expiresAt"`
	TTLSeconds int64     `json:"ttlSeconds"`
	Target     string    `json:"target,omitempty"`
	SessionKey string    `json:"sessionKey,omitempty"`
	// ProxyURL, when the proxy requires credentials, is the URL to use (credentials included),
	// ready for HTTP_PROXY. Username and Password are its parts. Never log them.
	ProxyURL string `json:"proxyURL,omitempty"`
	Username string `json:"username,omitempty"`
	Password string `json:"password,omitempty"`
}

// TTL is the lease's length.
func (l Lease) TTL() time.Duration { return time.Duration(l.TTLSeconds) * time.Second }

// URL is where to send traffic through the lease's proxy: the answer's proxyURL when it has
// one, else http://ip:port with the username and password when the answer carries them.
func (l Lease) URL() (*url.URL, error) {
	if l.ProxyURL != "" {
		u, err := url.Parse(l.ProxyURL)
		if err != nil {
			// The parse error would echo the URL, credentials included.
			return nil, fmt.Errorf("client: lease %s: proxyURL is not a URL", l.ID)
		}
		return u, nil
	}
	if l.Proxy.IP == "" || l.Proxy.Port <= 0 {
		return nil, fmt.Errorf("client: lease %s: proxy has no address", l.ID)
	}
	u := &url.URL{Scheme: "http", Host: l.Proxy.Address()}
	if l.Username != "" {
		u.User = url.UserPassword(l.Username, l.Password)
	}
	return u, nil
}

// Transport returns a copy of http.DefaultTransport that sends every request through the
// lease's proxy (http.ProxyURL, so credentials in the URL become Proxy-Authorization).
func (l Lease) Transport() (*http.Transport, error) {
	u, err := l.URL()
	if err != nil {
		return nil, err
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.Proxy = http.ProxyURL(u)
	return t, nil
}

type leaseBody struct {
	Selector   map[string]string `json:"selector,omitempty"`
	TTLSeconds int64             `json:"ttlSeconds,omitempty"`
	Target     string            `json:"target,omitempty"`
	SessionKey string            `json:"sessionKey,omitempty"`
}

// Lease leases one proxy. While nothing fits (409) it waits and asks again as WithLeaseWait
// says (by default for up to a minute); then the error is a *NoMatchError (errors.Is
// ErrNoMatch) saying why and when a proxy frees up.
func (c *Client) Lease(ctx context.Context, r LeaseRequest) (*Lease, error) {
	body := leaseBody{Selector: r.Selector, Target: r.Target, SessionKey: r.SessionKey, TTLSeconds: ttlSeconds(r.TTL)}
	deadline := c.now().Add(c.leaseWait)
	for {
		var out Lease
		err := c.do(ctx, http.MethodPost, "/v1/leases", nil, body, &out, maxOtherBytes, 0)
		var nm *NoMatchError
		if err == nil || !errors.As(err, &nm) {
			if err != nil {
				return nil, err
			}
			return &out, nil
		}
		wait := nm.RetryAfter
		if wait <= 0 {
			wait = noMatchFallbackWait
		}
		next := c.now().Add(wait)
		if dl, ok := ctx.Deadline(); next.After(deadline) || ok && next.After(dl) {
			return nil, err
		}
		if serr := c.sleep(ctx, wait); serr != nil {
			return nil, err
		}
	}
}

// Renew extends a live lease to now + ttl (0: the lease's own TTL). A lease that is gone
// gives an error matching ErrNotFound: lease again.
func (c *Client) Renew(ctx context.Context, id string, ttl time.Duration) (*Lease, error) {
	var body any
	if s := ttlSeconds(ttl); s > 0 {
		body = map[string]int64{"ttlSeconds": s}
	}
	var out Lease
	if err := c.do(ctx, http.MethodPost, "/v1/leases/"+url.PathEscape(id)+"/renew", nil, body, &out, maxOtherBytes, idempotent); err != nil {
		return nil, err
	}
	return &out, nil
}

// Release ends a lease. Releasing a lease that is already gone is not an error.
func (c *Client) Release(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, "/v1/leases/"+url.PathEscape(id), nil, nil, nil, maxOtherBytes, idempotent)
}

// Result is what a crawler saw on a target.
type Result string

const (
	ResultOK          Result = "ok"
	ResultRateLimited Result = "rate_limited"
	ResultBanned      Result = "banned"
)

// Report is what a crawler tells the API about a target seen through a lease's proxy.
type Report struct {
	Result Result
	// Target is the host (or host:port) the result was seen on.
	Target string
	// RetryAfter is what the target asked for (its Retry-After), rounded up to seconds.
	RetryAfter time.Duration
}

// Cooldown is the answer to a report.
type Cooldown struct {
	ProxyID string `json:"proxyID"`
	Target  string `json:"target"`
	Result  Result `json:"result"`
	// Until is when the proxy may be leased for the target again (nil for ok).
	Until   *time.Time `json:"cooldownUntil,omitempty"`
	Strikes int        `json:"strikes,omitempty"`
}

// Report reports a result for the lease's proxy on a target.
func (c *Client) Report(ctx context.Context, id string, r Report) (*Cooldown, error) {
	body := struct {
		Result            Result `json:"result"`
		Target            string `json:"target"`
		RetryAfterSeconds *int64 `json:"retryAfterSeconds,omitempty"`
	}{Result: r.Result, Target: r.Target}
	if r.RetryAfter > 0 {
		s := ttlSeconds(r.RetryAfter)
		body.RetryAfterSeconds = &s
	}
	var out Cooldown
	if err := c.do(ctx, http.MethodPost, "/v1/leases/"+url.PathEscape(id)+"/report", nil, body, &out, maxOtherBytes, 0); err != nil {
		return nil, err
	}
	return &out, nil
}

// ParseRetryAfter reads a Retry-After header value (seconds or an HTTP date) relative to now;
// zero when absent or malformed.
func ParseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseInt(v, 10, 64); err == nil {
		if s <= 0 {
			return 0
		}
		return time.Duration(min(s, int64(7*24*3600))) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// retryPolicy says what else a call retries besides 429 and 503 (answers that changed nothing).
type retryPolicy int

const (
	// idempotent calls (list, renew, release) also retry transport errors: repeating one that
	// did arrive changes nothing. A lease that failed in transit is not retried: it may have
	// been granted, and a retry could hold two (the orphan expires with its TTL). Nor is a
	// report: it would count a strike twice.
	idempotent retryPolicy = 1 << iota
)

// do sends one call, retrying as policy allows with bounded backoff, honouring Retry-After.
func (c *Client) do(ctx context.Context, method, path string, q url.Values, body, out any, limit int64, policy retryPolicy) error {
	var payload []byte
	if body != nil {
		var err error
		if payload, err = json.Marshal(body); err != nil {
			return fmt.Errorf("client: %s %s: encoding body: %w", method, path, err)
		}
	}
	u := *c.base
	u.Path += path
	u.RawQuery = q.Encode()
	backoff := initialBackoff
	for attempt := 1; ; attempt++ {
		err := c.once(ctx, method, u.String(), path, payload, out, limit)
		if err == nil || attempt >= c.maxAttempts || ctx.Err() != nil {
			return err
		}
		var api *APIError
		// Full jitter on our own backoff; a server's Retry-After is waited as given.
		wait := backoff/2 + rand.N(backoff/2+1)
		switch {
		case errors.As(err, &api):
			retryable := api.StatusCode == http.StatusTooManyRequests || api.StatusCode == http.StatusServiceUnavailable
			if !retryable {
				return err
			}
			if api.RetryAfter > 0 {
				if api.RetryAfter > c.maxWait {
					return err // the caller decides whether to wait that long
				}
				wait = max(api.RetryAfter, wait)
			}
		case policy&idempotent == 0:
			return err
		}
		backoff = min(2*backoff, c.maxWait)
		if err := c.sleep(ctx, wait); err != nil {
			return err
		}
	}
}

func (c *Client) once(ctx context.Context, method, rawURL, path string, payload []byte, out any, limit int64) error {
	var rd io.Reader
	if payload != nil {
		rd = bytes.NewReader(payload)
	}
	req, err := http.NewRequestWithContext(ctx, method, rawURL, rd)
	if err != nil {
		return fmt.Errorf("client: %s %s: %w", method, path, err)
	}
	if payload != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	res, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("client: %s %s: %w", method, path, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, limit+1))
	if err != nil {
		return fmt.Errorf("client: %s %s: reading answer: %w", method, path, err)
	}
	if int64(len(b)) > limit {
		return fmt.Errorf("client: %s %s: answer larger than %d bytes", method, path, limit)
	}
	if res.StatusCode >= 200 && res.StatusCode < 300 {
		if out == nil || res.StatusCode == http.StatusNoContent {
			return nil
		}
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("client: %s %s: decoding answer: %w", method, path, err)
		}
		return nil
	}
	api := APIError{Method: method, Path: path, StatusCode: res.StatusCode,
		RetryAfter: ParseRetryAfter(res.Header.Get("Retry-After"), time.Now())}
	var eb ErrorBody
	if json.Unmarshal(b, &eb) == nil && eb.Error != "" {
		api.Message = eb.Error
	} else {
		api.Message = strings.TrimSpace(string(b[:min(len(b), 200)]))
		if api.Message == "" {
			api.Message = http.StatusText(res.StatusCode)
		}
	}
	if res.StatusCode == http.StatusConflict {
		nm := &NoMatchError{APIError: api, Matching: eb.Matching, Unhealthy: eb.Unhealthy,
			AtCapacity: eb.AtCapacity, CoolingForTarget: eb.CoolingForTarget, LeasedForTarget: eb.LeasedForTarget, Target: eb.Target}
		if eb.AvailableAt != nil {
			nm.AvailableAt = *eb.AvailableAt
		}
		return nm
	}
	return &api
}

func ttlSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

func joinHostPort(ip string, port int) string {
	if strings.Contains(ip, ":") {
		return "[" + ip + "]:" + strconv.Itoa(port)
	}
	return ip + ":" + strconv.Itoa(port)
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
