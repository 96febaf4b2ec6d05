package gateway

import (
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/internal/clocktest"
)

func noRule(string) (float64, bool) { return 0, false }

// TestPaceLearns: a first send tests nothing; a send at the pace that succeeds raises it once
// per interval (slow start); a 429 floors that upstream for the Retry-After and cuts the pace
// once, however many concurrent sends come back 429, to 0.95x the highest rate a success proved
// below the one that failed (slow start proved 1.0 and failed at 1.25: the limit is between);
// afterwards the pace stays near that, not past it at once.
func TestPaceLearns(t *testing.T) {
	clock := clocktest.New(time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC))
	p := newPacer(clock.Now, noRule, 4)
	p.mu.Lock()
	s := p.siteLocked("site.example")
	p.mu.Unlock()

	first := p.reserve(s, "a")
	if first.tested || !first.at.Equal(clock.Now()) {
		t.Fatalf("first send: %+v, want now and untested", first)
	}
	p.ok(first)
	if s.rate != DefaultPaceRate {
		t.Fatalf("an untested success moved the pace to %g", s.rate)
	}
	if got := p.ready(s, "a"); !got.Equal(clock.Now().Add(time.Second)) {
		t.Fatalf("a is ready at %s, want a second later", got)
	}
	clock.Advance(time.Second)
	second := p.reserve(s, "a")
	if !second.tested {
		t.Fatal("a send at the pace is not counted as testing it")
	}
	p.ok(second)
	if s.rate != DefaultPaceRate*paceSlowStart {
		t.Fatalf("after a tested success the pace is %g, want %g", s.rate, DefaultPaceRate*paceSlowStart)
	}
	b := p.reserve(s, "b")
	p.ok(b) // untested anyway; and within the interval of the last raise
	clock.Advance(800 * time.Millisecond)
	limited := p.reserve(s, "a")
	other := p.reserve(s, "b")
	p.limited(limited, 2*time.Second)
	p.limited(other, 2*time.Second) // the same round: no second cut
	if want := paceHeadroom * DefaultPaceRate; s.rate != want || s.ceil != DefaultPaceRate {
		t.Fatalf("after two 429s of one round: pace %g ceiling %g, want %g and %g (the rate proven before the one that failed)", s.rate, s.ceil, want, DefaultPaceRate)
	}
	if got := p.ready(s, "a"); got.Before(clock.Now().Add(2*time.Second)) || got.After(clock.Now().Add(2200*time.Millisecond)) {
		t.Fatalf("a is ready at +%s, want the Retry-After plus at most 10 %%", got.Sub(clock.Now()))
	}
	for range 100 {
		clock.Advance(s.interval())
		p.ok(p.reserve(s, "c"))
	}
	if limit := s.ceil; s.rate < 0.9*limit || s.rate > 1.05*limit {
		t.Errorf("after 100 successes the pace is %g, want it back near the ceiling %g", s.rate, limit)
	}
}

// TestPaceTablesAreBounded: the site table forgets its least recently used idle site, a full
// queue refuses, and an upstream ready long ago is forgotten.
func TestPaceTablesAreBounded(t *testing.T) {
	clock := clocktest.New(time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC))
	p := newPacer(clock.Now, noRule, 1)
	p.mu.Lock()
	for i := range maxPaceSites + 10 {
		p.siteLocked(string(rune('a'+i%26)) + time.Duration(i).String())
	}
	n := len(p.sites)
	s := p.siteLocked("busy.example")
	s.waiting = 1 // the queue is full
	p.mu.Unlock()
	if n != maxPaceSites {
		t.Errorf("%d sites remembered, want %d", n, maxPaceSites)
	}
	if _, _, err := p.enter(t.Context(), "busy.example", clock.Now().Add(time.Second)); err != errQueueFull {
		t.Errorf("enter a full queue: %v, want errQueueFull", err)
	}
	p.reserve(s, "a")
	clock.Advance(paceForget + 2*time.Second)
	if keys, _ := p.notReady(s, clock.Now()); len(keys) != 0 || len(s.ups) != 0 {
		t.Errorf("after %s the site still remembers %d upstreams", paceForget, len(s.ups))
	}
}

// TestPaceCutWithoutProof: a 429 when no success proved a lower rate since the last cut cuts
// to 0.8x the rate that failed and takes that rate as the site's limit; with one proven, the
// proven rate is the limit.
func TestPaceCutWithoutProof(t *testing.T) {
	clock := clocktest.New(time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC))
	p := newPacer(clock.Now, noRule, 4)
	p.mu.Lock()
	s := p.siteLocked("site.example")
	p.mu.Unlock()
	p.ok(p.reserve(s, "a"))
	clock.Advance(s.interval())
	p.limited(p.reserve(s, "a"), time.Second) // the first tested send: 429
	if want := DefaultPaceRate * paceCut; s.rate != want || s.ceil != DefaultPaceRate {
		t.Fatalf("pace %g ceiling %g, want %g and %g", s.rate, s.ceil, want, DefaultPaceRate)
	}
	// A success at 0.8 proves it (and raises the pace a step), the next send is refused: the
	// limit lies between, so the pace aims under the proven 0.8, not under the refused rate.
	clock.Advance(s.interval())
	p.ok(p.reserve(s, "a"))
	refused := s.rate
	clock.Advance(s.interval())
	p.limited(p.reserve(s, "a"), time.Second)
	if want := min(refused*paceCut, paceHeadroom*0.8); refused <= 0.8 || s.ceil != 0.8 || s.rate != want {
		t.Fatalf("proven 0.8, refused %g: pace %g ceiling %g, want %g and 0.8", refused, s.rate, s.ceil, want)
	}
}
