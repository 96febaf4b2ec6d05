package parents_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
	"github.com/proxy-operator/proxy-operator/internal/kube"
	"github.com/proxy-operator/proxy-operator/internal/kube/parents"
	"github.com/proxy-operator/proxy-operator/internal/kubetest"
)

// waitFor polls cond until it holds or a minute passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after a minute", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestCacheAgainstAPIServer runs the cache against a real kube-apiserver and checks every
// answer Check gives: not synced before the first list, agreement on the stored object, and
// each kind of disagreement; then that a delete (held by a finalizer) and an edit reach it.
func TestCacheAgainstAPIServer(t *testing.T) {
	rc := kubetest.Start(t)
	kubetest.Namespace(t, rc, "team-a")
	dyn := kubetest.Dynamic(t, rc)
	px := kubetest.CreateProxy(t, rc, "team-a", map[string]any{
		"metadata": map[string]any{"name": "va", "finalizers": []any{"example.com/hold"}, "annotations": map[string]any{"big": "x"}},
		"spec":     map[string]any{"mode": "External", "endpoint": map[string]any{"host": "192.0.2.1", "port": 3128}, "attributes": map[string]any{"geo": "eu"}},
	})
	pool := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1.APIVersion, "kind": v1.PoolKind, "metadata": map[string]any{"name": "web"},
		"spec": map[string]any{"replicas": int64(2), "template": map[string]any{"spec": map[string]any{"mode": "Managed", "provider": "mock"}}},
	}}
	pool, err := dyn.Resource(kube.PoolResource).Namespace("team-a").Create(context.Background(), pool, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	c, err := parents.New(dyn, nil)
	if err != nil {
		t.Fatal(err)
	}
	// spec decodes an object's spec as a hook decodes a body: from its JSON.
	spec := func(u *unstructured.Unstructured) *v1.ProxySpec {
		b, err := json.Marshal(u.Object["spec"])
		if err != nil {
			t.Fatal(err)
		}
		var s v1.ProxySpec
		if err := json.Unmarshal(b, &s); err != nil {
			t.Fatal(err)
		}
		return &s
	}
	if got := parents.Check(c, parents.Proxy, "team-a", "va", px.GetUID(), false, spec(px)); got != parents.ReasonNotSynced {
		t.Errorf("before Run: Check = %q, want %q", got, parents.ReasonNotSynced)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	waitFor(t, "cache synced", c.Synced)

	evil := spec(px)
	evil.Endpoint.Host = "127.0.66.6"
	for _, tc := range []struct {
		name       string
		ns, key    string
		uid        types.UID
		finalizing bool
		spec       *v1.ProxySpec
		want       string
	}{
		{"the stored object", "team-a", "va", px.GetUID(), false, spec(px), ""},
		{"another name", "team-a", "vb", px.GetUID(), false, spec(px), parents.ReasonAbsent},
		{"another namespace", "team-b", "va", px.GetUID(), false, spec(px), parents.ReasonAbsent},
		{"another uid", "team-a", "va", "0b4d1d00-0000-4000-8000-00000000f00d", false, spec(px), parents.ReasonUID},
		{"a finalize of an object not being deleted", "team-a", "va", px.GetUID(), true, spec(px), parents.ReasonNotDeleting},
		{"another endpoint", "team-a", "va", px.GetUID(), false, evil, parents.ReasonSpec},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := parents.Check(c, parents.Proxy, tc.ns, tc.key, tc.uid, tc.finalizing, tc.spec); got != tc.want {
				t.Errorf("Check = %q, want %q", got, tc.want)
			}
		})
	}
	var ps v1.ProxyPoolSpec
	if b, err := json.Marshal(pool.Object["spec"]); err != nil || json.Unmarshal(b, &ps) != nil {
		t.Fatalf("pool spec: %v", err)
	}
	if got := parents.Check(c, parents.Pool, "team-a", "web", pool.GetUID(), false, &ps); got != "" {
		t.Errorf("pool: Check = %q, want agreement", got)
	}
	zero := int32(0)
	ps.Replicas = &zero
	if got := parents.Check(c, parents.Pool, "team-a", "web", pool.GetUID(), false, &ps); got != parents.ReasonSpec {
		t.Errorf("pool with another replicas: Check = %q, want %q", got, parents.ReasonSpec)
	}

	// An edit and a delete reach the cache; the finalizer holds the object, deleting.
	live, err := dyn.Resource(kube.ProxyResource).Namespace("team-a").Get(context.Background(), "va", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_ = unstructured.SetNestedField(live.Object, "192.0.2.2", "spec", "endpoint", "host")
	if live, err = dyn.Resource(kube.ProxyResource).Namespace("team-a").Update(context.Background(), live, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the edit reaches the cache", func() bool {
		return parents.Check(c, parents.Proxy, "team-a", "va", px.GetUID(), false, spec(live)) == ""
	})
	if err := dyn.Resource(kube.ProxyResource).Namespace("team-a").Delete(context.Background(), "va", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the delete reaches the cache", func() bool {
		return parents.Check(c, parents.Proxy, "team-a", "va", px.GetUID(), true, spec(live)) == ""
	})
	if got, ok := c.Get(parents.Proxy, "team-a", "va"); !ok || !got.Deleting || got.UID != px.GetUID() {
		t.Errorf("Get after the delete = %+v, %v; want deleting, uid %s", got, ok, px.GetUID())
	}
}

// TestTrimKeepsIdentityAndSpec: the cache holds name, namespace, uid, generation,
// resourceVersion, deletionTimestamp and the decoded spec; status, labels, annotations,
// finalizers and managedFields are dropped.
func TestTrimKeepsIdentityAndSpec(t *testing.T) {
	now := metav1.NewTime(time.Date(2026, 12, 2, 4, 0, 0, 0, time.UTC))
	in := &unstructured.Unstructured{Object: map[string]any{"apiVersion": v1.APIVersion, "kind": v1.Kind,
		"status": map[string]any{"phase": "Ready"}, "spec": map[string]any{"mode": "Managed", "provider": "mock"}}}
	in.SetName("va")
	in.SetNamespace("team-a")
	in.SetUID("u1")
	in.SetGeneration(3)
	in.SetResourceVersion("42")
	in.SetDeletionTimestamp(&now)
	in.SetLabels(map[string]string{"a": "b"})
	in.SetAnnotations(map[string]string{"big": "x"})
	in.SetManagedFields([]metav1.ManagedFieldsEntry{{Manager: "kubectl"}})
	in.SetFinalizers([]string{"f"})
	out, err := parents.Trim(parents.Proxy)(in)
	if err != nil {
		t.Fatal(err)
	}
	m, err := meta.Accessor(out)
	if err != nil {
		t.Fatal(err)
	}
	if m.GetName() != "va" || m.GetNamespace() != "team-a" || m.GetUID() != "u1" || m.GetGeneration() != 3 || m.GetResourceVersion() != "42" ||
		m.GetDeletionTimestamp() == nil || !m.GetDeletionTimestamp().Equal(&now) {
		t.Errorf("identity not kept: %s/%s uid %s generation %d resourceVersion %s deletionTimestamp %v",
			m.GetNamespace(), m.GetName(), m.GetUID(), m.GetGeneration(), m.GetResourceVersion(), m.GetDeletionTimestamp())
	}
	if len(m.GetLabels())+len(m.GetAnnotations())+len(m.GetManagedFields())+len(m.GetFinalizers()) != 0 {
		t.Errorf("kept labels %v annotations %v managedFields %v finalizers %v", m.GetLabels(), m.GetAnnotations(), m.GetManagedFields(), m.GetFinalizers())
	}
	if _, ok := out.(*unstructured.Unstructured); ok {
		t.Error("Trim kept the unstructured object (status included)")
	}
	if got, _ := parents.Trim(parents.Proxy)("tombstone"); got != "tombstone" {
		t.Errorf("Trim of a non-object = %v, want it unchanged", got)
	}
}
