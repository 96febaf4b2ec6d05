package lease

import (
	"context"
	"slices"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
)

// PoolLoad is what the ProxyPool controller reads of a store about one pool: the load on each
// member, the targets each is cooling down for, and how often crawlers were refused for lack
// of capacity in the pool. Memory and the Redis store implement it; the pool hooks fall back
// to no load for a store without it. A shared store that cannot answer returns an error
// wrapping ErrUnavailable: a pool must not be scaled or drained on a view it could not read.
type PoolLoad interface {
	PoolLoad(ctx context.Context, q PoolQuery) (PoolView, error)
}

// PoolQuery names a pool and its members (proxy keys).
type PoolQuery struct {
	Namespace, Pool string
	Members         []string
}

// PoolView is a store's view of one pool's members.
type PoolView struct {
	// Active is the live leases per member, Cooling the targets each member is cooling down
	// for now (members without any absent from both).
	Active, Cooling map[string]int
	// Denied is the running count of lease requests refused (409) while members of this pool
	// (the "pool" attribute, in this namespace) matched the selector and were at capacity.
	Denied int64
}

var _ PoolLoad = (*Memory)(nil)

// PoolLoad implements PoolLoad.
func (m *Memory) PoolLoad(_ context.Context, q PoolQuery) (PoolView, error) {
	active, cooling := m.ActiveByProxy(), m.CoolingByProxy()
	v := PoolView{Active: map[string]int{}, Cooling: map[string]int{}, Denied: m.Denied(q.Namespace, q.Pool)}
	for _, k := range q.Members {
		if n := active[k]; n > 0 {
			v.Active[k] = n
		}
		if n := cooling[k]; n > 0 {
			v.Cooling[k] = n
		}
	}
	return v, nil
}

// CoolingByProxy is the number of distinct targets each proxy is cooling down for now
// (proxies without a live cooldown absent).
func (m *Memory) CoolingByProxy() map[string]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.cfg.Now()
	out := map[string]int{}
	for k, c := range m.cool {
		if now.Before(c.until) {
			out[k.proxy]++
		}
	}
	return out
}

// Cooling implements Store: a walk of the remembered cooldowns under the lock (bounded by
// MaxCooldowns, as CoolingByProxy's), keeping the q.Limit that end last.
func (m *Memory) Cooling(_ context.Context, q CoolingQuery) (CoolingList, error) {
	var out CoolingList
	m.mu.Lock()
	now := m.cfg.Now()
	for k, c := range m.cool {
		if !now.Before(c.until) {
			continue
		}
		if q.Namespaces != nil && !slices.Contains(q.Namespaces, namespaceOf(k.proxy)) {
			continue
		}
		out.Total++
		out.Cooldowns = append(out.Cooldowns, Cooldown{Proxy: k.proxy, Target: k.target, Until: c.until, Strikes: c.strikes, Reason: c.reason})
	}
	m.mu.Unlock()
	SortCooling(out.Cooldowns)
	if n := q.limit(); len(out.Cooldowns) > n {
		out.Cooldowns = out.Cooldowns[:n:n]
	}
	return out, nil
}

// Denied is the running count of lease requests refused (409) while members of the pool
// with this name (their "pool" attribute) in this namespace matched the selector and were at
// capacity. It starts from 0 with the process; the pool controller takes a drop as a restart.
func (m *Memory) Denied(namespace, pool string) int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.denied[namespace+"/"+pool]
}

// noteDenied counts a refused lease once for every pool among the buckets that were full.
// Called with the lock held.
func (m *Memory) noteDenied(full []*bucket) {
	var seen map[string]bool
	for _, b := range full {
		if b.attrs[v1.PoolAttribute] == "" {
			continue
		}
		p := b.ns + "/" + b.attrs[v1.PoolAttribute]
		if seen[p] {
			continue
		}
		if seen == nil {
			seen = map[string]bool{}
		}
		seen[p] = true
		if m.denied == nil {
			m.denied = map[string]int64{}
		}
		m.denied[p]++
	}
}
