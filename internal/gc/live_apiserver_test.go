package gc_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/proxy-operator/proxy-operator/internal/gc"
	"github.com/proxy-operator/proxy-operator/internal/kubetest"
)

// TestAPISourceOnAPIServer lists Proxies from a real kube-apiserver through client-go, over
// several pages and two namespaces, and sees exactly the UIDs the server assigned.
func TestAPISourceOnAPIServer(t *testing.T) {
	cfg := kubetest.Start(t)
	want := map[string]bool{}
	for _, ns := range []string{"crawl-a", "crawl-b"} {
		kubetest.Namespace(t, cfg, ns)
		for i := range 4 {
			obj := kubetest.CreateProxy(t, cfg, ns, map[string]any{
				"metadata": map[string]any{"name": fmt.Sprintf("p-%d", i)},
				"spec":     map[string]any{"mode": "Managed", "provider": "mock"},
			})
			want[string(obj.GetUID())] = true
		}
	}
	client := kubetest.Dynamic(t, cfg)
	got, err := (&gc.APISource{Client: client, PageSize: 3}).LiveUIDs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("listed %d UIDs, want %d", len(got), len(want))
	}
	for uid := range want {
		if !got[uid] {
			t.Errorf("uid %s missing from the list", uid)
		}
	}
}
