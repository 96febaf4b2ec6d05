package health

import (
	"time"

	"github.com/proxy-operator/proxy-operator/internal/verdict"
)

// ewmaWeight is the weight of the newest probe in the latency average: a single slow probe
// moves the figure by a third, not wholesale, so crawlers' tie-breaks and the >50 % status
// rule do not chase noise.
const ewmaWeight = 0.3

// judge turns a stream of probe results into a health verdict by thresholds. It reads no
// clock: each result comes with the time of its probe.
type judge struct {
	health       verdict.Health
	fails, succs int32
	// latency is the EWMA in milliseconds; 0 until the first success (or a recorded value).
	latency float64
}

// newVerdict starts from what the Proxy's status last recorded, so a restarted prober does
// not send a steady fleet back through Unknown. A proxy with nothing recorded starts Unknown.
func newVerdict(recorded verdict.Health) *judge {
	v := &judge{health: recorded, latency: float64(recorded.LatencyMillis)}
	switch recorded.State {
	case verdict.Healthy:
		v.health.Reason = ""
	case verdict.Unhealthy:
	default:
		v.health = verdict.Health{State: verdict.Unknown, LatencyMillis: recorded.LatencyMillis,
			Exit: recorded.Exit, Band: recorded.Band}
	}
	return v
}

// observe folds one result in, probed at `at`, and reports whether the state changed.
// failureThreshold consecutive failures make a proxy Unhealthy and successThreshold
// consecutive successes make it Healthy, from Unknown too: a new proxy is not offered to
// crawlers on one lucky probe, nor condemned on one unlucky one.
func (v *judge) observe(r Result, at time.Time, failureThreshold, successThreshold int32) bool {
	if r.OK {
		v.fails = 0
		v.succs++
		ms := float64(r.Latency) / float64(time.Millisecond)
		if v.latency == 0 {
			v.latency = ms
		} else {
			v.latency += ewmaWeight * (ms - v.latency)
		}
		v.health.LatencyMillis = int64(v.latency + 0.5)
		if v.health.State != verdict.Healthy && v.succs >= max(successThreshold, 1) {
			v.health.State, v.health.Since, v.health.Reason = verdict.Healthy, at, ""
			return true
		}
		return false
	}
	v.succs = 0
	v.fails++
	if v.health.State != verdict.Unhealthy && v.fails >= max(failureThreshold, 1) {
		// The reason is the one of the probe that made the transition and stays until the
		// next one, so the condition message does not move between transitions.
		v.health.State, v.health.Since, v.health.Reason = verdict.Unhealthy, at, r.Kind
		return true
	}
	return false
}
