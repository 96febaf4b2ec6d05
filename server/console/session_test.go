package console

import (
	"fmt"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/server/discovery/access"
)

// TestSessionsBounded: the table never holds more than its bound; a login past it replaces
// the session that ends first; an ended session is gone.
func TestSessionsBounded(t *testing.T) {
	now := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
	s := newSessions(2, time.Hour, func() time.Time { return now })
	a, b, c := &access.Caller{Name: "a"}, &access.Caller{Name: "b"}, &access.Caller{Name: "c"}
	first, _ := s.create(a)
	now = now.Add(time.Minute)
	second, _ := s.create(b)
	third, _ := s.create(c)
	if s.len() != 2 || s.get(first) != nil || s.get(second) == nil || s.get(third) == nil {
		t.Fatalf("after 3 logins with a bound of 2: %d sessions; the first must be the one replaced", s.len())
	}
	now = now.Add(time.Hour)
	if s.get(second) != nil || s.get(third) != nil {
		t.Fatal("sessions outlived their TTL")
	}
}

// TestSessionsLoginFlood: a flood of logins with one token (any reader's, or a stolen one)
// keeps the table bounded and replaces that token's own sessions only: the on-call's session,
// older than all of them, survives.
func TestSessionsLoginFlood(t *testing.T) {
	now := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
	s := newSessions(1000, time.Hour, func() time.Time { return now })
	oncall, _ := s.create(&access.Caller{Name: "on-call", Right: access.RightAdmin})
	flooder := &access.Caller{Name: "reader-a", Right: access.RightRead}
	var last string
	for i := range 10 * maxSessionsPerToken {
		now = now.Add(time.Millisecond)
		last, _ = s.create(flooder)
		if n := s.len(); n > 1+maxSessionsPerToken {
			t.Fatalf("login %d: %d sessions, want at most %d", i, n, 1+maxSessionsPerToken)
		}
	}
	if s.get(oncall) == nil || s.get(last) == nil {
		t.Fatal("the flood replaced the on-call's session (or not its own oldest)")
	}
	// Many tokens flooding: the global bound holds.
	for i := range 3000 {
		s.create(&access.Caller{Name: fmt.Sprintf("t%d", i)})
	}
	if n := s.len(); n != 1000 {
		t.Fatalf("%d sessions after 3000 logins of distinct tokens, want the bound 1000", n)
	}
}
