package console_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
	"github.com/proxy-operator/proxy-operator/internal/events"
	"github.com/proxy-operator/proxy-operator/internal/kube"
	"github.com/proxy-operator/proxy-operator/internal/kubetest"
	"github.com/proxy-operator/proxy-operator/internal/verdict"
	"github.com/proxy-operator/proxy-operator/lease"
	"github.com/proxy-operator/proxy-operator/providers"
	"github.com/proxy-operator/proxy-operator/server/console"
	"github.com/proxy-operator/proxy-operator/server/hooks"
)

// drainEnv is the console over a real kube-apiserver holding one External Proxy,
// crawl/px-1, synced once through the real sync hook and leasable.
type drainEnv struct {
	*env
	dyn  dynamic.Interface
	core kubernetes.Interface
	// sync posts the Proxy as the API server has it now to the real sync hook (as
	// Metacontroller does after the label changes) and returns it.
	sync func(t *testing.T) *unstructured.Unstructured
	// leasable says whether a lease on crawl/px-1 is granted now.
	leasable func(t *testing.T) bool
}

func newDrainEnv(t *testing.T) *drainEnv {
	t.Helper()
	cfg := kubetest.Start(t)
	kubetest.Namespace(t, cfg, "crawl")
	dyn, core := kubetest.Dynamic(t, cfg), kubetest.Core(t, cfg)
	kubetest.CreateProxy(t, cfg, "crawl", map[string]any{
		"metadata": map[string]any{"name": "px-1"},
		"spec": map[string]any{"mode": "External", "endpoint": map[string]any{"host": "203.0.113.10", "port": int64(3128)},
			"attributes": map[string]any{"geo": "eu"}, "maxLeases": int64(2)},
	})
	rec := events.NewRecorder(dyn, nil)
	t.Cleanup(rec.Shutdown)
	e := newEnv(t, 0, &console.Kube{Dynamic: dyn, Events: rec}, false)
	e.health.Set("crawl/px-1", verdict.Health{State: verdict.Healthy, LatencyMillis: 5, Band: "Good"})
	h := &hooks.Hooks{Providers: providers.NewSet(), Fleet: e.view, Health: e.health, Now: e.clock.Now}
	ctx := context.Background()
	d := &drainEnv{env: e, dyn: dyn, core: core}
	d.sync = func(t *testing.T) *unstructured.Unstructured {
		t.Helper()
		u, err := dyn.Resource(kube.ProxyResource).Namespace("crawl").Get(ctx, "px-1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		body, _ := json.Marshal(map[string]any{"controller": map[string]any{}, "parent": u.Object})
		w := httptest.NewRecorder()
		h.Handler().ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/sync", bytes.NewReader(body)))
		if w.Code != 200 {
			t.Fatalf("sync: %d %s", w.Code, w.Body)
		}
		e.store.Sync()
		return u
	}
	d.leasable = func(t *testing.T) bool {
		t.Helper()
		l, err := e.store.Acquire(ctx, lease.Request{TTL: time.Minute, Selector: map[string]string{"geo": "eu"}, Namespaces: []string{"crawl"}})
		if errors.Is(err, lease.ErrNoMatch) {
			return false
		}
		if err != nil {
			t.Fatal(err)
		}
		_ = e.store.Release(ctx, l.ID)
		return true
	}
	d.sync(t)
	if !d.leasable(t) {
		t.Fatal("the synced, healthy Proxy is not leasable before the drain")
	}
	return d
}

// TestDrainThroughAPIServer: an admin drains a Proxy from the console; the label is on the
// object in a real kube-apiserver with an Event beside it; the Proxy's next sync through the
// real hook (the one Metacontroller runs on the label change) records it draining and the
// lease store grants no new lease on it; undrain removes the label and the next sync brings
// it back into rotation.
func TestDrainThroughAPIServer(t *testing.T) {
	d := newDrainEnv(t)
	e, sync, leasable, core := d.env, d.sync, d.leasable, d.core
	ctx := context.Background()

	c := e.client(t)
	token := e.login(t, c, adminToken)
	resp, body := e.post(t, c, "/ui/proxies/drain", url.Values{"csrf": {token}, "proxy": {"crawl/px-1"}, "drain": {"true"}, "back": {"/ui/fleet?ns=crawl"}}, e.srv.URL)
	if resp.StatusCode != 200 || resp.Request.URL.RequestURI() != "/ui/fleet?ns=crawl" {
		t.Fatalf("drain: %d at %s:\n%s", resp.StatusCode, resp.Request.URL, body)
	}
	u := sync(t)
	if got := u.GetLabels()[v1.PoolDrainingLabel]; got != "true" {
		t.Fatalf("label %s on the object: %q, want true", v1.PoolDrainingLabel, got)
	}
	if p, _ := e.view.Get("crawl/px-1"); !p.Draining {
		t.Fatal("after the sync the fleet record is not draining")
	}
	if leasable(t) {
		t.Fatal("the drained Proxy is still leased")
	}
	if _, body := e.get(t, c, "/ui/fleet?ns=crawl"); !bytes.Contains([]byte(body), []byte(">Undrain<")) {
		t.Errorf("the fleet page offers no undrain for the drained Proxy:\n%s", body)
	}
	waitEvent(t, func() bool {
		l, err := core.CoreV1().Events("crawl").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range l.Items {
			if ev.Reason == console.ReasonDrained && ev.InvolvedObject.Name == "px-1" && ev.InvolvedObject.UID == u.GetUID() {
				return true
			}
		}
		return false
	})

	resp, _ = e.post(t, c, "/ui/proxies/drain", url.Values{"csrf": {token}, "proxy": {"crawl/px-1"}, "drain": {"false"}}, e.srv.URL)
	if resp.StatusCode != 200 {
		t.Fatalf("undrain: %d", resp.StatusCode)
	}
	u = sync(t)
	if _, ok := u.GetLabels()[v1.PoolDrainingLabel]; ok {
		t.Fatalf("after undrain the label is still there: %v", u.GetLabels())
	}
	if !leasable(t) {
		t.Fatal("the undrained Proxy is not back in rotation")
	}
}

// waitEvent waits until ok, for the recorder sends events asynchronously.
func waitEvent(t *testing.T, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatal("no Event recorded within 30 s")
		}
		time.Sleep(50 * time.Millisecond) // polling the API server for an asynchronous write
	}
}
