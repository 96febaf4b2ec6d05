package gateway

import (
	"github.com/prometheus/client_golang/prometheus"
)

const (
	kindRequest = "request"
	kindTunnel  = "tunnel"
	kindSOCKS   = "socks" // a SOCKS5 CONNECT tunnel (socks.go)
)

// metrics are the gateway's series. Labels stay low-cardinality: kinds, outcomes, rule names
// from the rules file, pools, and proxies only behind PerProxyMetrics. No token, target or
// credential is ever a label.
type metrics struct {
	requests     *prometheus.CounterVec
	tries        *prometheus.HistogramVec
	bans         *prometheus.CounterVec
	byteCount    *prometheus.CounterVec
	upstream     *prometheus.HistogramVec
	tunnels      prometheus.Gauge
	authFailures *prometheus.CounterVec
	conns        prometheus.Gauge
	connsRefused prometheus.Counter
	connsEvicted prometheus.Counter
	retryBodies  *prometheus.CounterVec
	waterfall    *prometheus.CounterVec
	perProxy     bool
}

func newMetrics(reg prometheus.Registerer, perProxy bool) *metrics {
	m := &metrics{
		perProxy: perProxy,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "proxy_operator_gateway_requests_total",
			Help: "Gateway requests and tunnels answered, by kind (request, tunnel: an HTTP CONNECT, socks: a SOCKS5 CONNECT) and outcome (ok, auth_failed, no_upstream, upstream_failed, token_limit, egress_denied, bad_request, error).",
		}, []string{"kind", "outcome"}),
		tries: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "proxy_operator_gateway_tries",
			Help:    "Upstreams tried per gateway request or tunnel.",
			Buckets: []float64{1, 2, 3, 4, 5, 8},
		}, []string{"kind"}),
		bans: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "proxy_operator_gateway_bans_total",
			Help: "Answers a ban rule matched (each reported to the lease store), by rule and result.",
		}, []string{"rule", "result"}),
		byteCount: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "proxy_operator_gateway_bytes_total",
			Help: "Body and tunnel bytes relayed, by direction (in: from upstreams, out: to them), pool, and proxy when -gateway-metrics-per-proxy is on (else empty).",
		}, []string{"direction", "pool", "proxy"}),
		upstream: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "proxy_operator_gateway_upstream_seconds",
			Help:    "Time from sending to an upstream to its answer's head (requests) or its 200 (tunnels).",
			Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 12),
		}, []string{"kind"}),
		tunnels: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "proxy_operator_gateway_tunnels_active",
			Help: "Tunnels open now, HTTP CONNECT and SOCKS5.",
		}),
		authFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "proxy_operator_gateway_auth_failures_total",
			Help: "407 answers and SOCKS5 logins refused, by reason (missing, scheme, encoding, no_token, token, read_only, username, namespace), and 429 answers (SOCKS5: refused logins) to an address throttled after too many failed logins (throttled).",
		}, []string{"reason"}),
		conns: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "proxy_operator_gateway_connections",
			Help: "Client connections open now.",
		}),
		connsRefused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "proxy_operator_gateway_connections_refused_total",
			Help: "Client connections refused at the connection limit or the memory budget, with nothing left to evict.",
		}),
		connsEvicted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "proxy_operator_gateway_connections_evicted_total",
			Help: "Client connections closed to make room in the memory budget (idle after a failed login first, then never authenticated, then idle).",
		}),
		retryBodies: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "proxy_operator_gateway_retry_bodies_total",
			Help: "Request bodies of idempotent requests within the retry limit, by fate: kept (for retries), streamed (the memory budget had no room: sent once), too_long (a chunked body past the limit: sent once).",
		}, []string{"fate"}),
		waterfall: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "proxy_operator_gateway_waterfall_total",
			Help: "Per-site waterfall decisions, by decision (to_vendor: a site sent to a vendor source, by reason refused or cooling; vendor: a try sent to a vendor source; back_to_fleet: a site's time with the vendor over, our own proxies tried again, by the reason it had; exit_check_failed: a gateway session's vendor exit outside the vendor Proxy's spec.verify.expectedExit).",
		}, []string{"decision", "reason"}),
	}
	for _, f := range []string{"kept", "streamed", "too_long"} {
		m.retryBodies.WithLabelValues(f)
	}
	for _, k := range []string{kindRequest, kindTunnel, kindSOCKS} {
		m.requests.WithLabelValues(k, "ok")
		m.tries.WithLabelValues(k)
	}
	if reg != nil {
		reg.MustRegister(m.requests, m.tries, m.bans, m.byteCount, m.upstream, m.tunnels, m.authFailures, m.conns, m.connsRefused, m.connsEvicted, m.retryBodies, m.waterfall)
	}
	return m
}

func (m *metrics) outcome(kind, outcome string) { m.requests.WithLabelValues(kind, outcome).Inc() }

func (m *metrics) bytes(h *hold, direction string, n int64) {
	if n <= 0 {
		return
	}
	proxy := ""
	if m.perProxy {
		proxy = h.l.Proxy.Key
	}
	m.byteCount.WithLabelValues(direction, h.pool, proxy).Add(float64(n))
}
