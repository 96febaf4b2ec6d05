// Package vendortest is a stand-in for a residential-IP vendor's gateway on loopback, for tests:
// an HTTP forward proxy (CONNECT tunnels and absolute-URI requests) that reads the targeting
// in the proxy username in Oxylabs' form (customer-USER-cc-US-sessid-X-sesstime-10) or Bright
// Data's (brd-customer-ID-zone-Z-country-us-session-X), refuses a wrong credential with 407,
// dials out from a 127.x address of its own per session (a new one once the session's
// lifetime is over) and counts the bytes and requests it carried for the account. It relays to loopback
// targets only and knows nothing of the operator.
package vendortest

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Format is a vendor's username grammar.
type Format string

const (
	// Oxylabs: customer-USER[-cc-CC][-city-X][-asn-N][-sessid-ID][-sesstime-MINUTES].
	Oxylabs Format = "oxylabs"
	// BrightData: brd-customer-ID-zone-ZONE[-country-cc][-city-x][-asn-N][-session-ID].
	BrightData Format = "brightdata"
)

// HeaderExit is set on every answer the stand-in relays: the address the session left from,
// so a test can see stickiness without a second look at the target.
const HeaderExit = "X-Vendortest-Exit"

// Config is one vendor account.
type Config struct {
	// Customer is Oxylabs' USER or Bright Data's customer ID; Zone is Bright Data's zone.
	Customer, Zone string
	Password       string
	// Exits is the range sessions leave from (default 127.0.200.0/24): the crawl farm's
	// residential addresses, apart from the mock fleet's 127.1.0.0-127.254.255.255.
	Exits netip.Prefix
	// Lifetime is a session's life when the username sets none (Bright Data never does);
	// default 10 minutes.
	Lifetime time.Duration
	Now      func() time.Time
}

// Target is what one username asks for.
type Target struct {
	Format   Format
	Country  string // upper case
	City     string
	ASN      string
	Session  string
	Lifetime time.Duration // 0: the account's default
}

// Usage is what the stand-in carried for an account: payload bytes (request bodies and tunnel
// bytes out, response bodies and tunnel bytes in) and requests (a tunnel is one).
type Usage struct {
	BytesIn, BytesOut, Requests int64
}

// Vendor is a running stand-in.
type Vendor struct {
	cfg  Config
	ln   net.Listener
	srv  *http.Server
	done chan struct{}

	in, out, requests atomic.Int64

	mu       sync.Mutex
	sessions map[string]*session // by session id
	next     uint32              // the next exit's offset in Exits
	refused  int64
}

type session struct {
	exit    netip.Addr
	expires time.Time
}

// ErrUsername is wrapped by ParseUsername's errors.
var ErrUsername = errors.New("vendor username")

// Start listens on 127.0.0.1 and serves until Close.
func Start(cfg Config) (*Vendor, error) {
	if !cfg.Exits.IsValid() {
		cfg.Exits = netip.MustParsePrefix("127.0.200.0/24")
	}
	if !cfg.Exits.Addr().Is4() || !cfg.Exits.Addr().IsLoopback() || cfg.Exits.Bits() > 30 {
		return nil, fmt.Errorf("vendortest: exits %s: want a loopback IPv4 range of at least 4 addresses", cfg.Exits)
	}
	if cfg.Lifetime <= 0 {
		cfg.Lifetime = 10 * time.Minute
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	v := &Vendor{cfg: cfg, ln: ln, done: make(chan struct{}), sessions: map[string]*session{}}
	v.srv = &http.Server{Handler: v, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 30 * time.Second}
	go func() { defer close(v.done); _ = v.srv.Serve(ln) }()
	return v, nil
}

// Addr is the stand-in's host:port.
func (v *Vendor) Addr() string { return v.ln.Addr().String() }

// Close stops the stand-in.
func (v *Vendor) Close() {
	_ = v.srv.Close()
	<-v.done
}

// Usage is what the stand-in carried so far.
func (v *Vendor) Usage() Usage {
	return Usage{BytesIn: v.in.Load(), BytesOut: v.out.Load(), Requests: v.requests.Load()}
}

// Refused counts the requests refused for their credential or username.
func (v *Vendor) Refused() int64 {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.refused
}

// Sessions is how many sessions the stand-in has handed an exit.
func (v *Vendor) Sessions() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.sessions)
}

// ParseUsername reads a username in either vendor's form and returns the account it names
// (customer, zone) and what it targets.
func ParseUsername(u string) (customer, zone string, t Target, err error) {
	parts := strings.Split(u, "-")
	var pairs []string
	switch {
	case len(parts) >= 2 && parts[0] == "customer":
		t.Format, customer, pairs = Oxylabs, parts[1], parts[2:]
	case len(parts) >= 5 && parts[0] == "brd" && parts[1] == "customer" && parts[3] == "zone":
		t.Format, customer, zone, pairs = BrightData, parts[2], parts[4], parts[5:]
	default:
		return "", "", Target{}, fmt.Errorf("%w %q: want customer-USER-... or brd-customer-ID-zone-ZONE-...", ErrUsername, u)
	}
	if len(pairs)%2 != 0 {
		return "", "", Target{}, fmt.Errorf("%w %q: a key without a value", ErrUsername, u)
	}
	for i := 0; i < len(pairs); i += 2 {
		k, val := pairs[i], pairs[i+1]
		if val == "" {
			return "", "", Target{}, fmt.Errorf("%w: %s has an empty value", ErrUsername, k)
		}
		switch {
		case k == "cc" && t.Format == Oxylabs, k == "country" && t.Format == BrightData:
			t.Country = strings.ToUpper(val)
		case k == "city":
			t.City = val
		case k == "asn":
			t.ASN = val
		case k == "sessid" && t.Format == Oxylabs, k == "session" && t.Format == BrightData:
			t.Session = val
		case k == "sesstime" && t.Format == Oxylabs:
			m, err := strconv.Atoi(val)
			if err != nil || m < 1 || m > 1440 {
				return "", "", Target{}, fmt.Errorf("%w: sesstime %q: want 1 to 1440 minutes", ErrUsername, val)
			}
			t.Lifetime = time.Duration(m) * time.Minute
		default:
			return "", "", Target{}, fmt.Errorf("%w: unknown key %q for %s", ErrUsername, k, t.Format)
		}
	}
	return customer, zone, t, nil
}

// login checks the Proxy-Authorization of r against the account.
func (v *Vendor) login(r *http.Request) (Target, bool) {
	asAuth := http.Request{Header: http.Header{"Authorization": r.Header.Values("Proxy-Authorization")}}
	user, pass, ok := asAuth.BasicAuth()
	if !ok {
		return Target{}, false
	}
	customer, zone, t, err := ParseUsername(user)
	if err != nil || customer != v.cfg.Customer || (t.Format == BrightData && zone != v.cfg.Zone) ||
		subtle.ConstantTimeCompare([]byte(pass), []byte(v.cfg.Password)) != 1 {
		return Target{}, false
	}
	return t, true
}

// exit is the address a request of t leaves from: the session's while it lives, else a new
// one (every request without a session gets the next address, as a rotating vendor does).
func (v *Vendor) exit(t Target) netip.Addr {
	v.mu.Lock()
	defer v.mu.Unlock()
	now := v.cfg.Now()
	if t.Session != "" {
		if s := v.sessions[t.Session]; s != nil && now.Before(s.expires) {
			return s.exit
		}
	}
	size := uint32(1) << (32 - v.cfg.Exits.Bits())
	base := v.cfg.Exits.Masked().Addr().As4()
	off := 1 + v.next%(size-2) // neither the network nor the broadcast address
	v.next++
	n := uint32(base[0])<<24 | uint32(base[1])<<16 | uint32(base[2])<<8 | uint32(base[3]) + off
	a := netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)})
	if t.Session != "" {
		life := t.Lifetime
		if life <= 0 {
			life = v.cfg.Lifetime
		}
		v.sessions[t.Session] = &session{exit: a, expires: now.Add(life)}
	}
	return a
}

// ServeHTTP relays one request or tunnel.
func (v *Vendor) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	t, ok := v.login(r)
	if !ok {
		v.mu.Lock()
		v.refused++
		v.mu.Unlock()
		w.Header().Set("Proxy-Authenticate", `Basic realm="vendortest"`)
		http.Error(w, "vendortest: bad credentials", http.StatusProxyAuthRequired)
		return
	}
	exit := v.exit(t)
	dialer := &net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: exit.AsSlice()}}
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		ap, err := netip.ParseAddrPort(addr)
		if err != nil || !ap.Addr().IsLoopback() {
			return nil, fmt.Errorf("vendortest: %s: relays to loopback addresses only", addr)
		}
		return dialer.DialContext(ctx, network, addr)
	}
	v.requests.Add(1)
	if r.Method == http.MethodConnect {
		v.tunnel(w, r, dial, exit)
		return
	}
	if !r.URL.IsAbs() {
		http.Error(w, "vendortest: absolute URI required", http.StatusBadRequest)
		return
	}
	out := r.Clone(r.Context())
	out.RequestURI = ""
	out.Header.Del("Proxy-Authorization")
	out.Header.Del("Proxy-Connection")
	if r.Body != nil {
		out.Body = countingReader{r.Body, &v.out}
	}
	tr := &http.Transport{DialContext: dial, DisableKeepAlives: true, DisableCompression: true}
	defer tr.CloseIdleConnections()
	resp, err := tr.RoundTrip(out)
	if err != nil {
		http.Error(w, "vendortest: "+err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for k, vs := range resp.Header {
		w.Header()[k] = vs
	}
	w.Header().Set(HeaderExit, exit.String())
	w.WriteHeader(resp.StatusCode)
	n, _ := io.Copy(w, resp.Body)
	v.in.Add(n)
}

func (v *Vendor) tunnel(w http.ResponseWriter, r *http.Request, dial func(context.Context, string, string) (net.Conn, error), exit netip.Addr) {
	up, err := dial(r.Context(), "tcp", r.Host)
	if err != nil {
		http.Error(w, "vendortest: "+err.Error(), http.StatusBadGateway)
		return
	}
	defer up.Close()
	w.Header().Set(HeaderExit, exit.String())
	w.WriteHeader(http.StatusOK)
	c, buf, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	defer c.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		n, _ := io.Copy(up, buf)
		v.out.Add(n)
		if tc, ok := up.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
	}()
	n, _ := io.Copy(c, up)
	v.in.Add(n)
	_ = c.Close()
	<-done
}

type countingReader struct {
	io.ReadCloser
	n *atomic.Int64
}

func (c countingReader) Read(p []byte) (int, error) {
	n, err := c.ReadCloser.Read(p)
	c.n.Add(int64(n))
	return n, err
}
