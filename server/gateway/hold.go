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
	// sessionKey is the gateway session of a vendor hold ("" : none), whose vendor session
	// moves to another exit when this one is banned (vendor.go).
	sessionKey string

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

// take returns a hold for one try of p on target, and the try's booking in the site's pace:
// the session's shared lease when it is live and not in own (the request's earlier tries),
// else a new lease of an upstream whose pace for the site allows a send. It returns when that
// send may go.
//
// Tunnels are not paced (paced false): the gateway sees none of the answers inside them, so
// it could never learn their pace; each tunnel still takes its own upstream for the site.
func (g *Gateway) take(ctx context.Context, p pick, target string, own []*hold, paced bool) (*hold, paceTicket, error) {
	req := g.request(p, target)
	deadline := g.Now().Add(g.QueueWait)
	if req.SessionKey == "" && paced {
		return g.takePaced(ctx, req, target, len(own), deadline)
	}
	if req.SessionKey == "" {
		req.Avoid = g.recentFor(target)
		l, err := g.acquire(ctx, req, len(own))
		if err != nil {
			return nil, paceTicket{}, err
		}
		g.noteUse(target, l.Proxy.Key, req.Avoid)
		return g.newHold(l, nil), paceTicket{}, nil
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
	h := s.h
	if h != nil && !h.bad && !slices.Contains(own, h) {
		h.refs++
	} else {
		// A session bound already gets its upstream whatever Avoid says; a new one avoids the
		// upstreams the site saw last, so distinct sessions take distinct upstreams while
		// there are enough (decision 0269).
		req.Avoid = g.recentFor(target)
		l, err := g.acquire(ctx, req, len(own))
		if err != nil {
			s.mu.Unlock()
			g.leaveSlot(s)
			return nil, paceTicket{}, err
		}
		g.noteUse(target, l.Proxy.Key, req.Avoid)
		h = g.newHold(l, s)
		s.h = h // an older hold keeps its users and ends with them
	}
	s.mu.Unlock()
	if !paced {
		return h, paceTicket{}, nil
	}
	// A session keeps its upstream and waits for that upstream's pace.
	t, err := g.waitPace(ctx, target, h.l.Proxy.Key, deadline)
	if err != nil {
		g.done(h)
		return nil, paceTicket{}, err
	}
	return h, t, nil
}

// takePaced waits in target's queue for its turn, then leases an upstream whose pace allows a
// send now: the store chooses (least loaded, the rotation's recent upstreams avoided) among the
// upstreams the pacer does not rule out, so neither choice is made twice.
//
// The first try of a request also waits for a cooldown that ends before its deadline (a
// site's short Retry-After); a retry (own > 0) does not: the client then gets the site's own
// answer and Retry-After rather than a wait it was not told of.
func (g *Gateway) takePaced(ctx context.Context, req lease.Request, target string, own int, deadline time.Time) (*hold, paceTicket, error) {
	site, leave, err := g.pace.enter(ctx, target, deadline)
	if err != nil {
		return nil, paceTicket{}, g.paceError(err, site)
	}
	if leave != nil {
		defer leave()
	}
	recent := g.recentFor(target)
	for {
		now := g.Now()
		notReady, earliest := g.pace.notReady(site, now)
		req.Avoid = append(notReady, recent...)
		g.mu.Lock()
		freed := g.freed
		g.mu.Unlock()
		l, err := g.acquire(ctx, req, own)
		var nm *lease.NoMatchError
		switch {
		case err == nil:
			if ready := g.pace.ready(site, l.Proxy.Key); !ready.After(now) {
				g.noteUse(target, l.Proxy.Key, req.Avoid)
				h := g.newHold(l, nil)
				t, err := g.booked(ctx, g.pace.reserve(site, l.Proxy.Key), deadline)
				if err != nil {
					g.done(h)
					return nil, paceTicket{}, err
				}
				return h, t, nil
			}
			// Every upstream that fits is waiting for its pace: free this one and wake when
			// the first of them may send.
			g.releaseLease(l, false)
		case errors.As(err, &nm) && (nm.LeasedForTarget > own || nm.AtCapacity > 0):
			// Upstreams in use by other requests: the freed signal or a short poll (releases by
			// other replicas are not signalled) wakes this one.
			if poll := now.Add(100 * time.Millisecond); earliest.IsZero() || poll.Before(earliest) {
				earliest = poll
			}
		case errors.As(err, &nm) && own == 0 && !nm.FreeAt.IsZero() && nm.FreeAt.Before(deadline):
			// Cooling after a Retry-After: a wait, not a refusal.
			if earliest.IsZero() || nm.FreeAt.Before(earliest) {
				earliest = nm.FreeAt
			}
		default:
			return nil, paceTicket{}, err
		}
		if earliest.IsZero() || earliest.After(deadline) {
			earliest = deadline
		}
		if !g.Now().Before(deadline) {
			if err != nil {
				return nil, paceTicket{}, err // the store's reason, not the pace's
			}
			return nil, paceTicket{}, g.paceError(errPaceWait, site)
		}
		t := time.NewTimer(max(earliest.Sub(g.Now()), time.Millisecond))
		select {
		case <-t.C:
		case <-freed:
		case <-ctx.Done():
			t.Stop()
			return nil, paceTicket{}, ctx.Err()
		}
		t.Stop()
	}
}

// waitPace books the next send through key to target and waits until it may go.
func (g *Gateway) waitPace(ctx context.Context, target, key string, deadline time.Time) (paceTicket, error) {
	site, leave, err := g.pace.enter(ctx, target, deadline)
	if err != nil {
		return paceTicket{}, g.paceError(err, site)
	}
	if leave == nil {
		return g.booked(ctx, g.pace.reserve(site, key), deadline)
	}
	t := g.pace.reserve(site, key)
	leave()
	if t.at.After(deadline) {
		return paceTicket{}, g.paceError(errPaceWait, site)
	}
	if d := t.at.Sub(g.Now()); d > 0 {
		tm := time.NewTimer(d)
		defer tm.Stop()
		select {
		case <-tm.C:
		case <-ctx.Done():
			return paceTicket{}, ctx.Err()
		}
	}
	return g.booked(ctx, t, deadline)
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
	g.releaseLease(h.l, true)
}

// releaseLease gives l back to the store and, with wake, wakes the requests waiting for an
// upstream. A lease given back because its pace did not allow a send wakes nobody: two sites'
// waiters would otherwise wake each other without end.
func (g *Gateway) releaseLease(l lease.Lease, wake bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := g.Leases.Release(ctx, l.ID); err != nil {
		// The lease runs out by its TTL: a short one for exactly this case.
		g.Log.Warn("gateway lease release failed", "proxy", l.Proxy.Key, "err", err)
	}
	if !wake {
		return
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
	if h.l.Proxy.IsVendor() {
		// The site refused one of the vendor's exits, not the vendor: no cooldown for the
		// Proxy (it would stop every other session). A ban moves the session to another exit
		// (decision 0294); a rate limit keeps it (a request without a session has a fresh
		// exit at every try anyway).
		g.m.bans.WithLabelValues(r.Name, string(r.Result)).Inc()
		if r.Result == lease.ResultBanned {
			g.vendorBanned(h)
		}
		g.Log.Info("gateway vendor exit refused by site", "proxy", h.l.Proxy.Key, "target", target, "rule", r.Name, "result", r.Result)
		return
	}
	if r.Result == lease.ResultBanned {
		g.noteBan(target)
	}
	rep := lease.Report{Result: r.Result, Target: target}
	if r.Result == lease.ResultRateLimited {
		rep.RetryAfter = retryAfter(hdr, g.Now(), g.MaxRetryAfter)
	}
	g.m.bans.WithLabelValues(r.Name, string(r.Result)).Inc()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	c, err := g.Leases.Report(ctx, h.l.ID, rep)
	if err != nil {
		g.Log.Warn("gateway report not recorded", "proxy", h.l.Proxy.Key, "target", target, "rule", r.Name, "result", r.Result, "err", err)
		return
	}
	if g.Reports != nil {
		g.Reports.WithLabelValues(string(r.Result), "gateway").Inc()
	}
	if r.Result == lease.ResultRateLimited {
		// Slow down, not a ban (decision 0261): routine when a site's pace is being learned.
		g.Log.Info("gateway upstream rate limited by site", "proxy", h.l.Proxy.Key, "target", target, "rule", r.Name,
			"result", r.Result, "cooldown_until", c.Until, "strikes", c.Strikes)
		return
	}
	g.Log.Warn("gateway upstream banned by site", "proxy", h.l.Proxy.Key, "target", target, "rule", r.Name,
		"result", r.Result, "cooldown_until", c.Until, "strikes", c.Strikes)
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
