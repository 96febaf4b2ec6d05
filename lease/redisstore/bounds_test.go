package redisstore

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/internal/clocktest"
	"github.com/proxy-operator/proxy-operator/internal/fleet"
	"github.com/proxy-operator/proxy-operator/internal/redistest"
	"github.com/proxy-operator/proxy-operator/lease"
)

// TestCooldownBounds: a report that would remember a new (proxy, target) pair past the
// per-proxy or the total bound is refused and changes nothing; a pair already remembered is
// never refused; forgotten pairs stop counting.
func TestCooldownBounds(t *testing.T) {
	srv := redistest.Start(t)
	clock := clocktest.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	s, err := New(Config{Client: newClient(t, srv), Prefix: freshPrefix(), Now: clock.Now, MaxCooldownsPerProxy: 2, MaxCooldowns: 3})
	if err != nil {
		t.Fatal(err)
	}
	view := fleet.New(time.Now, 0)
	for _, k := range []string{"ns/a", "ns/b"} {
		view.Upsert(fleet.Proxy{Key: k, IP: "10.0.0.1", Port: 3128, MaxLeases: 5})
	}
	ctx := context.Background()
	if err := NewPublisher(PublisherConfig{Store: s, Fleet: view, Health: staticHealth{}}).Sync(ctx); err != nil {
		t.Fatal(err)
	}
	onProxy := map[string]string{}
	for len(onProxy) < 2 {
		l, err := s.Acquire(ctx, lease.Request{TTL: 24 * time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		onProxy[l.Proxy.Key] = l.ID
	}
	report := func(proxy, target string) error {
		_, err := s.Report(ctx, onProxy[proxy], lease.Report{Result: lease.ResultRateLimited, Target: target})
		return err
	}
	for i, step := range []struct {
		proxy, target string
		refused       bool
	}{
		{"ns/a", "t1", false},
		{"ns/a", "t2", false},
		{"ns/a", "t3", true},  // ns/a's bound of 2
		{"ns/a", "t1", false}, // already remembered: never refused
		{"ns/b", "t1", false}, // 3 in all
		{"ns/b", "t2", true},  // the total bound of 3
	} {
		err := report(step.proxy, step.target)
		if refused := errors.Is(err, lease.ErrTooManyCooldowns); refused != step.refused || (err != nil && !refused) {
			t.Fatalf("step %d (%s, %s): err %v, refused want %v", i, step.proxy, step.target, err, step.refused)
		}
	}
	clock.Advance(time.Hour) // every pair forgotten (15 min cooldown, as long again to forget)
	for i := range 2 {
		if err := report("ns/b", fmt.Sprint("new", i)); err != nil {
			t.Errorf("report after the others were forgotten: %v", err)
		}
	}
}
