package redisstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/proxy-operator/proxy-operator/internal/fleet"
	"github.com/proxy-operator/proxy-operator/internal/redistest"
	"github.com/proxy-operator/proxy-operator/lease"
)

// waitUntil polls cond until it holds, failing after a generous deadline (readiness, not
// timing: the test never asserts how long it took).
func waitUntil(t *testing.T, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > 60*time.Second {
			t.Fatalf("never %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(start)
}

// TestRedisDownAndBack: with Redis killed (SIGKILL, no shutdown save) every operation fails
// with lease.ErrUnavailable instead of hanging; once it is back from its append-only file the
// lease granted before renews, its cooldown still excludes the proxy for the target, the
// session is still sticky, and nothing was granted twice.
func TestRedisDownAndBack(t *testing.T) {
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	t.Cleanup(func() { client.Close() })
	s, err := New(Config{Client: client, Prefix: freshPrefix(), Timeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	view := fleet.New(time.Now, 0)
	for _, k := range []string{"ns/a", "ns/b"} {
		view.Upsert(fleet.Proxy{Key: k, IP: "10.0.0.1", Port: 3128, MaxLeases: 2})
	}
	pub := NewPublisher(PublisherConfig{Store: s, Fleet: view, Health: staticHealth{}})
	ctx := context.Background()
	if err := pub.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	l, err := s.Acquire(ctx, lease.Request{TTL: time.Hour, Target: "t.example", SessionKey: "s1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Report(ctx, l.ID, lease.Report{Result: lease.ResultBanned, Target: "t.example"}); err != nil {
		t.Fatal(err)
	}
	reader := NewReader(ReaderConfig{Store: s, StaleAfter: 200 * time.Millisecond})
	if err := reader.Refresh(ctx); err != nil || reader.Err() != nil || len(reader.List()) != 2 {
		t.Fatalf("reader before the outage: %v, %v, %d proxies", err, reader.Err(), len(reader.List()))
	}

	srv.Kill()
	ops := map[string]func() error{
		"acquire": func() error { _, err := s.Acquire(ctx, lease.Request{TTL: time.Minute}); return err },
		"renew":   func() error { _, err := s.Renew(ctx, l.ID, 0); return err },
		"release": func() error { return s.Release(ctx, "x") },
		"report": func() error {
			_, err := s.Report(ctx, l.ID, lease.Report{Result: lease.ResultOK, Target: "x"})
			return err
		},
		"active": func() error { _, err := s.Active(ctx); return err },
		"publish": func() error {
			view.Upsert(fleet.Proxy{Key: "ns/c", IP: "10.0.0.1", MaxLeases: 1})
			return pub.Sync(ctx)
		},
		"read": func() error { return reader.Refresh(ctx) },
	}
	for name, op := range ops {
		if err := op(); !errors.Is(err, lease.ErrUnavailable) {
			t.Errorf("%s with Redis down: err %v, want ErrUnavailable", name, err)
		}
	}
	waitUntil(t, "reported the reader's copy stale", func() bool { return errors.Is(reader.Err(), lease.ErrUnavailable) })

	srv.Restart()
	waitUntil(t, "renewed the lease after Redis came back", func() bool {
		_, err := s.Renew(ctx, l.ID, time.Hour)
		return err == nil
	})
	// The session is sticky and the cooldown still excludes the proxy for its target.
	again, err := s.Acquire(ctx, lease.Request{TTL: time.Hour, SessionKey: "s1"})
	if err != nil || again.Proxy.Key != l.Proxy.Key || again.Active != 2 {
		t.Fatalf("session lease after the restart: %+v, %v; want %s with 2 active", again, err, l.Proxy.Key)
	}
	other, err := s.Acquire(ctx, lease.Request{TTL: time.Hour, Target: "t.example"})
	if err != nil || other.Proxy.Key == l.Proxy.Key {
		t.Fatalf("lease for the banned target after the restart: %+v, %v; want not %s", other, err, l.Proxy.Key)
	}
	// The publish that failed during the outage went through once Redis was back.
	if err := pub.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if err := reader.Refresh(ctx); err != nil || reader.Err() != nil {
		t.Fatalf("reader after the outage: %v, %v", err, reader.Err())
	}
	if _, ok := reader.Get("ns/c"); !ok {
		t.Errorf("proxy published while Redis was down is missing after it came back")
	}
	got, err := s.Active(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got[l.Proxy.Key] != 2 || got[other.Proxy.Key] != 1 {
		t.Errorf("leases per proxy after the restart %v, want 2 on %s and 1 on %s", got, l.Proxy.Key, other.Proxy.Key)
	}
}

// TestSlowRedisIsUnavailable: a Redis that does not answer within Timeout (paused for 1.5 s)
// fails the call with lease.ErrUnavailable rather than holding the caller, and answers again
// once the pause ends.
func TestSlowRedisIsUnavailable(t *testing.T) {
	srv := redistest.Start(t)
	s, err := New(Config{Client: newClient(t, srv), Prefix: freshPrefix(), Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	admin := newClient(t, srv)
	if err := admin.Do(ctx, "CLIENT", "PAUSE", "1500", "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Acquire(ctx, lease.Request{TTL: time.Minute}); !errors.Is(err, lease.ErrUnavailable) {
		t.Errorf("acquire on a paused Redis: err %v, want ErrUnavailable", err)
	}
	waitUntil(t, "answered after the pause", func() bool {
		_, err := s.Acquire(ctx, lease.Request{TTL: time.Minute})
		return errors.Is(err, lease.ErrNoMatch) // an empty fleet: an answer, not an outage
	})
}

// TestScriptErrorIsNotUnavailable: an error reply that is a defect, not an outage, is not
// dressed as ErrUnavailable (it is a 500 to find and fix, not a 503 to retry).
func TestScriptErrorIsNotUnavailable(t *testing.T) {
	srv := redistest.Start(t)
	client := newClient(t, srv)
	prefix := freshPrefix()
	s, err := New(Config{Client: client, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// A key of the wrong type where the store keeps its lease expiry.
	if err := client.Set(ctx, prefix+"exp", "not a sorted set", 0).Err(); err != nil {
		t.Fatal(err)
	}
	_, err = s.Acquire(ctx, lease.Request{TTL: time.Minute})
	if err == nil || errors.Is(err, lease.ErrUnavailable) || errors.Is(err, lease.ErrNoMatch) {
		t.Errorf("acquire over a corrupt key: err %v, want a plain error", err)
	}
}
