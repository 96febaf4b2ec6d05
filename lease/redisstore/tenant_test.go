package redisstore

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/internal/fleet"
	"github.com/proxy-operator/proxy-operator/internal/netpolicy"
	"github.com/proxy-operator/proxy-operator/internal/redistest"
	"github.com/proxy-operator/proxy-operator/lease"
)

// TestBannedNeverRefused: a banned report at the proxy's or the store's bound is recorded,
// in place of the proxy's first-ending cooldown or (a namespace with none) the store's next
// to be forgotten; a rate_limited one there is still refused.
func TestBannedNeverRefused(t *testing.T) {
	s, clock := boundedStore(t)
	publish(t, s, fleet.Proxy{Key: "a/p", IP: "10.0.0.1", Port: 3128, MaxLeases: 50}, fleet.Proxy{Key: "b/p", IP: "10.0.0.1", Port: 3128, MaxLeases: 50})
	ctx := context.Background()
	lease1 := func(ns string, target string) (lease.Lease, error) {
		return s.Acquire(ctx, lease.Request{TTL: 24 * time.Hour, Namespaces: []string{ns}, Target: target})
	}
	a, _ := lease1("a", "")
	b, _ := lease1("b", "")
	report := func(l lease.Lease, r lease.Result, target string) error {
		_, err := s.Report(ctx, l.ID, lease.Report{Result: r, Target: target})
		return err
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(report(a, lease.ResultRateLimited, "t1"))
	clock.Advance(time.Second)
	must(report(a, lease.ResultRateLimited, "t2"))
	if err := report(a, lease.ResultRateLimited, "t3"); !errors.Is(err, lease.ErrTooManyCooldowns) {
		t.Fatalf("rate_limited beyond the proxy's bound: %v, want refused", err)
	}
	must(report(a, lease.ResultBanned, "t3")) // takes t1's place: it ends first
	for target, cooling := range map[string]bool{"t1": false, "t2": true, "t3": true} {
		_, err := lease1("a", target)
		if got := errors.Is(err, lease.ErrNoMatch); got != cooling {
			t.Errorf("a/p for %s: %v, want cooling %v", target, err, cooling)
		}
	}
	// The store's bound of 3 is full (a: t2, t3; b: none yet after this one).
	must(report(b, lease.ResultRateLimited, "u1"))
	if err := report(b, lease.ResultRateLimited, "u2"); !errors.Is(err, lease.ErrTooManyCooldowns) {
		t.Fatalf("rate_limited beyond the store's bound: %v, want refused", err)
	}
	must(report(b, lease.ResultBanned, "u2")) // takes b's own oldest (u1) place, not a's
	for target, cooling := range map[string]bool{"u1": false, "u2": true} {
		_, err := lease1("b", target)
		if got := errors.Is(err, lease.ErrNoMatch); got != cooling {
			t.Errorf("b/p for %s: %v, want cooling %v", target, err, cooling)
		}
	}
	if _, err := lease1("a", "t2"); !errors.Is(err, lease.ErrNoMatch) {
		t.Errorf("a's cooldown was evicted for b's ban: %v", err)
	}
}

// TestForeignRecordDenied is issue 21 (point 6): records read from Redis were not checked by
// the egress policy at lease time. A record rewritten by whoever can write to Redis, pointing
// at a metadata address, is never leased; it is counted and logged once.
func TestForeignRecordDenied(t *testing.T) {
	srv := redistest.Start(t)
	client := newClient(t, srv)
	policy, err := netpolicy.New(netpolicy.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	s, err := New(Config{Client: client, Prefix: freshPrefix(), Log: slog.New(slog.NewTextHandler(&logs, nil)),
		Admit: func(p fleet.Proxy) error { return policy.CheckHost(p.IP, uint16(p.Port), netpolicy.Dest{}) }})
	if err != nil {
		t.Fatal(err)
	}
	publish(t, s, fleet.Proxy{Key: "ns/good", IP: "10.0.0.1", Port: 3128, MaxLeases: 5}, fleet.Proxy{Key: "ns/taken", IP: "10.0.0.2", Port: 3128, MaxLeases: 5})
	ctx := context.Background()
	// The attacker rewrites ns/taken's record; it stays in the index, leasable.
	forged, _ := encodeProxy(fleet.Proxy{Key: "ns/taken", IP: "169.254.169.254", Port: 80, MaxLeases: 5,
		Credentials: &fleet.Credentials{Username: "evil", Password: "evilpass"}})
	if err := client.HSet(ctx, s.Prefix()+"fleet", "ns/taken", forged).Err(); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		l, err := s.Acquire(ctx, lease.Request{TTL: time.Minute})
		if err != nil {
			t.Fatalf("lease %d: %v", i, err)
		}
		if l.Proxy.Key != "ns/good" || l.Proxy.IP != "10.0.0.1" {
			t.Fatalf("lease %d handed out %s at %s, want ns/good", i, l.Proxy.Key, l.Proxy.IP)
		}
	}
	if n := s.DeniedRecords(); n != 1 {
		t.Errorf("denied records %d, want 1 (skipped after the first)", n)
	}
	if n := strings.Count(logs.String(), "denied by the egress policy"); n != 1 {
		t.Errorf("%d log lines about the record, want 1:\n%s", n, logs.String())
	}
	if strings.Contains(logs.String(), "evilpass") {
		t.Errorf("the log carries the record's password:\n%s", logs.String())
	}
	// ns/good is full now (5 leases): nothing else is handed out, the denied one included.
	_, err = s.Acquire(ctx, lease.Request{TTL: time.Minute})
	var nm *lease.NoMatchError
	if !errors.As(err, &nm) || nm.AtCapacity != 1 || nm.Unhealthy != 1 {
		t.Errorf("lease with only the denied record left: %v, want 1 at capacity and 1 that cannot be leased", err)
	}
	if got, err := s.Active(ctx); err != nil || got["ns/taken"] != 0 {
		t.Errorf("active %v %v: the denied grant must have been given back", got, err)
	}
}
