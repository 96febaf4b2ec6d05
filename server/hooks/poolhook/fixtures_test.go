package poolhook

import (
	"encoding/json"
	"flag"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
	"github.com/proxy-operator/proxy-operator/internal/pool"
	"github.com/proxy-operator/proxy-operator/metacontroller"
)

// writeFixtures regenerates the request.json and state.json of the pool hook fixtures under
// testdata/pools-sync and testdata/pools-finalize (their goldens are then written by the golden
// test's -update). The fixtures are committed; this is how they were made:
//
//	go test ./poolhook -run TestWriteFixtures -args -write-fixtures
var writeFixtures = flag.Bool("write-fixtures", false, "rewrite the pool hook fixtures' request.json and state.json")

// fixtureState mirrors the pool fields of replay.State.
type fixtureState struct {
	Now     time.Time        `json:"now"`
	Leases  map[string]int   `json:"leases,omitempty"`
	Cooling map[string]int   `json:"cooling,omitempty"`
	Denied  map[string]int64 `json:"denied,omitempty"`
}

var fxNow = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

type fxPool struct{ v1.ProxyPool }

func newFxPool(replicas int32) *fxPool {
	p := &fxPool{v1.ProxyPool{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1.APIVersion, Kind: v1.PoolKind},
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "crawl", UID: "7d1c2a9e-0000-4000-9000-000000000001", Generation: 1, CreationTimestamp: metav1.NewTime(fxNow.Add(-48 * time.Hour))},
		Spec: v1.ProxyPoolSpec{
			Replicas: &replicas,
			Template: v1.ProxyTemplate{
				Metadata: v1.ProxyTemplateMeta{Labels: map[string]string{"team": "crawling"}},
				Spec: v1.ProxySpec{Mode: v1.ModeManaged, Provider: "mock", MaxLeases: ptr(int32(10)), Attributes: map[string]string{"geo": "eu"},
					Placement: &v1.PlacementSpec{Region: "local", Zone: "local-a", Image: "squid-6"}},
			},
		},
	}}
	p.Spec.Default()
	p.Status = v1.ProxyPoolStatus{ObservedGeneration: 1, DesiredReplicas: replicas}
	return p
}

// member is the observed member with that ordinal, made from the pool's current template
// an hour (minus the ordinal in minutes) ago, Ready and healthy unless changed.
func (p *fxPool) member(ordinal int64, opts ...func(*v1.Proxy)) *v1.Proxy {
	th := pool.TemplateHash(&p.Spec.Template)
	spec := p.Spec.Template.Spec
	spec.Attributes = maps.Clone(spec.Attributes)
	spec.Attributes[v1.PoolAttribute] = p.Name
	created := fxNow.Add(-time.Hour + time.Duration(ordinal)*time.Minute)
	px := &v1.Proxy{
		TypeMeta: metav1.TypeMeta{APIVersion: v1.APIVersion, Kind: v1.Kind},
		ObjectMeta: metav1.ObjectMeta{
			Name: pool.MemberName(p.Name, th, ordinal), Namespace: p.Namespace, UID: types.UID("00000000-0000-4000-8000-00000000000" + strconv.FormatInt(ordinal, 10)),
			Generation: 1, CreationTimestamp: metav1.NewTime(created),
			Labels:      map[string]string{v1.PoolLabel: p.Name, "team": "crawling", "controller-uid": string(p.UID)},
			Annotations: map[string]string{v1.PoolTemplateHashAnnotation: th, v1.PoolOrdinalAnnotation: strconv.FormatInt(ordinal, 10)},
			Finalizers:  []string{"metacontroller.io/compositecontroller-proxy-operator"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: v1.APIVersion, Kind: v1.PoolKind, Name: p.Name, UID: p.UID,
				Controller: ptr(true), BlockOwnerDeletion: ptr(true)}},
		},
		Spec: spec,
		Status: v1.ProxyStatus{ObservedGeneration: 1, Phase: v1.PhaseReady, ProviderID: "mock-" + strconv.FormatInt(ordinal, 10),
			IP: "127.0.0." + strconv.FormatInt(10+ordinal, 10), SpecHash: "5f0c6a1e2b3d4c5e", LatencyMillis: 40,
			Conditions: []metav1.Condition{
				{Type: v1.ConditionProvisioned, Status: metav1.ConditionTrue, ObservedGeneration: 1, Reason: "Running", Message: "instance running", LastTransitionTime: metav1.NewTime(created.Add(30 * time.Second))},
				{Type: v1.ConditionHealthy, Status: metav1.ConditionTrue, ObservedGeneration: 1, Reason: "ProbeSucceeded", Message: "probe succeeded", LastTransitionTime: metav1.NewTime(created.Add(40 * time.Second))},
			}},
	}
	for _, o := range opts {
		o(px)
	}
	return px
}

func fxOutdated(px *v1.Proxy) { px.Annotations[v1.PoolTemplateHashAnnotation] = "0a1b2c3d4e" }
func fxCreated(at time.Time) func(*v1.Proxy) {
	return func(px *v1.Proxy) { px.CreationTimestamp = metav1.NewTime(at) }
}
func fxDraining(since time.Time, reason string) func(*v1.Proxy) {
	return func(px *v1.Proxy) {
		px.Labels[v1.PoolDrainingLabel] = "true"
		px.Annotations[v1.PoolDrainingSinceAnnotation] = since.Format(time.RFC3339)
		px.Annotations[v1.PoolDrainReasonAnnotation] = reason
	}
}
func fxProvisioning(px *v1.Proxy) {
	px.Status.Phase, px.Status.IP = v1.PhaseProvisioning, ""
	px.Status.Conditions = []metav1.Condition{{Type: v1.ConditionProvisioned, Status: metav1.ConditionFalse, ObservedGeneration: 1, Reason: "Creating", Message: "instance starting", LastTransitionTime: metav1.NewTime(fxNow.Add(-10 * time.Second))}}
}
func fxFailed(since time.Time) func(*v1.Proxy) {
	return func(px *v1.Proxy) {
		px.Status.Phase, px.Status.IP = v1.PhaseFailed, ""
		px.Status.Conditions = []metav1.Condition{
			{Type: v1.ConditionProvisioned, Status: metav1.ConditionFalse, ObservedGeneration: 1, Reason: "PermanentError", Message: "image not found", LastTransitionTime: metav1.NewTime(since)},
			{Type: v1.ConditionHealthy, Status: metav1.ConditionFalse, ObservedGeneration: 1, Reason: "AwaitingInstance", Message: "no instance", LastTransitionTime: metav1.NewTime(since)},
		}
	}
}
func fxTerminating(px *v1.Proxy) {
	ts := metav1.NewTime(fxNow.Add(-20 * time.Second))
	px.DeletionTimestamp = &ts
	px.Status.Phase = v1.PhaseDeleting
}

type fixture struct {
	hook       string // pools-sync or pools-finalize
	name       string
	pool       *fxPool
	members    []*v1.Proxy
	state      fixtureState
	finalizing bool
	raw        string // a literal body instead (bad requests)
}

func (f fixture) body(t *testing.T) []byte {
	t.Helper()
	if f.raw != "" {
		return []byte(f.raw)
	}
	ctrl, _ := json.Marshal(map[string]any{"apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController", "metadata": map[string]any{"name": "proxy-operator-pools"}})
	parent, err := json.Marshal(f.pool.ProxyPool)
	if err != nil {
		t.Fatal(err)
	}
	if f.finalizing {
		var m map[string]any
		_ = json.Unmarshal(parent, &m)
		m["metadata"].(map[string]any)["deletionTimestamp"] = fxNow.Add(-time.Minute).Format(time.RFC3339)
		parent, _ = json.Marshal(m)
	}
	req := metacontroller.SyncRequest{Controller: ctrl, Parent: parent, Children: metacontroller.RelativeObjects{ChildType: {}}, Related: metacontroller.RelativeObjects{}, Finalizing: f.finalizing}
	for _, m := range f.members {
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		req.Children[ChildType][m.Namespace+"/"+m.Name] = b
	}
	b, err := json.MarshalIndent(req, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func key(px *v1.Proxy) string { return px.Namespace + "/" + px.Name }

func fixtures() []fixture {
	var out []fixture
	add := func(f fixture) {
		if f.hook == "" {
			f.hook = "pools-sync"
		}
		if f.state.Now.IsZero() {
			f.state.Now = fxNow
		}
		out = append(out, f)
	}
	// create
	add(fixture{name: "create", pool: func() *fxPool { p := newFxPool(3); p.Status = v1.ProxyPoolStatus{}; p.Generation = 1; return p }()})
	p3 := newFxPool(3)
	add(fixture{name: "steady", pool: p3, members: []*v1.Proxy{p3.member(1), p3.member(2), p3.member(3)},
		state: fixtureState{Leases: map[string]int{key(p3.member(1)): 4, key(p3.member(3)): 1}}})
	p5 := newFxPool(5)
	p5.Generation, p5.Status.ObservedGeneration, p5.Status.DesiredReplicas = 2, 1, 3
	add(fixture{name: "scale-up", pool: p5, members: []*v1.Proxy{p5.member(1), p5.member(2), p5.member(3)}})
	pd := newFxPool(3)
	pd.Generation, pd.Status.DesiredReplicas = 2, 5
	add(fixture{name: "scale-down-idle-first", pool: pd, members: []*v1.Proxy{pd.member(1), pd.member(2), pd.member(3), pd.member(4), pd.member(5)},
		state: fixtureState{Leases: map[string]int{key(pd.member(1)): 2, key(pd.member(3)): 1, key(pd.member(4)): 6}}})
	pt := newFxPool(3)
	pt.Generation = 2
	add(fixture{name: "template-change-surge", pool: pt, members: []*v1.Proxy{pt.member(1, fxOutdated), pt.member(2, fxOutdated), pt.member(3, fxOutdated)}})
	add(fixture{name: "template-change-new-member-provisioning", pool: pt, members: []*v1.Proxy{pt.member(1, fxOutdated), pt.member(2, fxOutdated), pt.member(3, fxOutdated), pt.member(4, fxProvisioning)}})
	add(fixture{name: "template-change-drain-oldest", pool: pt, members: []*v1.Proxy{pt.member(1, fxOutdated), pt.member(2, fxOutdated), pt.member(3, fxOutdated), pt.member(4)},
		state: fixtureState{Leases: map[string]int{key(pt.member(1)): 2}}})
	add(fixture{name: "drain-waits-for-leases", pool: pt, members: []*v1.Proxy{pt.member(1, fxOutdated, fxDraining(fxNow.Add(-time.Minute), pool.ReasonTemplate)), pt.member(2, fxOutdated), pt.member(3, fxOutdated), pt.member(4)},
		state: fixtureState{Leases: map[string]int{key(pt.member(1)): 2}}})
	add(fixture{name: "drain-removed-when-idle", pool: pt, members: []*v1.Proxy{pt.member(1, fxOutdated, fxDraining(fxNow.Add(-time.Minute), pool.ReasonTemplate)), pt.member(2, fxOutdated), pt.member(3, fxOutdated), pt.member(4)}})
	add(fixture{name: "drain-expired", pool: pt, members: []*v1.Proxy{pt.member(1, fxOutdated, fxDraining(fxNow.Add(-6*time.Minute), pool.ReasonTemplate)), pt.member(2, fxOutdated), pt.member(3, fxOutdated), pt.member(4)},
		state: fixtureState{Leases: map[string]int{key(pt.member(1)): 2}}})
	add(fixture{name: "removed-member-finalizing", pool: pt, members: []*v1.Proxy{pt.member(1, fxOutdated, fxDraining(fxNow.Add(-time.Minute), pool.ReasonTemplate), fxTerminating), pt.member(2, fxOutdated), pt.member(3, fxOutdated), pt.member(4)}})
	pa := newFxPool(3)
	pa.Spec.Rotation = &v1.PoolRotation{MaxAge: &metav1.Duration{Duration: 6 * time.Hour}}
	add(fixture{name: "maxage-rotation-surge", pool: pa, members: []*v1.Proxy{pa.member(1, fxCreated(fxNow.Add(-7*time.Hour))), pa.member(2, fxCreated(fxNow.Add(-6*time.Hour))), pa.member(3)}})
	add(fixture{name: "maxage-rotation-drain-oldest", pool: pa, members: []*v1.Proxy{pa.member(1, fxCreated(fxNow.Add(-6*time.Hour))), pa.member(2, fxCreated(fxNow.Add(-7*time.Hour))), pa.member(3), pa.member(4, fxCreated(fxNow.Add(-time.Minute)))}})
	pb := newFxPool(3)
	pb.Spec.Rotation = &v1.PoolRotation{BanThreshold: ptr(int32(3))}
	add(fixture{name: "ban-rotation", pool: pb, members: []*v1.Proxy{pb.member(1), pb.member(2), pb.member(3)},
		state: fixtureState{Cooling: map[string]int{key(pb.member(2)): 3, key(pb.member(3)): 2}, Leases: map[string]int{key(pb.member(2)): 1}}})
	pf := newFxPool(3)
	add(fixture{name: "member-failed-old-template", pool: pf, members: []*v1.Proxy{pf.member(1, fxOutdated, fxFailed(fxNow.Add(-time.Minute))), pf.member(2), pf.member(3)}})
	add(fixture{name: "member-failed-current-template-waits", pool: pf, members: []*v1.Proxy{pf.member(1, fxFailed(fxNow.Add(-time.Minute))), pf.member(2), pf.member(3)}})
	add(fixture{name: "member-failed-current-template-replaced", pool: pf, members: []*v1.Proxy{pf.member(1, fxFailed(fxNow.Add(-10*time.Minute))), pf.member(2), pf.member(3)}})
	as := func(desired int32, st *v1.PoolAutoscaleStatus) *fxPool {
		p := newFxPool(2)
		p.Spec.Autoscale = &v1.PoolAutoscale{MinReplicas: ptr(int32(2)), MaxReplicas: 8, TargetLeaseUtilization: ptr(int32(50)), ScaleDownStabilizationSeconds: ptr(int32(300))}
		p.Status.DesiredReplicas, p.Status.Autoscale = desired, st
		return p
	}
	pu := as(2, &v1.PoolAutoscaleStatus{Recommendation: 2})
	add(fixture{name: "autoscale-up", pool: pu, members: []*v1.Proxy{pu.member(1), pu.member(2)},
		state: fixtureState{Leases: map[string]int{key(pu.member(1)): 10, key(pu.member(2)): 9}}})
	pl := as(4, &v1.PoolAutoscaleStatus{Recommendation: 4})
	add(fixture{name: "autoscale-down-waits", pool: pl, members: []*v1.Proxy{pl.member(1), pl.member(2), pl.member(3), pl.member(4)},
		state: fixtureState{Leases: map[string]int{key(pl.member(1)): 3}}})
	lowSince := metav1.NewTime(fxNow.Add(-6 * time.Minute))
	pw := as(4, &v1.PoolAutoscaleStatus{Recommendation: 2, LowSince: &lowSince, LowMax: 3})
	add(fixture{name: "autoscale-down-after-window", pool: pw, members: []*v1.Proxy{pw.member(1), pw.member(2), pw.member(3), pw.member(4)},
		state: fixtureState{Leases: map[string]int{key(pw.member(2)): 3, key(pw.member(4)): 1}}})
	pn := as(2, &v1.PoolAutoscaleStatus{Recommendation: 2, DeniedSeen: 10})
	add(fixture{name: "autoscale-409-counts-as-demand", pool: pn, members: []*v1.Proxy{pn.member(1), pn.member(2)},
		state: fixtureState{Leases: map[string]int{key(pn.member(1)): 10, key(pn.member(2)): 10}, Denied: map[string]int64{"web": 22}}})
	ps := newFxPool(3)
	surge0 := intstr.FromInt32(0)
	unav1 := intstr.FromInt32(1)
	ps.Spec.Strategy = &v1.PoolStrategy{MaxSurge: &surge0, MaxUnavailable: &unav1}
	ps.Generation = 2
	add(fixture{name: "max-unavailable-drains-first", pool: ps, members: []*v1.Proxy{ps.member(1, fxOutdated), ps.member(2, fxOutdated), ps.member(3, fxOutdated)}})
	pi := newFxPool(3)
	pi.Spec.Template.Spec.Mode, pi.Spec.Template.Spec.Provider = v1.ModeExternal, ""
	pi.Spec.Template.Spec.Endpoint = &v1.EndpointSpec{Host: "198.51.100.7", Port: 3128}
	add(fixture{name: "invalid-spec-keeps-members", pool: pi, members: []*v1.Proxy{newFxPool(3).member(1), newFxPool(3).member(2)}})
	add(fixture{name: "bad-malformed-json", raw: `{"parent": {"kind": "ProxyPool"`})
	add(fixture{name: "bad-wrong-kind", raw: `{"parent":{"apiVersion":"crawl.example.com/v1alpha1","kind":"Proxy","metadata":{"name":"web","namespace":"crawl","uid":"u1"}}}`})
	add(fixture{name: "bad-missing-parent", raw: `{"children":{}}`})
	// finalize
	pz := newFxPool(3)
	add(fixture{hook: "pools-finalize", name: "deletes-every-member", pool: pz, finalizing: true,
		members: []*v1.Proxy{pz.member(1), pz.member(2, fxDraining(fxNow.Add(-time.Minute), pool.ReasonScaleDown)), pz.member(3, fxTerminating)}})
	add(fixture{hook: "pools-finalize", name: "waits-for-finalizing-members", pool: pz, finalizing: true, members: []*v1.Proxy{pz.member(3, fxTerminating)}})
	add(fixture{hook: "pools-finalize", name: "finalized-when-none-left", pool: pz, finalizing: true})
	return out
}

func TestWriteFixtures(t *testing.T) {
	if !*writeFixtures {
		t.Skip("run with -write-fixtures to rewrite testdata/pools-*/*/request.json and state.json")
	}
	for _, f := range fixtures() {
		dir := filepath.Join("..", "..", "..", "testdata", f.hook, f.name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "request.json"), append(f.body(t), '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
		st, _ := json.MarshalIndent(f.state, "", "  ")
		if err := os.WriteFile(filepath.Join(dir, "state.json"), append(st, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
