package gateway

import (
	"bytes"
	"container/list"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/proxy-operator/proxy-operator/server/hooks/membudget"
	"github.com/proxy-operator/proxy-operator/server/httpx"
)

// The gateway's memory budget (decisions 0255, 0274): one membudget.Budget holds what client
// connections (with the head each may be reading) and retry buffers cost. A new connection
// that does not fit evicts, in order, a connection idle after a failed login (or being closed
// after a refusal), one idle without ever authenticating, one still before its first head
// past a short grace, an idle one, and last one within its grace. A token's requests in flight
// (their connections and retry buffers) take at most a fair share of the budget, so one token
// cannot fill it; a retry buffer takes only free budget within that share, evicting nothing:
// else the body streams once, not retried.
const (
	// DefaultMemoryFraction of the process's memory limit is the gateway's budget.
	DefaultMemoryFraction = 0.25
	// DefaultFailedLoginIdle closes a connection idle after a failed login (407): a client that
	// answers the challenge does so at once.
	DefaultFailedLoginIdle = 5 * time.Second
	// connOverhead is what a connection costs beyond its head: the goroutine's stack, the
	// bufio reader and writer, the conn and request structs (issue 30: 15,000 idle
	// connections held 489 MiB, about 33 KiB each).
	connOverhead = 32 << 10
	// fdReserve is the least of the descriptor limit kept for the other listeners (hooks,
	// discovery, metrics), the lease store, the log and the upstreams of tunnels.
	fdReserve = 256
	// newGrace is how long a new connection is evicted only after every idle one: room for a
	// client to send its head and have it read on a busy machine (issue 30: a crawler's fresh
	// connection was evicted by the next newcomer before its head was read).
	newGrace = time.Second
)

// Eviction classes; victimLocked takes them in evictionOrder.
const (
	classFailed = iota // idle after a failed login, or closing after a refusal
	classUnauth        // idle, never authenticated
	classNew           // new: its first head not read yet
	classIdle          // idle between requests
	numClasses
	classBusy = -1 // serving a request, hijacked (a tunnel) or closed: never evicted
)

// evictionOrder: classNew twice, first only its connections past newGrace.
var evictionOrder = [...]int{classFailed, classUnauth, classNew, classIdle, classNew}

// BudgetFor is the gateway's budget for a process memory limit: DefaultMemoryFraction of it.
func BudgetFor(limit int64) *membudget.Budget {
	return membudget.New(int64(float64(limit)*DefaultMemoryFraction), 1)
}

// connCost is what one client connection is charged: its overhead and a head of
// MaxHeaderBytes, counted twice (the bytes as read and the parsed header).
func (g *Gateway) connCost() int64 { return 2*int64(g.MaxHeaderBytes) + connOverhead }

// fdConnCap is the most client connections the descriptor limit allows: each may need an
// upstream descriptor too, and a quarter of the limit (at least fdReserve) is kept for the
// rest of the process. 0: the limit is unknown.
func fdConnCap() int {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil || rl.Cur == 0 || rl.Cur > 1<<30 {
		return 0
	}
	return connCapFor(int(rl.Cur))
}

// connCapFor is fdConnCap for a descriptor limit of n.
func connCapFor(n int) int {
	return max(16, (n-max(n/4, fdReserve))/2)
}

// conns is the table of client connections by eviction class, and of the budget each token's
// requests in flight hold.
type conns struct {
	g       *Gateway
	budget  *membudget.Budget
	now     func() time.Time
	mu      sync.Mutex
	open    int
	classes [numClasses]list.List
	byToken map[string]int64
	grace   time.Duration // newGrace; tests set it longer
}

// connKey carries a request's *limitConn in its context (Server's ConnContext).
type connKey struct{}

func (t *conns) placeLocked(c *limitConn, class int) {
	if c.elem != nil {
		t.classes[c.class].Remove(c.elem)
		c.elem = nil
	}
	c.class = class
	c.since = t.now()
	if class != classBusy && !c.closed {
		c.elem = t.classes[class].PushBack(c)
	}
}

// place files c under class (a SOCKS5 connection's, which has no http.ConnState).
func (t *conns) place(c *limitConn, class int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.placeLocked(c, class)
}

// victimLocked takes the connection to evict out of its class: the oldest of the first
// non-empty class in evictionOrder.
func (t *conns) victimLocked() *limitConn {
	now := t.now()
	for i, class := range evictionOrder {
		e := t.classes[class].Front()
		if e == nil {
			continue
		}
		c := e.Value.(*limitConn)
		if class == classNew && i < len(evictionOrder)-1 && now.Sub(c.since) < t.grace {
			continue // the oldest new one is within its grace, so all are
		}
		t.placeLocked(c, classBusy)
		return c
	}
	return nil
}

// reserveConn takes a connection's cost of the budget, evicting connections while it does not
// fit or the count is at MaxConns; false when nothing is left to evict.
func (t *conns) reserveConn(w int64) (*membudget.Reservation, bool) {
	for {
		t.mu.Lock()
		if t.open < t.g.MaxConns {
			if res, err := t.budget.Reserve(w); err == nil {
				t.open++
				t.mu.Unlock()
				return res, true
			} else if errors.Is(err, membudget.ErrTooLarge) {
				t.mu.Unlock()
				return nil, false
			}
		}
		v := t.victimLocked()
		t.mu.Unlock()
		if v == nil {
			return nil, false
		}
		t.g.m.connsEvicted.Inc()
		_ = v.Close() // releases its share before the next round
	}
}

// shareLocked is the most of the budget one token's requests in flight may hold: an equal
// part for each token with requests in flight (name counted) and one more part, so there is
// always room for connections still unauthenticated and for a token not yet seen.
func (t *conns) shareLocked(name string) int64 {
	n := len(t.byToken)
	if _, ok := t.byToken[name]; !ok {
		n++
	}
	return t.budget.Size() / int64(n+1)
}

// charge counts w against token name's share (the budget itself is held elsewhere: by the
// connection, or by reserveFree); false, and nothing counted, past the share.
func (t *conns) charge(name string, w int64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.byToken[name]+w > t.shareLocked(name) {
		return false
	}
	t.byToken[name] += w
	return true
}

// uncharge gives back what charge counted.
func (t *conns) uncharge(name string, w int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.byToken[name] -= w; t.byToken[name] <= 0 {
		delete(t.byToken, name)
	}
}

// reserveFree takes w of the budget for token name if it is free now and within the token's
// share, evicting nothing (a retry buffer must not cost anyone a connection).
func (t *conns) reserveFree(name string, w int64) (*membudget.Reservation, bool) {
	if !t.charge(name, w) {
		return nil, false
	}
	res, err := t.budget.Reserve(w)
	if err != nil {
		t.uncharge(name, w)
		return nil, false
	}
	return res, true
}

// connState is the server's ConnState hook: it files each connection under its class.
func (t *conns) connState(nc net.Conn, s http.ConnState) {
	c, ok := nc.(*limitConn)
	if !ok {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if c.timer != nil {
		c.timer.Stop()
		c.timer = nil
	}
	switch s {
	case http.StateNew:
		t.placeLocked(c, classNew)
	case http.StateIdle:
		switch {
		case c.failed:
			t.placeLocked(c, classFailed)
			c.timer = time.AfterFunc(t.g.FailedLoginIdle, func() {
				t.mu.Lock()
				idle := c.class == classFailed
				t.mu.Unlock()
				if idle {
					_ = c.Close()
				}
			})
		case !c.authed:
			t.placeLocked(c, classUnauth)
		default:
			t.placeLocked(c, classIdle)
		}
	default:
		t.placeLocked(c, classBusy)
	}
}

// noteLogin records how a request on r's connection ended its login: failed (a 407 or the
// throttle's 429) or authenticated; a request that never reached the login (/healthz) leaves
// the connection as it was.
func (t *conns) noteLogin(r *http.Request, failed, authed bool) {
	c, _ := r.Context().Value(connKey{}).(*limitConn)
	if c == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	c.failed = failed
	c.authed = c.authed || authed
}

// closing files r's connection first for eviction: the gateway refused its request without
// reading the body and closes it after the answer (net/http lingers half a second first,
// holding the connection's share).
func (t *conns) closing(r *http.Request) {
	c, _ := r.Context().Value(connKey{}).(*limitConn)
	if c == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.placeLocked(c, classFailed)
}

// Listener bounds ln to the connections the memory budget and MaxConns allow: beyond, idle
// and unauthenticated connections are evicted first; when none is left a new connection is
// answered 503 at once and closed, so a flood costs a few bytes each instead of a goroutine
// and buffers.
func (g *Gateway) Listener(ln net.Listener) net.Listener {
	g.once.Do(g.init)
	return &limitListener{Listener: ln, g: g, overload: overloaded}
}

type limitListener struct {
	net.Listener
	g *Gateway
	// overload is written to a connection refused at the bound before it is closed ("": none).
	overload string
	// port, when set, is the token's own listener this is (PortListener).
	port *tokenPort
}

const overloadedBody = "gateway at its connection limit; retry after the Retry-After seconds\n"

var overloaded = "HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Type: text/plain\r\nConnection: close\r\n" +
	"Content-Length: " + strconv.Itoa(len(overloadedBody)) + "\r\n\r\n" + overloadedBody

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		t := l.g.conns
		if res, ok := t.reserveConn(l.g.connCost()); ok {
			l.g.m.conns.Inc()
			lc := &limitConn{Conn: c, class: classBusy, port: l.port}
			lc.release = func() {
				t.mu.Lock()
				t.placeLocked(lc, classBusy)
				lc.closed = true
				if lc.timer != nil {
					lc.timer.Stop()
				}
				t.open--
				t.mu.Unlock()
				res.Release()
				l.g.m.conns.Dec()
			}
			return lc, nil
		}
		l.g.m.connsRefused.Inc()
		if l.overload != "" {
			_ = c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
			_, _ = io.WriteString(c, l.overload)
		}
		_ = c.Close()
	}
}

type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
	port    *tokenPort

	// Guarded by conns.mu.
	elem           *list.Element
	class          int
	since          time.Time // placed in its class
	authed, failed bool
	closed         bool
	timer          *time.Timer
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// CloseWrite half-closes a TCP connection (a tunnel's client side after the upstream's EOF).
func (c *limitConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Conn.Close()
}

// retryBody gives each try of a request its body. Nothing is read before the first try (so
// before the first lease): then a body of an idempotent method, at most MaxRetryBody, is read
// and kept for the retries if the budget has it free now within the token's share; any other
// streams once and the request is not retried.
type retryBody struct {
	g     *Gateway
	r     *http.Request
	token string
	src   io.Reader
	kept  []byte
	res   *membudget.Reservation
	tries int
	keep  bool
}

func (g *Gateway) newRetryBody(r *http.Request, token string, rc *http.ResponseController, touch func()) *retryBody {
	b := &retryBody{g: g, r: r, token: token, keep: idempotent(r.Method)}
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
		return b
	}
	b.src = &idleReader{r: r.Body, rc: rc, idle: g.IdleTimeout, touch: touch}
	b.keep = b.keep && r.ContentLength <= g.MaxRetryBody
	return b
}

// next is the body of the next try; an error is the client's (its body could not be read).
func (b *retryBody) next() (io.ReadCloser, error) {
	b.tries++
	switch {
	case b.src == nil:
		return http.NoBody, nil
	case b.tries > 1:
		return io.NopCloser(bytes.NewReader(b.kept)), nil
	case !b.keep:
		return io.NopCloser(b.src), nil
	}
	w := b.r.ContentLength
	if w < 0 {
		w = b.g.MaxRetryBody + 1 // chunked: at most that is read to be kept
	}
	res, ok := b.g.conns.reserveFree(b.token, w)
	if !ok {
		b.keep = false
		b.g.m.retryBodies.WithLabelValues("streamed").Inc()
		return io.NopCloser(b.src), nil
	}
	b.res = res
	kept, err := io.ReadAll(io.LimitReader(b.src, b.g.MaxRetryBody+1))
	if err != nil {
		return nil, httpx.Errorf(http.StatusBadRequest, "reading the request body failed")
	}
	if int64(len(kept)) > b.g.MaxRetryBody {
		// A chunked body past the limit: sent once, the part read first.
		b.keep = false
		b.g.m.retryBodies.WithLabelValues("too_long").Inc()
		return io.NopCloser(io.MultiReader(bytes.NewReader(kept), b.src)), nil
	}
	b.kept = kept
	b.g.m.retryBodies.WithLabelValues("kept").Inc()
	return io.NopCloser(bytes.NewReader(kept)), nil
}

// retryable says whether another try may be sent (the body is kept, or there is none).
func (b *retryBody) retryable() bool { return b.keep }

// release gives the kept body's share of the budget back.
func (b *retryBody) release() {
	if b.res != nil {
		b.g.conns.uncharge(b.token, b.res.Held())
		b.res.Release()
	}
}

// withConn is the server's ConnContext: a request finds its connection's entry.
func withConn(ctx context.Context, c net.Conn) context.Context {
	if lc, ok := c.(*limitConn); ok {
		return context.WithValue(ctx, connKey{}, lc)
	}
	return ctx
}
