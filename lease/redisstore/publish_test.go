package redisstore

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/internal/fleet"
	"github.com/proxy-operator/proxy-operator/internal/logtest"
	"github.com/proxy-operator/proxy-operator/internal/redistest"
	"github.com/proxy-operator/proxy-operator/lease"
)

// TestPublisherAfterARestart: a restarted operator's view fills gradually. Until it is
// complete the publisher only adds and updates, so a proxy not yet re-synced keeps its record
// and its leases in Redis; the first complete pass removes what the fleet lost meanwhile (and
// its leases), and marks the store complete for replicas. Run follows later changes by itself.
func TestPublisherAfterARestart(t *testing.T) {
	srv := redistest.Start(t)
	s, err := New(Config{Client: newClient(t, srv), Prefix: freshPrefix()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	before := fleet.New(time.Now, 0)
	for _, k := range []string{"ns/a", "ns/b", "ns/gone"} {
		before.Upsert(fleet.Proxy{Key: k, IP: "10.0.0.1", Port: 3128, MaxLeases: 2})
	}
	if err := NewPublisher(PublisherConfig{Store: s, Fleet: before, Health: staticHealth{}}).Sync(ctx); err != nil {
		t.Fatal(err)
	}
	var leases []lease.Lease
	for range 3 {
		l, err := s.Acquire(ctx, lease.Request{TTL: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		leases = append(leases, l)
	}
	reader := NewReader(ReaderConfig{Store: s})
	if err := reader.Refresh(ctx); err != nil || !reader.Complete() {
		t.Fatalf("reader before the restart: %v, complete %v", err, reader.Complete())
	}

	// The restarted operator: a view holding one proxy of three so far.
	after := fleet.New(time.Now, 0)
	after.Upsert(fleet.Proxy{Key: "ns/a", IP: "10.0.0.1", Port: 3128, MaxLeases: 2})
	var complete atomic.Bool
	var logged logtest.Buffer
	pub := NewPublisher(PublisherConfig{Store: s, Fleet: after, Health: staticHealth{}, Complete: complete.Load, Refresh: 10 * time.Millisecond,
		Log: slog.New(slog.NewTextHandler(&logged, nil))})
	if err := pub.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := s.Active(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || reader.Refresh(ctx) != nil || len(reader.List()) != 3 {
		t.Fatalf("incomplete view: leases per proxy %v, %d proxies listed; want all 3 kept", got, len(reader.List()))
	}
	for _, l := range leases {
		if _, err := s.Renew(ctx, l.ID, 0); err != nil {
			t.Errorf("renew of %s on %s during the warm-up: %v", l.ID, l.Proxy.Key, err)
		}
	}

	// ns/b is synced again; ns/gone was deleted while the operator was down. Then the view
	// is complete, and Run takes it from there.
	after.Upsert(fleet.Proxy{Key: "ns/b", IP: "10.0.0.1", Port: 3128, MaxLeases: 2})
	complete.Store(true)
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- pub.Run(runCtx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	waitUntil(t, "removed the proxy the fleet lost, and said so", func() bool {
		return strings.Contains(logged.String(), "removed=1 kept=2 examples=[ns/gone]")
	})
	waitUntil(t, "removed the proxy the fleet lost", func() bool {
		return reader.Refresh(ctx) == nil && len(reader.List()) == 2
	})
	if _, ok := reader.Get("ns/gone"); ok {
		t.Errorf("ns/gone still listed")
	}
	got, err = s.Active(ctx)
	if err != nil || got["ns/gone"] != 0 || got["ns/a"]+got["ns/b"] != 2 {
		t.Errorf("leases per proxy after the complete pass %v (%v): want ns/gone's dropped, the others kept", got, err)
	}
	after.Upsert(fleet.Proxy{Key: "ns/c", IP: "10.0.0.1", Port: 3128, MaxLeases: 2, Attributes: map[string]string{"geo": "eu"}})
	waitUntil(t, "published a proxy added later", func() bool {
		_, ok := reader.Get("ns/c")
		return reader.Refresh(ctx) == nil && ok
	})
	if l, err := s.Acquire(ctx, lease.Request{TTL: time.Minute, Selector: map[string]string{"geo": "eu"}}); err != nil || l.Proxy.Key != "ns/c" {
		t.Errorf("lease on the new attribute set: %+v, %v", l, err)
	}
}
