package health

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
	"github.com/proxy-operator/proxy-operator/internal/fleet"
	"github.com/proxy-operator/proxy-operator/internal/verdict"
)

// step is a scripted stretch of history: n outcomes o, one every `every`, then the band
// expected.
type step struct {
	what  string
	o     Outcome
	n     int
	every time.Duration
	want  v1.QualityBand
	// moves is how many band changes the step may make (status writes).
	moves int
}

func TestScoreBandsUnderAScriptedHistory(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name  string
		from  v1.QualityBand
		steps []step
	}{
		{"a steady healthy proxy is Good and stays so", "", []step{
			{what: "first probe", o: OutcomeProbeOK, n: 1, every: 30 * time.Second, want: v1.BandGood, moves: 1},
			{what: "a day of probes", o: OutcomeProbeOK, n: 2880, every: 30 * time.Second, want: v1.BandGood},
		}},
		{"bans bring it down, successes and time bring it back", "", []step{
			{what: "probes", o: OutcomeProbeOK, n: 20, every: 30 * time.Second, want: v1.BandGood, moves: 1},
			{what: "three bans", o: OutcomeBanned, n: 3, every: time.Second, want: v1.BandFair, moves: 1},
			{what: "more bans", o: OutcomeBanned, n: 10, every: time.Second, want: v1.BandPoor, moves: 1},
			{what: "an hour of good probes", o: OutcomeProbeOK, n: 120, every: 30 * time.Second, want: v1.BandGood, moves: 2},
		}},
		{"a proxy half the sites ban is Poor despite its probes", "", []step{
			{what: "probes", o: OutcomeProbeOK, n: 20, every: 30 * time.Second, want: v1.BandGood, moves: 1},
			{what: "ok, ban, ok, ban...", o: -1, n: 40, every: 5 * time.Second, want: v1.BandPoor, moves: 2},
		}},
		{"a proxy whose every probe is slow ends Poor, like a failing one", "", []step{
			{what: "slow probes", o: OutcomeProbeSlow, n: 60, every: 30 * time.Second, want: v1.BandPoor, moves: 2},
			{what: "failures", o: OutcomeProbeFailed, n: 10, every: 30 * time.Second, want: v1.BandPoor},
		}},
		{"rate limits alone need many to demote", "", []step{
			{what: "probes", o: OutcomeProbeOK, n: 40, every: 30 * time.Second, want: v1.BandGood, moves: 1},
			{what: "five rate limits", o: OutcomeRateLimited, n: 5, every: time.Second, want: v1.BandGood},
			{what: "forty more", o: OutcomeRateLimited, n: 40, every: time.Second, want: v1.BandFair, moves: 1},
		}},
		// Decision 0220: a fast proxy crawled at its targets' pace earns a 429 per batch or so;
		// that is the crawler's pace, not the proxy's quality.
		{"a fast proxy crawled at its targets' pace stays Good", "", []step{
			{what: "probes", o: OutcomeProbeOK, n: 4, every: 30 * time.Second, want: v1.BandGood, moves: 1},
			{what: "ok, rate limited, ok, rate limited...", o: -2, n: 400, every: 2 * time.Second, want: v1.BandGood},
		}},
		// Decision 0220: reports carry no latency, so the probes' latency caps the band.
		{"a slow proxy that targets accept is Fair, not Good, until its probes are fast", "", []step{
			{what: "fast probes", o: OutcomeProbeOK, n: 10, every: 30 * time.Second, want: v1.BandGood, moves: 1},
			{what: "slow probes", o: OutcomeProbeSlow, n: 20, every: 30 * time.Second, want: v1.BandFair, moves: 1},
			{what: "slow probes among ok reports", o: -3, n: 400, every: 3 * time.Second, want: v1.BandFair},
			{what: "fast probes", o: OutcomeProbeOK, n: 60, every: 30 * time.Second, want: v1.BandGood, moves: 1},
		}},
		{"one slow probe among fast ones does not cap a proxy", "", []step{
			{what: "fast probes", o: OutcomeProbeOK, n: 20, every: 30 * time.Second, want: v1.BandGood, moves: 1},
			{what: "one slow", o: OutcomeProbeSlow, n: 1, every: 30 * time.Second, want: v1.BandGood},
			{what: "fast probes", o: OutcomeProbeOK, n: 20, every: 30 * time.Second, want: v1.BandGood},
		}},
		{"a band recorded in status holds after a restart", v1.BandFair, []step{
			{what: "one probe", o: OutcomeProbeOK, n: 1, every: time.Second, want: v1.BandFair},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newScore(tc.from)
			at := t0
			for _, st := range tc.steps {
				moves := 0
				for i := range st.n {
					o := st.o
					switch o { // alternating histories
					case -1:
						o = []Outcome{OutcomeOK, OutcomeBanned}[i%2]
					case -2:
						o = []Outcome{OutcomeOK, OutcomeRateLimited}[i%2]
					case -3: // a slow probe every 30 s, ok reports between
						o = OutcomeOK
						if i%10 == 0 {
							o = OutcomeProbeSlow
						}
					}
					at = at.Add(st.every)
					if s.add(o, at, DefaultScoreHalfLife, probeScale(30*time.Second)) {
						moves++
					}
				}
				if s.band != st.want || moves != st.moves {
					t.Fatalf("after %s: band %s (score %.3f) with %d changes, want %s with %d", st.what, s.band, s.value(), moves, st.want, st.moves)
				}
			}
		})
	}
}

// TestBandHysteresis: a score hovering on a line does not flip the band each time.
func TestBandHysteresis(t *testing.T) {
	for _, tc := range []struct {
		v    float64
		from v1.QualityBand
		want v1.QualityBand
	}{
		{0.79, v1.BandGood, v1.BandGood},
		{0.74, v1.BandGood, v1.BandFair},
		{0.82, v1.BandFair, v1.BandFair},
		{0.86, v1.BandFair, v1.BandGood},
		{0.47, v1.BandFair, v1.BandFair},
		{0.44, v1.BandFair, v1.BandPoor},
		{0.52, v1.BandPoor, v1.BandPoor},
		{0.56, v1.BandPoor, v1.BandFair},
		{0.90, v1.BandPoor, v1.BandGood},
		{0.80, "", v1.BandGood},
		{0.49, "", v1.BandPoor},
	} {
		if got := bandOf(tc.v, tc.from); got != tc.want {
			t.Errorf("bandOf(%.2f, %q) = %s, want %s", tc.v, tc.from, got, tc.want)
		}
	}
}

// TestReportMovesTheBand feeds crawler reports to a running scheduler: the published verdict
// takes the new band, the transition is announced, and the score is a metric.
func TestReportMovesTheBand(t *testing.T) {
	target := newTLSTarget(t)
	view := fleet.New(time.Now, 0)
	view.Upsert(proxyAt(t, "ns/a", newStubProxy(t).addr(), target.url(), 20, 20, 3, 1))
	transitions := make(chan verdict.Health, 64)
	reg := prometheus.NewRegistry()
	s := startScheduler(t, view, NewHTTPProber(trusting(target)), reg, func(s *Scheduler) {
		s.onTransition = func(key string, h verdict.Health) {
			select {
			case transitions <- h:
			default:
			}
		}
	})
	waitHealth(t, s, "ns/a", verdict.Healthy)
	// Probed every 2 s, a probe counts a fifteenth of one every 30 s; the prior sits on the
	// Good line, so the first good probe after the proxy turned Healthy makes it Good.
	waitUntil(t, "a band", func() bool { return s.Health("ns/a").Band != "" })
	if b := s.Health("ns/a").Band; b != v1.BandGood {
		t.Fatalf("band after good probes: %s, want Good", b)
	}
	for range 30 {
		s.Report("ns/a", OutcomeBanned, time.Now())
	}
	if b := s.Health("ns/a").Band; b != v1.BandPoor {
		t.Fatalf("band after 30 bans: %s, want Poor", b)
	}
	sawPoor := false
	for len(transitions) > 0 {
		if (<-transitions).Band == v1.BandPoor {
			sawPoor = true
		}
	}
	if !sawPoor {
		t.Error("no transition announced the Poor band")
	}
	if v := testutil.ToFloat64(s.metrics.score.WithLabelValues("ns/a")); v >= fairAt {
		t.Errorf("score metric %.3f, want below %.2f", v, fairAt)
	}
	s.Report("ns/unknown", OutcomeBanned, time.Now()) // ignored, no series born
	if n := testutil.CollectAndCount(s.metrics.score); n != 1 {
		t.Errorf("score series: %d, want 1", n)
	}
}

// TestBootFailuresDoNotGrade: probes that fail before a proxy's first Healthy verdict (a
// machine still starting) leave its score alone, so a new pool member is not graded below
// the members it replaces; from the first Healthy verdict on, probes count.
func TestBootFailuresDoNotGrade(t *testing.T) {
	target := newTLSTarget(t)
	proxy := newStubProxy(t)
	proxy.deny.Store(true)
	view := fleet.New(time.Now, 0)
	view.Upsert(proxyAt(t, "ns/boot", proxy.addr(), target.url(), 3, 20, 2, 1))
	var f failures
	s := startScheduler(t, view, NewHTTPProber(trusting(target)), nil, f.hook)
	waitUntil(t, "failed probes", func() bool { return f.get("ns/boot") >= 5 })
	if h := s.Health("ns/boot"); h.State == verdict.Healthy || h.Band != "" {
		t.Fatalf("while booting: %+v, want not Healthy and no band", h)
	}
	proxy.deny.Store(false)
	waitHealth(t, s, "ns/boot", verdict.Healthy)
	waitUntil(t, "a band", func() bool { return s.Health("ns/boot").Band != "" })
	if b := s.Health("ns/boot").Band; b != v1.BandGood {
		t.Errorf("band after booting: %s, want Good (the boot failures counted)", b)
	}
}
