package gc_test

import (
	"context"
	"fmt"
	"testing"

	"k8s.io/client-go/dynamic"

	"github.com/proxy-operator/proxy-operator/gc"
	"github.com/proxy-operator/proxy-operator/internal/apiservertest"
)

// TestAPISourceOnAPIServer lists Proxies from a real kube-apiserver through client-go, over
// several pages and two namespaces, and sees exactly the UIDs the server assigned.
func TestAPISourceOnAPIServer(t *testing.T) {
	s := apiservertest.Start(t)
	s.InstallProxyCRD(t)
	want := map[string]bool{}
	for _, ns := range []string{"crawl-a", "crawl-b"} {
		s.CreateNamespace(t, ns)
		for i := range 4 {
			obj := s.CreateProxy(t, ns, map[string]any{
				"apiVersion": "crawl.example.com/v1alpha1", "kind": "Proxy",
				"metadata": map[string]any{"name": fmt.Sprintf("p-%d", i)},
				"spec":     map[string]any{"mode": "Managed", "provider": "mock"},
			})
			want[obj["metadata"].(map[string]any)["uid"].(string)] = true
		}
	}
	client, err := dynamic.NewForConfig(s.RestConfig())
	if err != nil {
		t.Fatal(err)
	}
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
