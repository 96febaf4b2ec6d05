package gateway

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
	"github.com/proxy-operator/proxy-operator/internal/netpolicy"
	"github.com/proxy-operator/proxy-operator/server/httpx"
)

// The gateway's egress policy (decision 0250): a target is checked before anything is leased
// for it (netpolicy.CheckTarget), and an upstream is dialled only at an address the proxy
// policy allows for that proxy (netpolicy.Control, after DNS), as the prober dials it.

// initEgress defaults the policy (nil: netpolicy's zero Config, which denies every internal
// target and every loopback proxy) and puts its check in front of every upstream dial.
func (g *Gateway) initEgress() {
	if g.Egress == nil {
		g.Egress, _ = netpolicy.New(netpolicy.Config{})
	}
	g.dialer = &net.Dialer{Timeout: g.DialTimeout, KeepAlive: 30 * time.Second, ControlContext: g.Egress.Control}
	g.transport.DialContext = g.dial
	g.egressDenied = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "proxy_operator_gateway_egress_denied_total",
		Help: "Requests and tunnels the egress policy refused, by hop: target (403 before leasing) or upstream (a dial the proxy policy denied after DNS).",
	}, []string{"hop"})
	g.egressDenied.WithLabelValues("target")
	g.egressDenied.WithLabelValues("upstream")
	if g.Registerer != nil {
		g.Registerer.MustRegister(g.egressDenied)
	}
}

// dial is every upstream dial, under the proxy policy's dial-time check with the Dest the
// try's context carries (upstreamContext).
func (g *Gateway) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := g.dialer.DialContext(ctx, network, addr)
	if errors.Is(err, netpolicy.ErrDenied) {
		g.egressDenied.WithLabelValues("upstream").Inc()
		g.Log.Warn("gateway upstream denied by the egress policy", "err", err)
	}
	return c, err
}

// checkTarget refuses, with 403 and the reason, a request or tunnel whose target the policy
// denies: before a lease is sought, so a denied target costs no upstream and no report.
// Requests that are no proxy requests pass here and are refused by serve.
func (g *Gateway) checkTarget(r *http.Request, kind string) error {
	hostport, defPort := r.URL.Host, "80"
	if kind == kindTunnel {
		hostport, defPort = r.Host, "443"
		if hostport == "" {
			hostport = r.URL.Host
		}
	} else if !r.URL.IsAbs() {
		return nil
	}
	host, port, err := net.SplitHostPort(hostport)
	switch {
	case err != nil && kind == kindTunnel:
		return nil // tunnel answers: want host:port
	case err != nil:
		host, port = hostport, defPort
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil || n == 0 {
		return httpx.Errorf(http.StatusBadRequest, "port %.10q is not a port", port)
	}
	return g.checkAddr(hostport, host, uint16(n))
}

// checkAddr is checkTarget for host and port, hostport naming them in the refusal.
func (g *Gateway) checkAddr(hostport, host string, port uint16) error {
	err := g.Egress.CheckTarget(host, port)
	var de *netpolicy.DeniedError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &de):
		g.egressDenied.WithLabelValues("target").Inc()
		return refuse(http.StatusForbidden, ReasonTargetDenied,
			fmt.Sprintf("target %.80q refused by the gateway's egress policy: %s", hostport, de.Reason), g.Now(), time.Time{}, 0, err)
	default:
		return &httpx.Error{Code: http.StatusBadRequest, Err: err, Message: fmt.Sprintf("host %.80q: want a host name or address", hostport)}
	}
}

// upstreamContext is the context of one try through h: its upstream for the transport's
// Proxy function, and whose endpoint it is for the dial-time check.
func (g *Gateway) upstreamContext(ctx context.Context, h *hold) context.Context {
	return context.WithValue(netpolicy.WithDest(ctx, destOf(h)), upstreamKey{}, h.upstream)
}

// dialUpstream dials h's upstream for a tunnel under the dial-time check.
func (g *Gateway) dialUpstream(ctx context.Context, h *hold) (net.Conn, error) {
	return g.dial(netpolicy.WithDest(ctx, destOf(h)), "tcp", h.upstream.Host)
}

func destOf(h *hold) netpolicy.Dest {
	p := h.l.Proxy
	return netpolicy.Dest{External: p.Mode == v1.ModeExternal, Provider: p.Provider}
}
