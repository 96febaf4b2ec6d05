package pool

import (
	"cmp"
	"maps"
	"slices"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
)

// member is an observed member, classified.
type member struct {
	Member
	name        string
	ordinal     int64
	created     time.Time
	terminating bool // its Proxy is being deleted
	draining    bool
	drainSince  time.Time
	drainReason string
	updated     bool // made from the current template
	ready       bool // Provisioned=True
	healthy     bool // Healthy=True, phase Ready
	failed      bool
	failedSince time.Time
	replace     string // why it should go ("" keeps it)
	maxLeases   int32
	band        v1.QualityBand
}

// Decide returns the desired members, the pool's status, the changes and the resync delay.
func Decide(in Input) Decision {
	p := in.Pool
	d := &decider{in: in, spec: &p.Spec, now: in.Now}
	d.th = TemplateHash(&p.Spec.Template)
	d.classify()
	switch {
	case in.Finalizing:
		d.finalize()
	case in.SpecErr != nil:
		d.invalid()
	default:
		d.sync()
	}
	d.status()
	slices.SortFunc(d.out.Children, func(a, b Child) int { return cmp.Compare(a.Metadata.Name, b.Metadata.Name) })
	return d.out
}

type decider struct {
	in   Input
	spec *v1.ProxyPoolSpec
	now  time.Time
	th   string
	ms   []*member
	out  Decision

	desired     int32
	limited     string // ScalingLimited reason when autoscale was clamped
	recommended int32
	as          *v1.PoolAutoscaleStatus
	progress    string // Progressing reason ("" steady)
	wake        time.Time
}

func (d *decider) classify() {
	for _, m := range d.in.Members {
		px := m.Proxy
		if px == nil {
			continue
		}
		c := &member{Member: m, name: px.Name, created: px.CreationTimestamp.Time}
		if c.created.IsZero() || c.created.After(d.now) {
			c.created = d.now
		}
		c.ordinal, _ = strconv.ParseInt(px.Annotations[v1.PoolOrdinalAnnotation], 10, 64)
		c.terminating = px.DeletionTimestamp != nil
		c.draining = px.Labels[v1.PoolDrainingLabel] == "true"
		if c.draining {
			c.drainSince, _ = time.Parse(time.RFC3339, px.Annotations[v1.PoolDrainingSinceAnnotation])
			if c.drainSince.IsZero() || c.drainSince.After(d.now) {
				c.drainSince = d.now
			}
			c.drainReason = px.Annotations[v1.PoolDrainReasonAnnotation]
		}
		c.updated = px.Annotations[v1.PoolTemplateHashAnnotation] == d.th
		for _, cond := range px.Status.Conditions {
			switch cond.Type {
			case v1.ConditionProvisioned:
				c.ready = cond.Status == metav1.ConditionTrue
				if px.Status.Phase == v1.PhaseFailed {
					c.failedSince = cond.LastTransitionTime.Time
				}
			case v1.ConditionHealthy:
				c.healthy = cond.Status == metav1.ConditionTrue && px.Status.Phase == v1.PhaseReady
			}
		}
		c.failed = px.Status.Phase == v1.PhaseFailed
		c.band = px.Status.QualityBand
		if c.failed && (c.failedSince.IsZero() || c.failedSince.After(d.now)) {
			c.failedSince = c.created
		}
		c.healthy = c.healthy && !c.terminating // a member being deleted serves no one
		c.maxLeases = v1.DefaultMaxLeases
		if px.Spec.MaxLeases != nil {
			c.maxLeases = *px.Spec.MaxLeases
		}
		d.ms = append(d.ms, c)
	}
	slices.SortFunc(d.ms, func(a, b *member) int { return cmp.Compare(a.name, b.name) })
}

// soon records that something needs looking at again at t.
func (d *decider) soon(t time.Time) {
	if t.After(d.now) && (d.wake.IsZero() || t.Before(d.wake)) {
		d.wake = t
	}
}

func (d *decider) setProgress(reason string) {
	if d.progress == "" {
		d.progress = reason
	}
}

// finalize lists no member: Metacontroller deletes them all, each Proxy's own finalize
// deletes its machine, and the pool is finalized once none is left.
func (d *decider) finalize() {
	d.desired = 0
	d.as = d.in.Pool.Status.Autoscale
	for _, m := range d.ms {
		if !m.terminating {
			d.out.Changes = append(d.out.Changes, Change{Kind: ChangeRemove, Member: m.name, Reason: ReasonDeleted})
		}
	}
	if len(d.ms) == 0 {
		d.out.Finalized = true
		return
	}
	d.setProgress("Deleting")
	d.out.ResyncAfter = FinalizePoll
}

// invalid keeps every member as it is: a spec the hook cannot read must not delete a fleet.
func (d *decider) invalid() {
	d.desired = min(max(d.in.Pool.Status.DesiredReplicas, 0), v1.MaxPoolReplicas)
	d.as = d.in.Pool.Status.Autoscale
	for _, m := range d.ms {
		if !m.terminating {
			d.out.Children = append(d.out.Children, d.echo(m))
		}
	}
	d.out.ResyncAfter = SteadyResync
}

func (d *decider) sync() {
	d.decideSize()
	surge, unavailable := d.spec.SurgeAndUnavailable(d.desired)
	drain := time.Duration(*d.spec.DrainSeconds) * time.Second

	// Draining members leave once their leases end or the drain time is up. A member removed
	// now still exists until its Proxy has finalized, so it counts against the surge.
	var listed []*member      // members still listed (desired children)
	total := int32(len(d.ms)) // members that exist, terminating and just-removed ones included
	for _, m := range d.ms {
		switch {
		case m.terminating:
			d.setProgress("Removing")
		case m.draining:
			if m.Leases == 0 {
				d.out.Changes = append(d.out.Changes, Change{Kind: ChangeRemove, Member: m.name, Reason: ReasonDrained})
				d.setProgress("Draining")
				continue
			}
			if end := m.drainSince.Add(drain); !d.now.Before(end) {
				d.out.Changes = append(d.out.Changes, Change{Kind: ChangeRemove, Member: m.name, Reason: ReasonDrainExpired})
				d.setProgress("Draining")
				continue
			} else {
				d.soon(end)
			}
			listed = append(listed, m)
			d.setProgress("Draining")
		default:
			listed = append(listed, m)
		}
	}

	// Active members that should go, and why.
	var keep, replace []*member
	var maxAge time.Duration
	var ban int32
	var minBand int
	if r := d.spec.Rotation; r != nil {
		minBand = v1.BandRank(r.MinBand)
		if r.MaxAge != nil {
			maxAge = r.MaxAge.Duration
		}
		if r.BanThreshold != nil {
			ban = *r.BanThreshold
		}
	}
	for _, m := range listed {
		if m.draining {
			continue
		}
		switch {
		case m.failed && (!m.updated || !d.now.Before(m.failedSince.Add(FailedReplaceAfter))):
			m.replace = ReasonFailed
		case m.failed:
			d.soon(m.failedSince.Add(FailedReplaceAfter))
		case !m.updated:
			m.replace = ReasonTemplate
		case ban > 0 && m.Cooling >= int(ban):
			m.replace = ReasonBanned
		case minBand > 0 && m.band != "" && v1.BandRank(m.band) < minBand:
			m.replace = ReasonLowQuality
		case maxAge > 0 && !d.now.Before(m.created.Add(maxAge)):
			m.replace = ReasonMaxAge
		case maxAge > 0:
			d.soon(m.created.Add(maxAge))
		}
		if m.replace == "" {
			keep = append(keep, m)
		} else {
			replace = append(replace, m)
		}
	}
	// Too many kept members: the surplus goes, idle and unhealthy ones first.
	if extra := len(keep) - int(d.desired); extra > 0 {
		slices.SortStableFunc(keep, victimOrder)
		for _, m := range keep[:extra] {
			m.replace = ReasonScaleDown
		}
		replace = append(replace, keep[:extra]...)
		keep = keep[extra:]
	}

	// Make: new members up to the surge budget.
	need := d.desired - int32(len(keep))
	budget := d.desired + surge - total
	if n := min(need, budget); n > 0 {
		next := int64(0)
		names := map[string]bool{}
		for _, m := range d.ms {
			next = max(next, m.ordinal)
			names[m.name] = true
		}
		for range n {
			next++
			name := MemberName(d.in.Pool.Name, d.th, next)
			for names[name] { // a five-hex-digit collision with a live member: skip the ordinal
				next++
				name = MemberName(d.in.Pool.Name, d.th, next)
			}
			names[name] = true
			d.out.Children = append(d.out.Children, d.newChild(name, next))
			d.out.Changes = append(d.out.Changes, Change{Kind: ChangeCreate, Member: name, Reason: d.createReason(replace)})
		}
	}
	if need > 0 {
		d.setProgress(d.createReason(replace))
	}

	// Break: drain replaced members while enough healthy ones remain.
	healthy := int32(0)
	for _, m := range listed {
		if !m.draining && m.healthy {
			healthy++
		}
	}
	minHealthy := d.desired - unavailable
	slices.SortStableFunc(replace, drainOrder)
	for _, m := range replace {
		if m.healthy {
			if healthy-1 < minHealthy {
				d.setProgress(m.replace)
				continue
			}
			healthy--
		}
		m.draining, m.drainSince, m.drainReason = true, d.now, m.replace
		d.out.Changes = append(d.out.Changes, Change{Kind: ChangeDrain, Member: m.name, Reason: m.replace})
		d.setProgress(m.replace)
		d.soon(d.now.Add(drain))
	}
	for _, m := range keep {
		if !m.healthy {
			d.setProgress("WaitingForMembers")
		}
	}
	for _, m := range listed {
		d.out.Children = append(d.out.Children, d.echo(m))
	}

	switch {
	case d.progress != "":
		d.out.ResyncAfter = ProgressPoll
	case d.spec.Autoscale != nil:
		d.out.ResyncAfter = AutoscalePoll
	default:
		d.out.ResyncAfter = SteadyResync
	}
	if d.spec.Autoscale != nil {
		d.out.ResyncAfter = min(d.out.ResyncAfter, AutoscalePoll)
	}
	if !d.wake.IsZero() {
		d.out.ResyncAfter = min(d.out.ResyncAfter, d.wake.Sub(d.now).Round(time.Second)+time.Second)
	}
}

func (d *decider) createReason(replace []*member) string {
	for _, m := range replace {
		if m.replace != ReasonScaleDown {
			return m.replace
		}
	}
	return "ScaleUp"
}

// victimOrder picks scale-down victims: not healthy first, then idle, then fewest leases, then oldest.
func victimOrder(a, b *member) int {
	if a.healthy != b.healthy {
		if !a.healthy {
			return -1
		}
		return 1
	}
	if c := cmp.Compare(a.Leases, b.Leases); c != 0 {
		return c
	}
	if c := a.created.Compare(b.created); c != 0 {
		return c
	}
	return cmp.Compare(a.name, b.name)
}

// reasonRank orders replacements: a failed or burned member goes before an outdated or old one.
var reasonRank = map[string]int{ReasonFailed: 0, ReasonBanned: 1, ReasonScaleDown: 2, ReasonTemplate: 3, ReasonMaxAge: 4}

// drainOrder: unhealthy first (draining them costs no capacity), then by reason, then idle,
// then oldest.
func drainOrder(a, b *member) int {
	if a.healthy != b.healthy {
		if !a.healthy {
			return -1
		}
		return 1
	}
	if c := cmp.Compare(reasonRank[a.replace], reasonRank[b.replace]); c != 0 {
		return c
	}
	return victimOrder(a, b)
}

// newChild builds a member from the template.
func (d *decider) newChild(name string, ordinal int64) Child {
	pool := d.in.Pool
	t := d.spec.Template
	labels := maps.Clone(t.Metadata.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[v1.PoolLabel] = pool.Name
	ann := maps.Clone(t.Metadata.Annotations)
	if ann == nil {
		ann = map[string]string{}
	}
	ann[v1.PoolTemplateHashAnnotation] = d.th
	ann[v1.PoolOrdinalAnnotation] = strconv.FormatInt(ordinal, 10)
	spec := t.Spec // shallow: only attributes change, on a copy
	spec.Attributes = maps.Clone(spec.Attributes)
	if spec.Attributes == nil {
		spec.Attributes = map[string]string{}
	}
	spec.Attributes[v1.PoolAttribute] = pool.Name
	return Child{
		APIVersion: v1.APIVersion, Kind: v1.Kind,
		Metadata: ChildMeta{Name: name, Namespace: pool.Namespace, Labels: labels, Annotations: ann},
		Spec:     spec,
	}
}

// echo lists an existing member as it is, with the draining mark when it drains. Its spec is
// the one it was made with: a template change replaces members, it never edits them.
func (d *decider) echo(m *member) Child {
	px := m.Proxy
	labels := maps.Clone(px.Labels)
	ann := maps.Clone(px.Annotations)
	if m.draining {
		if labels == nil {
			labels = map[string]string{}
		}
		if ann == nil {
			ann = map[string]string{}
		}
		labels[v1.PoolDrainingLabel] = "true"
		ann[v1.PoolDrainingSinceAnnotation] = m.drainSince.UTC().Format(time.RFC3339)
		if m.drainReason != "" {
			ann[v1.PoolDrainReasonAnnotation] = m.drainReason
		}
	}
	return Child{
		APIVersion: v1.APIVersion, Kind: v1.Kind,
		Metadata: ChildMeta{Name: px.Name, Namespace: px.Namespace, Labels: labels, Annotations: ann},
		Spec:     px.Spec, // shared, never modified: the answer is encoded at once
	}
}

// status fills the pool's status from the classified members and the decision.
func (d *decider) status() {
	p := d.in.Pool
	st := v1.ProxyPoolStatus{
		ObservedGeneration: p.Generation,
		DesiredReplicas:    d.desired,
		Selector:           Selector(p.Name),
		TemplateHash:       d.th,
		Autoscale:          d.as,
		Conditions:         slices.Clone(p.Status.Conditions),
	}
	drainingNow := map[string]bool{}
	for _, c := range d.out.Changes {
		if c.Kind == ChangeDrain || c.Kind == ChangeRemove {
			drainingNow[c.Member] = true
		}
	}
	healthyActive := int32(0)
	for _, m := range d.ms {
		st.Members++
		st.ActiveLeases += int32(m.Leases)
		if m.terminating || m.draining || drainingNow[m.name] {
			st.DrainingReplicas++
			continue
		}
		st.Replicas++
		if m.ready {
			st.ReadyReplicas++
		}
		if m.healthy {
			st.HealthyReplicas++
			st.LeaseCapacity += m.maxLeases
			healthyActive++
		}
		if m.updated {
			st.UpdatedReplicas++
		}
	}
	if st.LeaseCapacity > 0 {
		st.UtilizationPercent = int32(int64(st.ActiveLeases) * 100 / int64(st.LeaseCapacity))
	}

	set := func(typ string, ok bool, reason, msg string) {
		s := metav1.ConditionFalse
		if ok {
			s = metav1.ConditionTrue
		}
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{
			Type: typ, Status: s, Reason: reason, Message: msg,
			ObservedGeneration: p.Generation, LastTransitionTime: metav1.NewTime(d.now),
		})
	}
	ready := healthyActive >= d.desired && !d.in.Finalizing && d.in.SpecErr == nil
	readyReason, readyMsg := "EnoughHealthy", strconv.Itoa(int(healthyActive))+" of "+strconv.Itoa(int(d.desired))+" members healthy"
	switch {
	case d.in.Finalizing:
		readyReason = "Deleting"
	case d.in.SpecErr != nil:
		readyReason, readyMsg = "InvalidSpec", d.in.SpecErr.Error()
	case !ready:
		readyReason = "TooFewHealthy"
	}
	set(v1.PoolConditionReady, ready, readyReason, readyMsg)
	if d.progress != "" {
		set(v1.PoolConditionProgressing, true, d.progress, "members are being added, drained or removed")
		set(v1.PoolConditionReconciling, true, d.progress, "members are being added, drained or removed")
	} else {
		set(v1.PoolConditionProgressing, false, "Steady", "every member is current")
		set(v1.PoolConditionReconciling, false, "Steady", "every member is current")
	}
	switch {
	case d.spec.Autoscale == nil:
		set(v1.PoolConditionScalingLimited, false, "AutoscaleDisabled", "size is spec.replicas")
	case d.limited != "":
		bound := "minReplicas (" + strconv.Itoa(int(*d.spec.Autoscale.MinReplicas)) + ")"
		if d.limited == LimitedTooMany {
			bound = "maxReplicas (" + strconv.Itoa(int(d.spec.Autoscale.MaxReplicas)) + ")"
		}
		set(v1.PoolConditionScalingLimited, true, d.limited,
			"demand asks for "+strconv.Itoa(int(d.recommended))+" members, clamped to "+bound+"; desired is "+strconv.Itoa(int(d.desired)))
	default:
		set(v1.PoolConditionScalingLimited, false, "DesiredWithinRange", "demand is within minReplicas and maxReplicas")
	}
	d.out.Status = st
}
