package redisstore

import (
	"github.com/proxy-operator/proxy-operator/lease"
)

// The same bounds as lease.Memory's (issue 10), and the same error: a refused report is a
// *lease.TooManyCooldownsError (discovery answers 429 naming the limit), never a 500.
const (
	defaultMaxCooldownsPerProxy = lease.DefaultMaxCooldownsPerProxy
	defaultMaxCooldowns         = lease.DefaultMaxCooldowns
)

func tooMany(scope, proxy string, perProxy, total int) error {
	if scope == "proxy" {
		return &lease.TooManyCooldownsError{Scope: "proxy", Limit: perProxy, Proxy: proxy}
	}
	return &lease.TooManyCooldownsError{Scope: "total", Limit: total}
}
