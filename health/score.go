package health

import (
	"math"
	"time"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
)

// Outcome is one thing that happened through a proxy, as the score weighs it (decision 0142).
type Outcome int

const (
	// OutcomeProbeOK is a probe that succeeded within SlowProbe.
	OutcomeProbeOK Outcome = iota
	// OutcomeProbeSlow is a probe that succeeded but took longer than SlowProbe.
	OutcomeProbeSlow
	// OutcomeProbeFailed is a failed probe.
	OutcomeProbeFailed
	// OutcomeOK is a crawler's (or the gateway's) "ok" report for a target.
	OutcomeOK
	// OutcomeRateLimited is a "rate_limited" report.
	OutcomeRateLimited
	// OutcomeBanned is a "banned" report.
	OutcomeBanned
)

// weigh is the value (1 good, 0 bad) and the weight of each outcome. Crawler reports weigh
// more than probes: they are what the target thinks of the proxy, which is the point. A ban
// weighs three successes: a proxy banned on five sites in a row is burnt whatever its probes
// say, and one that half the sites ban ends up Poor. A rate limit weighs a quarter of a
// success (decision 0220): a 429 mostly says the crawler went faster than the target allows
// one address, and the per-target cooldown already answers it; counted in full it demoted
// the fastest proxies, which crawlers push hardest, below slow ones that never reach a limit.
func (o Outcome) weigh() (value, weight float64) {
	switch o {
	case OutcomeProbeOK:
		return 1, 0.5
	case OutcomeProbeSlow:
		return 0.3, 0.5
	case OutcomeProbeFailed:
		return 0, 0.5
	case OutcomeOK:
		return 1, 1
	case OutcomeRateLimited:
		return 0, 0.25
	case OutcomeBanned:
		return 0, 3
	}
	return 0, 0
}

// Score defaults.
const (
	// DefaultScoreHalfLife is how long it takes an outcome to count half as much.
	DefaultScoreHalfLife = 10 * time.Minute
	// DefaultSlowProbe is the probe latency beyond which a success counts as slow.
	DefaultSlowProbe = 2 * time.Second
	// priorWeight and priorValue are the pseudo-outcomes every score starts from, so one
	// early failure does not condemn a new proxy nor one success crown it. The prior sits on
	// the Good line: a new proxy whose first probe is good is Good at any probe interval
	// (below it, a proxy probed more often than every 30 s came up Fair, and a pool with
	// rotation.minBand Good replaced every new member as soon as it was graded).
	priorWeight = 2.0
	priorValue  = goodAt
	// seedWeight is how much a band recorded in status counts for after a restart.
	seedWeight = 4.0
	// probeEvidence is the probe interval at which a probe counts its full weight: probes are
	// evidence per unit of time, so a fleet probed every 2 s does not drown crawlers' reports
	// fifteen times more than one probed every 30 s.
	probeEvidence = 30 * time.Second
	minProbeScale = 0.02
)

// probeScale is the factor on a probe's weight for a proxy probed every interval.
func probeScale(interval time.Duration) float64 {
	return min(max(float64(interval)/float64(probeEvidence), minProbeScale), 1)
}

// Band thresholds, with a margin either side (hysteresis) so a score hovering on a line does
// not rewrite status on every outcome.
const (
	goodAt     = 0.80
	fairAt     = 0.50
	hysteresis = 0.05
)

// The latency cap (decision 0220): while at least slowCapAt of a proxy's recent successful
// probes (decayed like the score) were slow, its band is at most Fair; the cap lifts when the
// share falls below slowReleaseAt. Crawlers' reports carry no latency, so without it a slow
// proxy that targets accept would out-grade a fast one: the probe is the only measure of speed,
// and success reports, which measure something else, must not outvote it.
const (
	slowCapAt     = 0.5
	slowReleaseAt = 0.35
)

// score is one proxy's quality: the weighted mean of its outcomes, each decaying by half
// every half-life, blended with a prior, and the share of slow probes among its successful
// ones, decayed alike. It reads no clock: each outcome brings its time.
type score struct {
	good, total float64
	// fast and slow are the decayed weights of successful probes within and beyond SlowProbe.
	fast, slow float64
	at         time.Time
	// raw is the band of the value alone (with its hysteresis); capped is the latency cap;
	// band is what is published: raw, lowered to Fair while capped.
	raw    v1.QualityBand
	capped bool
	band   v1.QualityBand
}

// newScore starts from a band recorded in status (so a restart does not regrade the fleet)
// or from nothing.
func newScore(recorded v1.QualityBand) *score {
	s := &score{raw: recorded, band: recorded}
	var v float64
	switch recorded {
	case v1.BandGood:
		v = 0.9
	case v1.BandFair:
		v = 0.65
	case v1.BandPoor:
		v = 0.3
	default:
		return s
	}
	s.good, s.total = v*seedWeight, seedWeight
	return s
}

// add folds an outcome in, its weight times scale, and reports whether the band changed.
func (s *score) add(o Outcome, at time.Time, halfLife time.Duration, scale float64) bool {
	value, weight := o.weigh()
	weight *= scale
	if !s.at.IsZero() && at.After(s.at) && halfLife > 0 {
		f := math.Exp2(-float64(at.Sub(s.at)) / float64(halfLife))
		s.good *= f
		s.total *= f
		s.fast *= f
		s.slow *= f
	}
	if at.After(s.at) {
		s.at = at
	}
	s.good += value * weight
	s.total += weight
	switch o {
	case OutcomeProbeOK:
		s.fast += weight
	case OutcomeProbeSlow:
		s.slow += weight
	}
	s.raw = bandOf(s.value(), s.raw)
	if share := s.slowShare(); s.capped {
		s.capped = share >= slowReleaseAt
	} else {
		s.capped = share >= slowCapAt
	}
	b := s.raw
	if s.capped && b == v1.BandGood {
		b = v1.BandFair
	}
	if b == s.band {
		return false
	}
	s.band = b
	return true
}

// slowShare is the decayed share of slow probes among successful ones (0 with none).
func (s *score) slowShare() float64 {
	if s.fast+s.slow <= 0 {
		return 0
	}
	return s.slow / (s.fast + s.slow)
}

func (s *score) value() float64 {
	return (s.good + priorWeight*priorValue) / (s.total + priorWeight)
}

// bandOf grades v. From a band, v must cross the next line by the hysteresis margin to move.
func bandOf(v float64, from v1.QualityBand) v1.QualityBand {
	plain := func(v float64) v1.QualityBand {
		switch {
		case v >= goodAt:
			return v1.BandGood
		case v >= fairAt:
			return v1.BandFair
		}
		return v1.BandPoor
	}
	switch from {
	case v1.BandGood:
		if v >= goodAt-hysteresis {
			return v1.BandGood
		}
		return plain(v)
	case v1.BandFair:
		switch {
		case v >= goodAt+hysteresis:
			return v1.BandGood
		case v >= fairAt-hysteresis:
			return v1.BandFair
		}
		return v1.BandPoor
	case v1.BandPoor:
		if v < fairAt+hysteresis {
			return v1.BandPoor
		}
		if v >= goodAt+hysteresis {
			return v1.BandGood
		}
		return v1.BandFair
	}
	return plain(v)
}
