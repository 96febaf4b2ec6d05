package gateway

import (
	"fmt"
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
	b := p.reserve(s, "b")
	p.ok(b) // untested: its first send
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

// TestPaceSlowStartOneCanary: in slow start only one upstream (the canary, the first to send)
// tries the raised pace; the others keep to the rate it proved, so the overshoot that ends
// slow start costs one 429, not one per upstream whose send left before the 429 came back
// (decision 0290). Sixteen upstreams, all busy, answers 200 ms after each send, against a
// site that allows each source one request a second (the crawl farm's rate-limited site):
// one 429 in 400 sends (the pace before 0290: 16), and the pace settles under the limit.
func TestPaceSlowStartOneCanary(t *testing.T) {
	clock := clocktest.New(time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC))
	p := newPacer(clock.Now, noRule, 4)
	p.mu.Lock()
	s := p.siteLocked("site.example")
	p.mu.Unlock()
	const (
		limit   = time.Second // the site's interval per source
		latency = 200 * time.Millisecond
	)
	type answer struct {
		t       paceTicket
		at      time.Time
		refused bool
	}
	var (
		ups      = make([]string, 16)
		lastAt   = map[string]time.Time{}
		inFlight = map[string]bool{}
		answers  []answer
		refused  int
		sent     int
	)
	for i := range ups {
		ups[i] = fmt.Sprintf("ns/up-%02d", i)
	}
	for sent < 400 {
		now := clock.Now()
		next := now.Add(time.Hour)
		rest := answers[:0]
		for _, a := range answers {
			if a.at.After(now) {
				rest = append(rest, a)
				next = minTime(next, a.at)
				continue
			}
			inFlight[a.t.key] = false
			if a.refused {
				p.limited(a.t, 2*time.Second)
			} else {
				p.ok(a.t)
			}
		}
		answers = rest
		for _, k := range ups {
			if inFlight[k] {
				continue
			}
			if r := p.ready(s, k); r.After(now) {
				next = minTime(next, r)
				continue
			}
			tk := p.reserve(s, k)
			sent++
			inFlight[k] = true
			a := answer{t: tk, at: tk.at.Add(latency)}
			if last, ok := lastAt[k]; ok && tk.at.Sub(last) < limit {
				a.refused = true
				refused++
			} else {
				lastAt[k] = tk.at
			}
			answers = append(answers, a)
			next = minTime(next, a.at)
		}
		if s.rate > DefaultPaceRate && s.ceil == 0 {
			p.mu.Lock()
			for _, k := range ups {
				if k != s.canary && s.rateLocked(k) > DefaultPaceRate {
					t.Errorf("in slow start %s paces at %g before the canary %s proved it", k, s.rateLocked(k), s.canary)
				}
			}
			p.mu.Unlock()
		}
		clock.Advance(next.Sub(now))
	}
	if refused != 1 {
		t.Errorf("%d 429s in %d sends, want 1 (the canary's overshoot)", refused, sent)
	}
	if s.ceil != DefaultPaceRate || s.rate > DefaultPaceRate || s.canary != "" {
		t.Errorf("pace %g ceiling %g canary %q, want under the proven %g with slow start over", s.rate, s.ceil, s.canary, DefaultPaceRate)
	}
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
