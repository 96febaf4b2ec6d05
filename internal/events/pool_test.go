package events_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
	"github.com/proxy-operator/proxy-operator/internal/events"
	"github.com/proxy-operator/proxy-operator/internal/kube"
	"github.com/proxy-operator/proxy-operator/internal/kubetest"
	"github.com/proxy-operator/proxy-operator/server/hooks/poolhook"
)

var _ poolhook.EventRecorder = (*events.Recorder)(nil)

// TestPoolEventOnAPIServer: a pool hook's decision lands as an Event whose involvedObject is
// the ProxyPool, where `kubectl describe pxp` looks.
func TestPoolEventOnAPIServer(t *testing.T) {
	cfg := kubetest.Start(t)
	kubetest.Namespace(t, cfg, "crawl")
	clients, err := kube.NewClients(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rec := events.NewRecorder(clients.Dynamic, nil)
	t.Cleanup(rec.Shutdown)
	p := &v1.ProxyPool{ObjectMeta: metav1.ObjectMeta{Namespace: "crawl", Name: "web", UID: "5a1e0000-0000-4000-9000-000000000001"}}
	rec.Event(p, corev1.EventTypeNormal, "Scaled", "desired members 2 -> 5 (Autoscale)")
	deadline := time.Now().Add(2 * time.Minute)
	for {
		l, err := kubetest.Core(t, cfg).CoreV1().Events("crawl").List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.uid=" + string(p.UID)})
		if err != nil {
			t.Fatal(err)
		}
		if len(l.Items) == 1 {
			e := l.Items[0]
			if e.InvolvedObject.Kind != v1.PoolKind || e.InvolvedObject.Name != "web" || e.Reason != "Scaled" || e.Source.Component != events.Component {
				t.Errorf("event = %+v", e)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d events for the pool after 2 minutes, want 1", len(l.Items))
		}
		time.Sleep(100 * time.Millisecond)
	}
}
