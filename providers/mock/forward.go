package mock

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"github.com/proxy-operator/proxy-operator/providers"
)

// ErrRelayDenied is the error of a relay to a destination the mock proxy does not serve.
var ErrRelayDenied = errors.New("mock proxy: destination not allowed")

// ForwardConfig configures one mock forward proxy.
type ForwardConfig struct {
	// RelayAnywhere lets the proxy relay to any address. By default it relays only to
	// loopback, so a laptop fleet cannot be used to reach the network it runs in.
	RelayAnywhere bool
	// Credentials, when set, must be on every request (Proxy-Authorization: Basic), as a
	// Squid of the kubernetes provider demands: without them the answer is 407.
	Credentials *providers.Credentials
	// EgressIP, when set, is the address the proxy dials out from instead of its own: a
	// proxy whose traffic leaves through another egress, which an exit check must catch.
	EgressIP string
	// Refuse, when set, names destinations the proxy never relays to, loopback or not,
	// relayAnywhere or not: the operator's own listeners, which a crawler holding a lease
	// would otherwise reach through the proxy (issue 21). The one request still relayed there
	// is a plain GET /healthz without a body: the demo fleet and the tests probe their mock
	// proxies against the operator's own /healthz, which answers anyone anyway.
	Refuse func(netip.AddrPort) bool
}

// ServeForwardProxy is ServeForwardProxyWith with creds and otherwise the default config
// (loopback only).
func ServeForwardProxy(addr string, creds *providers.Credentials) (stop func(), err error) {
	return ServeForwardProxyWith(addr, ForwardConfig{Credentials: creds})
}

// ServeForwardProxyWith listens on addr and serves a minimal HTTP forward proxy there: CONNECT
// tunnels and absolute-URI GETs, so probes and crawlers on a laptop go through a real proxy.
// It dials out from the address it listens on, so a site sees each proxy as its own client,
// as it would a fleet of machines. The returned stop closes the listener and every open
// connection, hijacked tunnels included: a deleted instance relays nothing more.
func ServeForwardProxyWith(addr string, cfg ForwardConfig) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	fp := &forwardProxy{cfg: cfg, tunnels: map[net.Conn]struct{}{}}
	fp.dialer = &net.Dialer{Timeout: 10 * time.Second, ControlContext: fp.control}
	// Dial out from the listening IP (port chosen by the kernel), so a site sees each proxy
	// as its own client, as it would a fleet of machines; a wildcard listener dials from
	// wherever the route says.
	if a, ok := ln.Addr().(*net.TCPAddr); ok && !a.IP.IsUnspecified() {
		fp.dialer.LocalAddr = &net.TCPAddr{IP: a.IP}
	}
	if cfg.EgressIP != "" {
		ip := net.ParseIP(cfg.EgressIP)
		if ip == nil {
			_ = ln.Close()
			return nil, fmt.Errorf("mock proxy: egress %q is not an IP address", cfg.EgressIP)
		}
		fp.dialer.LocalAddr = &net.TCPAddr{IP: ip}
	}
	fp.transport = &http.Transport{
		Proxy:                 nil,
		DialContext:           fp.dialer.DialContext,
		ResponseHeaderTimeout: 30 * time.Second,
		DisableKeepAlives:     true,
	}
	srv := &http.Server{
		Handler:           requireAuth(cfg.Credentials, http.HandlerFunc(fp.forward)),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       30 * time.Second,
	}
	go func() { _ = srv.Serve(ln) }()
	return func() {
		// Close the tunnels first: Shutdown does not know hijacked connections, and a
		// tunnel that outlived its instance would keep relaying for whoever opened it.
		fp.closeTunnels()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if srv.Shutdown(ctx) != nil {
			_ = srv.Close()
		}
		fp.transport.CloseIdleConnections()
	}, nil
}

// requireAuth answers 407 to a request without creds; nil creds let everything through.
func requireAuth(creds *providers.Credentials, next http.Handler) http.Handler {
	if creds == nil {
		return next
	}
	user, pass := []byte(creds.Username), []byte(creds.Password)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// net/http parses Basic credentials only from Authorization; borrow that parser.
		asAuth := http.Request{Header: http.Header{"Authorization": r.Header.Values("Proxy-Authorization")}}
		u, p, ok := asAuth.BasicAuth()
		if !ok || subtle.ConstantTimeCompare([]byte(u), user)&subtle.ConstantTimeCompare([]byte(p), pass) != 1 {
			w.Header().Set("Proxy-Authenticate", `Basic realm="proxy-operator"`)
			http.Error(w, "mock proxy: proxy authentication required", http.StatusProxyAuthRequired)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// forwardProxy relays requests from one proxy address.
type forwardProxy struct {
	cfg       ForwardConfig
	dialer    *net.Dialer
	transport *http.Transport

	mu      sync.Mutex
	closed  bool
	tunnels map[net.Conn]struct{} // both ends of every open tunnel
}

// control runs after DNS resolution, on the address actually dialled.
// healthzKey marks a relayed GET /healthz, the one request Refuse lets through.
type healthzKey struct{}

func (fp *forwardProxy) control(ctx context.Context, _, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%w: %s is not an address and port", ErrRelayDenied, address)
	}
	ap = netip.AddrPortFrom(ap.Addr().Unmap().WithZone(""), ap.Port())
	if fp.cfg.Refuse != nil && fp.cfg.Refuse(ap) && ctx.Value(healthzKey{}) == nil {
		return fmt.Errorf("%w: %s is one of the operator's own listeners", ErrRelayDenied, address)
	}
	if !fp.cfg.RelayAnywhere && !ap.Addr().IsLoopback() {
		return fmt.Errorf("%w: %s is not loopback (set relayAnywhere to relay elsewhere)", ErrRelayDenied, address)
	}
	return nil
}

// track registers conns as a tunnel; false when the proxy is already stopped.
func (fp *forwardProxy) track(conns ...net.Conn) bool {
	fp.mu.Lock()
	defer fp.mu.Unlock()
	if fp.closed {
		return false
	}
	for _, c := range conns {
		fp.tunnels[c] = struct{}{}
	}
	return true
}

func (fp *forwardProxy) untrack(conns ...net.Conn) {
	fp.mu.Lock()
	defer fp.mu.Unlock()
	for _, c := range conns {
		delete(fp.tunnels, c)
	}
}

func (fp *forwardProxy) closeTunnels() {
	fp.mu.Lock()
	defer fp.mu.Unlock()
	fp.closed = true
	for c := range fp.tunnels {
		_ = c.Close()
	}
	clear(fp.tunnels)
}

// HeaderError marks an answer the mock proxy made itself (a relay it refused or that failed),
// as Squid's X-Squid-Error does: a gateway must not take it for the site's.
const HeaderError = "X-Mock-Proxy-Error"

func relayStatus(err error) int {
	if errors.Is(err, ErrRelayDenied) {
		return http.StatusForbidden
	}
	return http.StatusBadGateway
}

func (fp *forwardProxy) forward(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodConnect {
		fp.tunnel(w, r)
		return
	}
	if !r.URL.IsAbs() {
		http.Error(w, "mock proxy: absolute URI required", http.StatusBadRequest)
		return
	}
	ctx := r.Context()
	if r.Method == http.MethodGet && r.URL.Path == "/healthz" && r.URL.RawQuery == "" && r.ContentLength == 0 {
		ctx = context.WithValue(ctx, healthzKey{}, true)
	}
	out := r.Clone(ctx)
	out.RequestURI = ""
	out.Header.Del("Proxy-Connection")
	out.Header.Del("Proxy-Authorization")
	resp, err := fp.transport.RoundTrip(out)
	if err != nil {
		w.Header().Set(HeaderError, "relay")
		http.Error(w, "mock proxy: "+err.Error(), relayStatus(err))
		return
	}
	defer resp.Body.Close()
	for k, vs := range resp.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

func (fp *forwardProxy) tunnel(w http.ResponseWriter, r *http.Request) {
	upstream, err := fp.dialer.DialContext(r.Context(), "tcp", r.Host)
	if err != nil {
		w.Header().Set(HeaderError, "relay")
		http.Error(w, "mock proxy: "+err.Error(), relayStatus(err))
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		upstream.Close()
		http.Error(w, "mock proxy: cannot hijack", http.StatusInternalServerError)
		return
	}
	// The 200 is written on the hijacked connection itself: through the ResponseWriter it
	// would carry Transfer-Encoding: chunked, which strict clients refuse on a CONNECT answer.
	client, buf, err := hj.Hijack()
	if err != nil {
		upstream.Close()
		return
	}
	if !fp.track(client, upstream) {
		client.Close()
		upstream.Close()
		return
	}
	defer fp.untrack(client, upstream)
	if _, err := client.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n")); err != nil {
		client.Close()
		upstream.Close()
		return
	}
	// Bytes the client sent after the CONNECT line are already buffered.
	if n := buf.Reader.Buffered(); n > 0 {
		b, _ := buf.Reader.Peek(n)
		if _, err := upstream.Write(b); err != nil {
			client.Close()
			upstream.Close()
			return
		}
	}
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, err := io.Copy(dst, src)
		if errors.Is(err, net.ErrClosed) {
			err = nil
		}
		if tcp, ok := dst.(*net.TCPConn); ok {
			_ = tcp.CloseWrite()
		}
		done <- struct{}{}
	}
	go pipe(upstream, client)
	go pipe(client, upstream)
	<-done
	<-done
	client.Close()
	upstream.Close()
}
