package discovery

import (
	"strings"
	"sync"
	"time"

	"github.com/proxy-operator/proxy-operator/server/discovery/access"
)

// Fair shares (decision 0259): with more than one token, a token's live leases in one
// namespace are bounded by -lease-max-per-token and by its share of the namespace's capacity,
// the sum of its proxies' maxLeases divided among the tokens that may lease there (rounded
// up, at least 1). The share holds whatever the token's scope: a token for every namespace
// gets a small namespace's share, not all of it.

// capacityTTL is how long a computed capacity per namespace is reused: a fleet change reaches
// the shares within it.
const capacityTTL = time.Second

// capacities caches the capacity per namespace of the fleet.
type capacities struct {
	mu   sync.Mutex
	at   time.Time
	byNS map[string]int
}

// of is the capacity per namespace now, recomputed at most every capacityTTL.
func (c *capacities) of(d *Discovery) map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := d.Now()
	if c.byNS != nil && now.Sub(c.at) < capacityTTL && !now.Before(c.at) {
		return c.byNS
	}
	byNS := map[string]int{}
	for _, p := range d.Fleet.List() {
		ns, _, _ := strings.Cut(p.Key, "/")
		byNS[ns] += int(max(p.MaxLeases, 0))
	}
	c.byNS, c.at = byNS, now
	return byNS
}

// SharesFor are caller's fair shares in the namespaces it may lease in, for a gateway in the
// same process (nil without more than one token: no holder, no share).
func (d *Discovery) SharesFor(caller *access.Caller) map[string]int {
	if d.tokens == nil || d.tokens.Len() <= 1 {
		return nil
	}
	return d.sharesFor(caller, d.tokens)
}

// sharesFor are caller's fair shares in the namespaces it may lease in (lease.Request's
// HolderShares; the store keeps the lower of a share and its own bound).
func (d *Discovery) sharesFor(caller *access.Caller, tokens *access.Tokens) map[string]int {
	caps := d.caps.of(d)
	shares := make(map[string]int, len(caps))
	for ns, capacity := range caps {
		if !caller.MayLease(ns) {
			continue
		}
		n := max(tokens.LeaseHolders(ns), 1)
		shares[ns] = max((capacity+n-1)/n, 1)
	}
	return shares
}
