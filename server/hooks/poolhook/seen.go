package poolhook

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
	"github.com/proxy-operator/proxy-operator/internal/pool"
)

// Seen is what the pool hooks answered last for each pool, kept for readers in the same
// process (the web console's Pools page): the status, and the last change of the desired
// size with its reason. It holds one entry per pool the hooks were called about and drops a
// pool once its finalize answers finalized, so it is as large as the cluster's pools.
type Seen struct {
	mu    sync.Mutex
	pools map[string]PoolSeen
}

// PoolSeen is one pool as its hook last answered it.
type PoolSeen struct {
	Key    string // namespace/name
	Status v1.ProxyPoolStatus
	At     time.Time // of the answer
	// LastScale says how the desired size last changed ("" until it changed in this process).
	LastScale   string
	LastScaleAt time.Time
}

// record keeps d's answer for p.
func (s *Seen) record(p *v1.ProxyPool, d pool.Decision, now time.Time) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if d.Finalized {
		delete(s.pools, p.Key())
		return
	}
	if s.pools == nil {
		s.pools = map[string]PoolSeen{}
	}
	e := s.pools[p.Key()]
	e.Key, e.Status, e.At = p.Key(), d.Status, now
	if sc := d.Scale; sc != nil {
		e.LastScale, e.LastScaleAt = fmt.Sprintf("%d -> %d (%s)", sc.From, sc.To, sc.Reason), now
	}
	s.pools[p.Key()] = e
}

// List is every pool seen, by key.
func (s *Seen) List() []PoolSeen {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.SortedFunc(maps.Values(s.pools), func(a, b PoolSeen) int { return strings.Compare(a.Key, b.Key) })
}
