package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
	"github.com/proxy-operator/proxy-operator/health/mark"
	"github.com/proxy-operator/proxy-operator/internal/events"
	"github.com/proxy-operator/proxy-operator/internal/kube"
	"github.com/proxy-operator/proxy-operator/internal/kubetest"
	"github.com/proxy-operator/proxy-operator/providers/factory"
	"github.com/proxy-operator/proxy-operator/providers/mock"
	"github.com/proxy-operator/proxy-operator/server"
)

// TestOperatorWithAPIServer boots the operator with -kubeconfig pointing at a real
// kube-apiserver and plays Metacontroller by hand (read the Proxy, POST /sync, write the
// answered status): the sync records events on the Proxy, and a health transition found by
// the real prober (through a real mock forward proxy) is patched onto the Proxy as the
// health annotation, which is what makes Metacontroller sync it at once: Healthy -> Unhealthy -> Healthy,
// each patched while nothing syncs.
func TestOperatorWithAPIServer(t *testing.T) {
	rc := kubetest.Start(t)
	kubetest.Namespace(t, rc, "crawl")

	var up atomic.Bool
	up.Store(true)
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if up.Load() {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	t.Cleanup(target.Close)
	kubetest.CreateProxy(t, rc, "crawl", map[string]any{
		"metadata": map[string]any{"name": "edge"},
		"spec": map[string]any{"mode": "Managed", "provider": "mock",
			"healthCheck": map[string]any{"probeURL": target.URL + "/generate_204", "intervalSeconds": 1, "timeoutSeconds": 1, "failureThreshold": 1}},
	})

	zero := mock.Duration(0)
	op, err := server.New(server.Config{
		Hooks:     server.HooksConfig{Addr: "127.0.0.1:0"},
		Discovery: server.DiscoveryAPIConfig{Addr: "127.0.0.1:0", Insecure: true},
		Kube:      server.KubeConfig{Kubeconfig: kubetest.Kubeconfig(t, rc)},
		Providers: server.ProvidersConfig{Parsed: &factory.Config{Providers: []factory.Entry{{Name: "mock", Type: "mock", Mock: &mock.Config{ServeProxies: true, ProvisioningDelay: zero}}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	runOperator(t, op)

	dyn, core := kubetest.Dynamic(t, rc), kubetest.Core(t, rc)
	px := dyn.Resource(kube.ProxyResource).Namespace("crawl")
	// children are the Proxy's children as Metacontroller keeps them (its credentials Secret):
	// created from the first answer that returns one, never updated.
	children := map[string]any{}
	// syncOnce plays one Metacontroller sync: the live parent to the hook, its status back.
	syncOnce := func() *unstructured.Unstructured {
		t.Helper()
		obj, err := px.Get(context.Background(), "edge", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		body, _ := json.Marshal(map[string]any{"controller": map[string]any{"metadata": map[string]any{"name": "proxy-operator"}},
			"parent": obj.Object, "children": children, "related": map[string]any{}, "finalizing": false})
		res, err := http.Post("http://"+op.HookAddr()+"/sync", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Fatalf("sync: %d %s", res.StatusCode, b)
		}
		var ans struct {
			Status   map[string]any   `json:"status"`
			Children []map[string]any `json:"children"`
		}
		if err := json.Unmarshal(b, &ans); err != nil {
			t.Fatal(err)
		}
		for _, c := range ans.Children {
			m := c["metadata"].(map[string]any)
			typ := c["kind"].(string) + "." + c["apiVersion"].(string)
			objs, _ := children[typ].(map[string]any)
			if objs == nil {
				objs = map[string]any{}
				children[typ] = objs
			}
			key := "crawl/" + m["name"].(string)
			if _, ok := objs[key]; !ok {
				m["uid"] = "child-" + m["name"].(string)
				objs[key] = c
			}
		}
		obj.Object["status"] = ans.Status
		updated, err := px.UpdateStatus(context.Background(), obj, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			// The annotation patch landed meanwhile: Metacontroller ignores the conflict and
			// syncs again on that update; so does the caller's next round.
			if updated, err = px.Get(context.Background(), "edge", metav1.GetOptions{}); err != nil {
				t.Fatal(err)
			}
			return updated
		}
		if err != nil {
			t.Fatal(err)
		}
		return updated
	}
	// until syncs (as a resync or an annotation-triggered sync would) until cond holds.
	until := func(what string, cond func(obj *unstructured.Unstructured) bool) *unstructured.Unstructured {
		t.Helper()
		deadline := time.Now().Add(90 * time.Second)
		for {
			obj := syncOnce()
			if cond(obj) {
				return obj
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: not reached; status %v, annotations %v", what, obj.Object["status"], obj.GetAnnotations())
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	phase := func(obj *unstructured.Unstructured) string {
		p, _, _ := unstructured.NestedString(obj.Object, "status", "phase")
		return p
	}
	// The annotation is "<verdict>[,band=<band>]@<seq>": match the verdict word exactly.
	annotated := func(prefix string) func(*unstructured.Unstructured) bool {
		verdict := strings.TrimSuffix(prefix, "@")
		return func(obj *unstructured.Unstructured) bool {
			v := obj.GetAnnotations()[mark.Annotation]
			return strings.HasPrefix(v, verdict+"@") || strings.HasPrefix(v, verdict+",")
		}
	}

	// marked waits, without syncing, until the operator itself has patched the annotation: a
	// verdict the status does not show yet. (The first verdict is not one: a Proxy awaiting
	// its first verdict is answered with a short resync instead, and the syncs above record it.)
	marked := func(what string, cond func(*unstructured.Unstructured) bool) {
		t.Helper()
		deadline := time.Now().Add(90 * time.Second)
		for {
			obj, err := px.Get(context.Background(), "edge", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if cond(obj) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: not patched; status %v, annotations %v", what, obj.Object["status"], obj.GetAnnotations())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	until("Ready", func(o *unstructured.Unstructured) bool { return phase(o) == string(v1.PhaseReady) })
	up.Store(false)
	marked("annotation Unhealthy", annotated("Unhealthy@"))
	obj := until("Unhealthy", func(o *unstructured.Unstructured) bool { return phase(o) == string(v1.PhaseUnhealthy) })
	up.Store(true)
	marked("annotation Healthy", annotated("Healthy@"))
	until("Ready again", func(o *unstructured.Unstructured) bool { return phase(o) == string(v1.PhaseReady) })

	want := []string{events.ReasonCreating, events.ReasonHealthLost}
	deadline := time.Now().Add(time.Minute)
	for {
		l, err := core.CoreV1().Events("crawl").List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.uid=" + string(obj.GetUID())})
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for _, e := range l.Items {
			seen[e.Reason] = true
		}
		missing := ""
		for _, r := range want {
			if !seen[r] {
				missing += " " + r
			}
		}
		if missing == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("events on the Proxy lack%s (have %v)", missing, seen)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
