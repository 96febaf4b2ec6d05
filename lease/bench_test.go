package lease

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/internal/fleet"
	"github.com/proxy-operator/proxy-operator/internal/healthtest"
	"github.com/proxy-operator/proxy-operator/internal/verdict"
)

// benchFleet is n healthy proxies over 10 attribute sets.
func benchFleet(n int) (*fleet.View, *healthtest.Map, []fleet.Proxy) {
	view := fleet.New(time.Now, 0)
	health := &healthtest.Map{}
	geos := []string{"eu", "us", "asia", "sa", "af"}
	var all []fleet.Proxy
	for i := range n {
		p := fleet.Proxy{Key: fmt.Sprintf("ns/p%06d", i), IP: "10.0.0.1", Port: 3128, MaxLeases: 4,
			Attributes: map[string]string{"geo": geos[i%5], "purpose": []string{"crawl", "scrape"}[i/5%2]}}
		view.Upsert(p)
		health.SetState(p.Key, verdict.Healthy, int64(20+i*7919%300))
		all = append(all, p)
	}
	return view, health, all
}

// BenchmarkAcquireRelease is one acquire and one release through the index, at growing fleet
// sizes; "scan" is the same choice made by a pass over the whole fleet per lease (what the
// index replaces), in the same run. The index's cost should stay flat as the fleet grows.
func BenchmarkAcquireRelease(b *testing.B) {
	ctx := context.Background()
	sel := map[string]string{"geo": "eu"}
	for _, n := range []int{1000, 10000, 100000} {
		view, health, all := benchFleet(n)
		b.Run(fmt.Sprintf("index/proxies=%d", n), func(b *testing.B) {
			m := NewMemory(Config{Fleet: view, Health: health})
			for b.Loop() {
				l, err := m.Acquire(ctx, Request{Selector: sel, TTL: time.Minute, Target: "example.com"})
				if err != nil {
					b.Fatal(err)
				}
				_ = m.Release(ctx, l.ID)
			}
		})
		b.Run(fmt.Sprintf("scan/proxies=%d", n), func(b *testing.B) {
			load := map[string]int{}
			for b.Loop() {
				var best *fleet.Proxy
				var bestLat int64
				for i := range all {
					p := &all[i]
					if !fleet.Matches(p.Attributes, sel) || load[p.Key] >= int(p.MaxLeases) {
						continue
					}
					h := health.Health(p.Key)
					if h.State != verdict.Healthy {
						continue
					}
					if best == nil || load[p.Key] < load[best.Key] || load[p.Key] == load[best.Key] && h.LatencyMillis < bestLat {
						best, bestLat = p, h.LatencyMillis
					}
				}
				load[best.Key]++
				load[best.Key]--
			}
		})
	}
}

// BenchmarkReapWithCooldowns is one Reap while the store remembers n cooldowns that are not
// yet due. Reap walks a heap, so its cost should stay flat as n grows (it used to walk the
// whole table under the lock every second).
func BenchmarkReapWithCooldowns(b *testing.B) {
	ctx := context.Background()
	for _, n := range []int{0, 1000, 60000} {
		b.Run(fmt.Sprintf("cooldowns=%d", n), func(b *testing.B) {
			view, health, _ := benchFleet(100)
			m := NewMemory(Config{Fleet: view, Health: health, MaxCooldownsPerProxy: n + 1, MaxCooldowns: n + 1})
			l, err := m.Acquire(ctx, Request{TTL: time.Hour})
			if err != nil {
				b.Fatal(err)
			}
			for i := range n {
				if _, err := m.Report(ctx, l.ID, Report{Result: ResultRateLimited, Target: fmt.Sprint("t", i)}); err != nil {
					b.Fatal(err)
				}
			}
			for b.Loop() {
				m.Reap()
			}
		})
	}
}
