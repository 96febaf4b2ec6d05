package poolhook

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
	"github.com/proxy-operator/proxy-operator/internal/pool"
	"github.com/proxy-operator/proxy-operator/lease"
	"github.com/proxy-operator/proxy-operator/metacontroller"
)

var now = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

type fakeLoad struct {
	active, cooling map[string]int
	denied          map[string]int64
}

func (f fakeLoad) PoolLoad(_ context.Context, q lease.PoolQuery) (lease.PoolView, error) {
	return lease.PoolView{Active: f.active, Cooling: f.cooling, Denied: f.denied[q.Pool]}, nil
}

type event struct{ Type, Reason, Message string }

type events []event

func (e *events) Event(_ *v1.ProxyPool, typ, reason, msg string) {
	*e = append(*e, event{typ, reason, msg})
}

func poolJSON(t *testing.T, replicas int32, mutate func(map[string]any)) json.RawMessage {
	t.Helper()
	p := map[string]any{
		"apiVersion": v1.APIVersion, "kind": v1.PoolKind,
		"metadata": map[string]any{"name": "web", "namespace": "crawl", "uid": "u1", "generation": 1},
		"spec": map[string]any{
			"replicas": replicas,
			"template": map[string]any{"spec": map[string]any{"mode": "Managed", "provider": "mock"}},
			"rotation": map[string]any{"banThreshold": 2},
		},
		"status": map[string]any{"desiredReplicas": replicas, "observedGeneration": 1},
	}
	if mutate != nil {
		mutate(p)
	}
	b, _ := json.Marshal(p)
	return b
}

// member is a healthy current member as the decision would have made it.
func member(t *testing.T, parent json.RawMessage, ordinal int64) (string, json.RawMessage) {
	t.Helper()
	var p v1.ProxyPool
	if err := json.Unmarshal(parent, &p); err != nil {
		t.Fatal(err)
	}
	p.Spec.Default()
	th := pool.TemplateHash(&p.Spec.Template)
	px := v1.Proxy{
		TypeMeta: metav1.TypeMeta{APIVersion: v1.APIVersion, Kind: v1.Kind},
		ObjectMeta: metav1.ObjectMeta{
			Name: pool.MemberName("web", th, ordinal), Namespace: "crawl", CreationTimestamp: metav1.NewTime(now.Add(-time.Hour)),
			Labels:      map[string]string{v1.PoolLabel: "web"},
			Annotations: map[string]string{v1.PoolTemplateHashAnnotation: th, v1.PoolOrdinalAnnotation: strconv.FormatInt(ordinal, 10)},
		},
		Spec: p.Spec.Template.Spec,
		Status: v1.ProxyStatus{Phase: v1.PhaseReady, Conditions: []metav1.Condition{
			{Type: v1.ConditionProvisioned, Status: metav1.ConditionTrue},
			{Type: v1.ConditionHealthy, Status: metav1.ConditionTrue},
		}},
	}
	b, _ := json.Marshal(px)
	return px.Name, b
}

func body(t *testing.T, parent json.RawMessage, children map[string]json.RawMessage) []byte {
	t.Helper()
	req := metacontroller.SyncRequest{Parent: parent, Children: metacontroller.RelativeObjects{ChildType: {}}}
	for name, c := range children {
		req.Children[ChildType]["crawl/"+name] = c
	}
	b, _ := json.Marshal(req)
	return b
}

func TestHandleReadsLoadAndRecords(t *testing.T) {
	parent := poolJSON(t, 2, nil)
	n1, c1 := member(t, parent, 1)
	n2, c2 := member(t, parent, 2)
	reg := prometheus.NewRegistry()
	var ev events
	h := &Hooks{
		Load:    fakeLoad{active: map[string]int{"crawl/" + n1: 3}, cooling: map[string]int{"crawl/" + n2: 2}},
		Now:     func() time.Time { return now },
		Metrics: NewMetrics(reg),
		Events:  &ev,
	}
	resp, _, err := h.Handle(context.Background(), "sync", body(t, parent, map[string]json.RawMessage{n1: c1, n2: c2}))
	if err != nil {
		t.Fatal(err)
	}
	st := resp.Status.(v1.ProxyPoolStatus)
	if st.ActiveLeases != 3 || st.DesiredReplicas != 2 {
		t.Errorf("status leases %d desired %d, want 3 and 2", st.ActiveLeases, st.DesiredReplicas)
	}
	// n2 cools for 2 targets = banThreshold: a replacement is made first (surge 1).
	if len(resp.Children) != 3 {
		t.Fatalf("children = %d, want 3 (2 members and a replacement)", len(resp.Children))
	}
	if diff := cmp.Diff(events{{"Normal", "MemberCreated", "created member " + pool.MemberName("web", st.TemplateHash, 3) + " (Banned)"}}, ev); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	if got := testutil.ToFloat64(h.Metrics.members.WithLabelValues("crawl/web", "healthy")); got != 2 {
		t.Errorf("healthy members metric = %v, want 2", got)
	}
	if got := testutil.ToFloat64(h.Metrics.utilization.WithLabelValues("crawl/web")); got != 0.3 {
		t.Errorf("utilization = %v, want 0.3 (3 of 10)", got)
	}
}

func TestHandleFinalizeDropsMetrics(t *testing.T) {
	parent := poolJSON(t, 1, nil)
	reg := prometheus.NewRegistry()
	h := &Hooks{Now: func() time.Time { return now }, Metrics: NewMetrics(reg)}
	if _, _, err := h.Handle(context.Background(), "sync", body(t, parent, nil)); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(h.Metrics.members); n != 3 {
		t.Fatalf("member series = %d, want 3", n)
	}
	resp, _, err := h.Handle(context.Background(), "finalize", body(t, parent, nil))
	if err != nil {
		t.Fatal(err)
	}
	if !resp.Finalized || len(resp.Children) != 0 {
		t.Errorf("finalize with no members: finalized %v children %d", resp.Finalized, len(resp.Children))
	}
	if n := testutil.CollectAndCount(h.Metrics.members); n != 0 {
		t.Errorf("member series after finalize = %d, want 0", n)
	}
}

func TestHandleRejects(t *testing.T) {
	good := poolJSON(t, 1, nil)
	tests := []struct {
		name string
		body string
		want string
	}{
		{"not JSON", `{`, "malformed JSON"},
		{"no parent", `{"children":{}}`, "no parent"},
		{"wrong kind", string(body(t, poolJSON(t, 1, func(p map[string]any) { p["kind"] = "Proxy" }), nil)), `kind "Proxy"`},
		{"no uid", string(body(t, poolJSON(t, 1, func(p map[string]any) { delete(p["metadata"].(map[string]any), "uid") }), nil)), "metadata.uid is required"},
		{"name too long", string(body(t, poolJSON(t, 1, func(p map[string]any) { p["metadata"].(map[string]any)["name"] = strings.Repeat("a", 51) }), nil)), "longer than 50"},
		{"replicas a string", string(body(t, poolJSON(t, 1, func(p map[string]any) { p["spec"].(map[string]any)["replicas"] = "3" }), nil)), "field spec.replicas"},
		{"bad child", `{"parent":` + string(good) + `,"children":{"` + ChildType + `":{"crawl/x":{"metadata":"x"}}}}`, "children["},
	}
	h := &Hooks{Now: func() time.Time { return now }}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := h.Handle(context.Background(), "sync", []byte(tt.body))
			if !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want ErrBadRequest containing %q", err, tt.want)
			}
		})
	}
}

func TestInvalidSpecAnswersKeepingMembers(t *testing.T) {
	parent := poolJSON(t, 1, func(p map[string]any) {
		p["spec"].(map[string]any)["template"] = map[string]any{"spec": map[string]any{"mode": "External", "endpoint": map[string]any{"host": "x", "port": 1}}}
	})
	n1, c1 := member(t, parent, 1)
	h := &Hooks{Now: func() time.Time { return now }}
	resp, _, err := h.Handle(context.Background(), "sync", body(t, parent, map[string]json.RawMessage{n1: c1}))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Children) != 1 {
		t.Errorf("children = %d, want the 1 member kept", len(resp.Children))
	}
}
