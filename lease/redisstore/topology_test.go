package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/proxy-operator/proxy-operator/internal/redistest"
	"github.com/proxy-operator/proxy-operator/lease/leasetest"
)

// conformance runs the lease.Store suite on client, each case under its own prefix (so on a
// Cluster the cases spread over the slots of every primary).
func conformance(t *testing.T, client redis.UniversalClient, waitReplicas int) {
	leasetest.Run(t, func(t *testing.T, env leasetest.Env) leasetest.Harness {
		// Generous timeouts: on a loaded 2-core machine a replica's acknowledgement can take
		// longer than the production default; the suite checks semantics, not latency.
		cfg := envConfig(client, env)
		cfg.WaitReplicas, cfg.Timeout, cfg.WaitTimeout = waitReplicas, 10*time.Second, 5*time.Second
		s, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		pub := NewPublisher(PublisherConfig{Store: s, Fleet: env.Fleet, Health: env.Health, PreferBand: env.PreferBand})
		return leasetest.Harness{
			Store: s,
			Sync: func(t *testing.T) {
				t.Helper()
				if err := pub.Sync(context.Background()); err != nil {
					t.Fatalf("publish: %v", err)
				}
			},
			Reap: func(t *testing.T) {
				t.Helper()
				if err := s.Sweep(context.Background()); err != nil {
					t.Fatalf("sweep: %v", err)
				}
			},
		}
	})
}

// TestConformanceCluster runs the suite on a Redis Cluster of three primaries through the
// redis+cluster:// URL: every script's keys share the prefix's hash tag, so Cluster accepts
// them, and the cases' prefixes land on all three primaries.
func TestConformanceCluster(t *testing.T) {
	nodes := redistest.StartCluster(t, 3)
	client, err := NewClient(ClientConfig{URL: redistest.ClusterURL(nodes)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	conformance(t, client, 0)
	// The cases' data really was spread: every primary holds some of it.
	for _, n := range nodes {
		if k, err := n.Client().DBSize(context.Background()).Result(); err != nil || k == 0 {
			t.Errorf("primary %s holds %d keys (%v): the prefixes did not spread over the cluster", n.Addr, k, err)
		}
	}
}

// TestConformanceSentinel runs the suite through a Sentinel master set with every change
// waiting for one replica (WAIT in the script's pipeline).
func TestConformanceSentinel(t *testing.T) {
	set := redistest.StartSentinelSet(t, 2, 3)
	client, err := NewClient(ClientConfig{URL: set.URL()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	conformance(t, client, 1)
}
