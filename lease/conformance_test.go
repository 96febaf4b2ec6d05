package lease_test

import (
	"testing"

	"github.com/proxy-operator/proxy-operator/lease"
	"github.com/proxy-operator/proxy-operator/lease/leasetest"
)

// TestMemoryConformance runs the suite every lease.Store passes (lease/redisstore runs it
// against a real Redis).
func TestMemoryConformance(t *testing.T) {
	leasetest.Run(t, func(t *testing.T, env leasetest.Env) leasetest.Harness {
		m := lease.NewMemory(lease.Config{Fleet: env.Fleet, Health: env.Health, Now: env.Now, MaxSessions: env.MaxSessions,
			MaxCooldowns: env.MaxCooldowns, MaxCooldownsPerNamespace: env.MaxCooldownsPerNamespace,
			MaxSessionsPerNamespace: env.MaxSessionsPerNamespace, MaxLeasesPerHolder: env.MaxLeasesPerHolder,
			PreferBand: env.PreferBand, Admit: env.Admit})
		return leasetest.Harness{
			Store: m,
			Sync:  func(*testing.T) { m.Sync(); m.RefreshHealth() },
			Reap:  func(*testing.T) { m.Reap() },
		}
	})
}
