package leasetest

import (
	"sync"

	"github.com/proxy-operator/proxy-operator/lifecycle"
)

// verdicts is a settable verdict per key; absent keys are Unknown.
type verdicts struct {
	mu sync.RWMutex
	m  map[string]lifecycle.Health
}

func newVerdicts() *verdicts { return &verdicts{m: map[string]lifecycle.Health{}} }

func (v *verdicts) Health(key string) lifecycle.Health {
	v.mu.RLock()
	defer v.mu.RUnlock()
	if h, ok := v.m[key]; ok {
		return h
	}
	return lifecycle.Health{State: lifecycle.HealthUnknown}
}

func (v *verdicts) set(key string, state lifecycle.HealthState, latency int64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.m[key] = lifecycle.Health{State: state, LatencyMillis: latency}
}
