package pool

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
)

// ScalingLimited reasons.
const (
	LimitedTooFew  = "TooFewReplicas"
	LimitedTooMany = "TooManyReplicas"
)

// decideSize sets the desired member count: spec.replicas, or the autoscaler's choice.
//
// The autoscaler recommends clamp(ceil(demand / (target% x maxLeases)), min, max), where demand
// is the live leases on every member plus the no-capacity answers since the last sync (each
// is a lease a crawler wanted and did not get), the latter capped at the pool's current lease
// capacity so a crawler retrying in a tight loop can at most double the pool per sync. A
// recommendation at or above the current size is taken at once; one below it is taken only
// after it has stayed below for the stabilization window, and then as the largest
// recommendation seen during the window (the HorizontalPodAutoscaler's damping).
func (d *decider) decideSize() {
	p := d.in.Pool
	a := d.spec.Autoscale
	prev := p.Status.DesiredReplicas
	if a == nil {
		d.desired = *d.spec.Replicas
		if p.Status.ObservedGeneration > 0 && prev != d.desired {
			d.out.Scale = &Scale{From: prev, To: d.desired, Reason: "Spec"}
		}
		return
	}
	lo, hi := *a.MinReplicas, a.MaxReplicas
	st := v1.PoolAutoscaleStatus{}
	if p.Status.Autoscale != nil {
		st = *p.Status.Autoscale
	}
	cur := prev
	first := p.Status.Autoscale == nil
	if first {
		cur = *d.spec.Replicas
	}
	// The bounds may have moved since the last sync (and status is input too): every recorded
	// size is read back within them. An unclamped lowMax of 2^31 once became the desired size.
	cur = min(max(cur, lo), hi)
	st.LowMax = min(max(st.LowMax, lo), hi)
	st.Recommendation = min(max(st.Recommendation, 0), v1.MaxPoolReplicas)
	st.DeniedSeen = max(st.DeniedSeen, 0)

	active := int64(0)
	for _, m := range d.ms {
		active += int64(m.Leases)
	}
	denied := d.in.Denied - st.DeniedSeen
	if denied < 0 { // the counter restarted with the process
		denied = d.in.Denied
	}
	perMember := int64(v1.DefaultMaxLeases)
	if ml := d.spec.Template.Spec.MaxLeases; ml != nil {
		perMember = int64(*ml)
	}
	rec := cur
	if perMember > 0 {
		denied = min(denied, max(int64(cur)*perMember, perMember))
		target := int64(*a.TargetLeaseUtilization)
		demand := active + denied
		// ceil(demand*100 / (target*perMember)) in integers.
		rec64 := (demand*100 + target*perMember - 1) / (target * perMember)
		rec = int32(min(rec64, int64(v1.MaxPoolReplicas)))
	}
	d.recommended = rec
	switch {
	case rec < lo:
		rec, d.limited = lo, LimitedTooFew
	case rec > hi:
		rec, d.limited = hi, LimitedTooMany
	}
	st.Recommendation = rec
	st.DeniedSeen = d.in.Denied
	window := time.Duration(*a.ScaleDownStabilizationSeconds) * time.Second
	next := cur
	switch {
	case rec >= cur:
		next = rec
		st.LowSince, st.LowMax = nil, 0
	case st.LowSince == nil:
		t := metav1.NewTime(d.now)
		st.LowSince, st.LowMax = &t, rec
	default:
		st.LowMax = max(st.LowMax, rec)
	}
	if st.LowSince != nil {
		if end := st.LowSince.Add(window); !d.now.Before(end) {
			next = st.LowMax
			st.LowSince, st.LowMax = nil, 0
		} else {
			d.soon(end)
		}
	}
	if next != prev || first {
		t := metav1.NewTime(d.now)
		st.LastScaleTime = &t
	}
	if next != prev && !first {
		d.out.Scale = &Scale{From: prev, To: next, Reason: "Autoscale"}
	}
	d.desired = next
	d.as = &st
}
