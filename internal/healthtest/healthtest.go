// Package healthtest is the one fake prober for tests: a verdict per proxy key that the test
// sets, with a fallback for keys it never set (Unknown unless SetDefault says otherwise). It
// satisfies hooks.HealthSource, discovery.HealthSource and lease.Health, and is safe for
// concurrent use, as the real health.Scheduler is.
package healthtest

import (
	"sync"

	"github.com/proxy-operator/proxy-operator/internal/lifecycle"
)

// Map is a settable verdict per key. The zero value answers Unknown for every key.
type Map struct {
	mu       sync.RWMutex
	m        map[string]lifecycle.Health
	fallback lifecycle.Health
}

// Health is the verdict set for key, else the default.
func (f *Map) Health(key string) lifecycle.Health {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if h, ok := f.m[key]; ok {
		return h
	}
	if f.fallback.State == "" {
		return lifecycle.Health{State: lifecycle.HealthUnknown}
	}
	return f.fallback
}

// Set records the verdict on key.
func (f *Map) Set(key string, h lifecycle.Health) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.m == nil {
		f.m = map[string]lifecycle.Health{}
	}
	f.m[key] = h
}

// SetState records a verdict of state and latency on key.
func (f *Map) SetState(key string, state lifecycle.HealthState, latencyMillis int64) {
	f.Set(key, lifecycle.Health{State: state, LatencyMillis: latencyMillis})
}

// SetDefault is the verdict on every key not set one by one.
func (f *Map) SetDefault(h lifecycle.Health) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fallback = h
}
