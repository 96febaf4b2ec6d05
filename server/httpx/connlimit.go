package httpx

import (
	"context"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
)

// ConnLimit bounds the open connections of one http.Server (set its ConnState to
// ConnLimit.ConnState and its ConnContext to ConnLimit.ConnContext). At the limit a new
// connection first takes the place of one whose last answer is written (CloseAfterAnswer),
// then of an idle keep-alive one, which is closed; when none is either the new connection is
// closed at once. Blocking Accept instead (netutil.LimitListener) would let idle connections
// opened by anyone who reaches the port starve the legitimate caller; closing idle ones costs
// a keep-alive client only a reconnect. Issue 21: 15,000 idle connections held 336 MiB for
// two minutes. Issue 30: a connection refused with Connection: close while its body still
// arrives stays active for net/http's half-second linger after the answer; 32 trickling
// callers re-dialling at once kept the limit full of those, and every new connection,
// the legitimate caller's included, was closed unanswered.
type ConnLimit struct {
	Max int

	mu      sync.Mutex
	conns   map[net.Conn]http.ConnState
	evicted atomic.Int64
	refused atomic.Int64
}

// stateClosing marks a connection whose last answer is written: it is only lingering.
const stateClosing http.ConnState = -1

// NewConnLimit returns a limit of n connections (n < 1: 1).
func NewConnLimit(n int) *ConnLimit {
	return &ConnLimit{Max: max(n, 1), conns: map[net.Conn]http.ConnState{}}
}

type connLimitKey struct{}

type limitedConn struct {
	l *ConnLimit
	c net.Conn
}

// ConnContext is the http.Server hook that lets CloseAfterAnswer find the request's connection.
func (l *ConnLimit) ConnContext(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connLimitKey{}, limitedConn{l, c})
}

// CloseAfterAnswer makes the answer to r the connection's last (Connection: close), so the
// server does not first read what is left of a body the caller may be trickling, and lets the
// connection's ConnLimit evict it first from now on: its answer is written, net/http only
// lingers before closing it.
func CloseAfterAnswer(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Connection", "close")
	lc, ok := r.Context().Value(connLimitKey{}).(limitedConn)
	if !ok {
		return
	}
	lc.l.mu.Lock()
	defer lc.l.mu.Unlock()
	if _, ok := lc.l.conns[lc.c]; ok {
		lc.l.conns[lc.c] = stateClosing
	}
}

// ConnState is the http.Server hook.
func (l *ConnLimit) ConnState(c net.Conn, s http.ConnState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch s {
	case http.StateNew:
		if len(l.conns) >= l.Max {
			victim := l.victimLocked()
			if victim == nil {
				l.refused.Add(1)
				_ = c.Close()
				return
			}
			delete(l.conns, victim)
			l.evicted.Add(1)
			_ = victim.Close()
		}
		l.conns[c] = s
	case http.StateActive, http.StateIdle:
		if _, ok := l.conns[c]; ok {
			l.conns[c] = s
		}
	case http.StateHijacked, http.StateClosed:
		delete(l.conns, c)
	}
}

// victimLocked is a connection to evict: one closing, else one idle, else nil.
func (l *ConnLimit) victimLocked() net.Conn {
	var idle net.Conn
	for o, st := range l.conns {
		switch st {
		case stateClosing:
			return o
		case http.StateIdle:
			idle = o
		}
	}
	return idle
}

// Open is the number of connections counted now.
func (l *ConnLimit) Open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.conns)
}

// Idle is the number of counted connections idle between requests now.
func (l *ConnLimit) Idle() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, st := range l.conns {
		if st == http.StateIdle {
			n++
		}
	}
	return n
}

// Evicted counts closing or idle connections closed to make room; Refused counts new connections closed
// because every counted one was busy.
func (l *ConnLimit) Evicted() int64 { return l.evicted.Load() }

// Refused: see Evicted.
func (l *ConnLimit) Refused() int64 { return l.refused.Load() }
