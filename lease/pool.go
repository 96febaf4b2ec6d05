package lease

import (
	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
)

// PoolLoad is what the ProxyPool controller reads of a store: the load on each member, the
// targets each is cooling down for, and how often crawlers were refused for lack of capacity
// in a pool. Memory implements it; a shared store may, and the pool hooks fall back to no
// load without it.
type PoolLoad interface {
	ActiveByProxy() map[string]int
	CoolingByProxy() map[string]int
	Denied(pool string) int64
}

var _ PoolLoad = (*Memory)(nil)

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

// Denied is the running count of lease requests refused (409) while members of the pool
// with this name (their "pool" attribute) matched the selector and were at capacity. It
// starts from 0 with the process; the pool controller takes a drop as a restart.
func (m *Memory) Denied(pool string) int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.denied[pool]
}

// noteDenied counts a refused lease once for every pool among the buckets that were full.
// Called with the lock held.
func (m *Memory) noteDenied(full []*bucket) {
	var seen map[string]bool
	for _, b := range full {
		p := b.attrs[v1.PoolAttribute]
		if p == "" || seen[p] {
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
