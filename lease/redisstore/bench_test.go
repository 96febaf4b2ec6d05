package redisstore

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/internal/fleet"
	"github.com/proxy-operator/proxy-operator/internal/redistest"
	"github.com/proxy-operator/proxy-operator/internal/verdict"
	"github.com/proxy-operator/proxy-operator/lease"
)

type benchHealth map[string]verdict.Health

func (h benchHealth) Health(key string) verdict.Health { return h[key] }

// benchView is n healthy proxies over 10 attribute sets (as lease's own benchmark).
func benchView(n int) (*fleet.View, benchHealth) {
	view := fleet.New(time.Now, 0)
	health := benchHealth{}
	geos := []string{"eu", "us", "asia", "sa", "af"}
	for i := range n {
		p := fleet.Proxy{Key: fmt.Sprintf("ns/p%06d", i), IP: "10.0.0.1", Port: 3128, MaxLeases: 4,
			Attributes: map[string]string{"geo": geos[i%5], "purpose": []string{"crawl", "scrape"}[i/5%2]}}
		view.Upsert(p)
		health[p.Key] = verdict.Health{State: verdict.Healthy, LatencyMillis: int64(20 + i*7919%300)}
	}
	return view, health
}

// BenchmarkAcquireRelease is one acquire and one release from 64 goroutines at once, through
// the in-memory store and through the Redis store on a real local redis-server, at 1,000 and
// 10,000 proxies in the same run. ns/op is per cycle over all goroutines; p99-ms is one
// cycle's 99th percentile.
func BenchmarkAcquireRelease(b *testing.B) {
	srv := redistest.Start(b)
	ctx := context.Background()
	sel := map[string]string{"geo": "eu"}
	for _, n := range []int{1000, 10000} {
		view, health := benchView(n)
		mem := lease.NewMemory(lease.Config{Fleet: view, Health: health})
		rs, err := New(Config{Client: newClient(b, srv), Prefix: freshPrefix()})
		if err != nil {
			b.Fatal(err)
		}
		if err := NewPublisher(PublisherConfig{Store: rs, Fleet: view, Health: health}).Sync(ctx); err != nil {
			b.Fatal(err)
		}
		for _, st := range []struct {
			name  string
			store lease.Store
		}{{"memory", mem}, {"redis", rs}} {
			b.Run(fmt.Sprintf("%s/proxies=%d", st.name, n), func(b *testing.B) {
				for range 256 { // warm the connection pool and the script cache
					if l, err := st.store.Acquire(ctx, lease.Request{Selector: sel, TTL: time.Minute}); err == nil {
						_ = st.store.Release(ctx, l.ID)
					}
				}
				b.ResetTimer()
				var mu sync.Mutex
				var all []time.Duration
				b.SetParallelism(max(1, 64/runtime.GOMAXPROCS(0))) // 64 goroutines in all
				b.RunParallel(func(pb *testing.PB) {
					var mine []time.Duration
					for pb.Next() {
						t0 := time.Now()
						l, err := st.store.Acquire(ctx, lease.Request{Selector: sel, TTL: time.Minute, Target: "example.com"})
						if err != nil {
							b.Error(err)
							return
						}
						if err := st.store.Release(ctx, l.ID); err != nil {
							b.Error(err)
							return
						}
						mine = append(mine, time.Since(t0))
					}
					mu.Lock()
					all = append(all, mine...)
					mu.Unlock()
				})
				if len(all) > 0 {
					slices.Sort(all)
					b.ReportMetric(float64(all[len(all)*99/100].Microseconds())/1000, "p99-ms")
				}
			})
		}
	}
}
