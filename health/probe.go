// Package health owns the prober: it probes every proxy in the fleet view through the proxy
// itself, on a schedule, and turns results into a verdict per proxy by thresholds. It knows
// nothing of how status is written or how the fleet view is filled.
package health

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/proxy-operator/proxy-operator/internal/netpolicy"
	"github.com/proxy-operator/proxy-operator/providers"
)

// Error kinds a failed probe reports: short stable words that end up in the Healthy
// condition's message and in logs. The set is closed so they can be matched on.
const (
	KindTimeout       = "timeout"         // no answer within the per-proxy timeout
	KindRefused       = "refused"         // the proxy's port refused the connection
	KindReset         = "reset"           // a connection was reset or closed mid-exchange
	KindUnreachable   = "unreachable"     // no route to the proxy
	KindConnectDenied = "connect_denied"  // the proxy refused to open the tunnel (4xx to CONNECT)
	KindProxyAuth     = "proxy_auth"      // the proxy answered 407: the credential is missing or wrong
	KindUpstream      = "upstream_failed" // the proxy could not reach the target (5xx to CONNECT)
	KindTLS           = "tls"             // the TLS handshake through the tunnel failed
	KindBadURL        = "bad_url"         // the probe URL or proxy address cannot be used
	KindEgressDenied  = "egress_denied"   // the egress policy forbids connecting to the proxy
	KindCanceled      = "canceled"        // the scheduler stopped the probe
	KindError         = "error"           // anything else
	// A response with an unexpected status is "status_<code>", e.g. "status_503".
)

// errConnect marks a CONNECT the proxy did not answer with 2xx; the transport's own error
// for that is only the status text.
var errConnect = errors.New("proxy did not open the tunnel")

var errNoProxy = errors.New("health: probe without a proxy address")

// Target is one probe to make.
type Target struct {
	// Proxy is the proxy's host:port.
	Proxy string
	// URL is fetched through the proxy.
	URL string
	// Timeout bounds the whole probe, connect to last header.
	Timeout time.Duration
	// Expected are the status codes that count as success.
	Expected []int32
	// Credentials, when set, authenticate the probe to the proxy (HTTP Basic, on the CONNECT
	// or on the forwarded request).
	Credentials *providers.Credentials
	// Dest says whose endpoint the proxy is, for the egress policy.
	Dest netpolicy.Dest
	// ExitURL, when set, is fetched through the proxy after a successful probe, within its
	// own Timeout: its answer is the address the far side saw (see ParseEcho).
	ExitURL string
}

// Result is the outcome of one probe.
type Result struct {
	OK bool
	// Latency is from the start of the probe to the response headers (or to the failure).
	Latency time.Duration
	// Status is the target's HTTP status, 0 when none arrived.
	Status int
	// Kind is empty on success, else one of the Kind constants or "status_<code>".
	Kind string
	// Err is the cause of a failure, for logs.
	Err error
	// Exit is the address the exit check learned (invalid when none ran or it failed);
	// ExitErr says why it failed. A failed exit check does not fail the probe.
	Exit    netip.Addr
	ExitErr error
}

// Prober makes probes. Every probe opens fresh connections so that a pooled connection can
// never hide a dead proxy.
type Prober interface {
	Probe(ctx context.Context, t Target) Result
}

// HTTPProber probes with net/http through the proxy: an https:// URL goes through a CONNECT
// tunnel and a TLS handshake with the target, so a proxy that accepts TCP but cannot reach
// the internet fails.
type HTTPProber struct {
	tr     *http.Transport
	policy *netpolicy.Policy
}

// ProberOption configures an HTTPProber.
type ProberOption func(*HTTPProber)

// WithEgressPolicy checks every connection the prober makes against pol after DNS
// resolution, so a proxy address (or a name that resolves, or rebinds, to one) the policy
// denies is never connected to; such a probe fails with KindEgressDenied.
func WithEgressPolicy(pol *netpolicy.Policy) ProberOption {
	return func(p *HTTPProber) { p.policy = pol }
}

// maxBodyBytes is how much of a probe answer is read before the connection is dropped: the
// status is all that matters, but reading a little lets the server finish cleanly.
const maxBodyBytes = 4 << 10

type proxyKey struct{}

// NewHTTPProber returns a prober. tlsConfig is used for the target's handshake; nil means
// the system roots (tests pass one that trusts their own server).
func NewHTTPProber(tlsConfig *tls.Config, opts ...ProberOption) *HTTPProber {
	p := &HTTPProber{}
	for _, o := range opts {
		o(p)
	}
	dialer := &net.Dialer{KeepAlive: -1}
	if p.policy != nil {
		dialer.ControlContext = p.policy.Control
	}
	if tlsConfig == nil {
		tlsConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	tr := &http.Transport{
		// One transport for every proxy: the proxy of each request travels in its context.
		// Without one the request fails rather than going direct, which would vouch for a
		// proxy it never touched.
		Proxy: func(r *http.Request) (*url.URL, error) {
			if u, ok := r.Context().Value(proxyKey{}).(*url.URL); ok {
				return u, nil
			}
			return nil, errNoProxy
		},
		OnProxyConnectResponse: func(_ context.Context, _ *url.URL, _ *http.Request, res *http.Response) error {
			if res.StatusCode/100 != 2 {
				return &connectError{status: res.StatusCode}
			}
			return nil
		},
		DialContext:       dialer.DialContext,
		TLSClientConfig:   tlsConfig,
		DisableKeepAlives: true,
		// The per-probe context bounds everything; these only stop a runaway without one.
		TLSHandshakeTimeout:    time.Minute,
		ResponseHeaderTimeout:  time.Minute,
		MaxResponseHeaderBytes: 64 << 10,
		DisableCompression:     true,
	}
	p.tr = tr
	return p
}

type connectError struct{ status int }

func (e *connectError) Error() string { return "proxy answered CONNECT with " + strconv.Itoa(e.status) }
func (e *connectError) Unwrap() error { return errConnect }

// Probe makes one GET of t.URL through t.Proxy within t.Timeout.
func (p *HTTPProber) Probe(ctx context.Context, t Target) Result {
	start := time.Now()
	if _, _, err := net.SplitHostPort(t.Proxy); err != nil {
		return Result{Kind: KindBadURL, Err: fmt.Errorf("%w: %q: %w", errNoProxy, t.Proxy, err)}
	}
	proxyURL := t.Credentials.ProxyURL(t.Proxy)
	ctx = context.WithValue(ctx, proxyKey{}, proxyURL)
	ctx = netpolicy.WithDest(ctx, t.Dest)
	parent := ctx
	if t.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, t.Timeout)
		defer cancel()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, t.URL, nil)
	if err != nil {
		return Result{Latency: time.Since(start), Kind: KindBadURL, Err: err}
	}
	req.Header.Set("User-Agent", "proxy-operator-probe")
	res, err := p.tr.RoundTrip(req)
	lat := time.Since(start)
	if err != nil {
		return Result{Latency: lat, Kind: classify(ctx, err), Err: err}
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, maxBodyBytes))
	_ = res.Body.Close()
	if slices.Contains(t.Expected, int32(res.StatusCode)) {
		r := Result{OK: true, Latency: lat, Status: res.StatusCode}
		if t.ExitURL != "" {
			r.Exit, r.ExitErr = p.exit(parent, t)
		}
		return r
	}
	if res.StatusCode == http.StatusProxyAuthRequired {
		// Only the proxy answers 407 (a target cannot ask for proxy credentials).
		return Result{Latency: lat, Status: res.StatusCode, Kind: KindProxyAuth,
			Err: errors.New("proxy refused the credential: " + res.Status)}
	}
	return Result{Latency: lat, Status: res.StatusCode, Kind: "status_" + strconv.Itoa(res.StatusCode),
		Err: errors.New("unexpected status " + res.Status)}
}

// exit fetches t.ExitURL through the proxy (ctx carries it) and reads the address, within a
// timeout of its own so a slow health answer does not starve it.
func (p *HTTPProber) exit(ctx context.Context, t Target) (netip.Addr, error) {
	if t.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, t.Timeout)
		defer cancel()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, t.ExitURL, nil)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("exit check: %w", err)
	}
	req.Header.Set("User-Agent", "proxy-operator-probe")
	req.Header.Set("Accept", "application/json, text/plain;q=0.9")
	res, err := p.tr.RoundTrip(req)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("exit check: %s: %w", classify(ctx, err), err)
	}
	defer func() { _ = res.Body.Close() }()
	if res.StatusCode != http.StatusOK {
		return netip.Addr{}, fmt.Errorf("exit check: %w: status %s", ErrEcho, res.Status)
	}
	body, err := io.ReadAll(io.LimitReader(res.Body, maxEchoBytes+1))
	if err != nil {
		return netip.Addr{}, fmt.Errorf("exit check: %s: %w", classify(ctx, err), err)
	}
	if len(body) > maxEchoBytes {
		return netip.Addr{}, fmt.Errorf("exit check: %w: longer than %d bytes", ErrEcho, maxEchoBytes)
	}
	return ParseEcho(body)
}

// Close drops any connection the transport still holds.
func (p *HTTPProber) Close() { p.tr.CloseIdleConnections() }

// classify maps a transport error onto a Kind.
func classify(ctx context.Context, err error) string {
	var ne net.Error
	var tlsErr *tls.CertificateVerificationError
	var recErr tls.RecordHeaderError
	var alert tls.AlertError
	var ce *connectError
	switch {
	case errors.As(err, &ce) && ce.status == http.StatusProxyAuthRequired:
		return KindProxyAuth
	case errors.Is(err, netpolicy.ErrDenied):
		return KindEgressDenied
	case errors.As(err, &ce) && ce.status >= 500:
		return KindUpstream
	case errors.As(err, &ce):
		return KindConnectDenied
	case errors.Is(ctx.Err(), context.DeadlineExceeded), errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, os.ErrDeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return KindTimeout
	case errors.Is(err, context.Canceled):
		return KindCanceled
	case errors.Is(err, syscall.ECONNREFUSED):
		return KindRefused
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return KindUnreachable
	case errors.As(err, &tlsErr), errors.As(err, &recErr), errors.As(err, &alert):
		return KindTLS
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE), errors.Is(err, io.EOF),
		errors.Is(err, io.ErrUnexpectedEOF):
		return KindReset
	}
	return KindError
}
