package redisstore

import "fmt"

// The same bounds as lease.Memory's (issue 10); until lease has them, they live here.
const (
	defaultMaxCooldownsPerProxy = 1024
	defaultMaxCooldowns         = 65536
)

func tooMany(scope, proxy string, perProxy, total int) error {
	if scope == "proxy" {
		return fmt.Errorf("proxy %s already remembers %d cooldowns, the per-proxy limit", proxy, perProxy)
	}
	return fmt.Errorf("the store already remembers %d cooldowns, the total limit", total)
}
