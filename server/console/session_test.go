package console

import (
	"testing"
	"time"
)

// TestSessionsBounded: the table never holds more than its bound; a login past it replaces
// the session that ends first; an ended session is gone.
func TestSessionsBounded(t *testing.T) {
	now := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
	s := newSessions(2, time.Hour, func() time.Time { return now })
	first, _ := s.create(nil)
	now = now.Add(time.Minute)
	second, _ := s.create(nil)
	third, _ := s.create(nil)
	if s.len() != 2 || s.get(first) != nil || s.get(second) == nil || s.get(third) == nil {
		t.Fatalf("after 3 logins with a bound of 2: %d sessions; the first must be the one replaced", s.len())
	}
	now = now.Add(time.Hour)
	if s.get(second) != nil || s.get(third) != nil {
		t.Fatal("sessions outlived their TTL")
	}
}
