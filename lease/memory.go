package lease

import (
	"container/heap"
	"container/list"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"sync"
	"time"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
	"github.com/proxy-operator/proxy-operator/internal/fleet"
	"github.com/proxy-operator/proxy-operator/internal/verdict"
)

// Defaults for Config and Policy fields left zero.
const (
	DefaultRateLimitedCooldown = 15 * time.Minute
	DefaultBannedCooldown      = time.Hour
	DefaultMaxCooldown         = 24 * time.Hour
	DefaultSessionIdle         = 30 * time.Minute
	DefaultReapInterval        = time.Second
	DefaultHealthRefresh       = time.Second
	DefaultMinSyncInterval     = 100 * time.Millisecond
	DefaultMaxSessions         = 100_000
	// DefaultMaxSessionsPerNamespace and DefaultMaxCooldownsPerNamespace are each tenant's
	// share (a tenant is the namespace of the proxies it leases): a tenant at its share never
	// takes another's (issue 21: one tenant filled the store-wide tables in seconds).
	DefaultMaxSessionsPerNamespace  = 10_000
	DefaultMaxCooldownsPerNamespace = 8192
)

// EventKind names a change of the store's state.
type EventKind string

const (
	EventGranted  EventKind = "granted"
	EventReleased EventKind = "released"
	EventExpired  EventKind = "expired"
	EventDropped  EventKind = "dropped" // the proxy left the fleet
	EventCooled   EventKind = "cooled"
	EventCleared  EventKind = "cleared" // an operator forgot a cooldown (ClearCooldown)
)

// Event is one change, delivered in the order the store applied it.
type Event struct {
	Kind    EventKind
	At      time.Time
	LeaseID string
	Proxy   string
	Target  string
	Health  verdict.Health // Granted: the verdict the grant was made on
	Until   time.Time      // Cooled
}

// Config configures a Memory store.
type Config struct {
	Fleet  Fleet
	Health Health
	Now    func() time.Time

	// Policy is the cooldowns and bounds every store enforces (policy.go).
	Policy

	// ReapInterval and HealthRefresh pace Run; MinSyncInterval bounds how often Acquire
	// re-reads the whole fleet when the view keeps changing (0 in tests: on every change).
	ReapInterval    time.Duration
	HealthRefresh   time.Duration
	MinSyncInterval time.Duration
	// Admit, when set, is asked once per version of a proxy record whether the proxy may be
	// leased at all (the egress policy: a denied endpoint is never handed to a crawler,
	// whatever its health says).
	Admit func(fleet.Proxy) error
	// Observe, when set, is called with every change while the store's lock is held: it
	// must be quick and must not call back into the store.
	Observe func(Event)
	// PreferBand orders candidates by the verdict's quality band before load and latency
	// (decision 0142); off, bands are ignored.
	PreferBand bool
}

// Memory is the in-memory Store. Selection goes through an index: proxies are grouped in
// buckets by their exact attribute set, and each bucket keeps the proxies that can take a
// lease (known healthy, capacity left) in a B-tree ordered by active leases, then latency.
// A lease looks at the head of each bucket the selector matches, so its cost grows with the
// number of distinct attribute sets, not with the fleet.
type Memory struct {
	cfg Config

	mu       sync.Mutex
	entries  map[string]*entry
	buckets  map[string]*bucket
	selCache map[string][]*bucket
	version  uint64
	synced   bool
	syncedAt time.Time

	leases   map[string]*held
	expiry   expiryHeap
	cool     map[coolKey]*cooldown
	coolBy   map[string]int        // remembered cooldowns per proxy
	coolNS   map[string]*list.List // remembered cooldowns per namespace, oldest first
	sessNS   map[string]int        // bound sessions per namespace
	forget   coolHeap              // cooldowns by forget time
	sessions map[string]*session
	denied   map[string]int64 // no-capacity answers per pool attribute value
	idle     idleHeap         // sessions without live leases, by until
	// byHolder is the live leases per holder and namespace ("holder\x00ns"), kept only with
	// MaxLeasesPerHolder.
	byHolder map[string]map[*held]struct{}
	// deniedRecords counts the record versions Admit refused.
	deniedRecords uint64
	// byTarget is the live lease per (target, proxy): at most one, see check. Its expiry is
	// when a 409 for that target says the proxy frees up.
	byTarget map[coolKey]*held
	// healthKick wakes Run to re-read the verdicts at once (HealthChanged): a proxy the prober
	// just found healthy is leasable now, not at the next HealthRefresh tick.
	healthKick chan struct{}
}

var _ Store = (*Memory)(nil)

type held struct {
	id, proxy, target, session string
	holder                     string // "holder\x00ns" in byHolder, "" when not counted
	by                         string // Request.Holder, shown to operators (Holdings)
	ttl                        time.Duration
	expires                    time.Time
	index                      int // in expiry
}

type coolKey struct{ target, proxy string }

type cooldown struct {
	key           coolKey
	elem          *list.Element // in coolNS
	until, forget time.Time
	strikes       int
	reason        Result // of the report that set until
	index         int    // in forget
}

type session struct {
	key   string
	proxy string
	until time.Time // zero while a lease of the session is live
	live  int
	index int // in idle while live is 0, else -1
}

// NewMemory returns an empty store reading cfg.Fleet and cfg.Health.
func NewMemory(cfg Config) *Memory {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	cfg.Policy = cfg.Policy.WithDefaults()
	def(&cfg.ReapInterval, DefaultReapInterval)
	def(&cfg.HealthRefresh, DefaultHealthRefresh)
	if cfg.MinSyncInterval < 0 {
		cfg.MinSyncInterval = 0
	}
	return &Memory{
		cfg:        cfg,
		entries:    map[string]*entry{},
		buckets:    map[string]*bucket{},
		selCache:   map[string][]*bucket{},
		leases:     map[string]*held{},
		byHolder:   map[string]map[*held]struct{}{},
		cool:       map[coolKey]*cooldown{},
		coolBy:     map[string]int{},
		coolNS:     map[string]*list.List{},
		sessNS:     map[string]int{},
		sessions:   map[string]*session{},
		byTarget:   map[coolKey]*held{},
		healthKick: make(chan struct{}, 1),
	}
}

// HealthChanged tells the index that the prober published a new verdict; Run re-reads the
// verdicts at once. It never blocks (the prober calls it on its loop), and kicks that come
// while one is pending are one: a flapping fleet costs at most one pass per MinSyncInterval.
// Without it, a proxy that /v1/proxies already shows healthy could be refused a lease as
// unhealthy for up to HealthRefresh.
func (m *Memory) HealthChanged() {
	select {
	case m.healthKick <- struct{}{}:
	default:
	}
}

func (m *Memory) emit(e Event) {
	if m.cfg.Observe != nil {
		m.cfg.Observe(e)
	}
}

// Acquire implements Store.
func (m *Memory) Acquire(_ context.Context, r Request) (Lease, error) {
	if r.TTL <= 0 {
		return Lease{}, fmt.Errorf("acquire: ttl %s: %w", r.TTL, ErrInvalid)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.cfg.Now()
	if !m.synced || (m.cfg.Fleet.Version() != m.version && now.Sub(m.syncedAt) >= m.cfg.MinSyncInterval) {
		m.syncLocked(now)
	}
	m.reapLocked(now)

	if r.SessionKey != "" {
		if s := m.sessions[r.SessionKey]; s != nil {
			if e := m.entries[s.proxy]; e != nil && fleet.Matches(e.p.Attributes, r.Selector) && inNamespaces(e.bucket, r.Namespaces) &&
				!m.capped(r, namespaceOf(e.p.Key)) {
				if h, v := m.check(e, r.Target, now); v == fits {
					return m.grant(e, h, r, now), nil
				}
			}
		}
	}

	var (
		best      *entry
		bestH     verdict.Health
		fallback  *entry // the first avoided proxy that fits
		fallbackH verdict.Health
		nm        = NoMatchError{Target: r.Target}
		stale     []*entry
		health    = map[*entry]verdict.Health{}
	)
	var fullPools []*bucket // buckets with a member at capacity: demand for their pool
	heldOut := 0            // proxies in namespaces where the holder is at its share
	for _, b := range m.match(r.Selector) {
		if !inNamespaces(b, r.Namespaces) {
			continue
		}
		if m.capped(r, b.ns) {
			// The holder's share of this namespace is taken: its proxies are others' to lease.
			nm.Matching += b.size
			heldOut += b.size
			continue
		}
		before := nm.AtCapacity
		nm.Matching += b.size
		nm.Unhealthy += b.unhealthy
		nm.AtCapacity += b.full
		b.tree.Ascend(func(e *entry) bool {
			if best != nil && !less(e, best) {
				return false // nothing further in this bucket beats the best so far
			}
			h, v := m.check(e, r.Target, now)
			switch v {
			case fits:
				if len(r.Avoid) > 0 && slices.Contains(r.Avoid, e.p.Key) {
					if fallback == nil {
						fallback, fallbackH = e, h
					}
					return true
				}
				best, bestH = e, h
				return false
			case unhealthy:
				nm.Unhealthy++
				stale = append(stale, e)
				health[e] = h
			case full:
				nm.AtCapacity++
			case cooling:
				nm.Cooling++
				nm.noteFree(m.cool[coolKey{r.Target, e.p.Key}].until)
			case taken:
				nm.LeasedForTarget++
				nm.noteFree(m.byTarget[coolKey{r.Target, e.p.Key}].expires)
			}
			return true
		})
		if nm.AtCapacity > before {
			fullPools = append(fullPools, b)
		}
	}
	// Proxies found unhealthy (or changed in the fleet) leave the tree now rather than at the
	// next refresh, so the next lease does not look at them again.
	for _, e := range stale {
		m.refreshEntry(e, health[e])
	}
	if best == nil && fallback != nil {
		best, bestH = fallback, fallbackH
	}
	if best == nil && heldOut > 0 {
		return Lease{}, m.tooManyLeases(r)
	}
	if best == nil {
		m.noteDenied(fullPools)
		if nm.AtCapacity > 0 && len(m.expiry) > 0 {
			// No lease on a full proxy ends before the first lease of the store does.
			nm.noteFree(m.expiry[0].expires)
		}
		return Lease{}, &nm
	}
	return m.grant(best, bestH, r, now), nil
}

// capped reports whether holder already holds its share of live leases in namespace ns.
func (m *Memory) capped(r Request, ns string) bool {
	limit := m.holderLimit(r, ns)
	return limit > 0 && len(m.byHolder[r.Holder+"\x00"+ns]) >= limit
}

// holderLimit is r.Holder's bound in ns: the store's, or the request's share there when lower
// (0: no bound).
func (m *Memory) holderLimit(r Request, ns string) int {
	if r.Holder == "" || m.cfg.MaxLeasesPerHolder <= 0 {
		return 0
	}
	if share, ok := r.HolderShares[ns]; ok && share > 0 && share < m.cfg.MaxLeasesPerHolder {
		return share
	}
	return m.cfg.MaxLeasesPerHolder
}

// tooManyLeases is the refusal of a holder at its share, with the earliest end of one of its
// leases in a namespace where it is at its share (a walk of at most that share per namespace).
func (m *Memory) tooManyLeases(r Request) error {
	e := &TooManyLeasesError{Holder: r.Holder, Limit: m.cfg.MaxLeasesPerHolder}
	prefix := r.Holder + "\x00"
	for k, set := range m.byHolder {
		if len(k) < len(prefix) || k[:len(prefix)] != prefix {
			continue
		}
		limit := m.holderLimit(r, k[len(prefix):])
		if len(set) < limit {
			continue
		}
		e.Limit = min(e.Limit, limit)
		for l := range set {
			if e.FreeAt.IsZero() || l.expires.Before(e.FreeAt) {
				e.FreeAt = l.expires
			}
		}
	}
	return e
}

func inNamespaces(b *bucket, nss []string) bool {
	return nss == nil || b != nil && slices.Contains(nss, b.ns)
}

// fit is why a proxy can or cannot take a lease now.
type fit int

const (
	fits fit = iota
	unhealthy
	full
	cooling
	taken // leased for the target by another holder
)

// check reads the proxy's live state: the fleet record and the prober's verdict now, not
// what the index last saw, so a stale index can cost a skip but never a bad lease.
func (m *Memory) check(e *entry, target string, now time.Time) (verdict.Health, fit) {
	p, ok := m.cfg.Fleet.Get(e.p.Key)
	if !ok || !p.Equal(e.p) {
		return verdict.Health{}, unhealthy // gone or changed: the next sync re-files it
	}
	h := m.cfg.Health.Health(e.p.Key)
	switch {
	case e.denied || !Leasable(p, h):
		return h, unhealthy
	case e.load >= int(p.MaxLeases):
		return h, full
	case target != "":
		k := coolKey{target, p.Key}
		if c := m.cool[k]; c != nil && now.Before(c.until) {
			return h, cooling
		}
		// One holder per (proxy, target): two crawlers on one site through one address
		// double that address's rate there, which is what rate limits and bans punish.
		if m.byTarget[k] != nil {
			return h, taken
		}
	}
	return h, fits
}

func (m *Memory) grant(e *entry, h verdict.Health, r Request, now time.Time) Lease {
	m.move(e, func() { e.load++; e.healthy, e.latency, e.rank = true, h.LatencyMillis, m.rank(h) })
	l := &held{id: newID(), proxy: e.p.Key, target: r.Target, session: r.SessionKey, by: r.Holder, ttl: r.TTL, expires: now.Add(r.TTL)}
	m.leases[l.id] = l
	heap.Push(&m.expiry, l)
	if r.Holder != "" && m.cfg.MaxLeasesPerHolder > 0 {
		l.holder = r.Holder + "\x00" + namespaceOf(e.p.Key)
		set := m.byHolder[l.holder]
		if set == nil {
			set = map[*held]struct{}{}
			m.byHolder[l.holder] = set
		}
		set[l] = struct{}{}
	}
	if r.Target != "" {
		m.byTarget[coolKey{r.Target, e.p.Key}] = l
	}
	if r.SessionKey != "" && m.canBind(r.SessionKey, e.p.Key) {
		s := m.sessions[r.SessionKey]
		if s == nil || s.proxy != e.p.Key {
			// Leases of the old binding still count down on their own proxy: end() only
			// touches the session when the proxies agree.
			if s != nil {
				if s.index >= 0 {
					heap.Remove(&m.idle, s.index)
				}
				m.unbind(s)
			}
			s = &session{key: r.SessionKey, proxy: e.p.Key, index: -1}
			m.sessions[r.SessionKey] = s
			m.sessNS[namespaceOf(e.p.Key)]++
		}
		s.live++
		s.until = time.Time{}
		if s.index >= 0 {
			heap.Remove(&m.idle, s.index)
		}
	}
	m.emit(Event{Kind: EventGranted, At: now, LeaseID: l.id, Proxy: e.p.Key, Target: r.Target, Health: h})
	return Lease{ID: l.id, Proxy: e.p, Health: h, Active: e.load, Target: r.Target, SessionKey: r.SessionKey, ExpiresAt: l.expires}
}

// end removes a lease and frees its slot.
func (m *Memory) end(l *held, kind EventKind, now time.Time) {
	delete(m.leases, l.id)
	if set := m.byHolder[l.holder]; set != nil {
		delete(set, l)
		if len(set) == 0 {
			delete(m.byHolder, l.holder)
		}
	}
	if l.index >= 0 {
		heap.Remove(&m.expiry, l.index)
	}
	if e := m.entries[l.proxy]; e != nil {
		m.move(e, func() { e.load-- })
	}
	if l.target != "" {
		if k := (coolKey{l.target, l.proxy}); m.byTarget[k] == l {
			delete(m.byTarget, k)
		}
	}
	if l.session != "" {
		if s := m.sessions[l.session]; s != nil && s.proxy == l.proxy {
			s.live--
			if s.live <= 0 {
				s.live, s.until = 0, now.Add(m.cfg.SessionIdle)
				if s.index >= 0 {
					heap.Fix(&m.idle, s.index)
				} else {
					heap.Push(&m.idle, s)
				}
			}
		}
	}
	m.emit(Event{Kind: kind, At: now, LeaseID: l.id, Proxy: l.proxy, Target: l.target})
}

// Release implements Store.
func (m *Memory) Release(_ context.Context, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.cfg.Now()
	m.reapLocked(now)
	if l := m.leases[id]; l != nil {
		m.end(l, EventReleased, now)
	}
	return nil
}

// live returns the lease if it is live and its proxy still in the fleet (dropping it if not).
func (m *Memory) live(id string, now time.Time) *held {
	m.reapLocked(now)
	l := m.leases[id]
	if l == nil {
		return nil
	}
	if _, ok := m.cfg.Fleet.Get(l.proxy); !ok {
		m.end(l, EventDropped, now)
		return nil
	}
	return l
}

// Renew implements Store.
func (m *Memory) Renew(_ context.Context, id string, ttl time.Duration) (Lease, error) {
	if ttl < 0 {
		return Lease{}, fmt.Errorf("renew: ttl %s: %w", ttl, ErrInvalid)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.cfg.Now()
	l := m.live(id, now)
	if l == nil {
		return Lease{}, fmt.Errorf("renew: %w", ErrNotFound)
	}
	if ttl == 0 {
		ttl = l.ttl
	}
	l.ttl, l.expires = ttl, now.Add(ttl)
	heap.Fix(&m.expiry, l.index)
	e := m.entries[l.proxy]
	var p fleet.Proxy
	load := 0
	if e != nil {
		p, load = e.p, e.load
	}
	return Lease{ID: l.id, Proxy: p, Health: m.cfg.Health.Health(l.proxy), Active: load, Target: l.target, SessionKey: l.session, ExpiresAt: l.expires}, nil
}

// Report implements Store.
func (m *Memory) Report(_ context.Context, id string, r Report) (Cooldown, error) {
	if !r.Result.Valid() || r.Target == "" || r.RetryAfter < 0 {
		return Cooldown{}, fmt.Errorf("report: result %q target %q: %w", r.Result, r.Target, ErrInvalid)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.cfg.Now()
	l := m.live(id, now)
	if l == nil {
		return Cooldown{}, fmt.Errorf("report: %w", ErrNotFound)
	}
	out := Cooldown{Proxy: l.proxy, Target: r.Target}
	if r.Result == ResultOK {
		// A success through the proxy forgives one strike of a remembered pair (decision 0261).
		if c := m.cool[coolKey{r.Target, l.proxy}]; c != nil && now.Before(c.forget) && c.strikes > 0 {
			c.strikes--
			out.Until, out.Strikes = c.until, c.strikes
		}
		return out, nil
	}
	base := m.cfg.RateLimitedCooldown
	if r.Result == ResultBanned {
		base = m.cfg.BannedCooldown
	}
	m.reapCooldownsLocked(now)
	k := coolKey{r.Target, l.proxy}
	c := m.cool[k]
	if c == nil {
		if err := m.makeRoom(l.proxy, r.Result == ResultBanned); err != nil {
			return Cooldown{}, fmt.Errorf("report: %w", err)
		}
		c = &cooldown{key: k, index: -1}
		m.cool[k] = c
		m.coolBy[l.proxy]++
		ns := namespaceOf(l.proxy)
		q := m.coolNS[ns]
		if q == nil {
			q = list.New()
			m.coolNS[ns] = q
		}
		c.elem = q.PushBack(c)
	}
	if r.Result == ResultBanned {
		c.strikes++
	}
	d := cooldownFor(r, base, c.strikes, m.cfg.MaxCooldown)
	// A report during a cooldown never shortens it.
	if until := now.Add(d); until.After(c.until) {
		c.until, c.reason = until, r.Result
	}
	// Strikes are remembered for as long again as the cooldown, so a proxy that is limited
	// again soon after it comes back cools for longer.
	c.forget = c.until.Add(d)
	if c.index >= 0 {
		heap.Fix(&m.forget, c.index)
	} else {
		heap.Push(&m.forget, c)
	}
	m.emit(Event{Kind: EventCooled, At: now, LeaseID: l.id, Proxy: l.proxy, Target: r.Target, Until: c.until})
	out.Until, out.Strikes = c.until, c.strikes
	return out, nil
}

// cooldownFor is the cooldown policy (decision 0261). rate_limited means "slow down", not
// "go away": the target's Retry-After when it gave one, else the short default, never doubled
// and no strike. banned doubles the default with each strike still remembered (a success
// forgives one), and a longer Retry-After wins. Everything is capped at maxCooldown.
func cooldownFor(r Report, base time.Duration, strikes int, maxCooldown time.Duration) time.Duration {
	if r.Result == ResultRateLimited {
		if r.RetryAfter > 0 {
			return min(r.RetryAfter, maxCooldown)
		}
		return min(base, maxCooldown)
	}
	d := base
	for i := 1; i < strikes && d < maxCooldown; i++ {
		d *= 2
	}
	return min(max(d, r.RetryAfter), maxCooldown)
}

// Count implements Store; it never fails.
func (m *Memory) Count(context.Context) (int, error) { return m.ActiveCount(), nil }

// Active implements Store; it never fails.
func (m *Memory) Active(context.Context) (map[string]int, error) { return m.ActiveByProxy(), nil }

// ActiveCount is the number of live leases.
func (m *Memory) ActiveCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.reapLocked(m.cfg.Now())
	return len(m.leases)
}

// ActiveByProxy is the number of live leases per proxy key (proxies without leases absent).
func (m *Memory) ActiveByProxy() map[string]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.reapLocked(m.cfg.Now())
	out := make(map[string]int, len(m.leases))
	for _, l := range m.leases {
		out[l.proxy]++
	}
	return out
}

// Run implements Store: it reaps on a ticker, refreshes the index's view of health, and
// follows fleet changes so leases on a departed proxy are dropped without waiting for a lease.
func (m *Memory) Run(ctx context.Context) error {
	reap := time.NewTicker(m.cfg.ReapInterval)
	defer reap.Stop()
	refresh := time.NewTicker(m.cfg.HealthRefresh)
	defer refresh.Stop()
	for {
		// Take the channel before comparing versions: a change after this closes it, one
		// before it shows in the version.
		changed := m.cfg.Fleet.Changed()
		if m.behind() {
			m.Sync()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
			// Bound the cost of a fleet that changes all the time.
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(m.cfg.MinSyncInterval):
			}
		case <-reap.C:
			m.Reap()
		case <-refresh.C:
			m.RefreshHealth()
		case <-m.healthKick:
			m.RefreshHealth()
			// Bound the cost of a fleet whose verdicts change all the time, as for the fleet.
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(m.cfg.MinSyncInterval):
			}
		}
	}
}

func (m *Memory) behind() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return !m.synced || m.cfg.Fleet.Version() != m.version
}

// Reap expires leases, cooldowns and sessions whose time has come. Each kind is kept in a
// heap by expiry, so a reap costs O(log n) per entry that goes, not a walk of the tables:
// a flood of cooldowns or sessions cannot stretch the time Acquire waits for the lock.
func (m *Memory) Reap() {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.cfg.Now()
	m.reapLocked(now)
	m.reapCooldownsLocked(now)
	for len(m.idle) > 0 && !now.Before(m.idle[0].until) {
		s := heap.Pop(&m.idle).(*session)
		delete(m.sessions, s.key)
		m.unbind(s)
	}
}

func (m *Memory) reapCooldownsLocked(now time.Time) {
	for len(m.forget) > 0 && !now.Before(m.forget[0].forget) {
		m.dropCooldown(heap.Pop(&m.forget).(*cooldown))
	}
}

// dropCooldown forgets c; it is already out of the forget heap.
func (m *Memory) dropCooldown(c *cooldown) {
	delete(m.cool, c.key)
	if m.coolBy[c.key.proxy]--; m.coolBy[c.key.proxy] <= 0 {
		delete(m.coolBy, c.key.proxy)
	}
	ns := namespaceOf(c.key.proxy)
	if q := m.coolNS[ns]; q != nil && c.elem != nil {
		q.Remove(c.elem)
		if q.Len() == 0 {
			delete(m.coolNS, ns)
		}
	}
	c.elem = nil
}

// evictCooldown forgets c before its time, to make room for a banned report.
func (m *Memory) evictCooldown(c *cooldown) {
	if c.index >= 0 {
		heap.Remove(&m.forget, c.index)
	}
	m.dropCooldown(c)
}

// makeRoom makes sure one more cooldown on proxy fits its bounds: the proxy's, its
// namespace's, the store's. A rate_limited report beyond one is refused; a banned one is
// always recorded, in place of the oldest cooldown of the proxy or of its namespace (of the
// store, when the namespace has none), so that a ban is never lost to a flood: a crawler
// sent back to a banned proxy burns it again. Namespaces are counted apart so that one
// tenant at its share never refuses another's report.
func (m *Memory) makeRoom(proxy string, banned bool) error {
	ns := namespaceOf(proxy)
	q := m.coolNS[ns]
	if m.coolBy[proxy] >= m.cfg.MaxCooldownsPerProxy {
		if !banned {
			return &TooManyCooldownsError{Scope: "proxy", Limit: m.cfg.MaxCooldownsPerProxy, Proxy: proxy}
		}
		for el := q.Front(); el != nil; el = el.Next() {
			if c := el.Value.(*cooldown); c.key.proxy == proxy {
				m.evictCooldown(c)
				break
			}
		}
		q = m.coolNS[ns]
	}
	nsFull := q != nil && q.Len() >= m.cfg.MaxCooldownsPerNamespace
	totalFull := len(m.cool) >= m.cfg.MaxCooldowns
	switch {
	case !nsFull && !totalFull:
		return nil
	case !banned && totalFull:
		return &TooManyCooldownsError{Scope: "total", Limit: m.cfg.MaxCooldowns}
	case !banned:
		return &TooManyCooldownsError{Scope: "namespace", Limit: m.cfg.MaxCooldownsPerNamespace, Proxy: proxy}
	case q != nil && q.Len() > 0:
		m.evictCooldown(q.Front().Value.(*cooldown))
	default:
		m.evictCooldown(m.forget[0])
	}
	return nil
}

// canBind says whether key may be bound to proxy: a key already bound moves freely; a new
// one needs room in the store and in the proxy's namespace.
func (m *Memory) canBind(key, proxy string) bool {
	if s := m.sessions[key]; s != nil {
		return namespaceOf(s.proxy) == namespaceOf(proxy) || m.sessNS[namespaceOf(proxy)] < m.cfg.MaxSessionsPerNamespace
	}
	return len(m.sessions) < m.cfg.MaxSessions && m.sessNS[namespaceOf(proxy)] < m.cfg.MaxSessionsPerNamespace
}

// unbind stops counting s against its namespace; it is already out of the session table or
// about to be replaced in it.
func (m *Memory) unbind(s *session) {
	ns := namespaceOf(s.proxy)
	if m.sessNS[ns]--; m.sessNS[ns] <= 0 {
		delete(m.sessNS, ns)
	}
}

// DeniedRecords is how many proxy record versions Config.Admit refused (the egress policy):
// never leased.
func (m *Memory) DeniedRecords() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.deniedRecords
}

// CooldownCount is the number of remembered cooldowns (an optional capability of a Store,
// read by the discovery metrics).
func (m *Memory) CooldownCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.cool)
}

func (m *Memory) reapLocked(now time.Time) {
	for len(m.expiry) > 0 && !now.Before(m.expiry[0].expires) {
		m.end(m.expiry[0], EventExpired, now)
	}
}

// Sync brings the index up to date with the fleet view.
func (m *Memory) Sync() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.syncLocked(m.cfg.Now())
}

// syncLocked diffs the fleet against the index: unchanged proxies cost a comparison, changed
// ones a move between buckets, departed ones are removed with their leases.
func (m *Memory) syncLocked(now time.Time) {
	version := m.cfg.Fleet.Version() // read first: a change during List is caught next time
	list := m.cfg.Fleet.List()
	seen := make(map[string]struct{}, len(list))
	for _, p := range list {
		seen[p.Key] = struct{}{}
		e := m.entries[p.Key]
		if e != nil && e.p.Equal(p) {
			continue
		}
		if e == nil {
			e = &entry{}
			m.entries[p.Key] = e
		} else {
			m.detach(e)
		}
		e.p = p
		e.denied = m.cfg.Admit != nil && m.cfg.Admit(p) != nil
		if e.denied {
			m.deniedRecords++
		}
		h := m.cfg.Health.Health(p.Key)
		e.healthy, e.latency, e.rank = !e.denied && Leasable(p, h), h.LatencyMillis, m.rank(h)
		m.attach(e)
	}
	var gone map[string]bool
	for k, e := range m.entries {
		if _, ok := seen[k]; !ok {
			m.detach(e)
			delete(m.entries, k)
			if gone == nil {
				gone = map[string]bool{}
			}
			gone[k] = true
		}
	}
	if gone != nil {
		for _, l := range m.leases {
			if gone[l.proxy] {
				m.end(l, EventDropped, now)
			}
		}
	}
	m.version, m.synced, m.syncedAt = version, true, now
}

// Leasable is the one definition of a healthy proxy for crawlers: the prober says Healthy,
// the Proxy is not being deleted or drained out of its pool, has an address, and its exit
// does not fail a verification that excludes it (spec.verify.onMismatch). Leases already
// held on a draining proxy run to their end.
func Leasable(p fleet.Proxy, h verdict.Health) bool {
	return h.State == verdict.Healthy && !p.Deleting && !p.Draining && p.IP != "" &&
		(h.Exit.Mismatch == "" || !p.ExcludesMismatch())
}

// rank is the index's band rank of a verdict: 0 for all when bands are not preferred.
func (m *Memory) rank(h verdict.Health) int {
	if !m.cfg.PreferBand {
		return 0
	}
	return v1.BandRank(h.Band)
}

// RefreshHealth re-reads every proxy's verdict so the index orders by current latency and
// offers proxies that recovered. Live checks at lease time make it a matter of freshness,
// not of correctness.
func (m *Memory) RefreshHealth() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, e := range m.entries {
		m.refreshEntry(e, m.cfg.Health.Health(e.p.Key))
	}
}

func (m *Memory) refreshEntry(e *entry, h verdict.Health) {
	ok := !e.denied && Leasable(e.p, h)
	rank := m.rank(h)
	if ok == e.healthy && h.LatencyMillis == e.latency && rank == e.rank {
		return
	}
	m.move(e, func() { e.healthy, e.latency, e.rank = ok, h.LatencyMillis, rank })
}

func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}

// expiryHeap orders live leases by expiry, coolHeap remembered cooldowns by the time they are
// forgotten, idleHeap sessions without live leases by the time they are dropped: one heap
// shape (timeHeap) over three element types.
type (
	expiryHeap = timeHeap[*held]
	coolHeap   = timeHeap[*cooldown]
	idleHeap   = timeHeap[*session]
)

func (l *held) heapTime() time.Time     { return l.expires }
func (l *held) setHeapIndex(i int)      { l.index = i }
func (c *cooldown) heapTime() time.Time { return c.forget }
func (c *cooldown) setHeapIndex(i int)  { c.index = i }
func (s *session) heapTime() time.Time  { return s.until }
func (s *session) setHeapIndex(i int)   { s.index = i }

// timed is an element of a timeHeap: ordered by heapTime, told its index (-1 once popped), so
// heap.Fix and heap.Remove can find it.
type timed interface {
	heapTime() time.Time
	setHeapIndex(int)
}

// timeHeap is a container/heap min-heap by time.
type timeHeap[T timed] []T

func (h timeHeap[T]) Len() int           { return len(h) }
func (h timeHeap[T]) Less(i, j int) bool { return h[i].heapTime().Before(h[j].heapTime()) }
func (h timeHeap[T]) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].setHeapIndex(i)
	h[j].setHeapIndex(j)
}
func (h *timeHeap[T]) Push(x any) {
	e := x.(T)
	e.setHeapIndex(len(*h))
	*h = append(*h, e)
}
func (h *timeHeap[T]) Pop() any {
	old := *h
	e := old[len(old)-1]
	var zero T
	old[len(old)-1] = zero
	*h = old[:len(old)-1]
	e.setHeapIndex(-1)
	return e
}
