package gateway

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"time"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
	"github.com/proxy-operator/proxy-operator/lease"
)

// hold is a lease in use by one request or tunnel, or shared by the concurrent requests of
// one sticky session to one target. It is renewed at half its TTL while in use and released
// when its last user is done: between uses a session is held by the store's session binding,
// which every gateway replica sees, not by a lease one replica keeps.
type hold struct {
	l        lease.Lease
	upstream *url.URL // with the upstream's credential: never logged (log l.Proxy.Key)
	pool     string

	slot    *slot       // nil: not shared
	refs    int         // guarded by slot.mu
	bad     bool        // reported or lost: the session's next request leases anew (slot.mu)
	renewMu sync.Mutex  // guards renew and released
	renew   *time.Timer //
	gone    bool        // released
}

// slot serialises the leasing of one (session, target) so concurrent requests of a session do
// not each lease a different upstream.
type slot struct {
	key   string
	mu    sync.Mutex
	h     *hold
	users int // guarded by Gateway.mu
}

// take returns a hold for one try of p on target: the session's shared lease when it is live
// and not in own (the request's earlier tries), else a new lease.
func (g *Gateway) take(ctx context.Context, p pick, target string, own []*hold) (*hold, error) {
	req := g.request(p, target)
	if req.SessionKey == "" {
		req.Avoid = g.recentFor(target)
		l, err := g.acquire(ctx, req, len(own))
		if err != nil {
			return nil, err
		}
		g.noteUse(target, l.Proxy.Key, req.Avoid)
		return g.newHold(l, nil), nil
	}
	key := req.SessionKey + "|" + target
	g.mu.Lock()
	s := g.slots[key]
	if s == nil {
		s = &slot{key: key}
		g.slots[key] = s
	}
	s.users++
	g.mu.Unlock()

	s.mu.Lock()
	defer s.mu.Unlock()
	if h := s.h; h != nil && !h.bad && !slices.Contains(own, h) {
		h.refs++
		return h, nil
	}
	l, err := g.acquire(ctx, req, len(own))
	if err != nil {
		g.leaveSlot(s)
		return nil, err
	}
	h := g.newHold(l, s)
	s.h = h // an older hold keeps its users and ends with them
	return h, nil
}

func (g *Gateway) newHold(l lease.Lease, s *slot) *hold {
	p := l.Proxy
	h := &hold{l: l, slot: s, refs: 1, pool: p.Attributes[v1.PoolAttribute],
		upstream: p.Credentials.ProxyURL(net.JoinHostPort(p.IP, strconv.Itoa(int(p.Port))))}
	h.renew = time.AfterFunc(g.LeaseTTL/2, func() { g.renewHold(h) })
	return h
}

// renewHold keeps a lease in long use alive; a lease the store no longer knows is marked bad
// so a session's next request leases anew.
func (g *Gateway) renewHold(h *hold) {
	h.renewMu.Lock()
	defer h.renewMu.Unlock()
	if h.gone {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := g.Leases.Renew(ctx, h.l.ID, g.LeaseTTL); errors.Is(err, lease.ErrNotFound) {
		g.markBad(h)
		return
	} else if err != nil {
		g.Log.Warn("gateway lease renew failed", "proxy", h.l.Proxy.Key, "err", err)
	}
	h.renew.Reset(g.LeaseTTL / 2)
}

func (g *Gateway) markBad(h *hold) {
	if h.slot == nil {
		return
	}
	h.slot.mu.Lock()
	h.bad = true
	h.slot.mu.Unlock()
}

// done ends one use of h; the last use releases the lease.
func (g *Gateway) done(h *hold) {
	last := true
	if s := h.slot; s != nil {
		s.mu.Lock()
		h.refs--
		last = h.refs == 0
		if last && s.h == h {
			s.h = nil
		}
		s.mu.Unlock()
		g.leaveSlot(s)
	}
	if !last {
		return
	}
	h.renewMu.Lock()
	h.gone = true
	h.renew.Stop()
	h.renewMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := g.Leases.Release(ctx, h.l.ID); err != nil {
		// The lease runs out by its TTL: a short one for exactly this case.
		g.Log.Warn("gateway lease release failed", "proxy", h.l.Proxy.Key, "err", err)
	}
	g.mu.Lock()
	close(g.freed)
	g.freed = make(chan struct{})
	g.mu.Unlock()
}

func (g *Gateway) leaveSlot(s *slot) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if s.users--; s.users == 0 && g.slots[s.key] == s {
		delete(g.slots, s.key)
	}
}

// report tells the store what a rule saw through h for target, as a crawler's report would.
func (g *Gateway) report(ctx context.Context, h *hold, target string, r *Rule, hdr http.Header) {
	g.markBad(h)
	rep := lease.Report{Result: r.Result, Target: target}
	if r.Result == lease.ResultRateLimited {
		rep.RetryAfter = retryAfter(hdr, g.Now(), g.MaxRetryAfter)
	}
	g.m.bans.WithLabelValues(r.Name, string(r.Result)).Inc()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	c, err := g.Leases.Report(ctx, h.l.ID, rep)
	if err != nil {
		g.Log.Warn("gateway ban report not recorded", "proxy", h.l.Proxy.Key, "target", target, "rule", r.Name, "err", err)
		return
	}
	g.Log.Info("gateway ban detected", "proxy", h.l.Proxy.Key, "target", target, "rule", r.Name, "result", r.Result,
		"cooldown_until", c.Until, "strikes", c.Strikes)
}

// Rotation: requests without a session avoid the upstreams used last for their target, so
// consecutive requests to a site leave through different addresses even when one upstream
// would always be the least loaded.
const (
	rotationMemory  = 16    // upstreams remembered per target
	rotationTargets = 10000 // targets remembered; beyond, the memory starts afresh
)

func (g *Gateway) recentFor(target string) []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.recent[target])
}

// noteUse records that key served target. When key was itself avoided (every other upstream
// was, or none fitted), the round is over and the memory restarts from key.
func (g *Gateway) noteUse(target, key string, avoided []string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	r := g.recent[target]
	if slices.Contains(avoided, key) {
		r = r[:0]
	}
	if len(g.recent) >= rotationTargets && g.recent[target] == nil {
		clear(g.recent)
	}
	r = append(r, key)
	if len(r) > rotationMemory {
		r = slices.Delete(r, 0, len(r)-rotationMemory)
	}
	g.recent[target] = r
}
