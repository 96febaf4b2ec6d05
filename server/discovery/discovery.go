// Package discovery serves the crawler-facing API on its own listener: the proxy list,
// leases (acquire, renew, release) and reports, behind a bearer token. Its clients are
// crawlers, never Metacontroller (see server/hooks). It reads the fleet view and the prober's
// verdicts and asks the lease store; it decides nothing itself.
package discovery

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/proxy-operator/proxy-operator/internal/fleet"
	"github.com/proxy-operator/proxy-operator/internal/lifecycle"
	"github.com/proxy-operator/proxy-operator/lease"
	"github.com/proxy-operator/proxy-operator/server/discovery/access"
	"github.com/proxy-operator/proxy-operator/server/httpx"
)

// Defaults and bounds for Discovery fields left zero.
const (
	DefaultDiscoveryAddr      = ":8090"
	DefaultLeaseTTL           = 300 * time.Second
	DefaultMaxLeaseTTL        = time.Hour
	MinLeaseTTL               = time.Second
	DefaultMaxRetryAfter      = 7 * 24 * time.Hour
	DefaultDiscoveryBodyBytes = 64 << 10

	maxSelectorPairs = 32
	maxAttrKeyLen    = 63
	maxAttrValueLen  = 256
	maxTargetLen     = 253
	maxSessionKeyLen = 256

	// unavailableRetryAfter is the Retry-After of a 503 for a shared store that is out: short,
	// since a Redis restart or failover takes seconds.
	unavailableRetryAfter = 1
	// NoMatchRetryAfter is a 409's Retry-After when no time is known (nothing matches, or only
	// unhealthy proxies do: probes or new proxies change that, at their own pace).
	NoMatchRetryAfter = 5 * time.Second
	// ReleaseRetryAfter caps a 409's Retry-After while a proxy at capacity or leased for the
	// target is among the refused: its holder may release it any moment.
	ReleaseRetryAfter = 2 * time.Second
)

// HealthSource is the prober's live verdict by proxy key (lease.Health has the same method).
type HealthSource interface {
	Health(key string) lifecycle.Health
}

// FleetSource is where the API reads the fleet: the process's *fleet.View, or, with a shared
// lease store, what the operator published there (*redisstore.Reader).
type FleetSource interface {
	List() []fleet.Proxy
	Complete() bool
	CompleteAt() time.Time
}

// staleness is the optional capability of a FleetSource that reads from elsewhere and can
// fall behind: while Err is non-nil the list answers 503 rather than an old copy.
type staleness interface{ Err() error }

// Discovery serves the crawler-facing API: the proxy list and leases. It runs on its own
// listener so crawlers never reach the hook endpoints.
type Discovery struct {
	Fleet  FleetSource
	Health HealthSource
	Leases lease.Store
	// Tokens are the scoped bearer tokens every /v1 request must carry (access.Load).
	Tokens *access.Tokens
	// Token, when Tokens is nil, is one bearer token with lease rights in every namespace
	// (DISCOVERY_TOKEN).
	Token string
	// Insecure serves every /v1 request without a token, as a caller with every right. It is
	// never implied: with no token and no Insecure, every /v1 request is refused.
	Insecure bool
	Log      *slog.Logger
	// Registerer receives the lease metrics (nil: not registered).
	Registerer prometheus.Registerer
	Now        func() time.Time

	DefaultTTL    time.Duration
	MaxTTL        time.Duration
	MaxRetryAfter time.Duration
	MaxBodyBytes  int64

	once       sync.Once
	lastActive atomic.Int64 // the gauge's value when the store cannot answer
	tokens     *access.Tokens
	requests   *prometheus.CounterVec
	reports    *prometheus.CounterVec
	refused    *prometheus.CounterVec
	denied     *prometheus.CounterVec
	http       *httpMetrics
}

// cooldownCounter is the optional capability of a lease store that counts its cooldowns.
type cooldownCounter interface {
	CooldownCount() int
}

func (d *Discovery) init() {
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.Health == nil {
		d.Health = unknownHealth{}
	}
	if d.DefaultTTL <= 0 {
		d.DefaultTTL = DefaultLeaseTTL
	}
	if d.MaxTTL <= 0 {
		d.MaxTTL = DefaultMaxLeaseTTL
	}
	if d.MaxRetryAfter <= 0 {
		d.MaxRetryAfter = DefaultMaxRetryAfter
	}
	if d.MaxBodyBytes <= 0 {
		d.MaxBodyBytes = DefaultDiscoveryBodyBytes
	}
	d.tokens = d.Tokens
	if d.tokens == nil && strings.TrimSpace(d.Token) != "" {
		var err error
		d.tokens, err = access.New([]access.TokenSpec{{Name: "DISCOVERY_TOKEN", Token: d.Token,
			Namespaces: []string{access.AllNamespaces}, Right: access.RightLease}})
		if err != nil {
			d.Log.Error("discovery token unusable: every request is refused", "err", err)
		}
	}
	d.refused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "proxy_operator_lease_reports_refused_total",
		Help: "Crawler reports refused because the cooldown bound was reached, by limit (per_proxy or total).",
	}, []string{"limit"})
	for _, l := range []string{"per_proxy", "total"} {
		d.refused.WithLabelValues(l)
	}
	d.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "proxy_operator_lease_requests_total",
		Help: "Lease requests answered, by outcome (granted or no_match).",
	}, []string{"outcome"})
	d.reports = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "proxy_operator_lease_reports_total",
		Help: "Crawler reports on leased proxies, by result.",
	}, []string{"result"})
	for _, o := range []string{"granted", "no_match"} {
		d.requests.WithLabelValues(o)
	}
	d.denied = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "proxy_operator_lease_refused_total",
		Help: "Lease requests refused, by reason: no_proxy (none matches the selector), cooling, leased_for_target, at_capacity, unhealthy (the reason that held back most matching proxies), warming_up (503 after a restart), store_unavailable (503).",
	}, []string{"reason"})
	for _, r := range refusalReasons {
		d.denied.WithLabelValues(r)
	}
	d.http = newHTTPMetrics()
	for _, r := range []lease.Result{lease.ResultOK, lease.ResultRateLimited, lease.ResultBanned} {
		d.reports.WithLabelValues(string(r))
	}
	if d.Registerer != nil {
		d.Registerer.MustRegister(d.requests, d.reports, d.refused, d.denied, d.http.requests, d.http.duration, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "proxy_operator_leases_active",
			Help: "Leases currently held.",
		}, func() float64 {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			if n, err := d.Leases.Count(ctx); err == nil {
				d.lastActive.Store(int64(n))
			}
			return float64(d.lastActive.Load())
		}))
		if cc, ok := d.Leases.(cooldownCounter); ok {
			d.Registerer.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "proxy_operator_lease_cooldowns",
				Help: "Per-target cooldowns the lease store remembers.",
			}, func() float64 { return float64(cc.CooldownCount()) }))
		}
	}
	switch {
	case d.Insecure:
		d.Log.Warn("DISCOVERY API AUTH DISABLED (-discovery-insecure): anyone who reaches the discovery listener can list and lease every proxy")
	case d.tokens == nil:
		d.Log.Error("discovery has no token: every /v1 request is refused")
	}
}

// Handler returns the discovery router.
func (d *Discovery) Handler() http.Handler {
	d.once.Do(d.init)
	r := httpx.NewRouter(d.http.observe, d.auth)
	r.Get("/v1/proxies", d.serve(d.listProxies))
	r.Post("/v1/leases", d.serve(d.acquire))
	r.Delete("/v1/leases/{id}", d.serve(d.release))
	r.Post("/v1/leases/{id}/renew", d.serve(d.renew))
	r.Post("/v1/leases/{id}/report", d.serve(d.report))
	return r
}

// Server returns the discovery listener's server with every timeout set.
func (d *Discovery) Server(addr string) *http.Server {
	return &http.Server{
		Addr:              addr,
		Handler:           d.Handler(),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      15 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    16 << 10,
	}
}

// Tokens returns the discovery tokens: the tokens file when a path is given (a mounted
// Secret: one token per line, or the YAML form of access.Load), else env (DISCOVERY_TOKEN) as
// one token with lease rights everywhere. Neither is an error unless insecure: the API is
// never open by default. A blank token, in the file or in env, is an error too.
func Tokens(env, file string, insecure bool) (*access.Tokens, error) {
	switch {
	case file != "":
		return access.Load(file)
	case env != "":
		t, err := access.New([]access.TokenSpec{{Name: "DISCOVERY_TOKEN", Token: env,
			Namespaces: []string{access.AllNamespaces}, Right: access.RightLease}})
		if err != nil {
			return nil, fmt.Errorf("DISCOVERY_TOKEN: %w", err)
		}
		return t, nil
	case insecure:
		return nil, nil
	}
	return nil, errors.New("discovery API has no token: give -discovery-token-file (a mounted Secret) or DISCOVERY_TOKEN, " +
		"or pass -discovery-insecure to serve it without auth (only on a trusted address such as 127.0.0.1)")
}

// auth guards every /v1 path, including unknown ones, so an unauthenticated caller learns
// nothing about the routes, and puts the caller in the request's context. Tokens are
// compared by hash in constant time and never logged.
func (d *Discovery) auth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !(r.URL.Path == "/v1" || strings.HasPrefix(r.URL.Path, "/v1/")) {
			next.ServeHTTP(w, r)
			return
		}
		if d.Insecure {
			next.ServeHTTP(w, r.WithContext(access.WithCaller(r.Context(), access.Insecure)))
			return
		}
		var caller *access.Caller
		err := access.ErrInvalidToken
		if d.tokens != nil {
			caller, err = d.tokens.Authenticate(r)
		}
		switch {
		case errors.Is(err, access.ErrNoToken):
			w.Header().Set("WWW-Authenticate", `Bearer realm="proxy-operator"`)
			httpx.WriteError(w, httpx.Errorf(http.StatusUnauthorized, "missing bearer token"))
			return
		case err != nil:
			w.Header().Set("WWW-Authenticate", `Bearer realm="proxy-operator", error="invalid_token"`)
			httpx.WriteError(w, httpx.Errorf(http.StatusUnauthorized, "invalid bearer token"))
			return
		}
		next.ServeHTTP(w, r.WithContext(access.WithCaller(r.Context(), caller)))
	})
}

// mayLease refuses a caller without the lease right (a read-only token). A lease ID is a
// capability: only a caller that could lease in the proxy's namespace was ever given it.
func mayLease(r *http.Request) error {
	c := access.FromContext(r.Context())
	if !c.MayLeaseSomewhere() {
		name := "this caller"
		if c != nil {
			name = "token " + c.Name
		}
		return httpx.Errorf(http.StatusForbidden, "%s may read, not lease", name)
	}
	return nil
}

// serve maps the lease store's errors, then hands over to the common mapping.
func (d *Discovery) serve(h httpx.HandlerFunc) http.HandlerFunc {
	return httpx.Serve(d.Log, func(w http.ResponseWriter, r *http.Request) error {
		err := h(w, r)
		var nm *lease.NoMatchError
		var tm *lease.TooManyCooldownsError
		switch {
		case err == nil:
			return nil
		case errors.As(err, &nm):
			d.requests.WithLabelValues("no_match").Inc()
			d.denied.WithLabelValues(refusalReason(nm)).Inc()
			wait := noMatchWait(nm, d.Now())
			body := noMatchJSON{
				Error: nm.Reason(), Matching: nm.Matching, Unhealthy: nm.Unhealthy,
				AtCapacity: nm.AtCapacity, CoolingForTarget: nm.Cooling, LeasedForTarget: nm.LeasedForTarget, Target: nm.Target,
				RetryAfterSeconds: int64(wait / time.Second),
			}
			if !nm.FreeAt.IsZero() {
				at := nm.FreeAt.UTC()
				body.AvailableAt = &at
			}
			w.Header().Set("Retry-After", strconv.FormatInt(body.RetryAfterSeconds, 10))
			httpx.WriteJSON(w, http.StatusConflict, body)
			return nil
		case errors.Is(err, lease.ErrNotFound):
			return &httpx.Error{Code: http.StatusNotFound, Message: "lease not found: unknown, expired, released, or its proxy left the fleet", Err: err}
		case errors.Is(err, lease.ErrInvalid):
			return &httpx.Error{Code: http.StatusBadRequest, Message: "invalid lease request", Err: err}
		case errors.As(err, &tm):
			limit := "total"
			if tm.Scope == "proxy" {
				limit = "per_proxy"
			}
			d.refused.WithLabelValues(limit).Inc()
			return &httpx.Error{Code: http.StatusTooManyRequests, Err: err,
				Message: "report not recorded: " + tm.Error() + "; the bound frees as cooldowns are forgotten"}
		case errors.Is(err, lease.ErrUnavailable):
			if r.Method == http.MethodPost && r.URL.Path == "/v1/leases" {
				d.denied.WithLabelValues("store_unavailable").Inc()
			}
			// A shared store that is down or slow: nothing was decided, so a retry is safe.
			return &httpx.Error{Code: http.StatusServiceUnavailable, RetryAfter: unavailableRetryAfter,
				Message: "lease store unavailable; retry after the Retry-After seconds", Err: err}
		}
		return err
	})
}

// proxyJSON is one proxy as crawlers see it.
type proxyJSON struct {
	ID            string            `json:"id"`
	IP            string            `json:"ip"`
	Port          int32             `json:"port"`
	Attributes    map[string]string `json:"attributes"`
	Phase         string            `json:"phase"`
	Healthy       bool              `json:"healthy"`
	Draining      bool              `json:"draining,omitempty"`
	LatencyMillis int64             `json:"latencyMillis"`
	ActiveLeases  int               `json:"activeLeases"`
	MaxLeases     int32             `json:"maxLeases"`
}

func toProxyJSON(p fleet.Proxy, h lifecycle.Health, active int) proxyJSON {
	attrs := p.Attributes
	if attrs == nil {
		attrs = map[string]string{}
	}
	return proxyJSON{
		ID: p.Key, IP: p.IP, Port: p.Port, Attributes: attrs, Phase: string(p.Phase),
		Healthy: lease.Leasable(p, h), Draining: p.Draining, LatencyMillis: h.LatencyMillis, ActiveLeases: active, MaxLeases: p.MaxLeases,
	}
}

type listJSON struct {
	// Complete is false right after a restart, until every Proxy has been synced again:
	// an absent proxy may then simply not be known yet.
	Complete   bool        `json:"complete"`
	CompleteAt *time.Time  `json:"completeAt,omitempty"`
	Count      int         `json:"count"`
	Proxies    []proxyJSON `json:"proxies"`
}

type noMatchJSON struct {
	Error            string `json:"error"`
	Matching         int    `json:"matching"`
	Unhealthy        int    `json:"unhealthy"`
	AtCapacity       int    `json:"atCapacity"`
	CoolingForTarget int    `json:"coolingForTarget"`
	LeasedForTarget  int    `json:"leasedForTarget"`
	Target           string `json:"target,omitempty"`
	// AvailableAt is lease.NoMatchError.FreeAt: the earliest a matching proxy frees up by
	// itself (absent when no time is known). RetryAfterSeconds repeats the Retry-After header.
	AvailableAt       *time.Time `json:"availableAt,omitempty"`
	RetryAfterSeconds int64      `json:"retryAfterSeconds"`
}

// refusalReasons are the values of proxy_operator_lease_refused_total's reason label.
var refusalReasons = []string{"no_proxy", "cooling", "leased_for_target", "at_capacity", "unhealthy", "warming_up", "store_unavailable"}

// refusalReason is the reason that held back most of the matching proxies (ties: the order
// of refusalReasons).
func refusalReason(nm *lease.NoMatchError) string {
	if nm.Matching == 0 {
		return "no_proxy"
	}
	best, n := "unhealthy", 0
	for _, c := range []struct {
		reason string
		n      int
	}{{"cooling", nm.Cooling}, {"leased_for_target", nm.LeasedForTarget}, {"at_capacity", nm.AtCapacity}, {"unhealthy", nm.Unhealthy}} {
		if c.n > n {
			best, n = c.reason, c.n
		}
	}
	return best
}

// noMatchWait is a 409's Retry-After, in whole seconds (at least 1): until the earliest time
// a matching proxy frees up by itself, at most ReleaseRetryAfter while a holder could release
// one sooner, and NoMatchRetryAfter when no time is known.
func noMatchWait(nm *lease.NoMatchError, now time.Time) time.Duration {
	wait := NoMatchRetryAfter
	if !nm.FreeAt.IsZero() {
		wait = nm.FreeAt.Sub(now)
	}
	if nm.AtCapacity+nm.LeasedForTarget > 0 {
		wait = min(wait, ReleaseRetryAfter)
	}
	return time.Duration(max(1, math.Ceil(wait.Seconds()))) * time.Second
}

func (d *Discovery) listProxies(w http.ResponseWriter, r *http.Request) error {
	sel, healthy, err := parseListQuery(r)
	if err != nil {
		return err
	}
	if st, ok := d.Fleet.(staleness); ok {
		if err := st.Err(); err != nil {
			return err
		}
	}
	active, err := d.Leases.Active(r.Context())
	if err != nil {
		return err
	}
	out := listJSON{Complete: d.Fleet.Complete(), Proxies: []proxyJSON{}}
	if !out.Complete {
		at := d.Fleet.CompleteAt().UTC()
		out.CompleteAt = &at
		w.Header().Set("Retry-After", retryAfterSeconds(at.Sub(d.Now())))
	}
	caller := access.FromContext(r.Context())
	for _, p := range d.Fleet.List() {
		if ns, _, _ := strings.Cut(p.Key, "/"); !caller.MayRead(ns) {
			continue
		}
		if !fleet.Matches(p.Attributes, sel) {
			continue
		}
		pj := toProxyJSON(p, d.Health.Health(p.Key), active[p.Key])
		if healthy != nil && pj.Healthy != *healthy {
			continue
		}
		out.Proxies = append(out.Proxies, pj)
	}
	out.Count = len(out.Proxies)
	httpx.WriteJSON(w, http.StatusOK, out)
	return nil
}

// parseListQuery accepts only attr.<key>=<value> (once per key) and healthy=true|false.
func parseListQuery(r *http.Request) (map[string]string, *bool, error) {
	// url.Values from r.URL.Query() drops a pair it cannot decode, which silently widened a
	// filter to the whole fleet: a query that does not parse is a 400.
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, nil, httpx.Errorf(http.StatusBadRequest, "malformed query: %s", err.Error())
	}
	sel := map[string]string{}
	var healthy *bool
	for k, vs := range q {
		switch {
		case k == "healthy":
			if len(vs) != 1 || (vs[0] != "true" && vs[0] != "false") {
				return nil, nil, httpx.Errorf(http.StatusBadRequest, "query parameter healthy: want exactly one of true or false")
			}
			b := vs[0] == "true"
			healthy = &b
		case strings.HasPrefix(k, "attr."):
			key := strings.TrimPrefix(k, "attr.")
			if len(vs) != 1 {
				return nil, nil, httpx.Errorf(http.StatusBadRequest, "query parameter %s: given %d times; selectors are equality on one value", k, len(vs))
			}
			if err := checkSelectorPair(key, vs[0]); err != nil {
				return nil, nil, httpx.Wrap(http.StatusBadRequest, err, "query parameter %s", k)
			}
			sel[key] = vs[0]
		default:
			return nil, nil, httpx.Errorf(http.StatusBadRequest, "unknown query parameter %q: want attr.<key>=<value> or healthy=true|false", k)
		}
	}
	if len(sel) > maxSelectorPairs {
		return nil, nil, httpx.Errorf(http.StatusBadRequest, "selector has %d pairs, at most %d", len(sel), maxSelectorPairs)
	}
	return sel, healthy, nil
}

// checkSelectorPair rejects keys outside attribute-key syntax: anything else (!=, in (...),
// globs) would be a selector language this API does not speak.
func checkSelectorPair(key, value string) error {
	if key == "" || len(key) > maxAttrKeyLen {
		return fmt.Errorf("attribute key must be 1 to %d characters", maxAttrKeyLen)
	}
	for _, c := range key {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '_' || c == '/') {
			return fmt.Errorf("unsupported selector syntax in key %q: keys are letters, digits, '.', '-', '_', '/' and selectors are equality only", key)
		}
	}
	if len(value) > maxAttrValueLen {
		return fmt.Errorf("attribute value longer than %d characters", maxAttrValueLen)
	}
	return nil
}

type acquireRequest struct {
	Selector   map[string]string `json:"selector"`
	TTLSeconds *int64            `json:"ttlSeconds"`
	Target     string            `json:"target"`
	SessionKey string            `json:"sessionKey"`
}

type leaseJSON struct {
	LeaseID    string    `json:"leaseID"`
	Proxy      proxyJSON `json:"proxy"`
	ExpiresAt  time.Time `json:"expiresAt"`
	TTLSeconds int64     `json:"ttlSeconds"`
	Target     string    `json:"target,omitempty"`
	SessionKey string    `json:"sessionKey,omitempty"`
	// ProxyURL is ready for HTTP_PROXY: the credential in it, percent-encoded. It, Username
	// and Password are the only place a credential leaves the process.
	ProxyURL string `json:"proxyURL"`
	Username string `json:"username,omitempty"`
	Password string `json:"password,omitempty"`
}

func (d *Discovery) acquire(w http.ResponseWriter, r *http.Request) error {
	if err := mayLease(r); err != nil {
		return err
	}
	var req acquireRequest
	if err := d.decode(w, r, &req, "lease request", true); err != nil {
		return err
	}
	ttl, err := d.ttl(req.TTLSeconds)
	if err != nil {
		return err
	}
	if len(req.Selector) > maxSelectorPairs {
		return httpx.Errorf(http.StatusBadRequest, "selector has %d pairs, at most %d", len(req.Selector), maxSelectorPairs)
	}
	for k, v := range req.Selector {
		if err := checkSelectorPair(k, v); err != nil {
			return httpx.Wrap(http.StatusBadRequest, err, "selector")
		}
	}
	target, err := normalizeTarget(req.Target, false)
	if err != nil {
		return err
	}
	if len(req.SessionKey) > maxSessionKeyLen {
		return httpx.Errorf(http.StatusBadRequest, "sessionKey longer than %d characters", maxSessionKeyLen)
	}
	if !d.Fleet.Complete() {
		// After a restart the view is filled by syncs as they come: a lease now could pile
		// every crawler onto the few proxies synced first, and a 409 would be a lie.
		d.denied.WithLabelValues("warming_up").Inc()
		return &httpx.Error{Code: http.StatusServiceUnavailable, RetryAfter: max(1, int(math.Ceil(d.Fleet.CompleteAt().Sub(d.Now()).Seconds()))),
			Message: "fleet view still warming up after a restart; retry after the Retry-After seconds"}
	}
	// A token leases only in its namespaces: the others' proxies are not even counted.
	l, err := d.Leases.Acquire(r.Context(), lease.Request{Selector: req.Selector, TTL: ttl, Target: target, SessionKey: req.SessionKey,
		Namespaces: access.FromContext(r.Context()).LeaseNamespaces()})
	if err != nil {
		return err
	}
	d.requests.WithLabelValues("granted").Inc()
	httpx.WriteJSON(w, http.StatusOK, d.leaseJSON(l, ttl))
	return nil
}

func (d *Discovery) leaseJSON(l lease.Lease, ttl time.Duration) leaseJSON {
	out := leaseJSON{
		LeaseID: l.ID, Proxy: toProxyJSON(l.Proxy, l.Health, l.Active), ExpiresAt: l.ExpiresAt.UTC(),
		TTLSeconds: int64(ttl / time.Second), Target: l.Target, SessionKey: l.SessionKey,
		ProxyURL: l.Proxy.Credentials.ProxyURL(net.JoinHostPort(l.Proxy.IP, strconv.Itoa(int(l.Proxy.Port)))).String(),
	}
	if c := l.Proxy.Credentials; c != nil {
		out.Username, out.Password = c.Username, c.Password
	}
	return out
}

func (d *Discovery) release(w http.ResponseWriter, r *http.Request) error {
	if err := mayLease(r); err != nil {
		return err
	}
	if err := d.Leases.Release(r.Context(), chi.URLParam(r, "id")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

type renewRequest struct {
	TTLSeconds *int64 `json:"ttlSeconds"`
}

func (d *Discovery) renew(w http.ResponseWriter, r *http.Request) error {
	if err := mayLease(r); err != nil {
		return err
	}
	var req renewRequest
	if err := d.decode(w, r, &req, "renew request", true); err != nil {
		return err
	}
	var ttl time.Duration // 0: the lease's own TTL
	if req.TTLSeconds != nil {
		var err error
		if ttl, err = d.ttl(req.TTLSeconds); err != nil {
			return err
		}
	}
	l, err := d.Leases.Renew(r.Context(), chi.URLParam(r, "id"), ttl)
	if err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusOK, d.leaseJSON(l, l.ExpiresAt.Sub(d.Now()).Round(time.Second)))
	return nil
}

type reportRequest struct {
	Result            lease.Result `json:"result"`
	Target            string       `json:"target"`
	RetryAfterSeconds *int64       `json:"retryAfterSeconds"`
}

type reportJSON struct {
	ProxyID       string     `json:"proxyID"`
	Target        string     `json:"target"`
	Result        string     `json:"result"`
	CooldownUntil *time.Time `json:"cooldownUntil,omitempty"`
	Strikes       int        `json:"strikes,omitempty"`
}

func (d *Discovery) report(w http.ResponseWriter, r *http.Request) error {
	if err := mayLease(r); err != nil {
		return err
	}
	var req reportRequest
	if err := d.decode(w, r, &req, "report", false); err != nil {
		return err
	}
	if !req.Result.Valid() {
		return httpx.Errorf(http.StatusBadRequest, "report: result %q: want rate_limited, banned or ok", req.Result)
	}
	target, err := normalizeTarget(req.Target, true)
	if err != nil {
		return err
	}
	var retryAfter time.Duration
	if s := req.RetryAfterSeconds; s != nil {
		if *s < 0 || *s > int64(d.MaxRetryAfter/time.Second) {
			return httpx.Errorf(http.StatusBadRequest, "report: retryAfterSeconds %d out of range 0..%d", *s, int64(d.MaxRetryAfter/time.Second))
		}
		retryAfter = time.Duration(*s) * time.Second
	}
	c, err := d.Leases.Report(r.Context(), chi.URLParam(r, "id"), lease.Report{Result: req.Result, Target: target, RetryAfter: retryAfter})
	if err != nil {
		return err
	}
	d.reports.WithLabelValues(string(req.Result)).Inc()
	out := reportJSON{ProxyID: c.Proxy, Target: c.Target, Result: string(req.Result), Strikes: c.Strikes}
	if !c.Until.IsZero() {
		u := c.Until.UTC()
		out.CooldownUntil = &u
	}
	httpx.WriteJSON(w, http.StatusOK, out)
	return nil
}

// ttl turns ttlSeconds into a duration: absent is the default, anything outside
// [MinLeaseTTL, MaxTTL] a 400.
func (d *Discovery) ttl(s *int64) (time.Duration, error) {
	if s == nil {
		return d.DefaultTTL, nil
	}
	lo, hi := int64(MinLeaseTTL/time.Second), int64(d.MaxTTL/time.Second)
	if *s < lo || *s > hi {
		return 0, httpx.Errorf(http.StatusBadRequest, "ttlSeconds %d out of range %d..%d", *s, lo, hi)
	}
	return time.Duration(*s) * time.Second, nil
}

// normalizeTarget lower-cases a host name (optionally host:port) and rejects anything else.
func normalizeTarget(t string, required bool) (string, error) {
	if t == "" {
		if required {
			return "", httpx.Errorf(http.StatusBadRequest, "report: target is required (the host the result was seen on)")
		}
		return "", nil
	}
	if len(t) > maxTargetLen {
		return "", httpx.Errorf(http.StatusBadRequest, "target longer than %d characters", maxTargetLen)
	}
	t = strings.ToLower(t)
	for _, c := range t {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '_' || c == ':' || c == '[' || c == ']') {
			return "", httpx.Errorf(http.StatusBadRequest, "target %q: want a host name or host:port, not a URL", t)
		}
	}
	return t, nil
}

// decode reads a bounded body and decodes it strictly: unknown fields are a 400, so a typo
// ("ttl" for "ttlSeconds") is not silently ignored. emptyOK lets an empty body mean {}.
func (d *Discovery) decode(w http.ResponseWriter, r *http.Request, v any, what string, emptyOK bool) error {
	b, err := httpx.ReadBody(w, r, d.MaxBodyBytes)
	if err != nil {
		return err
	}
	if len(bytes.TrimSpace(b)) == 0 && emptyOK {
		return nil
	}
	if err := httpx.DecodeJSON(b, v, what); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return httpx.Errorf(http.StatusBadRequest, "%s: %s", what, strings.TrimPrefix(err.Error(), "json: "))
	}
	return nil
}

func retryAfterSeconds(d time.Duration) string {
	return fmt.Sprint(max(1, int(math.Ceil(d.Seconds()))))
}

type unknownHealth struct{}

func (unknownHealth) Health(string) lifecycle.Health {
	return lifecycle.Health{State: lifecycle.HealthUnknown}
}
