package poolhook

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
	"github.com/proxy-operator/proxy-operator/internal/pool"
	"github.com/proxy-operator/proxy-operator/metacontroller"
)

// benchBody is a sync of a pool of n current, healthy members with a lease on every other
// one: the steady state the hook meets most.
func benchBody(b *testing.B, n int) ([]byte, fakeLoad) {
	b.Helper()
	replicas := int32(n)
	p := v1.ProxyPool{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1.APIVersion, Kind: v1.PoolKind},
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "crawl", UID: "u1", Generation: 1},
		Spec: v1.ProxyPoolSpec{Replicas: &replicas, Template: v1.ProxyTemplate{Spec: v1.ProxySpec{
			Mode: v1.ModeManaged, Provider: "gcp-eu", Attributes: map[string]string{"geo": "eu"},
			Placement: &v1.PlacementSpec{Region: "europe-west1", Zone: "europe-west1-b", MachineType: "e2-small", Image: "squid-6"},
		}}, Rotation: &v1.PoolRotation{MaxAge: &metav1.Duration{Duration: 6 * time.Hour}, BanThreshold: ptr(int32(3))}},
	}
	p.Spec.Default()
	p.Status.DesiredReplicas, p.Status.ObservedGeneration = replicas, 1
	th := pool.TemplateHash(&p.Spec.Template)
	load := fakeLoad{active: map[string]int{}, cooling: map[string]int{}}
	children := map[string]json.RawMessage{}
	for i := 1; i <= n; i++ {
		spec := p.Spec.Template.Spec
		spec.Attributes = map[string]string{"geo": "eu", v1.PoolAttribute: "web"}
		px := v1.Proxy{
			TypeMeta: metav1.TypeMeta{APIVersion: v1.APIVersion, Kind: v1.Kind},
			ObjectMeta: metav1.ObjectMeta{
				Name: pool.MemberName("web", th, int64(i)), Namespace: "crawl", UID: types.UID("m" + strconv.Itoa(i)),
				CreationTimestamp: metav1.NewTime(now.Add(-time.Hour)), Generation: 1, ResourceVersion: "100",
				Labels:      map[string]string{v1.PoolLabel: "web", "controller-uid": "u1"},
				Annotations: map[string]string{v1.PoolTemplateHashAnnotation: th, v1.PoolOrdinalAnnotation: strconv.Itoa(i)},
				Finalizers:  []string{"metacontroller.io/compositecontroller-proxy-operator"},
			},
			Spec: spec,
			Status: v1.ProxyStatus{Phase: v1.PhaseReady, IP: "203.0.113.7", ProviderID: "gcp-" + strconv.Itoa(i), SpecHash: "0123456789abcdef",
				ObservedGeneration: 1, LatencyMillis: 40, Conditions: []metav1.Condition{
					{Type: v1.ConditionProvisioned, Status: metav1.ConditionTrue, Reason: "Running", Message: "instance running", LastTransitionTime: metav1.NewTime(now.Add(-time.Hour))},
					{Type: v1.ConditionHealthy, Status: metav1.ConditionTrue, Reason: "ProbeSucceeded", Message: "probe succeeded", LastTransitionTime: metav1.NewTime(now.Add(-time.Hour))},
				}},
		}
		raw, _ := json.Marshal(px)
		children["crawl/"+px.Name] = raw
		if i%2 == 0 {
			load.active["crawl/"+px.Name] = 3
		}
	}
	parent, _ := json.Marshal(p)
	body, _ := json.Marshal(metacontroller.SyncRequest{Parent: parent, Children: metacontroller.RelativeObjects{ChildType: children}})
	return body, load
}

func ptr[T any](v T) *T { return &v }

// noop is the least a pool hook must do with the same body: decode the parent and every member
// and encode the members back as the answer.
func noop(body []byte) ([]byte, error) {
	var req metacontroller.SyncRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, err
	}
	var p v1.ProxyPool
	if err := json.Unmarshal(req.Parent, &p); err != nil {
		return nil, err
	}
	out := make([]json.RawMessage, 0, len(req.Children[ChildType]))
	for _, raw := range req.Children[ChildType] {
		var px v1.Proxy
		if err := json.Unmarshal(raw, &px); err != nil {
			return nil, err
		}
		b, err := json.Marshal(pool.Child{APIVersion: px.APIVersion, Kind: px.Kind, Spec: px.Spec,
			Metadata: pool.ChildMeta{Name: px.Name, Namespace: px.Namespace, Labels: px.Labels, Annotations: px.Annotations}})
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return json.Marshal(metacontroller.SyncResponse{Status: p.Status, Children: out})
}

// BenchmarkPoolSync measures the pool hook on a pool of 1,000 members against the no-op
// decode/encode of the same body in the same run; "interleaved" alternates them call by call
// and reports the ratio of their medians, so machine noise hits both alike.
func BenchmarkPoolSync(b *testing.B) {
	body, load := benchBody(b, 1000)
	h := &Hooks{Load: load, Now: func() time.Time { return now }}
	sync := func() time.Duration {
		t0 := time.Now()
		resp, _, err := h.Handle(context.Background(), "sync", body)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := json.Marshal(resp); err != nil {
			b.Fatal(err)
		}
		if len(resp.Children) != 1000 {
			b.Fatalf("children = %d, want 1000", len(resp.Children))
		}
		return time.Since(t0)
	}
	baseline := func() time.Duration {
		t0 := time.Now()
		if _, err := noop(body); err != nil {
			b.Fatal(err)
		}
		return time.Since(t0)
	}
	b.Run("noop", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			baseline()
		}
	})
	b.Run("sync", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			sync()
		}
	})
	b.Run("interleaved", func(b *testing.B) {
		var ds, dn []time.Duration
		for b.Loop() {
			dn = append(dn, baseline())
			ds = append(ds, sync())
		}
		ps, pn := p50(ds), p50(dn)
		b.ReportMetric(ps, "sync-p50-ns")
		b.ReportMetric(pn, "noop-p50-ns")
		b.ReportMetric(ps/pn, "sync/noop")
	})
}

func p50(ds []time.Duration) float64 {
	slices.Sort(ds)
	return float64(ds[len(ds)/2].Nanoseconds())
}
