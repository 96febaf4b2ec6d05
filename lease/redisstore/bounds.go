package redisstore

import (
	"fmt"

	"github.com/proxy-operator/proxy-operator/lease"
)

// The same bounds as lease.Memory's (issue 10). Until the lease package has its own error for
// a refused report, it is an invalid request (400), never a 500.
const (
	defaultMaxCooldownsPerProxy = 1024
	defaultMaxCooldowns         = 65536
)

func tooMany(scope, proxy string, perProxy, total int) error {
	if scope == "proxy" {
		return fmt.Errorf("proxy %s already remembers %d cooldowns, the per-proxy limit: %w", proxy, perProxy, lease.ErrInvalid)
	}
	return fmt.Errorf("the store already remembers %d cooldowns, the total limit: %w", total, lease.ErrInvalid)
}
