// Package healthtest is the one fake prober for tests: a verdict per proxy key that the test
// sets, with a fallback for keys it never set (Unknown unless SetDefault says otherwise). It
// satisfies hooks.HealthSource, discovery.HealthSource and lease.Health, and is safe for
// concurrent use, as the real health.Scheduler is.
package healthtest

import (
	"sync"

	"github.com/proxy-operator/proxy-operator/internal/verdict"
)

// Map is a settable verdict per key. The zero value answers Unknown for every key.
type Map struct {
	mu       sync.RWMutex
	m        map[string]verdict.Health
	fallback verdict.Health
}

// Health is the verdict set for key, else the default.
func (f *Map) Health(key string) verdict.Health {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if h, ok := f.m[key]; ok {
		return h
	}
	if f.fallback.State == "" {
		return verdict.Health{State: verdict.Unknown}
	}
	return f.fallback
}

// Set records the verdict on key.
func (f *Map) Set(key string, h verdict.Health) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.m == nil {
		f.m = map[string]verdict.Health{}
	}
	f.m[key] = h
}

// SetState records a verdict of state and latency on key.
func (f *Map) SetState(key string, state verdict.State, latencyMillis int64) {
	f.Set(key, verdict.Health{State: state, LatencyMillis: latencyMillis})
}

// SetDefault is the verdict on every key not set one by one.
func (f *Map) SetDefault(h verdict.Health) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fallback = h
}
