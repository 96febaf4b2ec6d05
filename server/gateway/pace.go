package gateway

import (
	"container/list"
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/proxy-operator/proxy-operator/server/discovery"
)

// Pacing (decision 0260): each site has a pace, requests per second through each upstream,
// learned from its answers. A request for a site waits in the site's bounded queue until an
// upstream's pace allows it; the lease store still chooses among the upstreams that are ready
// (its least-loaded order), the pacer only says which are not.
const (
	// DefaultPaceRate is the pace of a site nothing is known of yet: polite, and raised by
	// slow start within seconds when the site allows more.
	DefaultPaceRate = 1.0
	// MaxPaceRate is where a site counts as unpaced: its requests skip the queue.
	MaxPaceRate = 1000.0
	// DefaultQueueWait bounds how long a request waits for its site's pace (then 503).
	DefaultQueueWait = 15 * time.Second
	// DefaultMaxQueue bounds the requests waiting for one site's pace (beyond: 503 queue_full).
	DefaultMaxQueue = 256

	paceSlowStart = 1.25        // before the first 429: growth per success that tested the pace
	paceCut       = 0.8         // a 429: the pace becomes this share of the rate that failed
	paceHeadroom  = 0.95        // after a 429 the pace climbs back to this share of the rate that failed
	paceClimb     = 0.1         // share of the gap to the headroom closed per tested success
	paceProbe     = 0.001       // at the headroom, growth per tested success (a share of the ceiling)
	paceTested    = 1.25        // a success tests the pace when it came within this factor of its interval
	paceJitter    = 0.1         // a Retry-After floor is stretched by up to this share, so upstreams do not return at once
	maxPaceSites  = 10000       // sites remembered; the least recently used idle one is forgotten first
	maxPaceUps    = 4096        // upstreams remembered per site
	paceForget    = time.Minute // an upstream ready this long ago is forgotten for the site
)

// Errors of the pacer, matched by the gateway's refusals.
var (
	errQueueFull = errors.New("the site's queue is full")
	errPaceWait  = errors.New("no upstream's pace for the site allowed the request in time")
)

// pacer holds every site's pace and queue.
type pacer struct {
	now      func() time.Time
	rule     func(site string) (rate float64, ok bool)
	maxQueue int

	mu    sync.Mutex
	sites map[string]*sitePace
	lru   *list.List // *sitePace, most recently used first
}

// sitePace is one site's learned pace and the upstreams that served it.
type sitePace struct {
	name   string
	elem   *list.Element
	rate   float64 // requests/s per upstream
	ceil   float64 // the site's limit as last measured: the rate of the last 429, or the highest rate proven below it (0: none yet, slow start)
	proven float64 // the highest rate a tested success proved since the last cut
	limit  float64 // a rule's rate: never exceeded (0: none)
	// canary is, in slow start, the one upstream that sends at the raised pace; the others
	// keep to the rate last proven, so an overshoot costs one 429, not one per upstream
	// (decision 0290). Empty: none chosen yet, or slow start is over.
	canary  string
	lastCut time.Time
	lastUp  time.Time
	ups     map[string]*upPace
	waiting int           // requests in the queue, the one choosing included
	turn    chan struct{} // cap 1: whoever holds it chooses the site's next upstream
	// Counters for /v1/sites and logs.
	sent, limited uint64
	// traffic is the recent sends per namespace of the upstream (decayed with paceTraffic as
	// time constant), so /v1/sites ranks sites and shows a tenant only its own.
	traffic   map[string]float64
	trafficAt time.Time
}

// paceTraffic is the time constant of a site's recent traffic: a send counts 1, e-folded away
// over this time. Namespaces remembered per site are bounded by maxPaceTrafficNS.
const (
	paceTraffic      = 5 * time.Minute
	maxPaceTrafficNS = 64
)

// decayLocked brings s.traffic to now.
func (s *sitePace) decayLocked(now time.Time) {
	if dt := now.Sub(s.trafficAt); dt > 0 && !s.trafficAt.IsZero() {
		f := math.Exp(-dt.Seconds() / paceTraffic.Seconds())
		for ns, v := range s.traffic {
			if v *= f; v < 1e-3 {
				delete(s.traffic, ns)
			} else {
				s.traffic[ns] = v
			}
		}
	}
	s.trafficAt = now
}

// upPace is one upstream's last send to a site and the floor a Retry-After set.
type upPace struct {
	last  time.Time
	floor time.Time
}

// paceTicket is one send through an upstream to a site, kept to learn from its answer.
type paceTicket struct {
	site   *sitePace
	key    string
	at     time.Time
	tested bool    // the send came at about the pace: its answer says whether the pace is right
	rate   float64 // the pace the send was booked at
}

func newPacer(now func() time.Time, rule func(string) (float64, bool), maxQueue int) *pacer {
	return &pacer{now: now, rule: rule, maxQueue: maxQueue, sites: map[string]*sitePace{}, lru: list.New()}
}

// site returns the pace of name, creating it; the caller holds p.mu.
func (p *pacer) siteLocked(name string) *sitePace {
	if s := p.sites[name]; s != nil {
		p.lru.MoveToFront(s.elem)
		return s
	}
	if len(p.sites) >= maxPaceSites {
		// Forget the least recently used site nobody waits for; if every site has waiters the
		// table grows past the bound by at most the queued requests, which are bounded.
		for e := p.lru.Back(); e != nil; e = e.Prev() {
			if old := e.Value.(*sitePace); old.waiting == 0 {
				p.lru.Remove(e)
				delete(p.sites, old.name)
				break
			}
		}
	}
	s := &sitePace{name: name, rate: DefaultPaceRate, ups: map[string]*upPace{}, turn: make(chan struct{}, 1)}
	if r, ok := p.rule(name); ok {
		s.rate, s.limit = r, r
	}
	s.elem = p.lru.PushFront(s)
	p.sites[name] = s
	return s
}

// interval is the time between two sends through one upstream at the site's pace; the caller
// holds p.mu.
func (s *sitePace) interval() time.Duration { return every(s.rate) }

// every is the interval between two sends at rate.
func every(rate float64) time.Duration { return time.Duration(float64(time.Second) / rate) }

// slowStartLocked reports whether the pace is still climbing to the site's first 429 with no
// rule to bound it: then only the canary tries a rate not yet proven.
func (s *sitePace) slowStartLocked() bool { return s.ceil == 0 && s.limit == 0 }

// rateLocked is the pace of upstream key for s: the site's, but in slow start for any
// upstream but the canary, the rate last proven (at least the polite DefaultPaceRate).
func (s *sitePace) rateLocked(key string) float64 {
	if !s.slowStartLocked() || key == s.canary {
		return s.rate
	}
	return min(s.rate, max(s.proven, DefaultPaceRate))
}

// readyLocked is when upstream key may next send to s (zero: now, never used).
func (s *sitePace) readyLocked(key string) time.Time {
	u := s.ups[key]
	if u == nil {
		return time.Time{}
	}
	t := u.last.Add(every(s.rateLocked(key)))
	if u.floor.After(t) {
		t = u.floor
	}
	return t
}

// unpaced reports whether the site's requests skip the queue: it allows more than the pacer
// measures and no rule bounds it.
func (s *sitePace) unpacedLocked() bool { return s.rate >= MaxPaceRate && s.limit == 0 }

// enter queues a request for site until it may choose an upstream or until deadline. The
// returned function leaves the queue; it is nil (and nothing to leave) for an unpaced site.
func (p *pacer) enter(ctx context.Context, name string, deadline time.Time) (*sitePace, func(), error) {
	p.mu.Lock()
	s := p.siteLocked(name)
	if s.unpacedLocked() {
		p.mu.Unlock()
		return s, nil, nil
	}
	if s.waiting >= p.maxQueue {
		p.mu.Unlock()
		return s, nil, errQueueFull
	}
	s.waiting++
	p.mu.Unlock()
	leave := func() {
		p.mu.Lock()
		s.waiting--
		p.mu.Unlock()
	}
	t := time.NewTimer(deadline.Sub(p.now()))
	defer t.Stop()
	select {
	case s.turn <- struct{}{}:
		return s, func() { <-s.turn; leave() }, nil
	case <-ctx.Done():
		leave()
		return s, nil, ctx.Err()
	case <-t.C:
		leave()
		return s, nil, errPaceWait
	}
}

// notReady are the upstreams whose pace does not allow a send to s now, and the earliest
// time one of them does.
func (p *pacer) notReady(s *sitePace, now time.Time) ([]string, time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var keys []string
	var earliest time.Time
	for k := range s.ups {
		t := s.readyLocked(k)
		if now.Sub(t) > paceForget {
			// Ready long ago: its last send no longer tests the pace. Forgetting it keeps
			// the table at the upstreams in recent use.
			delete(s.ups, k)
			continue
		}
		if t.After(now) {
			keys = append(keys, k)
			if earliest.IsZero() || t.Before(earliest) {
				earliest = t
			}
		}
	}
	return keys, earliest
}

// ready is when upstream key may next send to s.
func (p *pacer) ready(s *sitePace, key string) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return s.readyLocked(key)
}

// reserve books the next send through key to s, at its ready time or now, whichever is later,
// and returns the ticket; the caller waits until ticket.at.
func (p *pacer) reserve(s *sitePace, key string) paceTicket {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	at := now
	if t := s.readyLocked(key); t.After(now) {
		at = t
	}
	u := s.ups[key]
	tested := false
	if u == nil {
		if len(s.ups) >= maxPaceUps {
			for k := range s.ups {
				if !s.readyLocked(k).After(now) {
					delete(s.ups, k)
					break
				}
			}
		}
		u = &upPace{}
		s.ups[key] = u
	} else {
		tested = at.Sub(u.last) <= time.Duration(paceTested*float64(every(s.rateLocked(key))))
	}
	if s.slowStartLocked() && (s.canary == "" || s.ups[s.canary] == nil) {
		s.canary = key // the first upstream to send, or the next once the canary is forgotten
	}
	u.last = at
	s.sent++
	s.decayLocked(now)
	ns, _, _ := strings.Cut(key, "/")
	if s.traffic == nil {
		s.traffic = map[string]float64{}
	}
	if _, ok := s.traffic[ns]; ok || len(s.traffic) < maxPaceTrafficNS {
		s.traffic[ns]++
	}
	return paceTicket{site: s, key: key, at: at, tested: tested, rate: s.rateLocked(key)}
}

// interval is the pace t was booked at, as the interval between two sends.
func (t paceTicket) interval() time.Duration { return every(t.rate) }

// ok learns from a success: a send that tested the pace raises it.
func (p *pacer) ok(t paceTicket) {
	if t.site == nil || !t.tested {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	s, now := t.site, p.now()
	if t.at.After(s.lastCut) {
		s.proven = max(s.proven, t.rate)
	}
	if s.slowStartLocked() && t.key != s.canary {
		return // it proved the rate the canary had proven already: only the canary's raise it
	}
	if now.Sub(s.lastUp) < s.interval() {
		// One raise per interval, however many upstreams answered in it: the pace is per
		// upstream, and sixteen upstreams' successes are one round, not sixteen.
		return
	}
	s.lastUp = now
	switch {
	case s.ceil == 0:
		s.rate *= paceSlowStart
	case s.rate < paceHeadroom*s.ceil:
		s.rate += paceClimb * (paceHeadroom*s.ceil - s.rate)
	default:
		s.rate += paceProbe * s.ceil
	}
	if s.limit > 0 {
		s.rate = min(s.rate, s.limit)
	}
	s.rate = min(s.rate, MaxPaceRate)
}

// limited learns from a 429 through t's upstream: that upstream waits at least retryAfter
// (stretched by a random share up to paceJitter), and the site's pace is cut, once per
// interval however many concurrent sends come back limited.
func (p *pacer) limited(t paceTicket, retryAfter time.Duration) {
	if t.site == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	s, now := t.site, p.now()
	s.limited++
	if u := s.ups[t.key]; u != nil && retryAfter > 0 {
		floor := now.Add(retryAfter + time.Duration(rand.Float64()*paceJitter*float64(retryAfter)))
		if floor.After(u.floor) {
			u.floor = floor
		}
	}
	if !t.at.After(s.lastCut) {
		return // sent at the pace before the last cut: that cut already answered it
	}
	// The site refused this rate. When a lower rate was proven since the last cut (slow start
	// went from 1.0, proven, to 1.25, refused), the limit lies between them: aim under the
	// proven one rather than under the refused one, which would come back to a 429.
	s.ceil = s.rate
	if s.proven > 0 && s.proven < s.ceil {
		s.ceil = s.proven
	}
	s.rate = max(min(s.rate*paceCut, paceHeadroom*s.ceil), 1e-3)
	s.proven = 0
	s.lastCut = now
	s.canary = ""
}

// floorOf is the shortest interval the last 429 allows s (the pace never climbs past
// paceHeadroom of the rate that failed); zero before any 429.
func (p *pacer) floorOf(s *sitePace) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if s.ceil <= 0 {
		return 0
	}
	return time.Duration(float64(time.Second) / (paceHeadroom * s.ceil))
}

var _ discovery.SitesView = (*Gateway)(nil)

// Sites implements discovery.SitesView: every site the pacer remembers (at most 10,000), with
// its pace and its recent traffic per namespace.
func (g *Gateway) Sites() []discovery.SitePace {
	g.once.Do(g.init)
	p := g.pace
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	out := make([]discovery.SitePace, 0, len(p.sites))
	for e := p.lru.Front(); e != nil; e = e.Next() {
		s := e.Value.(*sitePace)
		s.decayLocked(now)
		tr := make(map[string]float64, len(s.traffic))
		for ns, v := range s.traffic {
			tr[ns] = v
		}
		out = append(out, discovery.SitePace{Site: s.name, Rate: s.rate, Ceiling: s.ceil, Queue: s.waiting, Traffic: tr})
	}
	return g.waterfallSites(out)
}
