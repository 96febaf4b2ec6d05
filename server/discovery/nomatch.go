package discovery

import (
	"math"
	"time"

	"github.com/proxy-operator/proxy-operator/lease"
)

// refusalReasons are the values of proxy_operator_lease_refused_total's reason label.
var refusalReasons = []string{"no_proxy", "cooling", "leased_for_target", "at_capacity", "unhealthy", "warming_up", "store_unavailable", "token_share"}

// refusalReason is the reason that held back most of the matching proxies (ties: the order
// of refusalReasons).
func refusalReason(nm *lease.NoMatchError) string {
	if nm.Matching == 0 {
		return "no_proxy"
	}
	best, n := "unhealthy", 0
	for _, c := range []struct {
		reason string
		n      int
	}{{"cooling", nm.Cooling}, {"leased_for_target", nm.LeasedForTarget}, {"at_capacity", nm.AtCapacity}, {"unhealthy", nm.Unhealthy}} {
		if c.n > n {
			best, n = c.reason, c.n
		}
	}
	return best
}

// noMatchWait is a 409's Retry-After, in whole seconds (at least 1): until the earliest time
// a matching proxy frees up by itself, at most ReleaseRetryAfter while a holder could release
// one sooner, and NoMatchRetryAfter when no time is known.
func noMatchWait(nm *lease.NoMatchError, now time.Time) time.Duration {
	wait := NoMatchRetryAfter
	if !nm.FreeAt.IsZero() {
		wait = nm.FreeAt.Sub(now)
	}
	if nm.AtCapacity+nm.LeasedForTarget > 0 {
		wait = min(wait, ReleaseRetryAfter)
	}
	return time.Duration(max(1, math.Ceil(wait.Seconds()))) * time.Second
}
