package redisstore

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/proxy-operator/proxy-operator/internal/redistest"
	"github.com/proxy-operator/proxy-operator/lease/leasetest"
)

var prefixes atomic.Int64

// freshPrefix gives each store under test its own keys in a shared redis-server.
func freshPrefix() string { return fmt.Sprintf("{t%d}:", prefixes.Add(1)) }

func newClient(t testing.TB, srv *redistest.Server) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { c.Close() })
	return c
}

// envConfig is the store's Config for a conformance case's env.
func envConfig(client redis.UniversalClient, env leasetest.Env) Config {
	return Config{Client: client, Prefix: freshPrefix(), Now: env.Now, MaxSessions: env.MaxSessions,
		MaxCooldowns: env.MaxCooldowns, MaxCooldownsPerNamespace: env.MaxCooldownsPerNamespace,
		MaxSessionsPerNamespace: env.MaxSessionsPerNamespace, MaxLeasesPerHolder: env.MaxLeasesPerHolder, Admit: env.Admit}
}

// TestConformance runs the lease.Store suite against the Redis store on a real redis-server.
func TestConformance(t *testing.T) {
	conformance(t, newClient(t, redistest.Start(t)), 0)
}
