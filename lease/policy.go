package lease

import (
	"errors"
	"fmt"
	"time"
)

// Policy is what every Store enforces, the in-memory one and the Redis one alike: how long a
// report cools a proxy for a target, how long a session outlives its last lease, and the bounds
// that keep one tenant or one holder from filling the store. Every process sharing a store
// must agree on it (the cooldown policy travels with each report). Its defaults are stated
// once, in DefaultPolicy, and applied once, by WithDefaults.
type Policy struct {
	// RateLimitedCooldown and BannedCooldown are the first cooldown for each result; each
	// further report while the previous one is remembered doubles it, up to MaxCooldown.
	RateLimitedCooldown time.Duration
	BannedCooldown      time.Duration
	MaxCooldown         time.Duration
	// SessionIdle is how long a session key stays bound to its proxy after its last lease ends.
	SessionIdle time.Duration
	// MaxSessions bounds the session table: beyond it a new key still gets a lease, unbound,
	// so clients that mint a key per request cannot grow memory without end.
	MaxSessions int
	// MaxCooldownsPerProxy and MaxCooldowns bound the remembered (proxy, target) cooldowns per
	// proxy and in total; a report past them is refused (see Store.Report).
	MaxCooldownsPerProxy int
	MaxCooldowns         int
	// MaxSessionsPerNamespace and MaxCooldownsPerNamespace bound each tenant (the proxies'
	// namespace): beyond its share a tenant's new session key is not bound and its new
	// rate_limited pair is refused, while a banned report is always recorded, in place of
	// the tenant's own oldest cooldown (see Store.Report). Unset, they are the defaults capped
	// at MaxSessions and MaxCooldowns.
	MaxSessionsPerNamespace  int
	MaxCooldownsPerNamespace int
	// MaxLeasesPerHolder, above 0, bounds the live leases of one Request.Holder in one
	// namespace: a holder at its share there is refused with a *TooManyLeasesError when no
	// proxy outside such namespaces fits. 0 is no bound (WithDefaults leaves it so; the
	// flags' default is DefaultMaxLeasesPerHolder); requests without a holder are never
	// bounded.
	MaxLeasesPerHolder int
}

// DefaultPolicy is the policy of a store whose settings nobody chose: the flags' defaults.
func DefaultPolicy() Policy {
	return Policy{
		RateLimitedCooldown: DefaultRateLimitedCooldown, BannedCooldown: DefaultBannedCooldown, MaxCooldown: DefaultMaxCooldown,
		SessionIdle: DefaultSessionIdle, MaxSessions: DefaultMaxSessions,
		MaxCooldownsPerProxy: DefaultMaxCooldownsPerProxy, MaxCooldowns: DefaultMaxCooldowns,
		MaxSessionsPerNamespace: DefaultMaxSessionsPerNamespace, MaxCooldownsPerNamespace: DefaultMaxCooldownsPerNamespace,
		MaxLeasesPerHolder: DefaultMaxLeasesPerHolder,
	}
}

// WithDefaults fills the unset (zero or negative) fields from DefaultPolicy, the per-namespace
// shares capped at the totals; MaxLeasesPerHolder is left as it is (0: no bound).
func (p Policy) WithDefaults() Policy {
	d := DefaultPolicy()
	or := func(v *time.Duration, def time.Duration) {
		if *v <= 0 {
			*v = def
		}
	}
	orInt := func(v *int, def int) {
		if *v <= 0 {
			*v = def
		}
	}
	or(&p.RateLimitedCooldown, d.RateLimitedCooldown)
	or(&p.BannedCooldown, d.BannedCooldown)
	or(&p.MaxCooldown, d.MaxCooldown)
	or(&p.SessionIdle, d.SessionIdle)
	orInt(&p.MaxSessions, d.MaxSessions)
	orInt(&p.MaxCooldownsPerProxy, d.MaxCooldownsPerProxy)
	orInt(&p.MaxCooldowns, d.MaxCooldowns)
	orInt(&p.MaxSessionsPerNamespace, min(d.MaxSessionsPerNamespace, p.MaxSessions))
	orInt(&p.MaxCooldownsPerNamespace, min(d.MaxCooldownsPerNamespace, p.MaxCooldowns))
	p.MaxLeasesPerHolder = max(p.MaxLeasesPerHolder, 0)
	return p
}

// Validate says which setting is out of range, by the flag that sets it: the cooldowns must be
// positive and the cap at least each of them, and no bound negative.
func (p Policy) Validate() error {
	switch {
	case p.RateLimitedCooldown <= 0 || p.BannedCooldown <= 0:
		return errors.New("-lease-cooldown and -lease-ban-cooldown must be positive")
	case p.MaxCooldown < p.RateLimitedCooldown || p.MaxCooldown < p.BannedCooldown:
		return fmt.Errorf("-lease-max-cooldown %s must be at least -lease-cooldown %s and -lease-ban-cooldown %s", p.MaxCooldown, p.RateLimitedCooldown, p.BannedCooldown)
	case p.MaxLeasesPerHolder < 0:
		return fmt.Errorf("-lease-max-per-token %d is negative (0: no bound)", p.MaxLeasesPerHolder)
	case p.MaxSessions < 0 || p.MaxCooldowns < 0 || p.MaxCooldownsPerProxy < 0 || p.MaxSessionsPerNamespace < 0 || p.MaxCooldownsPerNamespace < 0:
		return errors.New("the session and cooldown bounds must not be negative")
	}
	return nil
}
