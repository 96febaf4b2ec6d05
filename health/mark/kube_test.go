package mark_test

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/proxy-operator/proxy-operator/health/mark"
	"github.com/proxy-operator/proxy-operator/internal/gc"
	"github.com/proxy-operator/proxy-operator/internal/kubetest"
)

// TestKubePatcherOnAPIServer: the merge patch lands on a real API server as a metadata change
// (new resourceVersion, the annotation set, status and spec untouched), which is what makes
// Metacontroller's parent informer enqueue a sync; a deleted Proxy is Gone.
func TestKubePatcherOnAPIServer(t *testing.T) {
	cfg := kubetest.Start(t)
	kubetest.Namespace(t, cfg, "crawl")
	kubetest.CreateProxy(t, cfg, "crawl", map[string]any{
		"metadata": map[string]any{"name": "p"},
		"spec":     map[string]any{"mode": "Managed", "provider": "mock"},
	})
	client := kubetest.Dynamic(t, cfg)
	px := client.Resource(gc.ProxyResource).Namespace("crawl")
	before, err := px.Get(context.Background(), "p", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p := mark.KubePatcher{Client: client, Resource: gc.ProxyResource}
	if err := p.Patch(context.Background(), "crawl/p", "Unhealthy@1"); err != nil {
		t.Fatal(err)
	}
	after, err := px.Get(context.Background(), "p", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := after.GetAnnotations()[mark.Annotation]; got != "Unhealthy@1" {
		t.Errorf("annotation %q, want Unhealthy@1", got)
	}
	if after.GetResourceVersion() == before.GetResourceVersion() {
		t.Error("the patch did not change the resourceVersion: no watch event, no sync")
	}
	if after.GetGeneration() != before.GetGeneration() {
		t.Errorf("generation moved %d -> %d: a metadata patch must not look like a spec change", before.GetGeneration(), after.GetGeneration())
	}
	err = p.Patch(context.Background(), "crawl/absent", "Healthy@2")
	if err == nil || !p.Gone(err) {
		t.Errorf("patching a missing Proxy: %v, want Gone", err)
	}
}
