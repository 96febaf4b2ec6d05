package lease

import (
	"context"
	"slices"
	"strings"
	"time"
)

// SortHoldings orders holdings as Holdings lists them: by proxy, then expiry, then ID.
func SortHoldings(hs []Holding) {
	slices.SortFunc(hs, func(a, b Holding) int {
		if c := strings.Compare(a.Proxy, b.Proxy); c != 0 {
			return c
		}
		if c := a.ExpiresAt.Compare(b.ExpiresAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
}

// Holding is one live lease as an operator sees it: who holds which proxy, for what. The
// lease ID is the holder's capability (anyone with it may report or release), so readers
// that show holdings to people show a digest of it, never the ID itself.
type Holding struct {
	ID        string
	Proxy     string // namespace/name
	Holder    string // Request.Holder: the discovery token's name ("" when none was given)
	Target    string
	Session   string
	ExpiresAt time.Time
}

// MaxHoldingsList bounds the holdings one Holdings call returns.
const MaxHoldingsList = 1000

// HoldingsLister is the optional capability of a store that lists its live leases (both
// stores, decision 0299).
type HoldingsLister interface {
	// Holdings lists the live leases on proxies of namespaces (nil: every namespace), at most
	// limit (0 or above MaxHoldingsList: MaxHoldingsList) of them (which ones, when there
	// are more, is the store's choice), in SortHoldings order, and how many there are in all.
	Holdings(ctx context.Context, namespaces []string, limit int) ([]Holding, int, error)
}

// CooldownClearer is the optional capability of a store that forgets one cooldown before its
// time (both stores, decision 0299).
type CooldownClearer interface {
	// ClearCooldown forgets proxy's cooldown for target, strikes included, and reports
	// whether there was one. Clearing one that is not there is not an error.
	ClearCooldown(ctx context.Context, proxy, target string) (bool, error)
}

var (
	_ HoldingsLister  = (*Memory)(nil)
	_ CooldownClearer = (*Memory)(nil)
)

// Holdings implements HoldingsLister: a walk of the live leases under the lock, bounded by
// the leases the fleet's capacity allows.
func (m *Memory) Holdings(_ context.Context, namespaces []string, limit int) ([]Holding, int, error) {
	if limit <= 0 || limit > MaxHoldingsList {
		limit = MaxHoldingsList
	}
	m.mu.Lock()
	now := m.cfg.Now()
	m.reapLocked(now)
	var out []Holding
	for _, l := range m.leases {
		if namespaces != nil && !slices.Contains(namespaces, namespaceOf(l.proxy)) {
			continue
		}
		out = append(out, Holding{ID: l.id, Proxy: l.proxy, Holder: l.by, Target: l.target, Session: l.session, ExpiresAt: l.expires})
	}
	m.mu.Unlock()
	SortHoldings(out)
	total := len(out)
	if len(out) > limit {
		out = out[:limit:limit]
	}
	return out, total, nil
}

// ClearCooldown implements CooldownClearer.
func (m *Memory) ClearCooldown(_ context.Context, proxy, target string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.reapCooldownsLocked(m.cfg.Now())
	c := m.cool[coolKey{target, proxy}]
	if c == nil {
		return false, nil
	}
	m.evictCooldown(c)
	m.emit(Event{Kind: EventCleared, At: m.cfg.Now(), Proxy: proxy, Target: target})
	return true, nil
}
