// Package lease owns who holds which proxy: leases and their TTLs, per-target cooldowns,
// sticky sessions, and the index that picks the least-loaded healthy proxy for a selector
// without scanning the fleet. It knows nothing of HTTP, of how health is probed or of how
// the fleet view is filled.
package lease

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/proxy-operator/proxy-operator/internal/fleet"
	"github.com/proxy-operator/proxy-operator/internal/verdict"
)

var (
	// ErrNotFound is returned for a lease that does not exist, has expired or was dropped.
	ErrNotFound = errors.New("lease not found")
	// ErrNoMatch is wrapped by *NoMatchError when no proxy can be leased.
	ErrNoMatch = errors.New("no proxy available")
	// ErrInvalid is returned for a request the store cannot act on (the caller validates first).
	ErrInvalid = errors.New("invalid lease request")
	// ErrTooManyCooldowns is wrapped by *TooManyCooldownsError when a report would start a
	// cooldown beyond the store's bound.
	ErrTooManyCooldowns = errors.New("too many cooldowns")
	// ErrTooManyLeases is wrapped by *TooManyLeasesError when the caller already holds its
	// share of leases in every namespace where a proxy would fit.
	ErrTooManyLeases = errors.New("too many leases held")
	// ErrUnavailable is wrapped by a shared store's errors when its backend cannot be reached
	// or does not answer in time: the request may be retried, nothing was decided.
	ErrUnavailable = errors.New("lease store unavailable")
)

// Default bounds on remembered cooldowns (see Store.Report).
const (
	DefaultMaxCooldownsPerProxy = 1024
	DefaultMaxCooldowns         = 65536
)

// DefaultMaxLeasesPerHolder is the default share of one holder (a discovery token) in one
// namespace: live leases beyond it are refused (decision 0201).
const DefaultMaxLeasesPerHolder = 256

// TooManyLeasesError says a holder already has Limit live leases in each namespace where a
// proxy would fit; one of them ends at FreeAt (zero when unknown).
type TooManyLeasesError struct {
	Holder string
	Limit  int
	FreeAt time.Time
}

func (e *TooManyLeasesError) Error() string {
	return fmt.Sprintf("%s already holds %d live leases in each namespace with a proxy to lease, its share per namespace; release or let one expire", e.Holder, e.Limit)
}

func (e *TooManyLeasesError) Unwrap() error { return ErrTooManyLeases }

// TooManyCooldownsError says which bound a refused report hit.
type TooManyCooldownsError struct {
	// Scope is "proxy" (the proxy's own bound), "namespace" (its tenant's share) or "total"
	// (the store's).
	Scope string
	Limit int
	Proxy string
}

func (e *TooManyCooldownsError) Error() string {
	switch e.Scope {
	case "proxy":
		return fmt.Sprintf("proxy %s already remembers %d cooldowns, the per-proxy limit", e.Proxy, e.Limit)
	case "namespace":
		return fmt.Sprintf("the namespace of proxy %s already remembers %d cooldowns, its share", e.Proxy, e.Limit)
	}
	return fmt.Sprintf("the store already remembers %d cooldowns, the total limit", e.Limit)
}

func (e *TooManyCooldownsError) Unwrap() error { return ErrTooManyCooldowns }

// Store holds leases and cooldowns. Memory is the embedded default; lease/redisstore is the
// shared store that any number of discovery replicas use at once.
type Store interface {
	// Acquire leases the best proxy for the request or returns a *NoMatchError.
	Acquire(ctx context.Context, r Request) (Lease, error)
	// Release ends a lease. Releasing an unknown or expired lease is not an error.
	Release(ctx context.Context, id string) error
	// Renew moves a live lease's expiry to now+ttl (ttl 0: the lease's last TTL); ErrNotFound
	// when it is gone.
	Renew(ctx context.Context, id string, ttl time.Duration) (Lease, error)
	// Report records what a crawler saw through a lease's proxy; rate_limited and banned
	// start or grow that proxy's cooldown for the target. ErrNotFound when the lease is gone.
	//
	// Cooldowns are bounded: a (proxy, target) pair is remembered from its first report until
	// its forget time (the cooldown's end plus as long again), and a report that would add a
	// new pair while the proxy already remembers MaxCooldownsPerProxy pairs, or the store
	// MaxCooldowns in total, is refused with a *TooManyCooldownsError (ErrTooManyCooldowns)
	// and changes nothing. A banned report is never refused: it takes the place of the
	// proxy's (or its namespace's) oldest cooldown. The in-memory store also bounds each
	// namespace (MaxCooldownsPerNamespace), so one tenant at its share refuses no other's. A report on a pair already remembered is never refused. Forgotten
	// pairs stop counting at once, whether or not they have been reaped yet. Expiry must not
	// cost O(all entries) under a lock held by Acquire.
	Report(ctx context.Context, id string, r Report) (Cooldown, error)
	// Count is the number of live leases. A shared store can fail to answer (ErrUnavailable).
	Count(ctx context.Context) (int, error)
	// Active is the number of live leases per proxy key (proxies without leases absent).
	Active(ctx context.Context) (map[string]int, error)
	// Cooling lists the cooldowns in force now (Until after now) on proxies of q.Namespaces,
	// the longest-lasting first (then by target and proxy), at most q.Limit of them, and
	// how many are in force there in all. It costs at most O(remembered cooldowns) and never
	// changes what is remembered. A shared store can fail to answer (ErrUnavailable).
	Cooling(ctx context.Context, q CoolingQuery) (CoolingList, error)
	// Run does the store's housekeeping until ctx ends. For Memory it is what keeps the index
	// following the fleet; for a shared store, where every replica runs it and every call
	// expires what is due, it only keeps an idle store tidy: correctness never waits on it.
	Run(ctx context.Context) error
}

// Fleet is what the store reads of the fleet view (*fleet.View satisfies it).
type Fleet interface {
	List() []fleet.Proxy
	Get(key string) (fleet.Proxy, bool)
	Version() uint64
	Changed() <-chan struct{}
}

// Health is the prober's live verdict by proxy key (hooks.HealthSource and discovery.HealthSource have the same method).
type Health interface {
	Health(key string) verdict.Health
}

// Request asks for one lease.
type Request struct {
	// Selector must be contained in the proxy's attributes (equality on every pair).
	Selector map[string]string
	TTL      time.Duration
	// Target, when set, excludes proxies cooling down for it and proxies another live lease
	// holds for it.
	Target string
	// SessionKey, when set, asks for the proxy the same key got last, while it still fits.
	SessionKey string
	// Namespaces, when not nil, limits the lease to proxies in these namespaces (the caller's
	// lease rights); the NoMatchError then counts only those proxies.
	Namespaces []string
	// Holder names who asks (the discovery token's name; empty: nobody in particular). With a
	// store's MaxLeasesPerHolder, a holder's live leases in one namespace are bounded, so one
	// token cannot hold every proxy of a namespace that others lease from too.
	Holder string
	// HolderShares, by namespace, lowers the store's MaxLeasesPerHolder for this Holder there
	// (the caller's fair share: the namespace's capacity over the tokens that may lease in it,
	// decision 0259). A share at or above the store's bound, or a namespace absent, changes
	// nothing; nothing applies without a Holder or with the store's bound at 0.
	HolderShares map[string]int
	// Avoid are proxy keys passed over while another proxy fits; when none does, the best of
	// them is granted. The gateway rotates with it: the upstreams it used last for a target.
	Avoid []string
}

// Lease is a granted lease.
type Lease struct {
	ID         string
	Proxy      fleet.Proxy
	Health     verdict.Health
	Active     int // leases on the proxy including this one
	Target     string
	SessionKey string
	ExpiresAt  time.Time
}

// Result is what a crawler reports about a target seen through a proxy.
type Result string

const (
	ResultOK          Result = "ok"
	ResultRateLimited Result = "rate_limited"
	ResultBanned      Result = "banned"
)

// Valid reports whether r is one of the known results.
func (r Result) Valid() bool {
	return r == ResultOK || r == ResultRateLimited || r == ResultBanned
}

// Report is one crawler report.
type Report struct {
	Result Result
	Target string
	// RetryAfter is what the target asked for; longer than the default cooldown, it wins.
	RetryAfter time.Duration
}

// Cooldown is a proxy's exclusion for one target. Until is zero for an ok report.
type Cooldown struct {
	Proxy   string
	Target  string
	Until   time.Time
	Strikes int
	// Reason is the result of the report that set Until (rate_limited or banned). Cooling
	// sets it; Report leaves it empty (its caller knows what it reported).
	Reason Result
}

// MaxCoolingList bounds the cooldowns one Cooling call returns.
const MaxCoolingList = 1000

// CoolingQuery asks Store.Cooling for the cooldowns in force.
type CoolingQuery struct {
	// Namespaces, when not nil, limits the answer to proxies in these namespaces (the
	// caller's read rights).
	Namespaces []string
	// Limit bounds the cooldowns listed (0 or above MaxCoolingList: MaxCoolingList).
	Limit int
}

// CoolingList is Store.Cooling's answer.
type CoolingList struct {
	// Cooldowns are in force now, Until latest first, then by target and proxy.
	Cooldowns []Cooldown
	// Total is how many cooldowns are in force in the namespaces asked, listed or not.
	Total int
}

// limit is q's bound on the cooldowns listed.
func (q CoolingQuery) limit() int {
	if q.Limit <= 0 || q.Limit > MaxCoolingList {
		return MaxCoolingList
	}
	return q.Limit
}

// Limited is q's bound on the cooldowns listed, for stores outside this package.
func (q CoolingQuery) Limited() int { return q.limit() }

// SortCooling orders cooldowns as Cooling lists them: Until latest first, then target, then
// proxy.
func SortCooling(cs []Cooldown) {
	slices.SortFunc(cs, func(a, b Cooldown) int {
		if c := b.Until.Compare(a.Until); c != 0 {
			return c
		}
		if c := strings.Compare(a.Target, b.Target); c != 0 {
			return c
		}
		return strings.Compare(a.Proxy, b.Proxy)
	})
}

// NoMatchError says why nothing could be leased, with counts over the proxies that match
// the selector. Each such proxy is counted once, under the first reason that applies in the
// order unhealthy, at capacity, cooling, leased for the target.
type NoMatchError struct {
	Matching   int
	Unhealthy  int
	AtCapacity int
	Cooling    int
	// LeasedForTarget are proxies another live lease holds for the same target.
	LeasedForTarget int
	Target          string
	// FreeAt is the earliest time one of the matching proxies frees up without anyone acting:
	// a cooldown for the target ends, a lease held for the target expires, or (for proxies at
	// capacity) the store's first lease expires, a lower bound. A release can free one sooner.
	// Zero when no such time is known: none matches, or those that do are unhealthy.
	FreeAt time.Time
}

// noteFree keeps the earliest of the times a proxy frees up.
func (e *NoMatchError) noteFree(t time.Time) {
	if !t.IsZero() && (e.FreeAt.IsZero() || t.Before(e.FreeAt)) {
		e.FreeAt = t
	}
}

func (e *NoMatchError) Error() string { return e.Reason() }

func (e *NoMatchError) Unwrap() error { return ErrNoMatch }

// Reason is the sentence a client is shown.
func (e *NoMatchError) Reason() string {
	if e.Matching == 0 {
		return "no proxy matches the selector"
	}
	var parts []string
	if e.Unhealthy > 0 {
		parts = append(parts, fmt.Sprintf("%d unhealthy", e.Unhealthy))
	}
	if e.AtCapacity > 0 {
		parts = append(parts, fmt.Sprintf("%d at capacity", e.AtCapacity))
	}
	if e.Cooling > 0 {
		parts = append(parts, fmt.Sprintf("%d cooling down for %s", e.Cooling, e.Target))
	}
	if e.LeasedForTarget > 0 {
		parts = append(parts, fmt.Sprintf("%d already leased for %s", e.LeasedForTarget, e.Target))
	}
	return fmt.Sprintf("none of the %d proxies matching the selector can be leased: %s", e.Matching, strings.Join(parts, ", "))
}
