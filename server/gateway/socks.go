package gateway

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/proxy-operator/proxy-operator/server/discovery/access"
	"github.com/proxy-operator/proxy-operator/server/httpx"
)

// The SOCKS5 listener (decision 0277): RFC 1928 CONNECT with RFC 1929 username/password, the
// username in the selection grammar and the password a discovery token, as in
// Proxy-Authorization. After the handshake a SOCKS5 tunnel takes the path of an HTTP CONNECT
// (tunnel): the same leases, tries, egress check, token bound, connection budget and metrics
// (kind "socks"). A domain target is passed to the upstream unresolved; the gateway never
// resolves a name.

// SOCKS5 reply codes (RFC 1928 section 6) the gateway sends; docs/api.md maps each to why.
const (
	SOCKSSucceeded           byte = 0x00
	SOCKSGeneralFailure      byte = 0x01
	SOCKSNotAllowed          byte = 0x02
	SOCKSNetworkUnreachable  byte = 0x03
	SOCKSHostUnreachable     byte = 0x04
	SOCKSConnectionRefused   byte = 0x05
	SOCKSTTLExpired          byte = 0x06
	SOCKSCommandNotSupported byte = 0x07
	SOCKSAddressNotSupported byte = 0x08
)

const (
	socksVersion     = 5
	socksAuthVersion = 1 // RFC 1929's subnegotiation version
	methodNoAuth     = 0x00
	methodUserPass   = 0x02
	methodNone       = 0xff
	cmdConnect       = 0x01
	atypIPv4         = 0x01
	atypDomain       = 0x03
	atypIPv6         = 0x04
	// socksBufSize holds the longest handshake whole: a greeting (2+255), the credentials
	// (3+255+255) and a request (5+255+2), so it is read without a second buffer.
	socksBufSize = 1 << 10
)

// SOCKSServer serves the gateway's SOCKS5 listener. Build it with Gateway.SOCKSServer; its
// Serve, Shutdown and Close behave as an http.Server's.
type SOCKSServer struct {
	g      *Gateway
	ctx    context.Context
	cancel context.CancelFunc

	mu     sync.Mutex
	lns    map[net.Listener]struct{}
	conns  map[net.Conn]bool // true once the handshake is done (a tunnel, or one on its way)
	closed bool
}

// SOCKSServer returns the server of the gateway's SOCKS5 listener. Its connections count
// against the same bound and memory budget as the HTTP listener's.
func (g *Gateway) SOCKSServer() *SOCKSServer {
	g.once.Do(g.init)
	ctx, cancel := context.WithCancel(context.Background())
	return &SOCKSServer{g: g, ctx: ctx, cancel: cancel, lns: map[net.Listener]struct{}{}, conns: map[net.Conn]bool{}}
}

// Serve accepts SOCKS5 connections on ln until it fails or the server is shut down
// (http.ErrServerClosed). A connection beyond the bound, with nothing left to evict, is closed
// at once: SOCKS5 has no word for "busy" before the greeting.
func (s *SOCKSServer) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return http.ErrServerClosed
	}
	s.lns[ln] = struct{}{}
	s.mu.Unlock()
	lln, ok := ln.(*limitListener) // a token's own port (PortListener)
	if !ok {
		lln = &limitListener{Listener: ln, g: s.g} // no overload answer: SOCKS5 has none
	} else {
		lln.overload = ""
	}
	for {
		c, err := lln.Accept()
		if err != nil {
			s.mu.Lock()
			closed := s.closed
			s.mu.Unlock()
			if closed {
				return http.ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return err
		}
		if !s.track(c, false) {
			_ = c.Close()
			continue
		}
		go s.serveConn(c.(*limitConn))
	}
}

// track records c (done: its handshake is over); false once the server is closed.
func (s *SOCKSServer) track(c net.Conn, done bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.conns[c] = done
	return true
}

func (s *SOCKSServer) forget(c net.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.conns, c)
}

// Shutdown stops accepting and closes the connections still in their handshake. Open
// tunnels go on until they end or the process exits, as the HTTP listener's hijacked ones.
func (s *SOCKSServer) Shutdown(context.Context) error { return s.stop(false) }

// Close stops accepting and closes every connection, tunnels too.
func (s *SOCKSServer) Close() error { return s.stop(true) }

func (s *SOCKSServer) stop(all bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	if all {
		s.cancel()
	}
	var err error
	for ln := range s.lns {
		if e := ln.Close(); e != nil && err == nil {
			err = e
		}
	}
	for c, done := range s.conns {
		if all || !done {
			_ = c.Close()
		}
	}
	return err
}

// socksConn is one client connection of the SOCKS5 listener during its handshake; its reader
// holds what the client sent past the request (a TLS hello sent early) for the tunnel.
type socksConn struct {
	c    *limitConn
	r    *bufio.Reader
	idle time.Duration // the write deadline of each answer
	buf  [2]byte       // the answers shorter than a request's reply
}

func (s *SOCKSServer) serveConn(c *limitConn) {
	g := s.g
	defer s.forget(c)
	defer c.Close()
	g.conns.place(c, classUnauth)
	// The whole handshake within ReadHeaderTimeout, as an HTTP head: a slow one is cut.
	_ = c.SetDeadline(time.Now().Add(g.ReadHeaderTimeout))
	sc := &socksConn{c: c, r: bufio.NewReaderSize(c, socksBufSize), idle: g.IdleTimeout}
	caller, sel, ok := s.handshake(sc)
	if !ok {
		return
	}
	g.conns.place(c, classBusy)
	if !s.track(c, true) {
		return // shut down during the handshake
	}
	authority, target, reply := sc.request()
	if reply != SOCKSSucceeded {
		g.m.outcome(kindSOCKS, "bad_request")
		sc.reply(reply)
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	err := g.socksTunnel(s.ctx, sc, pick{caller: caller, sel: sel}, authority, target)
	if err == nil {
		return
	}
	code := codeOf(err)
	reply = socksReplyOf(err)
	g.Log.Debug("gateway SOCKS5 request refused", "code", code, "reply", reply, "err", err)
	g.m.outcome(kindSOCKS, outcomeOf(code))
	sc.reply(reply)
}

// socksTunnel is serve's tail for a SOCKS5 CONNECT: the token's bound, the egress policy on
// the target, then the tunnel.
func (g *Gateway) socksTunnel(ctx context.Context, sc *socksConn, p pick, authority, target string) error {
	done, err := g.admit(p.caller)
	if err != nil {
		return err
	}
	defer done()
	host, port, _ := net.SplitHostPort(authority)
	n, _ := strconv.ParseUint(port, 10, 16)
	if err := g.checkAddr(authority, host, uint16(n)); err != nil {
		return err
	}
	return g.tunnel(ctx, sc, kindSOCKS, p, authority, target)
}

// handshake reads the greeting and the credentials and answers both; false: the connection
// is to be closed (the client was told why where the protocol has a word for it).
func (s *SOCKSServer) handshake(sc *socksConn) (_ *access.Caller, _ Selection, ok bool) {
	g := s.g
	hdr, err := sc.read(2)
	if err != nil || hdr[0] != socksVersion {
		// Not SOCKS5 (an HTTP client on the wrong port, SOCKS4): nothing it would understand.
		g.m.outcome(kindSOCKS, "bad_request")
		return nil, Selection{}, false
	}
	methods, err := sc.read(int(hdr[1]))
	if err != nil {
		g.m.outcome(kindSOCKS, "bad_request")
		return nil, Selection{}, false
	}
	l := login{g: g, remote: sc.c.RemoteAddr().String(), attrs: []any{"protocol", "socks5"}, port: sc.c.port}
	// Username/password when offered (the username selects); "no authentication" only where no
	// password is needed: -discovery-insecure, a token's own port (0279), or a source in a
	// token's allowlist (0278).
	chosen := byte(methodNone)
	for _, m := range methods {
		if m == methodUserPass || m == methodNoAuth && chosen == methodNone && (g.Insecure || l.port != nil || l.allowlisted() != nil) {
			chosen = m
		}
	}
	sc.buf[0], sc.buf[1] = socksVersion, chosen
	if err := sc.write(sc.buf[:2]); err != nil || chosen == methodNone {
		if chosen == methodNone {
			g.m.authFailures.WithLabelValues("missing").Inc()
			g.m.outcome(kindSOCKS, "auth_failed")
		}
		return nil, Selection{}, false
	}
	var caller *access.Caller
	var sel Selection
	if chosen == methodNoAuth {
		caller, sel, err = l.check("", "")
	} else {
		caller, sel, err = s.credentials(sc, l)
	}
	status := byte(0)
	if err != nil {
		status = 1
	}
	sc.buf[0], sc.buf[1] = socksAuthVersion, status
	if chosen == methodNoAuth {
		return caller, sel, err == nil
	}
	if werr := sc.write(sc.buf[:2]); werr != nil || err != nil {
		if err != nil {
			g.Log.Debug("gateway SOCKS5 login refused", "err", err)
			g.m.outcome(kindSOCKS, outcomeOf(codeOf(err)))
		}
		return nil, Selection{}, false // RFC 1929: on a failure the server closes
	}
	return caller, sel, true
}

// credentials reads RFC 1929's username and password (at most 255 bytes each, by the
// protocol's length bytes) and checks them as Proxy-Authorization's.
func (s *SOCKSServer) credentials(sc *socksConn, l login) (*access.Caller, Selection, error) {
	if wait := s.g.Logins.WaitAddr(l.remote); wait > 0 {
		return l.throttled(wait)
	}
	short := func() (*access.Caller, Selection, error) {
		return l.deny("encoding", "SOCKS5 username/password cut short")
	}
	hdr, err := sc.read(2)
	if err != nil {
		return short()
	}
	if hdr[0] != socksAuthVersion {
		return l.deny("encoding", "SOCKS5 username/password version %d, want 1", hdr[0])
	}
	u, err := sc.read(int(hdr[1]))
	if err != nil {
		return short()
	}
	user := string(u)
	n, err := sc.read(1)
	if err != nil {
		return short()
	}
	p, err := sc.read(int(n[0]))
	if err != nil {
		return short()
	}
	return l.check(user, string(p))
}

// request reads the client's request: the authority passed to the upstream (a name left
// unresolved), the lease target (its port left out when 80 or 443, as the HTTP listener's
// targets), or the reply refusing it.
func (sc *socksConn) request() (authority, target string, reply byte) {
	hdr, err := sc.read(4)
	if err != nil || hdr[0] != socksVersion {
		return "", "", SOCKSGeneralFailure
	}
	if hdr[1] != cmdConnect {
		return "", "", SOCKSCommandNotSupported // BIND, UDP ASSOCIATE
	}
	var host string
	switch hdr[3] {
	case atypIPv4:
		b, err := sc.read(4)
		if err != nil {
			return "", "", SOCKSGeneralFailure
		}
		host = netip.AddrFrom4([4]byte(b)).String()
	case atypIPv6:
		b, err := sc.read(16)
		if err != nil {
			return "", "", SOCKSGeneralFailure
		}
		host = netip.AddrFrom16([16]byte(b)).Unmap().String()
	case atypDomain:
		n, err := sc.read(1)
		if err != nil || n[0] == 0 {
			return "", "", SOCKSGeneralFailure
		}
		b, err := sc.read(int(n[0]))
		if err != nil {
			return "", "", SOCKSGeneralFailure
		}
		host = string(b)
		if a, perr := netip.ParseAddr(host); perr == nil && a.Zone() == "" {
			// Chromium sends every destination as a name, an address too: it is the address
			// it spells, checked by the egress policy as any address is (decision 0292).
			host = a.Unmap().String()
		} else if perr == nil || strings.ContainsAny(host, ":[]") {
			// A zoned address, or a name that would break host:port, is no name.
			return "", "", SOCKSAddressNotSupported
		}
	default:
		return "", "", SOCKSAddressNotSupported
	}
	pb, err := sc.read(2)
	if err != nil {
		return "", "", SOCKSGeneralFailure
	}
	port := int(pb[0])<<8 | int(pb[1])
	if port == 0 {
		return "", "", SOCKSNotAllowed
	}
	authority = net.JoinHostPort(host, strconv.Itoa(port))
	def := "443"
	if port == 80 {
		def = "80"
	}
	target, err = targetOf(authority, def)
	if err != nil {
		return "", "", SOCKSHostUnreachable // not a host name the gateway passes on
	}
	return authority, target, SOCKSSucceeded
}

// read returns the next n bytes of the handshake, valid until the next read.
func (sc *socksConn) read(n int) ([]byte, error) {
	b, err := sc.r.Peek(n)
	if err != nil {
		return nil, err
	}
	_, _ = sc.r.Discard(n)
	return b, nil
}

func (sc *socksConn) write(b []byte) error {
	_ = sc.c.SetWriteDeadline(time.Now().Add(sc.idle))
	_, err := sc.c.Write(b)
	return err
}

// reply answers the request with a refusal; the bound address is zero (RFC 1928 leaves it to
// the server; clients of CONNECT ignore it).
func (sc *socksConn) reply(code byte) {
	_ = sc.write([]byte{socksVersion, code, 0, atypIPv4, 0, 0, 0, 0, 0, 0})
}

func (sc *socksConn) failed(int) {}

func (sc *socksConn) established(*hold, int) (net.Conn, io.Reader, error) {
	sc.reply(SOCKSSucceeded)
	_ = sc.c.SetDeadline(time.Time{})
	return sc.c, sc.r, nil
}

// socksReplyOf maps why a tunnel was not opened to a SOCKS5 reply (docs/api.md): the egress
// policy's refusal is "not allowed by ruleset"; what the last upstream answered to its CONNECT
// says whether the target was unreachable, refused or timed out; everything else (no upstream,
// the token's bound, the store) is a general failure.
func socksReplyOf(err error) byte {
	var rf *refusal
	if errors.As(err, &rf) && rf.code == http.StatusForbidden {
		return SOCKSNotAllowed
	}
	var us *UpstreamStatusError
	if errors.As(err, &us) {
		// Squid names the errno of its failed connect: ERR_CONNECT_FAIL 111.
		_, errno, _ := strings.Cut(us.SquidError, " ")
		switch {
		case errno == "111":
			return SOCKSConnectionRefused
		case errno == "101":
			return SOCKSNetworkUnreachable
		case errno == "110" || us.Code == http.StatusGatewayTimeout:
			return SOCKSTTLExpired
		case us.Code == http.StatusForbidden:
			return SOCKSNotAllowed
		case us.Code == http.StatusBadGateway || us.Code == http.StatusServiceUnavailable || us.Code == http.StatusNotFound:
			return SOCKSHostUnreachable
		}
		return SOCKSGeneralFailure
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return SOCKSTTLExpired
	}
	return SOCKSGeneralFailure
}

// codeOf is the HTTP status an error of serve would be answered with.
func codeOf(err error) int {
	var rf *refusal
	var e *httpx.Error
	switch {
	case errors.As(err, &rf):
		return rf.code
	case errors.As(err, &e):
		return e.Code
	}
	return http.StatusInternalServerError
}
