package health

import (
	"fmt"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/internal/fleet"
	"github.com/proxy-operator/proxy-operator/internal/verdict"
)

// BenchmarkHealthRead measures what the discovery API pays per proxy on every list and
// lease: Health over a 10,000-proxy fleet from parallel readers, against a baseline read of
// an unsynchronised map of the same size in the same run.
func BenchmarkHealthRead(b *testing.B) {
	const n = 10_000
	keys := make([]string, n)
	plain := make(map[string]verdict.Health, n)
	view := fleet.New(time.Now, 0)
	s, err := New(Config{View: view, Prober: &gate{}})
	if err != nil {
		b.Fatal(err)
	}
	for i := range keys {
		keys[i] = fmt.Sprintf("bench/p%05d", i)
		h := verdict.Health{State: verdict.Healthy, LatencyMillis: int64(i)}
		plain[keys[i]] = h
		s.publish(keys[i], h)
	}
	b.Run("baseline-map", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				if plain[keys[i%n]].State != verdict.Healthy {
					b.Fatal("not healthy")
				}
				i++
			}
		})
	})
	b.Run("Health", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				if s.Health(keys[i%n]).State != verdict.Healthy {
					b.Fatal("not healthy")
				}
				i++
			}
		})
	})
}
