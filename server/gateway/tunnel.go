package gateway

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/proxy-operator/proxy-operator/server/discovery/access"
	"github.com/proxy-operator/proxy-operator/server/httpx"
)

// ErrUpstreamRefused is wrapped by the error of an upstream that answered a CONNECT with
// anything but 200 (with an *UpstreamStatusError that says what it answered).
var ErrUpstreamRefused = errors.New("upstream refused the tunnel")

// UpstreamStatusError is what an upstream answered to a CONNECT instead of 200: its status,
// and Squid's X-Squid-Error (ERR_CONNECT_FAIL 111), which says why a target was unreachable.
type UpstreamStatusError struct {
	Status     string
	Code       int
	SquidError string
}

func (e *UpstreamStatusError) Error() string { return e.Status }

// tunnelClient is the client end of a tunnel: an HTTP CONNECT (httpTunnel) or a SOCKS5
// CONNECT (socks.go). Both take the same path through tunnel: leases, tries, egress, metrics.
type tunnelClient interface {
	// established answers the client that its tunnel through h is open after tries upstreams,
	// and returns the client's connection and a reader of what it sent past its request.
	established(h *hold, tries int) (net.Conn, io.Reader, error)
	// failed says, before the error is answered, how many upstreams were tried in vain.
	failed(tries int)
}

// connect serves an HTTP CONNECT: its authority is host:port, its target the host with 443
// left out.
func (g *Gateway) connect(w http.ResponseWriter, r *http.Request, p pick) error {
	authority := r.Host
	if authority == "" {
		authority = r.URL.Host
	}
	if _, _, err := net.SplitHostPort(authority); err != nil {
		return httpx.Errorf(http.StatusBadRequest, "CONNECT %.64q: want host:port", authority)
	}
	target, err := targetOf(authority, "443")
	if err != nil {
		return err
	}
	return g.tunnel(r.Context(), httpTunnel{w, g.IdleTimeout}, kindTunnel, p, authority, target)
}

// tunnel opens a tunnel to authority through a leased upstream and holds the lease for the
// tunnel's life. An upstream that fails or refuses before the client has its answer is
// replaced by another (the client has sent nothing yet); inside the tunnel the gateway sees
// only bytes, so bans there are the crawler's to report (docs/api.md). kind labels the metrics.
func (g *Gateway) tunnel(ctx context.Context, c tunnelClient, kind string, p pick, authority, target string) error {
	var (
		held    []*hold
		lastErr error
		tries   int
	)
	defer func() {
		for _, h := range held {
			g.done(h)
		}
	}()
	for tries < g.MaxTries {
		h, _, err := g.takeTry(ctx, p, target, held, false)
		if err != nil {
			if tries == 0 {
				return g.leaseError(err)
			}
			break
		}
		held = append(held, h)
		tries++
		start := g.Now()
		up, br, err := g.connectUpstream(ctx, h, authority)
		if err != nil {
			lastErr = err
			g.Log.Debug("gateway upstream CONNECT failed", "kind", kind, "proxy", h.l.Proxy.Key, "target", target, "err", err)
			continue
		}
		g.m.upstream.WithLabelValues(kind).Observe(g.Now().Sub(start).Seconds())
		g.m.tries.WithLabelValues(kind).Observe(float64(tries))
		for _, o := range held[:len(held)-1] {
			g.done(o)
		}
		held = held[len(held)-1:]
		g.splice(c, kind, up, br, h, tries, p.caller)
		return nil
	}
	g.m.tries.WithLabelValues(kind).Observe(float64(tries))
	g.Log.Warn("gateway tunnel failed on every upstream tried", "kind", kind, "target", target, "tries", tries, "err", lastErr)
	c.failed(tries)
	return &httpx.Error{Code: http.StatusBadGateway, Err: lastErr,
		Message: "no upstream proxy opened a tunnel to " + target + " after " + strconv.Itoa(tries) + " tries"}
}

// connectUpstream dials h's upstream and asks it for a tunnel to authority with the
// upstream's credential. The reader holds whatever the upstream sent past its 200.
func (g *Gateway) connectUpstream(ctx context.Context, h *hold, authority string) (net.Conn, *bufio.Reader, error) {
	up, err := g.dialUpstream(ctx, h)
	if err != nil {
		return nil, nil, err
	}
	_ = up.SetDeadline(time.Now().Add(g.ResponseHeaderTimeout))
	var b strings.Builder
	fmt.Fprintf(&b, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n", authority, authority)
	if u := h.upstream.User; u != nil {
		pw, _ := u.Password()
		b.WriteString("Proxy-Authorization: Basic " + basic(u.Username(), pw) + "\r\n")
	}
	b.WriteString("\r\n")
	if _, err := io.WriteString(up, b.String()); err != nil {
		up.Close()
		return nil, nil, err
	}
	br := bufio.NewReaderSize(up, 4<<10)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		up.Close()
		return nil, nil, err
	}
	if resp.StatusCode != http.StatusOK {
		up.Close()
		return nil, nil, fmt.Errorf("%w: %w", ErrUpstreamRefused,
			&UpstreamStatusError{Status: resp.Status, Code: resp.StatusCode, SquidError: resp.Header.Get("X-Squid-Error")})
	}
	_ = up.SetDeadline(time.Time{})
	return up, br, nil
}

// splice answers the client and relays bytes both ways until either side closes or neither
// sends for IdleTimeout.
func (g *Gateway) splice(c tunnelClient, kind string, up net.Conn, upr *bufio.Reader, h *hold, tries int, caller *access.Caller) {
	defer up.Close()
	client, cr, err := c.established(h, tries)
	if err != nil {
		return
	}
	defer client.Close()
	g.m.outcome(kind, "ok")
	g.m.tunnels.Inc()
	defer g.m.tunnels.Dec()
	in, out := pipeIdle(client, cr, up, upr, g.IdleTimeout)
	g.m.bytes(h, "out", out)
	g.m.bytes(h, "in", in)
	g.account(caller, h, in, out)
}

// httpTunnel is the client end of an HTTP CONNECT.
type httpTunnel struct {
	w    http.ResponseWriter
	idle time.Duration // the write deadline of the 200
}

func (t httpTunnel) failed(tries int) { t.w.Header().Set(HeaderTries, strconv.Itoa(tries)) }

func (t httpTunnel) established(h *hold, tries int) (net.Conn, io.Reader, error) {
	hj, ok := t.w.(http.Hijacker)
	if !ok {
		err := httpx.Errorf(http.StatusInternalServerError, "this connection cannot carry a tunnel")
		httpx.WriteError(t.w, err)
		return nil, nil, err
	}
	client, cbuf, err := hj.Hijack()
	if err != nil {
		return nil, nil, err
	}
	_ = client.SetDeadline(time.Time{})
	// Written on the raw connection: through the ResponseWriter a 200 would carry
	// Transfer-Encoding: chunked, which strict clients refuse on a CONNECT answer.
	head := "HTTP/1.1 200 Connection established\r\n" + HeaderProxy + ": " + h.l.Proxy.Key + "\r\n" +
		HeaderTries + ": " + strconv.Itoa(tries) + "\r\n\r\n"
	_ = client.SetWriteDeadline(time.Now().Add(t.idle))
	if _, err := io.WriteString(client, head); err != nil {
		client.Close()
		return nil, nil, err
	}
	return client, cbuf.Reader, nil
}
