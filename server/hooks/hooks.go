// Package hooks serves Metacontroller's calls: sync, finalize and customize on the hook
// listener, beside /healthz, /readyz and /metrics. Its client is Metacontroller alone (see
// server/discovery for the crawlers' API). It turns a hook body into lifecycle.Input, asks the
// provider what exists, lets lifecycle decide, runs the one action, and answers the status;
// it knows nothing of how a decision is made or how providers talk to their clouds.
package hooks

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sync/semaphore"
	"k8s.io/apimachinery/pkg/types"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
	"github.com/proxy-operator/proxy-operator/internal/events"
	"github.com/proxy-operator/proxy-operator/internal/fleet"
	"github.com/proxy-operator/proxy-operator/internal/kube/parents"
	"github.com/proxy-operator/proxy-operator/internal/netpolicy"
	"github.com/proxy-operator/proxy-operator/internal/verdict"
	"github.com/proxy-operator/proxy-operator/providers"
	"github.com/proxy-operator/proxy-operator/server/hooks/membudget"
	"github.com/proxy-operator/proxy-operator/server/hooks/poolhook"
	"github.com/proxy-operator/proxy-operator/server/httpx"
)

// HealthSource is the prober's verdict on a proxy, by namespace/name.
type HealthSource interface {
	Health(key string) verdict.Health
}

// Defaults for Hooks fields left zero.
const (
	DefaultMaxBodyBytes = 4 << 20
	// DefaultMaxConns: Metacontroller runs a few workers per controller; room for several
	// replicas of it and probes.
	DefaultMaxConns        = 1024
	DefaultProviderTimeout = 8 * time.Second
	DefaultMaxInFlight     = 64
	// DefaultBodyReadTimeout bounds reading one hook body, before a call slot is taken:
	// Metacontroller sends a body at once, a trickle is not a hook call.
	DefaultBodyReadTimeout = 5 * time.Second
)

// Hooks serves Metacontroller's sync, finalize and customize calls.
type Hooks struct {
	Providers *providers.Set
	Fleet     *fleet.View
	Health    HealthSource
	Now       func() time.Time
	Log       *slog.Logger
	// Registerer, when set, receives the hook metrics.
	Registerer prometheus.Registerer
	// Gatherer, when set, is served at /metrics.
	Gatherer prometheus.Gatherer
	// HealthResync says how soon a steady proxy is synced again (nil: lifecycle's default).
	HealthResync func(fleetSize int, hc v1.HealthCheckSpec) time.Duration
	Recorder     Recorder
	// Events, when set, receives the Kubernetes Events each sync is worth (events.For): its
	// decisions and status transitions, never a steady resync.
	Events EventSink
	// Ready reports readiness for /readyz (nil: always ready).
	Ready func() error
	// Pools answers the ProxyPool controller's calls at /pools/sync and /pools/finalize
	// (nil: a pool hook that sees no lease load).
	Pools *poolhook.Hooks

	MaxBodyBytes    int64
	ProviderTimeout time.Duration
	// MaxInFlight bounds concurrent hook calls; beyond it the answer is 429 with Retry-After.
	MaxInFlight int
	// Budget bounds the memory hook bodies hold at once, in bytes (nil: sized from the
	// process's memory limit, membudget.Limit). Beyond it the answer is 429 with Retry-After.
	Budget *membudget.Budget
	// MaxConns bounds the hook listener's open connections (0: DefaultMaxConns); idle ones
	// make room for new ones (httpx.ConnLimit).
	MaxConns int
	// BodyReadTimeout bounds reading a body (0: DefaultBodyReadTimeout); 408 beyond it.
	BodyReadTimeout time.Duration
	// BigBodyBytes (0: DefaultBigBodyBytes): a body declared longer, or without a
	// Content-Length, waits for one of BigBodyLanes slots (0: DefaultBigBodyLanes) before it
	// is read, at most BigBodyWait (0: DefaultBigBodyWait); 429 with Retry-After beyond it
	// (lane.go, decision 0240).
	BigBodyBytes int64
	BigBodyLanes int
	BigBodyWait  time.Duration
	// Egress, when set, refuses External endpoints the egress policy denies (the Proxy fails
	// with a condition saying why and is never probed or leased).
	Egress *netpolicy.Policy
	// Parents, when set, is the API server's word on the parents (internal/kube/parents): a
	// sync or finalize body whose parent uid, deletion or spec it does not agree with is
	// answered without acting (nil: the body is trusted, as without a Kubernetes client).
	Parents parents.Source
	// Token, when set, is the bearer token every call must carry but GET /healthz, /readyz
	// and /metrics (401 otherwise, logged and counted; auth.go). Empty: no token is asked
	// (-hooks-insecure, and in-process tests).
	Token string
	// Logins throttles failed logins per source address (nil: the defaults; decision 0257).
	Logins *httpx.LoginThrottle
	// TLS, when set, is the listener's TLS config: Server sets it and the caller serves with
	// ServeTLS(ln, "", "").
	TLS *tls.Config

	once     sync.Once
	handler  http.Handler
	inflight chan struct{}
	lane     *semaphore.Weighted
	duration *prometheus.HistogramVec
	shed     *prometheus.CounterVec
	unauth   *prometheus.CounterVec
	// disagreements counts bodies the API server did not agree with, by hook and reason.
	disagreements *prometheus.CounterVec

	// retries remembers, per Proxy, until when a failed provider call keeps the provider
	// alone. It lives only in memory: after a restart a Proxy in backoff is tried once at
	// once, which the backoff then covers again.
	retryMu sync.Mutex
	retries map[types.UID]retryWait
}

// EventSink records events on a Proxy (events.Recorder in a cluster); it must not block.
type EventSink interface {
	Record(p *v1.Proxy, evs []events.Event)
}

func (h *Hooks) init() {
	if h.Now == nil {
		h.Now = time.Now
	}
	if h.Log == nil {
		h.Log = slog.New(slog.DiscardHandler)
	}
	if h.MaxBodyBytes <= 0 {
		h.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if h.ProviderTimeout <= 0 {
		h.ProviderTimeout = DefaultProviderTimeout
	}
	if h.MaxInFlight <= 0 {
		h.MaxInFlight = DefaultMaxInFlight
	}
	if h.Health == nil {
		h.Health = unknownHealth{}
	}
	if h.Pools == nil {
		h.Pools = &poolhook.Hooks{Now: h.Now, Log: h.Log}
	}
	if h.Parents != nil && h.Pools.Verify == nil {
		h.Pools.Verify = h.verifyPool
	}
	h.disagreements = newDisagreements()
	if h.BodyReadTimeout <= 0 {
		h.BodyReadTimeout = DefaultBodyReadTimeout
	}
	if h.Budget == nil {
		limit, _ := membudget.Limit(0)
		h.Budget = membudget.ForLimit(limit, 0, 0, h.MaxBodyBytes)
	}
	h.inflight = make(chan struct{}, h.MaxInFlight)
	if h.BigBodyBytes <= 0 {
		h.BigBodyBytes = DefaultBigBodyBytes
	}
	if h.BigBodyLanes <= 0 {
		h.BigBodyLanes = DefaultBigBodyLanes()
	}
	if h.BigBodyWait <= 0 {
		h.BigBodyWait = DefaultBigBodyWait
	}
	h.lane = newLane(h.BigBodyLanes)
	h.shed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "proxy_operator_hook_shed_total",
		Help: "Hook calls refused before they were handled, by reason (memory, inflight, slow_body, big_body).",
	}, []string{"reason"})
	for _, r := range []string{"memory", "inflight", "slow_body", "big_body"} {
		h.shed.WithLabelValues(r)
	}
	h.duration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "proxy_operator_hook_duration_seconds",
		Help:    "Time to answer a Metacontroller hook call.",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
	}, []string{"hook"})
	h.unauth = newUnauthorizedCounter()
	if h.Logins == nil {
		h.Logins = &httpx.LoginThrottle{Listener: "hooks", Message: "hook call unauthorized", Log: h.Log, Now: h.Now}
	}
	if h.Registerer != nil {
		h.Registerer.MustRegister(h.duration, h.shed, h.unauth, h.disagreements, newPhaseCollector(h.Fleet),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "proxy_operator_hook_memory_budget_bytes",
				Help: "The hook body memory budget (bodies weighted by their decoding cost).",
			}, func() float64 { return float64(h.Budget.Size()) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "proxy_operator_hook_memory_in_use_bytes",
				Help: "The part of the hook body memory budget held now.",
			}, func() float64 { return float64(h.Budget.InUse()) }))
	}
}

type unknownHealth struct{}

func (unknownHealth) Health(string) verdict.Health {
	return verdict.Health{State: verdict.Unknown}
}

// Handler returns the hook router. It is built (and the metrics registered) on the first
// call; later calls return the same router, so the fields must be set before it.
func (h *Hooks) Handler() http.Handler {
	h.once.Do(h.build)
	return h.handler
}

func (h *Hooks) build() {
	h.init()
	r := httpx.NewRouter()
	r.Post("/sync", h.hook("sync", h.sync))
	r.Post("/finalize", h.hook("finalize", h.sync))
	r.Post("/customize", h.hook("customize", h.customize))
	r.Post("/pools/sync", h.hook(PoolSyncHook, h.poolSync))
	r.Post("/pools/finalize", h.hook(PoolFinalizeHook, h.poolSync))
	r.Get("/readyz", httpx.Serve(h.Log, func(w http.ResponseWriter, _ *http.Request) error {
		if h.Ready != nil {
			if err := h.Ready(); err != nil {
				return &httpx.Error{Code: http.StatusServiceUnavailable, Message: "not ready: " + err.Error()}
			}
		}
		httpx.WriteJSON(w, http.StatusOK, map[string]string{"status": "ready"})
		return nil
	}))
	if h.Gatherer != nil {
		r.Handle("/metrics", promhttp.HandlerFor(h.Gatherer, promhttp.HandlerOpts{}))
	}
	h.handler = r
	if h.Token != "" {
		h.handler = &tokenGate{want: sha256.Sum256([]byte(h.Token)), next: r, h: h}
	}
}

// Server returns the hook listener's server with every timeout set: a hook may make two
// provider calls, so writes get room for both.
func (h *Hooks) Server() *http.Server {
	handler := h.Handler()
	n := h.MaxConns
	if n <= 0 {
		n = DefaultMaxConns
	}
	limit := httpx.NewConnLimit(n)
	return &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      2*h.ProviderTimeout + 10*time.Second,
		// Metacontroller calls often (every resync) and reconnects cheaply: an idle
		// connection is not worth holding long.
		IdleTimeout:    30 * time.Second,
		MaxHeaderBytes: 64 << 10,
		ConnState:      limit.ConnState,
		ConnContext:    limit.ConnContext,
		TLSConfig:      h.TLS,
		// Failed TLS handshakes (a scanner, a caller without the CA) at debug: Metacontroller
		// logs its side of one, and a flood must not flood the log.
		ErrorLog: slog.NewLogLogger(h.Log.Handler(), slog.LevelDebug),
	}
}

// hookFunc handles one decoded hook call and returns the response body.
type hookFunc func(ctx context.Context, hook string, body []byte, ex *Exchange) (any, error)

// hook wraps a hookFunc with the big-body lane, the body's memory budget and read deadline,
// load shedding, timing and capture. A big body first waits for a lane slot (enterLane), held
// until its answer is encoded (not while it is written to a slow reader). The body is read
// next, under its own short deadline and within the memory budget, and only then is a call
// slot taken: a client trickling a small body holds no slot and only the bytes it sent.
func (h *Hooks) hook(name string, fn hookFunc) http.HandlerFunc {
	return httpx.Serve(h.Log, func(w http.ResponseWriter, r *http.Request) error {
		start := time.Now()
		leave, err := h.enterLane(r)
		if err != nil {
			return err
		}
		defer leave()
		body, res, err := h.readBody(w, r)
		if err != nil {
			return err
		}
		defer res.Release()
		select {
		case h.inflight <- struct{}{}:
			defer func() { <-h.inflight }()
		default:
			h.shed.WithLabelValues("inflight").Inc()
			return &httpx.Error{Code: http.StatusTooManyRequests, Message: "too many hook calls in flight", RetryAfter: 1}
		}
		defer func() { h.duration.WithLabelValues(name).Observe(time.Since(start).Seconds()) }()
		ex := &Exchange{Hook: name, Now: h.Now()}
		ex.Request = body
		resp, err := fn(r.Context(), name, body, ex)
		if err != nil {
			var e *httpx.Error
			if h.Recorder != nil && errors.As(err, &e) {
				ex.Code = e.Code
				ex.Response, _ = json.Marshal(httpx.ErrorBody{Error: e.Message})
				h.capture(ex)
			}
			return err
		}
		out, err := json.Marshal(resp)
		leave()
		if err != nil {
			return err
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(out)
		ex.Code, ex.Response = http.StatusOK, out
		h.capture(ex)
		return nil
	})
}

// readBody reads the body under BodyReadTimeout, reserving its share of the memory budget as
// it arrives.
func (h *Hooks) readBody(w http.ResponseWriter, r *http.Request) ([]byte, *membudget.Reservation, error) {
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(h.BodyReadTimeout))
	body, res, err := h.Budget.Read(r.Body, r.ContentLength, h.MaxBodyBytes)
	if err == nil {
		// What the body's shape costs to decode, on top of its length: refused before decoding.
		if err = res.Grow(membudget.ShapeWeight(body)); err != nil {
			res.Release()
			if errors.Is(err, membudget.ErrTooLarge) {
				return nil, nil, httpx.Wrap(http.StatusRequestEntityTooLarge, err, "request body of %d bytes has too many objects", len(body))
			}
		}
	}
	switch {
	case err == nil:
		_ = rc.SetReadDeadline(time.Time{})
		return body, res, nil
	case errors.Is(err, membudget.ErrTooLarge):
		return nil, nil, httpx.Errorf(http.StatusRequestEntityTooLarge, "request body exceeds %d bytes", h.MaxBodyBytes)
	case errors.Is(err, membudget.ErrOverBudget):
		h.shed.WithLabelValues("memory").Inc()
		return nil, nil, &httpx.Error{Code: http.StatusTooManyRequests, RetryAfter: 1, Err: err,
			Message: fmt.Sprintf("hook memory budget (%d bytes) in use; retry after the Retry-After seconds", h.Budget.Size())}
	case errors.Is(err, os.ErrDeadlineExceeded):
		h.shed.WithLabelValues("slow_body").Inc()
		return nil, nil, &httpx.Error{Code: http.StatusRequestTimeout, Err: err,
			Message: fmt.Sprintf("request body not received within %s", h.BodyReadTimeout)}
	}
	return nil, nil, &httpx.Error{Code: http.StatusBadRequest, Message: "cannot read request body", Err: err}
}
