package mark

import (
	"github.com/proxy-operator/proxy-operator/internal/fleet"
	"github.com/proxy-operator/proxy-operator/internal/verdict"
)

// HealthSource is the prober's live verdict by namespace/name.
type HealthSource interface {
	Health(key string) verdict.Health
}

// FleetBehind is the Behind of a Marker in the operator: a Proxy is behind when the prober's
// verdict (Healthy or Unhealthy, its exit, its quality band) differs from what its status last recorded, as the
// fleet view holds it from the latest sync answer. A Proxy being deleted, unknown to the view,
// or without a verdict yet is never behind; nor is a new instance awaiting its first verdict,
// whose provisioning poll is due within seconds anyway and carries it (decision 0172): a
// patch would only add a write and a sync to every proxy's bring-up.
func FleetBehind(view *fleet.View, health HealthSource) func(key string) (string, bool) {
	return func(key string) (string, bool) {
		p, ok := view.Get(key)
		if !ok || p.Deleting || p.AwaitingVerdict {
			return "", false
		}
		h := health.Health(key)
		live := h.State
		if live != verdict.Healthy && live != verdict.Unhealthy {
			return "", false
		}
		// An exit or a quality band the status does not show yet is a transition too; the
		// mark names the state (and the band and exit when they are what moved), so the patch
		// differs from the last one.
		rec := p.Recorded
		mark := string(live)
		behind := live != rec.State
		if h.Exit.IP != "" && h.Exit != rec.Exit {
			mark, behind = mark+",exit="+h.Exit.IP, true
		}
		if h.Band != "" && h.Band != rec.Band {
			mark, behind = mark+",band="+string(h.Band), true
		}
		return mark, behind
	}
}
