package events_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
	"github.com/proxy-operator/proxy-operator/internal/events"
	"github.com/proxy-operator/proxy-operator/internal/kube"
	"github.com/proxy-operator/proxy-operator/internal/kubetest"
)

// TestRecorderOnAPIServer records the events a Proxy's life produces on a real API server
// and finds them where `kubectl describe px` looks (events whose involvedObject is the Proxy),
// the repeated one aggregated into a count rather than stored three times.
func TestRecorderOnAPIServer(t *testing.T) {
	cfg := kubetest.Start(t)
	kubetest.Namespace(t, cfg, "crawl")
	obj := kubetest.CreateProxy(t, cfg, "crawl", map[string]any{
		"metadata": map[string]any{"name": "edge-1"},
		"spec":     map[string]any{"mode": "Managed", "provider": "mock"},
	})
	p := &v1.Proxy{ObjectMeta: metav1.ObjectMeta{Namespace: "crawl", Name: "edge-1", UID: obj.GetUID()}}
	clients, err := kube.NewClients(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rec := events.NewRecorder(clients.Dynamic, nil)
	t.Cleanup(rec.Shutdown)

	life := []events.Event{
		{Type: corev1.EventTypeNormal, Reason: events.ReasonCreating, Message: "creating instance mock://proxy-a on provider mock"},
		{Type: corev1.EventTypeWarning, Reason: events.ReasonQuotaExceeded, Message: "quota exceeded"},
		{Type: corev1.EventTypeNormal, Reason: events.ReasonReplacing, Message: "deleting instance mock://proxy-a to replace it: spec changed (hash aaaa -> bbbb)"},
		{Type: corev1.EventTypeWarning, Reason: events.ReasonProvisioningFail, Message: "image not found"},
		{Type: corev1.EventTypeNormal, Reason: events.ReasonHealthRegained, Message: "probe through the proxy succeeded"},
		{Type: corev1.EventTypeNormal, Reason: events.ReasonInstanceDeleted, Message: "instance mock://proxy-b is gone; the Proxy can go"},
	}
	rec.Record(p, life)
	lost := events.Event{Type: corev1.EventTypeWarning, Reason: events.ReasonHealthLost, Message: "probe through the proxy failed: timeout"}
	for range 3 {
		rec.Record(p, []events.Event{lost})
	}

	want := map[string]int32{events.ReasonHealthLost: 3}
	for _, e := range life {
		want[e.Reason] = 1
	}
	var got map[string]int32
	deadline := time.Now().Add(2 * time.Minute)
	for {
		l, err := kubetest.Core(t, cfg).CoreV1().Events("crawl").List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.uid=" + string(p.UID)})
		if err != nil {
			t.Fatal(err)
		}
		got = map[string]int32{}
		stored := 0
		for _, e := range l.Items {
			if e.InvolvedObject.Kind != v1.Kind || e.InvolvedObject.Name != "edge-1" || e.Source.Component != events.Component {
				t.Errorf("event %s: involvedObject %+v, source %+v", e.Name, e.InvolvedObject, e.Source)
			}
			got[e.Reason] += e.Count
			stored++
		}
		if len(got) == len(want) && got[events.ReasonHealthLost] == 3 {
			if stored != len(want) {
				t.Errorf("%d Event objects stored, want %d (the repeat aggregated into a count)", stored, len(want))
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("events by reason %v, want %v", got, want)
		}
		time.Sleep(100 * time.Millisecond)
	}

	kubectl := filepath.Join(os.Getenv("KUBEBUILDER_ASSETS"), "kubectl")
	if _, err := os.Stat(kubectl); err != nil {
		t.Logf("no kubectl in KUBEBUILDER_ASSETS: checked the events by involvedObject only")
		return
	}
	out, err := exec.Command(kubectl, "--kubeconfig", kubetest.Kubeconfig(t, cfg), "describe", "px", "-n", "crawl", "edge-1").CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl describe px: %v\n%s", err, out)
	}
	text := string(out)
	events := text[strings.Index(text, "Events:"):]
	for reason := range want {
		if !strings.Contains(events, reason) {
			t.Errorf("kubectl describe px shows no %s event:\n%s", reason, events)
		}
	}
	if !strings.Contains(events, "(x3 over") {
		t.Errorf("kubectl describe px does not show HealthLost aggregated (x3):\n%s", events)
	}
	t.Logf("kubectl describe px:\n%s", events)
}
