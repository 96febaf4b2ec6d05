package redisstore

import (
	"github.com/proxy-operator/proxy-operator/lease"
)

// The same bounds as lease.Memory's (issue 10, lease.Policy), and the same error: a refused
// report is a *lease.TooManyCooldownsError (discovery answers 429 naming the limit), never a 500.

func (s *Store) tooMany(scope, proxy string) error {
	switch scope {
	case "proxy":
		return &lease.TooManyCooldownsError{Scope: "proxy", Limit: s.cfg.MaxCooldownsPerProxy, Proxy: proxy}
	case "namespace":
		return &lease.TooManyCooldownsError{Scope: "namespace", Limit: s.cfg.MaxCooldownsPerNamespace, Proxy: proxy}
	}
	return &lease.TooManyCooldownsError{Scope: "total", Limit: s.cfg.MaxCooldowns}
}
