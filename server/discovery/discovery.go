// Package discovery serves the crawler-facing API on its own listener: the proxy list,
// leases (acquire, renew, release) and reports, behind a bearer token. Its clients are
// crawlers, never Metacontroller (see server/hooks). It reads the fleet view and the prober's
// verdicts and asks the lease store; it decides nothing itself.
package discovery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/proxy-operator/proxy-operator/client"
	"github.com/proxy-operator/proxy-operator/internal/fleet"
	"github.com/proxy-operator/proxy-operator/internal/verdict"
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
	DefaultMaxConns           = 1024

	maxSelectorPairs = 32
	maxAttrKeyLen    = 63
	maxAttrValueLen  = 256
	maxTargetLen     = 253
	maxSessionKeyLen = 256

	// A GET /v1/proxies page holds at most limit proxies (defaultListLimit unless the query
	// says, up to maxListLimit) and about listPageBytes of JSON (at least one proxy): a fleet
	// of long attributes pages by size before count (issue 30: 6.1 MB unpaged answers).
	defaultListLimit = 500
	maxListLimit     = 1000
	listPageBytes    = 1 << 20
	maxContinueLen   = 512 // base64 of the longest id, namespace/name: 63+1+253 bytes

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
	Health(key string) verdict.Health
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

// FleetErr is why the fleet cannot be read now (nil: it can): a FleetSource that reads from
// elsewhere and fell behind. The list answers 503 rather than an old copy, and so does the
// console's Fleet page.
func (d *Discovery) FleetErr() error {
	if st, ok := d.Fleet.(staleness); ok {
		return st.Err()
	}
	return nil
}

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
	// MaxConns bounds the listener's open connections (0: DefaultMaxConns); idle ones make
	// room for new ones (httpx.ConnLimit). An idle connection costs about 22 KiB.
	MaxConns int
	// Logins throttles failed logins per source address (nil: the defaults; decision 0257).
	Logins *httpx.LoginThrottle
	// Reports, when set, is the counter of reports (NewReportCounter) this API counts its own
	// in, with source api, shared with the gateway of the same process, which counts its
	// reports in it too; its maker registers it. Nil: discovery makes and registers its own.
	Reports *prometheus.CounterVec
	// Sites is the gateway of the same process, read by GET /v1/sites for each site's pace
	// (nil: no gateway here; the sites shown are those cooling, without a pace).
	Sites SitesView
	// Console, when set, serves every path under /ui (the web console, -console) beside the
	// API, outside its bearer-token auth: the console has its own login.
	Console http.Handler
	// Usage is the gateway of the same process, read by GET /v1/usage (nil: an empty list).
	Usage UsageView

	once       sync.Once
	lastActive atomic.Int64 // the gauge's value when the store cannot answer
	tokens     *access.Tokens
	requests   *prometheus.CounterVec
	reports    *prometheus.CounterVec
	refused    *prometheus.CounterVec
	denied     *prometheus.CounterVec
	caps       capacities // per namespace, for the fair shares (shares.go)
	unauth     *prometheus.CounterVec
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
		Help: "Crawler reports refused because a cooldown bound was reached, by limit (per_proxy, per_namespace or total).",
	}, []string{"limit"})
	for _, l := range []string{"per_proxy", "per_namespace", "total"} {
		d.refused.WithLabelValues(l)
	}
	d.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "proxy_operator_lease_requests_total",
		Help: "Lease requests answered, by outcome (granted or no_match).",
	}, []string{"outcome"})
	d.reports = d.Reports
	if d.reports == nil {
		d.reports = NewReportCounter()
		if d.Registerer != nil {
			d.Registerer.MustRegister(d.reports)
		}
	}
	for _, o := range []string{"granted", "no_match"} {
		d.requests.WithLabelValues(o)
	}
	d.denied = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "proxy_operator_lease_refused_total",
		Help: "Lease requests refused, by reason: no_proxy (none matches the selector), cooling, leased_for_target, at_capacity, unhealthy (the reason that held back most matching proxies), warming_up (503 after a restart), store_unavailable (503), token_share (429: the token holds its share of the namespace).",
	}, []string{"reason"})
	for _, r := range refusalReasons {
		d.denied.WithLabelValues(r)
	}
	d.unauth = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "proxy_operator_discovery_unauthorized_total",
		Help: "Discovery API requests refused for their token, by reason (401: missing_token or invalid_token; 429: throttled, after too many failed logins from the address).",
	}, []string{"reason"})
	for _, r := range []string{reasonMissingToken, reasonInvalidToken, reasonThrottled} {
		d.unauth.WithLabelValues(r)
	}
	if d.Logins == nil {
		d.Logins = &httpx.LoginThrottle{Listener: "discovery", Message: "discovery request unauthorized", Log: d.Log, Now: d.Now}
	}
	d.http = newHTTPMetrics()
	if d.Registerer != nil {
		d.Registerer.MustRegister(d.requests, d.refused, d.denied, d.unauth, d.http.requests, d.http.duration, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
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

// Sources of a report, the source label of proxy_operator_lease_reports_total.
const (
	ReportSourceAPI     = "api"     // POST /v1/leases/{id}/report
	ReportSourceGateway = "gateway" // the gateway's own, when a rule matched an answer
)

// NewReportCounter makes proxy_operator_lease_reports_total, every result and source at 0.
// One process counts the API's and its gateway's reports in one counter, registered once.
func NewReportCounter() *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "proxy_operator_lease_reports_total",
		Help: "Reports on leased proxies the lease store accepted, by result (ok, rate_limited, banned) and source (api: POST /v1/leases/{id}/report; gateway: the gateway's own).",
	}, []string{"result", "source"})
	for _, r := range []lease.Result{lease.ResultOK, lease.ResultRateLimited, lease.ResultBanned} {
		for _, s := range []string{ReportSourceAPI, ReportSourceGateway} {
			c.WithLabelValues(string(r), s)
		}
	}
	return c
}

// Init sets the defaults of the fields left zero and builds the metrics, once; Handler calls
// it, and a reader of the fields in the same process (the console) calls it first.
func (d *Discovery) Init() { d.once.Do(d.init) }

// Handler returns the discovery router, and the console's beside it when one is set.
func (d *Discovery) Handler() http.Handler {
	d.Init()
	api := d.router()
	if d.Console == nil {
		return api
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/ui" || strings.HasPrefix(r.URL.Path, "/ui/") {
			d.Console.ServeHTTP(w, r)
			return
		}
		api.ServeHTTP(w, r)
	})
}

func (d *Discovery) router() http.Handler {
	r := httpx.NewRouter(d.http.observe, d.auth)
	r.Get("/v1/proxies", d.serve(d.listProxies))
	r.Get("/v1/sites", d.serve(d.listSites))
	r.Get("/v1/usage", d.serve(d.listUsage))
	r.Post("/v1/leases", d.serve(d.acquire))
	r.Delete("/v1/leases/{id}", d.serve(d.release))
	r.Post("/v1/leases/{id}/renew", d.serve(d.renew))
	r.Post("/v1/leases/{id}/report", d.serve(d.report))
	return r
}

// Server returns the discovery listener's server with every timeout set.
func (d *Discovery) Server(addr string) *http.Server {
	n := d.MaxConns
	if n <= 0 {
		n = DefaultMaxConns
	}
	limit := httpx.NewConnLimit(n)
	return &http.Server{
		Addr:              addr,
		Handler:           d.Handler(),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      15 * time.Second,
		// Crawlers lease, report and release within seconds; one that idles longer reconnects.
		IdleTimeout:    30 * time.Second,
		MaxHeaderBytes: 16 << 10,
		ConnState:      limit.ConnState,
		ConnContext:    limit.ConnContext,
	}
}

// serve maps the lease store's errors, then hands over to the common mapping.
func (d *Discovery) serve(h httpx.HandlerFunc) http.HandlerFunc {
	return httpx.Serve(d.Log, func(w http.ResponseWriter, r *http.Request) error {
		err := h(w, r)
		var nm *lease.NoMatchError
		var tm *lease.TooManyCooldownsError
		var tl *lease.TooManyLeasesError
		switch {
		case err == nil:
			return nil
		case errors.As(err, &tl):
			// The token's own share, not the fleet: 429, with when its first lease ends.
			d.denied.WithLabelValues("token_share").Inc()
			wait := 1
			if !tl.FreeAt.IsZero() {
				wait = max(1, int(math.Ceil(tl.FreeAt.Sub(d.Now()).Seconds())))
			}
			return &httpx.Error{Code: http.StatusTooManyRequests, RetryAfter: wait, Err: err,
				Message: fmt.Sprintf("lease refused: token %s already holds %d live leases in each namespace where a proxy fits (its share: the namespace's capacity over the tokens that may lease there, at most -lease-max-per-token); release one or retry after the Retry-After seconds", tl.Holder, tl.Limit)}
		case errors.As(err, &nm):
			d.requests.WithLabelValues("no_match").Inc()
			d.denied.WithLabelValues(refusalReason(nm)).Inc()
			wait := noMatchWait(nm, d.Now())
			body := client.ErrorBody{
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
			switch tm.Scope {
			case "proxy":
				limit = "per_proxy"
			case "namespace":
				limit = "per_namespace"
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

type unknownHealth struct{}

func (unknownHealth) Health(string) verdict.Health {
	return verdict.Health{State: verdict.Unknown}
}
