package redisstore

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/internal/fleet"
	"github.com/proxy-operator/proxy-operator/lease"
)

// TestCooldownBounds: a report that would remember a new (proxy, target) pair past the
// per-proxy or the total bound is refused and changes nothing; a pair already remembered is
// never refused; forgotten pairs stop counting.
func TestCooldownBounds(t *testing.T) {
	s, clock := boundedStore(t)
	publish(t, s, fleet.Proxy{Key: "ns/a", IP: "10.0.0.1", Port: 3128, MaxLeases: 5}, fleet.Proxy{Key: "ns/b", IP: "10.0.0.1", Port: 3128, MaxLeases: 5})
	ctx := context.Background()
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
