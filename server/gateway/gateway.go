// Package gateway serves the crawlers' one proxy endpoint: an HTTP/1.1 forward proxy
// (absolute-form requests and CONNECT tunnels), and SOCKS5 CONNECT tunnels on a listener of
// their own, that authenticates a discovery token given as
// the proxy password, leases an upstream proxy from the lease store for every request, tunnel
// or sticky session, adds that upstream's credential, and detects bans by rules, reporting
// them to the store and retrying on another upstream. It never dials a target itself and never
// decrypts TLS; it knows nothing of how the fleet is filled or probed.
package gateway

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/proxy-operator/proxy-operator/internal/netpolicy"
	"github.com/proxy-operator/proxy-operator/lease"
	"github.com/proxy-operator/proxy-operator/server/discovery/access"
	"github.com/proxy-operator/proxy-operator/server/hooks/membudget"
	"github.com/proxy-operator/proxy-operator/server/httpx"
)

// Defaults for Gateway fields left zero.
const (
	DefaultLeaseTTL              = time.Minute
	DefaultMaxTries              = 3
	DefaultMaxRetryBody          = 1 << 20
	DefaultAcquireWait           = 2 * time.Second
	DefaultMaxConns              = 20000
	DefaultMaxConnsPerToken      = 2000
	DefaultDialTimeout           = 10 * time.Second
	DefaultResponseHeaderTimeout = 30 * time.Second
	DefaultIdleTimeout           = 2 * time.Minute
	DefaultReadHeaderTimeout     = 10 * time.Second
	DefaultMaxHeaderBytes        = 32 << 10
	DefaultMaxRetryAfter         = 7 * 24 * time.Hour

	// realm is what Proxy-Authenticate names.
	realm = `Basic realm="proxy-operator gateway"`
)

// Headers the gateway adds to every answer it relays.
const (
	HeaderProxy = "X-Proxy-Operator-Proxy"
	HeaderTries = "X-Proxy-Operator-Tries"
	// HeaderSessionMoved says a session's upstream was left during the request, and why
	// ("banned"): its next requests go through the new one (decision 0269).
	HeaderSessionMoved = "X-Proxy-Operator-Session-Moved"
)

// FleetSource says whether the fleet view can be trusted yet (after a restart it fills as
// syncs come; leasing before would pile every request onto the first proxies synced).
type FleetSource interface {
	Complete() bool
	CompleteAt() time.Time
}

// Gateway is the forward proxy. Its dependencies are fields; zero limits take the defaults.
type Gateway struct {
	Leases lease.Store
	// Fleet, when set, holds requests back with 503 until the view is complete.
	Fleet FleetSource
	// Tokens authenticate the proxy password. Insecure serves without one, as a caller with
	// every right (only on a trusted address).
	Tokens *access.Tokens
	// Shares, when set, gives a token's fair share per namespace (decision 0259; the operator
	// wires the discovery API's). With more than one token every gateway lease is held in the
	// token's name, so the store's per-token bound applies even without Shares.
	Shares   func(*access.Caller) map[string]int
	Insecure bool
	// Rules detect bans in plain-HTTP answers (nil: the default rules).
	Rules *Rules
	Log   *slog.Logger
	// Registerer receives the gateway metrics (nil: not registered). PerProxyMetrics labels
	// the byte counters by proxy as well as by pool.
	Registerer      prometheus.Registerer
	PerProxyMetrics bool
	// Reports, when set, counts the reports the store accepted from this gateway, labelled
	// result and source "gateway": the process's proxy_operator_lease_reports_total
	// (discovery.NewReportCounter), shared with the API's reports and registered by whoever
	// made it. Nil: not counted.
	Reports *prometheus.CounterVec
	Now     func() time.Time
	// Egress is the policy targets and upstreams are checked against (egress.go; nil: the
	// default policy, which refuses every internal target and every loopback upstream).
	Egress *netpolicy.Policy

	// LeaseTTL is each lease's TTL; leases in use longer are renewed at half of it.
	LeaseTTL time.Duration
	// MaxTries bounds the upstreams one request or tunnel tries, the first included.
	MaxTries int
	// MaxRetryBody is the largest request body kept for a retry: a larger one is sent once.
	MaxRetryBody int64
	// AcquireWait is how long a request waits for an upstream another request holds for the
	// same target (or one at capacity) before the 503.
	AcquireWait time.Duration
	// MaxConns bounds client connections (Listener), never above what the descriptor limit
	// allows (fdConnCap); MaxConnsPerToken bounds the requests and tunnels in flight per token.
	MaxConns         int
	MaxConnsPerToken int
	// Budget is the memory budget of client connections, their heads and retry buffers
	// (budget.go; nil: DefaultMemoryFraction of membudget.Limit). FailedLoginIdle closes a
	// connection idle after a failed login.
	Budget          *membudget.Budget
	FailedLoginIdle time.Duration
	// DialTimeout bounds dialing an upstream, ResponseHeaderTimeout its answer's head;
	// IdleTimeout ends a keep-alive client connection, a tunnel or a body without traffic.
	DialTimeout           time.Duration
	ResponseHeaderTimeout time.Duration
	IdleTimeout           time.Duration
	ReadHeaderTimeout     time.Duration
	MaxHeaderBytes        int
	// MaxRetryAfter caps a target's Retry-After when it becomes a cooldown.
	MaxRetryAfter time.Duration
	// QueueWait bounds how long a request waits for its site's pace (pace.go); MaxQueue
	// bounds the requests waiting for one site.
	QueueWait time.Duration
	MaxQueue  int
	// Logins throttles failed logins per source address (nil: the defaults; decision 0257).
	Logins *httpx.LoginThrottle
	// Book shares the pace between replicas (nil: this process paces alone; pacebook.go).
	Book PaceBook
	// UsageBook keeps usage across restarts and replicas (nil: this process counts alone;
	// usage.go).
	UsageBook UsageBook
	// Waterfall sends a site's requests to a vendor source while our own proxies cannot get
	// it (refused or cooling), for WaterfallCooldown at a time (vendor.go, decision 0294).
	Waterfall         bool
	WaterfallCooldown time.Duration

	once         sync.Once
	transport    *http.Transport
	m            *metrics
	pace         *pacer
	conns        *conns
	dialer       *net.Dialer            // upstream dials, under Egress (initEgress)
	egressDenied *prometheus.CounterVec // by hop

	mu       sync.Mutex
	inflight map[string]int   // requests and tunnels per token name
	slots    map[string]*slot // sticky sessions with a lease in use, by session key and target
	freed    chan struct{}    // closed (and replaced) whenever this gateway releases a lease
	recent   map[string][]string
	water    *waterfall
	usage    *usage
}

func (g *Gateway) init() {
	if g.Log == nil {
		g.Log = slog.New(slog.DiscardHandler)
	}
	if g.Now == nil {
		g.Now = time.Now
	}
	if g.Rules == nil {
		g.Rules, _ = ParseRules(nil)
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	// The limits a Config sets take their defaults in one place, Config.WithDefaults, whether
	// the Gateway was built from flags (Config.Apply) or by hand (a test, an embedder).
	limitsOf(g).WithDefaults().setLimits(g)
	def(&g.AcquireWait, DefaultAcquireWait)
	def(&g.DialTimeout, DefaultDialTimeout)
	def(&g.ResponseHeaderTimeout, DefaultResponseHeaderTimeout)
	def(&g.ReadHeaderTimeout, DefaultReadHeaderTimeout)
	def(&g.MaxRetryAfter, DefaultMaxRetryAfter)
	def(&g.QueueWait, DefaultQueueWait)
	if g.MaxQueue <= 0 {
		g.MaxQueue = DefaultMaxQueue
	}
	g.pace = newPacer(g.Now, g.Rules.pace, g.MaxQueue)
	if g.LeaseTTL < 2*time.Second {
		g.LeaseTTL = 2 * time.Second
	}
	if fdCap := fdConnCap(); fdCap > 0 && g.MaxConns > fdCap {
		g.Log.Warn("gateway connection limit lowered to what the descriptor limit allows", "maxConns", g.MaxConns, "allowed", fdCap)
		g.MaxConns = fdCap
	}
	def(&g.FailedLoginIdle, DefaultFailedLoginIdle)
	g.inflight = map[string]int{}
	g.slots = map[string]*slot{}
	g.recent = map[string][]string{}
	g.water = newWaterfall()
	def(&g.WaterfallCooldown, DefaultWaterfallCooldown)
	g.freed = make(chan struct{})
	dialer := &net.Dialer{Timeout: g.DialTimeout, KeepAlive: 30 * time.Second}
	g.transport = &http.Transport{
		// The upstream of each request travels in its context (see upstreamOf); the pool of
		// connections is per upstream, so a request never rides another upstream's connection.
		Proxy:                  upstreamOf,
		DialContext:            dialer.DialContext,
		ResponseHeaderTimeout:  g.ResponseHeaderTimeout,
		IdleConnTimeout:        90 * time.Second,
		MaxIdleConns:           4096,
		MaxIdleConnsPerHost:    256,
		MaxResponseHeaderBytes: int64(g.MaxHeaderBytes) * 2,
		// The client's Accept-Encoding and the target's Content-Encoding pass through as sent.
		DisableCompression: true,
		ForceAttemptHTTP2:  false,
	}
	g.m = newMetrics(g.Registerer, g.PerProxyMetrics)
	g.usage = newUsage(g.Registerer)
	g.initEgress()
	if g.Budget == nil {
		limit, _ := membudget.Limit(0)
		g.Budget = BudgetFor(limit)
	}
	g.conns = &conns{g: g, budget: g.Budget, now: time.Now, byToken: map[string]int64{}, grace: newGrace}
	if g.Logins == nil {
		g.Logins = &httpx.LoginThrottle{Listener: "gateway", Message: "gateway login failed", Log: g.Log, Now: g.Now}
	}
	switch {
	case g.Insecure:
		g.Log.Warn("GATEWAY AUTH DISABLED (insecure): anyone who reaches the gateway listener can crawl through every proxy")
	case g.Tokens == nil:
		g.Log.Error("gateway has no token: every request is refused")
	}
}

// Server returns the gateway's server with its timeouts and header bound set. Serve it on
// Listener(ln) so the connection bound holds.
func (g *Gateway) Server() *http.Server {
	g.once.Do(g.init)
	return &http.Server{
		Handler:           g,
		ReadHeaderTimeout: g.ReadHeaderTimeout,
		IdleTimeout:       g.IdleTimeout,
		MaxHeaderBytes:    g.MaxHeaderBytes,
		ConnState:         g.conns.connState,
		ConnContext:       withConn,
		// Bodies and tunnels are bounded by idle deadlines set as they flow (see idle.go):
		// a whole-request ReadTimeout or WriteTimeout would cut long downloads and tunnels.
		ErrorLog: slog.NewLogLogger(g.Log.Handler(), slog.LevelDebug),
	}
}

// ServeHTTP answers one proxy request.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.once.Do(g.init)
	kind := kindRequest
	if r.Method == http.MethodConnect {
		kind = kindTunnel
	}
	if r.Method != http.MethodConnect && !r.URL.IsAbs() && r.URL.Path == "/healthz" {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte("ok\n"))
		return
	}
	err := g.serve(w, r, kind)
	var e *httpx.Error
	failed := errors.As(err, &e) && e.Code == http.StatusProxyAuthRequired || errors.Is(err, errLoginThrottled)
	g.conns.noteLogin(r, failed, !failed)
	if err == nil {
		return
	}
	if (failed || errors.Is(err, errOverShare)) && r.ContentLength != 0 {
		// Not reading the rest of a body refused before it was read (net/http would, first);
		// the connection, closed after the answer, is the first to evict meanwhile.
		w.Header().Set("Connection", "close")
		g.conns.closing(r)
	}
	var rf *refusal
	if errors.As(err, &rf) {
		g.Log.Debug("gateway request refused", "kind", kind, "code", rf.code, "reason", rf.reason, "err", err)
		g.m.outcome(kind, outcomeOf(rf.code))
		rf.write(w)
		return
	}
	if !errors.As(err, &e) {
		g.Log.Error("gateway request failed", "kind", kind, "err", err)
		e = &httpx.Error{Code: http.StatusInternalServerError, Message: "internal error"}
	} else if e.Code >= 500 && e.Code != http.StatusServiceUnavailable {
		g.Log.Warn("gateway request failed", "kind", kind, "code", e.Code, "err", err)
	} else {
		g.Log.Debug("gateway request refused", "kind", kind, "code", e.Code, "err", err)
	}
	g.m.outcome(kind, outcomeOf(e.Code))
	if e.Code == http.StatusProxyAuthRequired {
		w.Header().Set("Proxy-Authenticate", realm)
	}
	httpx.WriteError(w, e)
}

func (g *Gateway) serve(w http.ResponseWriter, r *http.Request, kind string) error {
	caller, sel, err := g.authenticate(r)
	if err != nil {
		return err
	}
	done, err := g.admit(caller)
	if err != nil {
		return err
	}
	defer done()
	if err := g.checkTarget(r, kind); err != nil {
		return err
	}
	pick := pick{caller: caller, sel: sel}
	if kind == kindTunnel {
		return g.connect(w, r, pick)
	}
	if !r.URL.IsAbs() {
		return httpx.Errorf(http.StatusBadRequest, "the gateway is a forward proxy: send absolute-form requests (GET http://site/path) or CONNECT host:port, e.g. with HTTP_PROXY and HTTPS_PROXY")
	}
	if r.URL.Scheme != "http" {
		return httpx.Errorf(http.StatusBadRequest, "scheme %q: the gateway relays http:// requests; for https:// use CONNECT (HTTPS_PROXY), the gateway never decrypts TLS", r.URL.Scheme)
	}
	return g.forward(w, r, pick)
}

// errLoginThrottled marks the 429 of a source address throttled after failed logins.
var errLoginThrottled = errors.New("too many failed logins")

// pick is who asks and what for.
type pick struct {
	caller *access.Caller
	sel    Selection
}

// authenticate reads Proxy-Authorization: Basic with the username grammar and a discovery
// token as the password. Every refusal is a 407 saying what is wrong, never echoing the token.
func (g *Gateway) authenticate(r *http.Request) (*access.Caller, Selection, error) {
	h := r.Header.Get("Proxy-Authorization")
	r.Header.Del("Proxy-Authorization")
	l := login{g: g, remote: r.RemoteAddr, attrs: []any{"method", r.Method, "path", r.URL.Path}}
	if c, _ := r.Context().Value(connKey{}).(*limitConn); c != nil {
		l.port = c.port
	}
	if wait := g.Logins.WaitAddr(l.remote); wait > 0 {
		return l.throttled(wait)
	}
	if h == "" {
		if !g.Insecure && l.port == nil && l.allowlisted() == nil {
			return l.deny("missing", "proxy authentication required: send Proxy-Authorization: Basic with a discovery token as the password (http://USERNAME:TOKEN@gateway:port)")
		}
		return l.check("", "")
	}
	scheme, enc, _ := strings.Cut(strings.TrimSpace(h), " ")
	if !strings.EqualFold(scheme, "Basic") {
		return l.deny("scheme", "Proxy-Authorization scheme %.20q: the gateway accepts Basic only", scheme)
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(enc))
	if err != nil {
		return l.deny("encoding", "Proxy-Authorization: the Basic credentials are not valid base64")
	}
	user, pass, ok := strings.Cut(string(raw), ":")
	if !ok {
		return l.deny("encoding", "Proxy-Authorization: the Basic credentials are not USERNAME:PASSWORD")
	}
	return l.check(user, pass)
}

// login is one login attempt, over HTTP (authenticate) or SOCKS5 (socks.go), from remote.
type login struct {
	g      *Gateway
	remote string
	attrs  []any      // what the attempt asked for, for the throttle's log line
	port   *tokenPort // the token's own listener the connection came to (nil: a shared one)
}

// allowlisted is the token whose allowlist holds the source address (nil: none).
func (l login) allowlisted() *access.Caller {
	ap, err := netip.ParseAddrPort(l.remote)
	if err != nil {
		return nil
	}
	return l.g.Tokens.BySource(ap.Addr())
}

// throttled is the 429 of a source address throttled after failed logins, given without
// looking at the credential, so a guesser learns nothing while it waits.
func (l login) throttled(wait time.Duration) (*access.Caller, Selection, error) {
	l.g.m.authFailures.WithLabelValues("throttled").Inc()
	return nil, Selection{}, &httpx.Error{Code: http.StatusTooManyRequests, RetryAfter: httpx.RetryAfter(wait), Err: errLoginThrottled,
		Message: "too many failed logins from this address; retry after the Retry-After seconds"}
}

// deny is a 407 for reason, counted and (but for a missing credential) a failure for the throttle.
func (l login) deny(reason, format string, args ...any) (*access.Caller, Selection, error) {
	l.g.m.authFailures.WithLabelValues(reason).Inc()
	if reason != "missing" {
		// A client that asks first without credentials (the challenge) has not failed.
		l.g.Logins.FailedAddr(l.remote, reason, l.attrs...)
	}
	return nil, Selection{}, httpx.Errorf(http.StatusProxyAuthRequired, format, args...)
}

// check authenticates a username (the selection grammar) and a password (a discovery token).
func (l login) check(user, pass string) (*access.Caller, Selection, error) {
	g := l.g
	var caller *access.Caller
	switch {
	case g.Insecure:
		caller = access.Insecure
	case pass == "":
		// On a token's own port, or from a source its allowlist holds, no password is that
		// token (decisions 0279, 0278).
		if l.port != nil {
			caller = l.port.caller
		} else if caller = l.allowlisted(); caller == nil {
			return l.deny("no_token", "proxy password is empty: it must be a discovery token")
		}
	case g.Tokens == nil:
		return l.deny("token", "the gateway has no token configured: every request is refused")
	default:
		c, err := g.Tokens.Token(pass)
		if err != nil {
			return l.deny("token", "proxy password is not a valid discovery token")
		}
		caller = c
	}
	if !caller.MayLeaseSomewhere() {
		return l.deny("read_only", "token %s may read, not lease: the gateway needs a token with the lease right", caller.Name)
	}
	if user == "" && pass == "" && l.port != nil {
		return caller, l.port.sel, nil // checked when the port was opened
	}
	sel, err := ParseUsername(user)
	if err != nil {
		return l.deny("username", "%s", err.Error())
	}
	if sel.Namespace != "" && !caller.MayLease(sel.Namespace) {
		return l.deny("namespace", "token %s may not lease in namespace %s", caller.Name, sel.Namespace)
	}
	return caller, sel, nil
}

// errOverShare marks a request refused because its token is at a bound: its requests and
// tunnels in flight, or its share of the memory budget.
var errOverShare = errors.New("token over its share")

// admit counts a request or tunnel against its token's bounds: MaxConnsPerToken, and its
// connection's cost against the token's share of the memory budget (budget.go), so one
// token's requests in flight cannot fill the budget every other client needs to connect; and
// it holds every one back while the fleet view is still filling after a restart.
func (g *Gateway) admit(c *access.Caller) (func(), error) {
	if g.Fleet != nil && !g.Fleet.Complete() {
		return nil, &httpx.Error{Code: http.StatusServiceUnavailable, RetryAfter: max(1, int(time.Until(g.Fleet.CompleteAt()).Seconds()+1)),
			Message: "fleet view still warming up after a restart; retry after the Retry-After seconds"}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.inflight[c.Name] >= g.MaxConnsPerToken {
		return nil, &httpx.Error{Code: http.StatusTooManyRequests, RetryAfter: 1, Err: errOverShare,
			Message: fmt.Sprintf("token %s has %d requests and tunnels in flight, its limit", c.Name, g.MaxConnsPerToken)}
	}
	cost := g.connCost()
	if !g.conns.charge(c.Name, cost) {
		return nil, refuse(http.StatusTooManyRequests, ReasonMemoryShare,
			fmt.Sprintf("token %s holds its share of the gateway's memory with %d requests and tunnels in flight; retry after the Retry-After seconds", c.Name, g.inflight[c.Name]),
			g.Now(), time.Time{}, time.Second, errOverShare)
	}
	g.inflight[c.Name]++
	return func() {
		g.conns.uncharge(c.Name, cost)
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.inflight[c.Name]--; g.inflight[c.Name] <= 0 {
			delete(g.inflight, c.Name)
		}
	}, nil
}

// request is the lease request of a pick for target.
func (g *Gateway) request(p pick, target string) lease.Request {
	req := lease.Request{Selector: p.sel.Selector, TTL: g.LeaseTTL, Target: target, Namespaces: p.caller.LeaseNamespaces()}
	if p.sel.Namespace != "" {
		req.Namespaces = []string{p.sel.Namespace}
	}
	if g.Tokens != nil && g.Tokens.Len() > 1 {
		// The lease is the token's, as through the API: the per-token bound and the token's
		// fair share of each namespace hold for requests through the gateway too.
		req.Holder = p.caller.Name
		if g.Shares != nil {
			req.HolderShares = g.Shares(p.caller)
		}
	}
	if p.sel.Session != "" {
		// Sessions are the token's own: two tenants choosing the same id do not share one.
		req.SessionKey = "gw|" + p.caller.Name + "|" + p.sel.Session
	}
	return req
}

// targetOf turns a request's host into the lease target: lower case, the port kept only when
// it is not the scheme's default, so a report made through the REST API with the bare host
// names the same target.
func targetOf(hostport, defaultPort string) (string, error) {
	if hostport == "" || len(hostport) > 260 {
		return "", httpx.Errorf(http.StatusBadRequest, "request has no usable host")
	}
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		host, port = hostport, ""
	}
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	if host == "" || len(host) > 253 {
		return "", httpx.Errorf(http.StatusBadRequest, "host %.64q: want a host name or address", hostport)
	}
	for _, c := range host {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '_' || c == ':') {
			return "", httpx.Errorf(http.StatusBadRequest, "host %.64q: want a host name or address", hostport)
		}
	}
	if port != "" {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return "", httpx.Errorf(http.StatusBadRequest, "port %.10q is not a port", port)
		}
	}
	if port == "" || port == defaultPort {
		if strings.Contains(host, ":") {
			return "[" + host + "]", nil
		}
		return host, nil
	}
	return net.JoinHostPort(host, port), nil
}

// acquire leases for req, waiting up to AcquireWait while the only obstacles are leases held
// for the same target by others or upstreams at capacity, both freed as requests end. own is
// how many of the leases held for the target are this request's own (they free nothing).
func (g *Gateway) acquire(ctx context.Context, req lease.Request, own int) (lease.Lease, error) {
	deadline := g.Now().Add(g.AcquireWait)
	for {
		g.mu.Lock()
		freed := g.freed
		g.mu.Unlock()
		l, err := g.Leases.Acquire(ctx, req)
		var nm *lease.NoMatchError
		if err == nil || !errors.As(err, &nm) || (nm.LeasedForTarget <= own && nm.AtCapacity == 0) {
			return l, err
		}
		wait := deadline.Sub(g.Now())
		if wait <= 0 {
			return l, err
		}
		t := time.NewTimer(min(wait, 100*time.Millisecond)) // releases by other replicas are not signalled
		select {
		case <-freed:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return l, err
		}
		t.Stop()
	}
}

func outcomeOf(code int) string {
	switch code {
	case http.StatusProxyAuthRequired:
		return "auth_failed"
	case http.StatusServiceUnavailable:
		return "no_upstream"
	case http.StatusBadGateway, http.StatusGatewayTimeout:
		return "upstream_failed"
	case http.StatusTooManyRequests:
		return "token_limit"
	case http.StatusForbidden:
		return "egress_denied"
	}
	if code >= 500 {
		return "error"
	}
	return "bad_request"
}
