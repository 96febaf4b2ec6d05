package pool

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
)

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func i32(v int32) *int32 { return &v }

func newPool(replicas int32, opts ...func(*v1.ProxyPool)) *v1.ProxyPool {
	p := &v1.ProxyPool{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "crawl", UID: "pool-uid", Generation: 1},
		Spec: v1.ProxyPoolSpec{
			Replicas: i32(replicas),
			Template: v1.ProxyTemplate{
				Metadata: v1.ProxyTemplateMeta{Labels: map[string]string{"team": "a"}},
				Spec:     v1.ProxySpec{Mode: v1.ModeManaged, Provider: "mock", Attributes: map[string]string{"geo": "eu"}},
			},
		},
	}
	for _, o := range opts {
		o(p)
	}
	p.Spec.Default()
	return p
}

func withStatus(desired int32) func(*v1.ProxyPool) {
	return func(p *v1.ProxyPool) { p.Status.DesiredReplicas, p.Status.ObservedGeneration = desired, 1 }
}

// memberOpt shapes an observed member.
type memberOpt func(*Member)

func healthy(m *Member) {
	m.Proxy.Status.Phase = v1.PhaseReady
	m.Proxy.Status.Conditions = []metav1.Condition{
		{Type: v1.ConditionProvisioned, Status: metav1.ConditionTrue},
		{Type: v1.ConditionHealthy, Status: metav1.ConditionTrue},
	}
}

func provisioning(m *Member) {
	m.Proxy.Status.Phase = v1.PhaseProvisioning
	m.Proxy.Status.Conditions = []metav1.Condition{{Type: v1.ConditionProvisioned, Status: metav1.ConditionFalse}}
}

func failedAt(at time.Time) memberOpt {
	return func(m *Member) {
		m.Proxy.Status.Phase = v1.PhaseFailed
		m.Proxy.Status.Conditions = []metav1.Condition{{Type: v1.ConditionProvisioned, Status: metav1.ConditionFalse, LastTransitionTime: metav1.NewTime(at)}}
	}
}

func leases(n int) memberOpt  { return func(m *Member) { m.Leases = n } }
func cooling(n int) memberOpt { return func(m *Member) { m.Cooling = n } }
func band(b v1.QualityBand) memberOpt {
	return func(m *Member) { m.Proxy.Status.QualityBand = b }
}
func createdAt(at time.Time) memberOpt {
	return func(m *Member) { m.Proxy.CreationTimestamp = metav1.NewTime(at) }
}
func outdated(m *Member) { m.Proxy.Annotations[v1.PoolTemplateHashAnnotation] = "old" }
func drainingSince(at time.Time) memberOpt {
	return func(m *Member) {
		m.Proxy.Labels[v1.PoolDrainingLabel] = "true"
		m.Proxy.Annotations[v1.PoolDrainingSinceAnnotation] = at.Format(time.RFC3339)
	}
}
func terminating(m *Member) { ts := metav1.NewTime(t0); m.Proxy.DeletionTimestamp = &ts }

// mem builds the observed child the pool would have created with that ordinal.
func mem(p *v1.ProxyPool, ordinal int64, opts ...memberOpt) Member {
	th := TemplateHash(&p.Spec.Template)
	px := &v1.Proxy{
		ObjectMeta: metav1.ObjectMeta{
			Name: MemberName(p.Name, th, ordinal), Namespace: p.Namespace,
			CreationTimestamp: metav1.NewTime(t0.Add(-time.Hour + time.Duration(ordinal)*time.Minute)),
			Labels:            map[string]string{v1.PoolLabel: p.Name, "team": "a"},
			Annotations:       map[string]string{v1.PoolTemplateHashAnnotation: th, v1.PoolOrdinalAnnotation: strconv.FormatInt(ordinal, 10)},
		},
		Spec: p.Spec.Template.Spec,
	}
	m := Member{Proxy: px}
	healthy(&m)
	for _, o := range opts {
		o(&m)
	}
	return m
}

// summary is what a case checks: the changes, listed children (with a * when draining), the
// desired size and the Progressing reason.
type summary struct {
	Changes     []string
	Children    []string
	Desired     int32
	Progressing string
}

func summarize(p *v1.ProxyPool, d Decision) summary {
	s := summary{Desired: d.Status.DesiredReplicas}
	for _, c := range d.Changes {
		s.Changes = append(s.Changes, fmt.Sprintf("%s %s %s", c.Kind, short(p, c.Member), c.Reason))
	}
	for _, c := range d.Children {
		n := short(p, c.Metadata.Name)
		if c.Metadata.Labels[v1.PoolDrainingLabel] == "true" {
			n += "*"
		}
		s.Children = append(s.Children, n)
	}
	slices.Sort(s.Children) // by ordinal; the decision sorts by (hashed) name
	if c := meta.FindStatusCondition(d.Status.Conditions, v1.PoolConditionProgressing); c != nil && c.Status == metav1.ConditionTrue {
		s.Progressing = c.Reason
	}
	return s
}

// short names a member by its ordinal ("#3"), found by trying the current template's names.
func short(p *v1.ProxyPool, name string) string {
	th := TemplateHash(&p.Spec.Template)
	for o := int64(0); o < 100; o++ {
		if MemberName(p.Name, th, o) == name {
			return "#" + strconv.FormatInt(o, 10)
		}
	}
	return name
}

func members(p *v1.ProxyPool, n int, opts ...memberOpt) []Member {
	var out []Member
	for i := 1; i <= n; i++ {
		out = append(out, mem(p, int64(i), opts...))
	}
	return out
}

func TestDecide(t *testing.T) {
	p3 := newPool(3, withStatus(3))
	p5 := newPool(5, withStatus(3))
	p3from5 := newPool(3, withStatus(5))
	maxAge := newPool(3, withStatus(3), func(p *v1.ProxyPool) {
		p.Spec.Rotation = &v1.PoolRotation{MaxAge: &metav1.Duration{Duration: 6 * time.Hour}}
	})
	banned := newPool(3, withStatus(3), func(p *v1.ProxyPool) { p.Spec.Rotation = &v1.PoolRotation{BanThreshold: i32(3)} })
	minFair := newPool(3, withStatus(3), func(p *v1.ProxyPool) { p.Spec.Rotation = &v1.PoolRotation{MinBand: v1.BandFair} })
	unavail := newPool(3, withStatus(3), func(p *v1.ProxyPool) {
		zero, one := intstr.FromInt32(0), intstr.FromInt32(1)
		p.Spec.Strategy = &v1.PoolStrategy{MaxSurge: &zero, MaxUnavailable: &one}
	})
	// oldTemplate members carry another template hash than the pool's.
	tests := []struct {
		name    string
		pool    *v1.ProxyPool
		members []Member
		now     time.Time
		want    summary
	}{
		{
			name: "create: an empty pool makes replicas members at once",
			pool: newPool(3),
			want: summary{
				Changes:     []string{"Create #1 ScaleUp", "Create #2 ScaleUp", "Create #3 ScaleUp"},
				Children:    []string{"#1", "#2", "#3"},
				Desired:     3,
				Progressing: "ScaleUp",
			},
		},
		{
			name:    "steady: every member current and healthy",
			pool:    p3,
			members: members(p3, 3),
			want:    summary{Children: []string{"#1", "#2", "#3"}, Desired: 3},
		},
		{
			name:    "new members are not healthy yet: wait",
			pool:    p3,
			members: members(p3, 3, provisioning),
			want:    summary{Children: []string{"#1", "#2", "#3"}, Desired: 3, Progressing: "WaitingForMembers"},
		},
		{
			name:    "scale up: new ordinals above every observed one",
			pool:    p5,
			members: members(p5, 3),
			want: summary{
				Changes:     []string{"Create #4 ScaleUp", "Create #5 ScaleUp"},
				Children:    []string{"#1", "#2", "#3", "#4", "#5"},
				Desired:     5,
				Progressing: "ScaleUp",
			},
		},
		{
			name: "scale down: idle members drain first",
			pool: p3from5,
			members: []Member{
				mem(p3from5, 1, leases(2)), mem(p3from5, 2), mem(p3from5, 3, leases(1)),
				mem(p3from5, 4, leases(4)), mem(p3from5, 5),
			},
			want: summary{
				Changes:     []string{"Drain #2 ScaleDown", "Drain #5 ScaleDown"},
				Children:    []string{"#1", "#2*", "#3", "#4", "#5*"},
				Desired:     3,
				Progressing: "ScaleDown",
			},
		},
		{
			name:    "template change: surge one new member, drain nothing yet",
			pool:    p3,
			members: members(p3, 3, outdated),
			want: summary{
				Changes:     []string{"Create #4 Template"},
				Children:    []string{"#1", "#2", "#3", "#4"},
				Desired:     3,
				Progressing: "Template",
			},
		},
		{
			name:    "template change: the new member is healthy, the oldest outdated one drains",
			pool:    p3,
			members: append(members(p3, 3, outdated), mem(p3, 4)),
			want: summary{
				Changes:     []string{"Drain #1 Template"},
				Children:    []string{"#1*", "#2", "#3", "#4"},
				Desired:     3,
				Progressing: "Template",
			},
		},
		{
			name:    "template change: surge used by the draining member, nothing more is created",
			pool:    p3,
			members: []Member{mem(p3, 1, outdated, drainingSince(t0), leases(1)), mem(p3, 2, outdated), mem(p3, 3, outdated), mem(p3, 4)},
			want: summary{
				Children:    []string{"#1*", "#2", "#3", "#4"},
				Desired:     3,
				Progressing: "Draining",
			},
		},
		{
			name:    "drain: a draining member whose leases ended is removed",
			pool:    p3,
			members: []Member{mem(p3, 1, drainingSince(t0.Add(-time.Minute))), mem(p3, 2), mem(p3, 3), mem(p3, 4)},
			want: summary{
				Changes:     []string{"Remove #1 Drained"},
				Children:    []string{"#2", "#3", "#4"},
				Desired:     3,
				Progressing: "Draining",
			},
		},
		{
			name:    "drain: leases outlive drainSeconds, the member is removed anyway",
			pool:    p3,
			members: []Member{mem(p3, 1, drainingSince(t0.Add(-301*time.Second)), leases(3)), mem(p3, 2), mem(p3, 3), mem(p3, 4)},
			want: summary{
				Changes:     []string{"Remove #1 DrainExpired"},
				Children:    []string{"#2", "#3", "#4"},
				Desired:     3,
				Progressing: "Draining",
			},
		},
		{
			name:    "finalizing member: not listed, still counted against the surge",
			pool:    p3,
			members: []Member{mem(p3, 1, terminating), mem(p3, 2), mem(p3, 3)},
			want: summary{
				Changes:     []string{"Create #4 ScaleUp"},
				Children:    []string{"#2", "#3", "#4"},
				Desired:     3,
				Progressing: "Removing",
			},
		},
		{
			name: "maxAge: the oldest members are replaced one surge at a time",
			pool: maxAge,
			members: []Member{
				mem(maxAge, 1, createdAt(t0.Add(-7*time.Hour))), mem(maxAge, 2, createdAt(t0.Add(-6*time.Hour))),
				mem(maxAge, 3, createdAt(t0.Add(-time.Hour))),
			},
			want: summary{
				Changes:     []string{"Create #4 MaxAge"},
				Children:    []string{"#1", "#2", "#3", "#4"},
				Desired:     3,
				Progressing: "MaxAge",
			},
		},
		{
			name: "maxAge: once the new member is healthy the oldest drains",
			pool: maxAge,
			members: []Member{
				mem(maxAge, 1, createdAt(t0.Add(-6*time.Hour))), mem(maxAge, 2, createdAt(t0.Add(-7*time.Hour))),
				mem(maxAge, 3, createdAt(t0.Add(-time.Hour))), mem(maxAge, 4, createdAt(t0)),
			},
			want: summary{
				Changes:     []string{"Drain #2 MaxAge"},
				Children:    []string{"#1", "#2*", "#3", "#4"},
				Desired:     3,
				Progressing: "MaxAge",
			},
		},
		{
			name:    "ban: a member cooling for banThreshold targets is replaced whatever its age",
			pool:    banned,
			members: []Member{mem(banned, 1), mem(banned, 2, cooling(3)), mem(banned, 3, cooling(2))},
			want: summary{
				Changes:     []string{"Create #4 Banned"},
				Children:    []string{"#1", "#2", "#3", "#4"},
				Desired:     3,
				Progressing: "Banned",
			},
		},
		{
			name: "minBand: a member graded below it is replaced make-before-break; ungraded ones stay",
			pool: minFair,
			members: []Member{mem(minFair, 1, band(v1.BandGood)), mem(minFair, 2, band(v1.BandPoor)),
				mem(minFair, 3, band(v1.BandFair)), mem(minFair, 4, band(""))},
			want: summary{
				Changes:     []string{"Drain #2 LowQuality"},
				Children:    []string{"#1", "#2*", "#3", "#4"},
				Desired:     3,
				Progressing: "LowQuality",
			},
		},
		{
			name:    "minBand: a Poor member is replaced by a new one first",
			pool:    minFair,
			members: []Member{mem(minFair, 1, band(v1.BandGood)), mem(minFair, 2, band(v1.BandPoor)), mem(minFair, 3)},
			want: summary{
				Changes:     []string{"Create #4 LowQuality"},
				Children:    []string{"#1", "#2", "#3", "#4"},
				Desired:     3,
				Progressing: "LowQuality",
			},
		},
		{
			name:    "failed member from an old template: drained at once, replaced",
			pool:    p3,
			members: []Member{mem(p3, 1, outdated, failedAt(t0)), mem(p3, 2), mem(p3, 3)},
			want: summary{
				Changes:     []string{"Create #4 Failed", "Drain #1 Failed"},
				Children:    []string{"#1*", "#2", "#3", "#4"},
				Desired:     3,
				Progressing: "Failed",
			},
		},
		{
			name:    "failed member from the current template: kept for FailedReplaceAfter",
			pool:    p3,
			members: []Member{mem(p3, 1, failedAt(t0.Add(-time.Minute))), mem(p3, 2), mem(p3, 3)},
			want:    summary{Children: []string{"#1", "#2", "#3"}, Desired: 3, Progressing: "WaitingForMembers"},
		},
		{
			name:    "failed member from the current template: replaced after FailedReplaceAfter",
			pool:    p3,
			members: []Member{mem(p3, 1, failedAt(t0.Add(-FailedReplaceAfter))), mem(p3, 2), mem(p3, 3)},
			want: summary{
				Changes:     []string{"Create #4 Failed", "Drain #1 Failed"},
				Children:    []string{"#1*", "#2", "#3", "#4"},
				Desired:     3,
				Progressing: "Failed",
			},
		},
		{
			name:    "maxUnavailable 1, maxSurge 0: drain first, then make",
			pool:    unavail,
			members: members(unavail, 3, outdated),
			want: summary{
				Changes:     []string{"Drain #1 Template"},
				Children:    []string{"#1*", "#2", "#3"},
				Desired:     3,
				Progressing: "Template",
			},
		},
		{
			name:    "scale to zero drains everything",
			pool:    newPool(0, withStatus(2)),
			members: members(p3, 2),
			want: summary{
				Changes:     []string{"Drain #1 ScaleDown", "Drain #2 ScaleDown"},
				Children:    []string{"#1*", "#2*"},
				Progressing: "ScaleDown",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			now := tt.now
			if now.IsZero() {
				now = t0
			}
			in := Input{Pool: tt.pool, Members: tt.members, Now: now}
			got := Decide(in)
			if diff := cmp.Diff(tt.want, summarize(tt.pool, got)); diff != "" {
				t.Errorf("mismatch (-want +got):\n%s", diff)
			}
			// The same inputs give the same decision, byte for byte.
			if diff := cmp.Diff(got, Decide(in)); diff != "" {
				t.Errorf("not deterministic (-first +second):\n%s", diff)
			}
		})
	}
}

func TestNewMemberShape(t *testing.T) {
	p := newPool(1)
	d := Decide(Input{Pool: p, Now: t0})
	if len(d.Children) != 1 {
		t.Fatalf("children = %d, want 1", len(d.Children))
	}
	c := d.Children[0]
	th := TemplateHash(&p.Spec.Template)
	want := Child{
		APIVersion: v1.APIVersion, Kind: v1.Kind,
		Metadata: ChildMeta{
			Name: MemberName("web", th, 1), Namespace: "crawl",
			Labels:      map[string]string{v1.PoolLabel: "web", "team": "a"},
			Annotations: map[string]string{v1.PoolTemplateHashAnnotation: th, v1.PoolOrdinalAnnotation: "1"},
		},
		Spec: p.Spec.Template.Spec,
	}
	want.Spec.Attributes = map[string]string{"geo": "eu", v1.PoolAttribute: "web"}
	if diff := cmp.Diff(want, c); diff != "" {
		t.Errorf("child (-want +got):\n%s", diff)
	}
	if p.Spec.Template.Spec.Attributes[v1.PoolAttribute] != "" {
		t.Errorf("the template's attributes were modified")
	}
	if st := d.Status; st.Selector != v1.PoolLabel+"=web" || st.TemplateHash != th || st.DesiredReplicas != 1 || st.ObservedGeneration != 1 {
		t.Errorf("status = %+v", st)
	}
}

func TestDrainMarkIsStable(t *testing.T) {
	// A member marked draining in one sync keeps the same since-time in the next: the mark
	// comes back in the observed child and is echoed.
	p := newPool(0, withStatus(1))
	d := Decide(Input{Pool: p, Members: []Member{mem(p, 1, leases(1))}, Now: t0})
	c := d.Children[0]
	if c.Metadata.Annotations[v1.PoolDrainingSinceAnnotation] != t0.Format(time.RFC3339) || c.Metadata.Annotations[v1.PoolDrainReasonAnnotation] != ReasonScaleDown {
		t.Fatalf("drain mark = %v", c.Metadata.Annotations)
	}
	m := mem(p, 1, leases(1))
	m.Proxy.Labels, m.Proxy.Annotations = c.Metadata.Labels, c.Metadata.Annotations
	d2 := Decide(Input{Pool: p, Members: []Member{m}, Now: t0.Add(time.Minute)})
	if diff := cmp.Diff(c, d2.Children[0]); diff != "" {
		t.Errorf("second sync changed the draining child (-want +got):\n%s", diff)
	}
	if len(d2.Changes) != 0 {
		t.Errorf("changes = %v, want none", d2.Changes)
	}
	if d2.ResyncAfter > ProgressPoll {
		t.Errorf("resync %s, want at most %s while draining", d2.ResyncAfter, ProgressPoll)
	}
}

func TestOrdinalNeverReusedWhileFinalizing(t *testing.T) {
	p := newPool(1, withStatus(1))
	// Member 7 is finalizing; 1 is outdated: the new member must be #8, not a name in use.
	d := Decide(Input{Pool: p, Members: []Member{mem(p, 7, terminating), mem(p, 1, outdated)}, Now: t0})
	var created []string
	for _, c := range d.Changes {
		if c.Kind == ChangeCreate {
			created = append(created, short(p, c.Member))
		}
	}
	// Budget: 1 + 1 surge - 2 existing = 0: nothing yet.
	if len(created) != 0 {
		t.Fatalf("created %v with no surge budget", created)
	}
	p2 := newPool(2, withStatus(1))
	d = Decide(Input{Pool: p2, Members: []Member{mem(p2, 7, terminating), mem(p2, 1)}, Now: t0})
	for _, c := range d.Changes {
		if c.Kind == ChangeCreate {
			created = append(created, short(p2, c.Member))
		}
	}
	if diff := cmp.Diff([]string{"#8"}, created); diff != "" {
		t.Errorf("created (-want +got):\n%s", diff)
	}
}

func TestFinalize(t *testing.T) {
	p := newPool(3, withStatus(3))
	d := Decide(Input{Pool: p, Members: []Member{mem(p, 1), mem(p, 2, terminating)}, Finalizing: true, Now: t0})
	if len(d.Children) != 0 || d.Finalized {
		t.Fatalf("children %d finalized %v, want none and false", len(d.Children), d.Finalized)
	}
	if diff := cmp.Diff([]Change{{Kind: ChangeRemove, Member: MemberName("web", TemplateHash(&p.Spec.Template), 1), Reason: ReasonDeleted}}, d.Changes); diff != "" {
		t.Errorf("changes (-want +got):\n%s", diff)
	}
	if d.ResyncAfter != FinalizePoll {
		t.Errorf("resync %s, want %s", d.ResyncAfter, FinalizePoll)
	}
	d = Decide(Input{Pool: p, Finalizing: true, Now: t0})
	if !d.Finalized {
		t.Errorf("no members left, not finalized")
	}
}

func autoscaled(min, max, target, window int32, status *v1.PoolAutoscaleStatus, desired int32) *v1.ProxyPool {
	return newPool(1, func(p *v1.ProxyPool) {
		p.Spec.Autoscale = &v1.PoolAutoscale{MinReplicas: i32(min), MaxReplicas: max, TargetLeaseUtilization: i32(target), ScaleDownStabilizationSeconds: i32(window)}
		p.Spec.Template.Spec.MaxLeases = i32(10)
		p.Status.Autoscale, p.Status.DesiredReplicas, p.Status.ObservedGeneration = status, desired, 1
	})
}

func TestAutoscale(t *testing.T) {
	lowSince := metav1.NewTime(t0.Add(-4 * time.Minute))
	tests := []struct {
		name        string
		pool        *v1.ProxyPool
		leases      []int // per member
		denied      int64
		wantDesired int32
		wantLimited string
		wantScale   *Scale
		wantLow     bool
	}{
		{"first sync starts from replicas clamped", autoscaled(2, 10, 50, 300, nil, 0), nil, 0, 2, LimitedTooFew, nil, false},
		{"steady at target", autoscaled(1, 10, 50, 300, &v1.PoolAutoscaleStatus{}, 2), []int{5, 5}, 0, 2, "", nil, false},
		// 30 leases / (50 % of 10) = 6: up at once.
		{"up at once", autoscaled(1, 10, 50, 300, &v1.PoolAutoscaleStatus{}, 2), []int{10, 10, 10}, 0, 6, "", &Scale{From: 2, To: 6, Reason: "Autoscale"}, false},
		{"up clamped to max", autoscaled(1, 4, 50, 300, &v1.PoolAutoscaleStatus{}, 2), []int{10, 10, 10}, 0, 4, LimitedTooMany, &Scale{From: 2, To: 4, Reason: "Autoscale"}, false},
		{"down waits for the window", autoscaled(1, 10, 50, 300, &v1.PoolAutoscaleStatus{}, 6), []int{1, 1}, 0, 6, "", nil, true},
		{"down after the window to the largest recommendation in it", autoscaled(1, 10, 50, 240, &v1.PoolAutoscaleStatus{LowSince: &lowSince, LowMax: 3}, 6), []int{1, 1}, 0, 3, "", &Scale{From: 6, To: 3, Reason: "Autoscale"}, false},
		{"demand back up resets the window", autoscaled(1, 10, 50, 300, &v1.PoolAutoscaleStatus{LowSince: &lowSince, LowMax: 3}, 2), []int{5, 5}, 0, 2, "", nil, false},
		{"down clamped to min", autoscaled(3, 10, 50, 0, &v1.PoolAutoscaleStatus{}, 5), nil, 0, 3, LimitedTooFew, &Scale{From: 5, To: 3, Reason: "Autoscale"}, false},
		// Clamped to minReplicas while the window holds the size at 5: the message names the bound (3), not 5.
		{"clamped to min inside the window", autoscaled(3, 10, 50, 300, &v1.PoolAutoscaleStatus{}, 5), nil, 0, 5, LimitedTooFew, nil, true},
		// The pool is full (20 of 20) and crawlers were refused 10 times: 30 / 5 = 6.
		{"409 no-capacity answers count as demand", autoscaled(1, 10, 50, 300, &v1.PoolAutoscaleStatus{DeniedSeen: 5}, 4), []int{5, 5, 5, 5}, 15, 6, "", &Scale{From: 4, To: 6, Reason: "Autoscale"}, false},
		// 1000 refusals count at most the current capacity (40): (20+40)/5 = 12, clamped to 10.
		{"a retry storm at most doubles", autoscaled(1, 20, 50, 300, &v1.PoolAutoscaleStatus{}, 4), []int{5, 5, 5, 5}, 1000, 12, "", &Scale{From: 4, To: 12, Reason: "Autoscale"}, false},
		{"maxReplicas lowered below the current size: down at once", autoscaled(1, 3, 50, 300, &v1.PoolAutoscaleStatus{}, 8), []int{5, 5, 5, 5, 5, 5, 5, 5}, 0, 3, LimitedTooMany, &Scale{From: 8, To: 3, Reason: "Autoscale"}, false},
		{"a hostile status size is clamped", autoscaled(1, 4, 50, 300, &v1.PoolAutoscaleStatus{}, 2000000000), nil, 0, 4, LimitedTooFew, &Scale{From: 2000000000, To: 4, Reason: "Autoscale"}, true},
		// The user lowered maxReplicas to 10 while the window had recorded 25 (or status is hostile).
		{"a recorded lowMax above maxReplicas is clamped", autoscaled(1, 10, 50, 240, &v1.PoolAutoscaleStatus{LowSince: &lowSince, LowMax: 25}, 10), []int{1, 1}, 0, 10, "", nil, false},
		{"a hostile lowMax is clamped", autoscaled(1, 4, 50, 240, &v1.PoolAutoscaleStatus{LowSince: &lowSince, LowMax: 2000000000}, 4), []int{1, 1}, 0, 4, "", nil, false},
		{"a negative lowMax is clamped to min", autoscaled(2, 4, 50, 240, &v1.PoolAutoscaleStatus{LowSince: &lowSince, LowMax: -7}, 4), nil, 0, 2, LimitedTooFew, &Scale{From: 4, To: 2, Reason: "Autoscale"}, false},
		{"a restarted counter is taken as new", autoscaled(1, 10, 50, 300, &v1.PoolAutoscaleStatus{DeniedSeen: 500}, 2), []int{5, 5}, 5, 3, "", &Scale{From: 2, To: 3, Reason: "Autoscale"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ms []Member
			for i, n := range tt.leases {
				ms = append(ms, mem(tt.pool, int64(i+1), leases(n)))
			}
			d := Decide(Input{Pool: tt.pool, Members: ms, Denied: tt.denied, Now: t0})
			if d.Status.DesiredReplicas != tt.wantDesired {
				t.Errorf("desired = %d, want %d", d.Status.DesiredReplicas, tt.wantDesired)
			}
			if diff := cmp.Diff(tt.wantScale, d.Scale); diff != "" {
				t.Errorf("scale (-want +got):\n%s", diff)
			}
			c := meta.FindStatusCondition(d.Status.Conditions, v1.PoolConditionScalingLimited)
			gotLimited := ""
			if c != nil && c.Status == metav1.ConditionTrue {
				gotLimited = c.Reason
			}
			if gotLimited != tt.wantLimited {
				t.Errorf("ScalingLimited = %q, want %q", gotLimited, tt.wantLimited)
			}
			if a := tt.pool.Spec.Autoscale; gotLimited != "" {
				want := fmt.Sprintf("clamped to minReplicas (%d)", *a.MinReplicas)
				if gotLimited == LimitedTooMany {
					want = fmt.Sprintf("clamped to maxReplicas (%d)", a.MaxReplicas)
				}
				if !strings.Contains(c.Message, want) {
					t.Errorf("ScalingLimited message %q, want it to say %q", c.Message, want)
				}
			}
			if got := d.Status.Autoscale.LowSince != nil; got != tt.wantLow {
				t.Errorf("lowSince set = %v, want %v", got, tt.wantLow)
			}
			if d.Status.Autoscale.DeniedSeen != tt.denied {
				t.Errorf("deniedSeen = %d, want %d", d.Status.Autoscale.DeniedSeen, tt.denied)
			}
			if d.ResyncAfter > AutoscalePoll {
				t.Errorf("resync %s, want at most %s with autoscale", d.ResyncAfter, AutoscalePoll)
			}
		})
	}
}

func TestStatusCounts(t *testing.T) {
	p := newPool(3, withStatus(3))
	d := Decide(Input{Pool: p, Now: t0, Members: []Member{
		mem(p, 1, leases(4)), mem(p, 2, leases(1)), mem(p, 3, provisioning),
		mem(p, 4, outdated, drainingSince(t0), leases(2)),
	}})
	st := d.Status
	got := []int32{st.Members, st.Replicas, st.ReadyReplicas, st.HealthyReplicas, st.UpdatedReplicas, st.DrainingReplicas, st.ActiveLeases, st.LeaseCapacity, st.UtilizationPercent}
	want := []int32{4, 3, 2, 2, 3, 1, 7, 10, 70}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("members, replicas, ready, healthy, updated, draining, leases, capacity, utilization (-want +got):\n%s", diff)
	}
	for typ, want := range map[string]metav1.ConditionStatus{
		v1.PoolConditionReady: metav1.ConditionFalse, v1.PoolConditionProgressing: metav1.ConditionTrue,
		v1.PoolConditionReconciling: metav1.ConditionTrue, v1.PoolConditionScalingLimited: metav1.ConditionFalse,
	} {
		if c := meta.FindStatusCondition(st.Conditions, typ); c == nil || c.Status != want || c.ObservedGeneration != 1 {
			t.Errorf("condition %s = %+v, want %s", typ, c, want)
		}
	}
}

// TestRolloutInvariants plays a pool through template changes, rotations, bans and scaling
// with members that take a few ticks to become healthy and to finish deleting, and checks at
// every tick that healthy non-draining members never drop below replicas - maxUnavailable
// (once the pool had them) and members never exceed replicas + maxSurge (a scale-down's
// draining surplus aside).
func TestRolloutInvariants(t *testing.T) {
	for _, strat := range []struct{ surge, unavailable int32 }{{1, 0}, {2, 0}, {0, 1}, {1, 1}} {
		t.Run(fmt.Sprintf("surge%d-unavailable%d", strat.surge, strat.unavailable), func(t *testing.T) {
			p := newPool(5, func(p *v1.ProxyPool) {
				s, u := intstr.FromInt32(strat.surge), intstr.FromInt32(strat.unavailable)
				p.Spec.Strategy = &v1.PoolStrategy{MaxSurge: &s, MaxUnavailable: &u}
				p.Spec.Rotation = &v1.PoolRotation{MaxAge: &metav1.Duration{Duration: time.Hour}, BanThreshold: i32(2), MinBand: v1.BandFair}
				p.Spec.DrainSeconds = i32(60)
			})
			type sim struct {
				px       *v1.Proxy
				bornTick int
				goneTick int // terminating until this tick
				leases   int
				cooling  int
			}
			world := map[string]*sim{}
			now := t0
			reachedFull := false
			for tick := 0; tick < 2000; tick++ {
				now = now.Add(10 * time.Second)
				switch tick {
				case 300:
					p.Spec.Template.Spec.Placement = &v1.PlacementSpec{Image: "v2"}
				case 600:
					p.Spec.Replicas = i32(8)
				case 900:
					p.Spec.Replicas = i32(3)
				}
				var ms []Member
				names := slices.Sorted(func(yield func(string) bool) {
					for n := range world {
						if !yield(n) {
							return
						}
					}
				})
				for _, n := range names {
					s := world[n]
					if s.goneTick > 0 && tick >= s.goneTick {
						delete(world, n)
						continue
					}
					if tick-s.bornTick >= 3 && s.px.DeletionTimestamp == nil {
						m := Member{Proxy: s.px}
						healthy(&m)
					}
					if tick == 1200 && s.px.DeletionTimestamp == nil && s.px.Labels[v1.PoolDrainingLabel] == "" {
						s.cooling = 2 // every member is burned at once
					}
					if tick == 1600 && s.px.DeletionTimestamp == nil && s.px.Labels[v1.PoolDrainingLabel] == "" {
						s.px.Status.QualityBand = v1.BandPoor // every member is graded Poor at once
					}
					s.leases = (tick + len(n)) % 3
					ms = append(ms, Member{Proxy: s.px, Leases: s.leases, Cooling: s.cooling})
				}
				d := Decide(Input{Pool: p, Members: ms, Now: now})
				p.Status = d.Status
				// Apply the desired children: create, update labels, delete the absent.
				desired := map[string]Child{}
				for _, c := range d.Children {
					desired[c.Metadata.Name] = c
				}
				for n, s := range world {
					if _, ok := desired[n]; !ok && s.px.DeletionTimestamp == nil {
						ts := metav1.NewTime(now)
						s.px.DeletionTimestamp, s.goneTick = &ts, tick+2
						s.px.Status.Phase = v1.PhaseDeleting
					}
				}
				for n, c := range desired {
					s := world[n]
					if s == nil {
						s = &sim{px: &v1.Proxy{ObjectMeta: metav1.ObjectMeta{Name: n, Namespace: "crawl", CreationTimestamp: metav1.NewTime(now)}}, bornTick: tick}
						provisioningProxy(s.px)
						world[n] = s
					}
					s.px.Labels, s.px.Annotations, s.px.Spec = c.Metadata.Labels, c.Metadata.Annotations, c.Spec
				}
				// Invariants on what now exists.
				total, healthyActive := int32(0), int32(0)
				for _, s := range world {
					// A scale-down's surplus drains for up to drainSeconds: above the new
					// size by nature, it is not a surge.
					if s.px.Annotations[v1.PoolDrainReasonAnnotation] != ReasonScaleDown {
						total++
					}
					if s.px.DeletionTimestamp == nil && s.px.Labels[v1.PoolDrainingLabel] != "true" && s.px.Status.Phase == v1.PhaseReady {
						healthyActive++
					}
				}
				r := *p.Spec.Replicas
				surge, unav := p.Spec.SurgeAndUnavailable(r)
				if total > r+surge {
					t.Fatalf("tick %d: %d members > replicas %d + maxSurge %d", tick, total, r, surge)
				}
				if healthyActive >= r {
					reachedFull = true
				}
				if reachedFull && tick != 600 && healthyActive < min(r, 5)-unav {
					t.Fatalf("tick %d: %d healthy members < replicas %d - maxUnavailable %d", tick, healthyActive, r, unav)
				}
				if tick == 600 {
					reachedFull = false // the new size is not reached at once
				}
				// Members become healthy 3 ticks after they are born.
				for _, s := range world {
					if s.px.DeletionTimestamp == nil && tick-s.bornTick >= 2 && s.px.Status.Phase == v1.PhaseProvisioning {
						m := Member{Proxy: s.px}
						healthy(&m)
					}
				}
			}
			if len(world) != 3 {
				t.Errorf("%d members at the end, want 3", len(world))
			}
		})
	}
}

func provisioningProxy(px *v1.Proxy) {
	m := Member{Proxy: px}
	provisioning(&m)
}

func TestInvalidSpecKeepsMembers(t *testing.T) {
	p := newPool(1, withStatus(3))
	ms := []Member{mem(p, 1), mem(p, 2, outdated), mem(p, 3, terminating)}
	d := Decide(Input{Pool: p, Members: ms, SpecErr: fmt.Errorf("spec.template.spec.mode: pool members must be Managed"), Now: t0})
	s := summarize(p, d)
	if diff := cmp.Diff(summary{Children: []string{"#1", "#2"}, Desired: 3}, s); diff != "" {
		t.Errorf("mismatch (-want +got):\n%s", diff)
	}
	if c := meta.FindStatusCondition(d.Status.Conditions, v1.PoolConditionReady); c == nil || c.Reason != "InvalidSpec" || c.Status != metav1.ConditionFalse {
		t.Errorf("Ready = %+v, want False InvalidSpec", c)
	}
}
