package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/internal/clocktest"
	"github.com/proxy-operator/proxy-operator/internal/redistest"
)

// TestPaceBook: bookings through one upstream to one site are spaced by the interval whoever
// books; a hold (a 429) keeps the upstream off the site and floors every booker's interval;
// other sites and upstreams are not touched.
func TestPaceBook(t *testing.T) {
	clock := clocktest.New(time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC))
	s, err := New(Config{Client: newClient(t, redistest.Start(t)), Prefix: freshPrefix(), Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	book := func(site, up string, interval time.Duration, want time.Duration) {
		t.Helper()
		wait, err := s.BookSend(ctx, site, up, interval)
		if err != nil || wait != want {
			t.Fatalf("BookSend(%s, %s, %v) = %v, %v; want %v", site, up, interval, wait, err, want)
		}
	}
	book("a.example", "ns/p1", time.Second, 0)
	book("a.example", "ns/p1", time.Second, time.Second)   // a second replica's booking waits its turn
	book("a.example", "ns/p1", time.Second, 2*time.Second) // and a third
	book("a.example", "ns/p2", time.Second, 0)             // another upstream is free
	book("b.example", "ns/p1", time.Second, 0)             // another site too
	clock.Advance(3 * time.Second)
	book("a.example", "ns/p1", time.Second, 0)

	// A 429 through p1 with Retry-After 5 s, at a pace the site refused (floor 2 s).
	if err := s.HoldSend(ctx, "a.example", "ns/p1", 5*time.Second, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	book("a.example", "ns/p1", time.Second, 5*time.Second)
	book("a.example", "ns/p2", 500*time.Millisecond, 0)
	book("a.example", "ns/p2", 500*time.Millisecond, 2*time.Second) // floored: not 500 ms
	book("b.example", "ns/p2", 500*time.Millisecond, 0)
	book("b.example", "ns/p2", 500*time.Millisecond, 500*time.Millisecond) // no floor on b
	clock.Advance(PaceFloorTTL + 10*time.Second)
	book("a.example", "ns/p3", 500*time.Millisecond, 0)
	book("a.example", "ns/p3", 500*time.Millisecond, 500*time.Millisecond) // the floor has passed
}
