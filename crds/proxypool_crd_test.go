package crds

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
	"github.com/proxy-operator/proxy-operator/internal/apiservertest"
	"github.com/proxy-operator/proxy-operator/internal/kubetest"
)

const poolNamespace = "pool-crd-test"

var poolsGVR = schema.GroupVersionResource{Group: "crawl.example.com", Version: "v1alpha1", Resource: "proxypools"}

// TestProxyPoolCRDOnAPIServer applies crds/ to a real kube-apiserver and checks the ProxyPool
// CRD: the sample is accepted and defaulted as Go's Default() says, every CEL rule rejects what
// it should with its message, the template stays mutable (unlike a Proxy's mode and provider),
// status fields are kept, and the scale subresource works through the API and `kubectl scale`.
func TestProxyPoolCRDOnAPIServer(t *testing.T) {
	cfg := apiservertest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ext, err := apiextensionsclient.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	applyCRDs(t, &server{ctx: ctx, kube: kube, ext: ext, proxies: dyn.Resource(proxiesGVR).Namespace(testNamespace), warned: &warnings{}})
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: poolNamespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pools := dyn.Resource(poolsGVR).Namespace(poolNamespace)
	create := func(obj map[string]any) (v1.ProxyPool, error) {
		obj["metadata"].(map[string]any)["namespace"] = poolNamespace
		got, err := pools.Create(ctx, &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{})
		if err != nil {
			return v1.ProxyPool{}, err
		}
		return decodePool(t, got), nil
	}

	t.Run("sample accepted and defaulted like Go", func(t *testing.T) {
		files, err := filepath.Glob("samples/pools/*.yaml")
		if err != nil || len(files) == 0 {
			t.Fatalf("no samples in crds/samples/pools (%v)", err)
		}
		for _, f := range files {
			raw := yamlFileToJSON(t, f)
			var obj map[string]any
			if err := json.Unmarshal(raw, &obj); err != nil {
				t.Fatal(err)
			}
			got, err := create(obj)
			if err != nil {
				t.Fatalf("%s rejected: %v", f, err)
			}
			var sample v1.ProxyPool
			if err := json.Unmarshal(raw, &sample); err != nil {
				t.Fatal(err)
			}
			want := sample.Spec
			want.Default()
			if err := want.Validate(); err != nil {
				t.Errorf("%s fails Go's Validate: %v", f, err)
			}
			if diff := cmp.Diff(want, got.Spec); diff != "" {
				t.Errorf("%s: server-defaulted spec differs from Go's Default() (-want +got):\n%s", f, diff)
			}
		}
	})

	t.Run("defaults as documented", func(t *testing.T) {
		obj := newPoolObj("defaults")
		obj["spec"].(map[string]any)["autoscale"] = map[string]any{"maxReplicas": 4}
		got, err := create(obj)
		if err != nil {
			t.Fatal(err)
		}
		var want v1.ProxyPoolSpec
		want.Template.Spec = v1.ProxySpec{Mode: v1.ModeManaged, Provider: "mock"}
		want.Autoscale = &v1.PoolAutoscale{MaxReplicas: 4}
		want.Default()
		if diff := cmp.Diff(want, got.Spec); diff != "" {
			t.Errorf("defaults (-want +got):\n%s", diff)
		}
		s := got.Spec
		if *s.Replicas != 1 || s.Strategy.MaxSurge.IntValue() != 1 || s.Strategy.MaxUnavailable.IntValue() != 0 || *s.DrainSeconds != 300 ||
			*s.Autoscale.MinReplicas != 1 || *s.Autoscale.TargetLeaseUtilization != 70 || *s.Autoscale.ScaleDownStabilizationSeconds != 300 {
			t.Errorf("defaults = %+v", s)
		}
	})

	t.Run("bad specs are rejected by the intended rule", func(t *testing.T) {
		tests := []struct {
			name   string
			mutate func(obj, spec map[string]any)
			want   string
		}{
			{"External template", func(_, sp map[string]any) {
				sp["template"] = map[string]any{"spec": map[string]any{"mode": "External", "endpoint": map[string]any{"host": "198.51.100.7", "port": 3128}}}
			}, "pool members must be Managed"},
			{"template without provider", func(_, sp map[string]any) { sp["template"] = map[string]any{"spec": map[string]any{"mode": "Managed"}} }, "provider is required when mode is Managed"},
			{"negative replicas", func(_, sp map[string]any) { sp["replicas"] = -1 }, "spec.replicas"},
			{"maxSurge not a percentage", func(_, sp map[string]any) { sp["strategy"] = map[string]any{"maxSurge": "many"} }, "maxSurge must be 0-1000 or a percentage"},
			{"maxSurge and maxUnavailable both 0", func(_, sp map[string]any) { sp["strategy"] = map[string]any{"maxSurge": 0, "maxUnavailable": "0%"} }, "maxSurge and maxUnavailable must not both be 0"},
			{"maxAge under a minute", func(_, sp map[string]any) { sp["rotation"] = map[string]any{"maxAge": "30s"} }, "maxAge must be at least 1m"},
			{"banThreshold 0", func(_, sp map[string]any) { sp["rotation"] = map[string]any{"banThreshold": 0} }, "spec.rotation.banThreshold"},
			{"minReplicas above maxReplicas", func(_, sp map[string]any) { sp["autoscale"] = map[string]any{"minReplicas": 5, "maxReplicas": 2} }, "autoscale.minReplicas must not exceed autoscale.maxReplicas"},
			{"utilization above 100", func(_, sp map[string]any) {
				sp["autoscale"] = map[string]any{"maxReplicas": 2, "targetLeaseUtilization": 101}
			}, "targetLeaseUtilization"},
			{"name too long for member names", func(obj, _ map[string]any) { obj["metadata"].(map[string]any)["name"] = strings.Repeat("a", 51) }, "metadata.name must be at most 50 characters"},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				obj := newPoolObj("bad")
				tt.mutate(obj, obj["spec"].(map[string]any))
				_, err := create(obj)
				wantInvalid(t, err, []string{tt.want})
			})
		}
	})

	t.Run("template is mutable", func(t *testing.T) {
		if _, err := create(newPoolObj("mutable")); err != nil {
			t.Fatal(err)
		}
		got, err := pools.Patch(ctx, "mutable", types.MergePatchType, []byte(`{"spec":{"template":{"spec":{"provider":"gcp-eu"}}}}`), metav1.PatchOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p := decodePool(t, got); p.Spec.Template.Spec.Provider != "gcp-eu" {
			t.Errorf("template provider = %q after the patch", p.Spec.Template.Spec.Provider)
		}
	})

	t.Run("status fields kept and the scale subresource", func(t *testing.T) {
		if _, err := create(newPoolObj("scaled")); err != nil {
			t.Fatal(err)
		}
		status := `{"status":{"observedGeneration":1,"desiredReplicas":3,"replicas":3,"members":4,"readyReplicas":3,"healthyReplicas":2,` +
			`"updatedReplicas":3,"drainingReplicas":1,"activeLeases":7,"leaseCapacity":10,"utilizationPercent":70,` +
			`"selector":"crawl.example.com/pool=scaled","templateHash":"abc","autoscale":{"recommendation":3,"lowMax":2,"deniedSeen":4},` +
			`"conditions":[{"type":"Ready","status":"False","reason":"TooFewHealthy","message":"2 of 3","lastTransitionTime":"2026-01-02T03:04:05Z"}]}}`
		got, err := pools.Patch(ctx, "scaled", types.MergePatchType, []byte(status), metav1.PatchOptions{}, "status")
		if err != nil {
			t.Fatal(err)
		}
		st, _, _ := unstructured.NestedMap(got.Object, "status")
		for _, f := range []string{"observedGeneration", "desiredReplicas", "replicas", "members", "readyReplicas", "healthyReplicas",
			"updatedReplicas", "drainingReplicas", "activeLeases", "leaseCapacity", "utilizationPercent", "selector", "templateHash", "autoscale", "conditions"} {
			if _, ok := st[f]; !ok {
				t.Errorf("status.%s was pruned", f)
			}
		}
		sc, err := pools.Get(ctx, "scaled", metav1.GetOptions{}, "scale")
		if err != nil {
			t.Fatal(err)
		}
		spec, _, _ := unstructured.NestedInt64(sc.Object, "spec", "replicas")
		cur, _, _ := unstructured.NestedInt64(sc.Object, "status", "replicas")
		sel, _, _ := unstructured.NestedString(sc.Object, "status", "selector")
		if spec != 1 || cur != 3 || sel != "crawl.example.com/pool=scaled" {
			t.Errorf("scale = spec %d status %d selector %q", spec, cur, sel)
		}
		bin := filepath.Join(os.Getenv("KUBEBUILDER_ASSETS"), "kubectl")
		if _, err := os.Stat(bin); err != nil {
			if bin, err = exec.LookPath("kubectl"); err != nil {
				t.Skip("no kubectl in KUBEBUILDER_ASSETS or on PATH")
			}
		}
		var out bytes.Buffer
		cmd := exec.CommandContext(ctx, bin, "--kubeconfig", kubetest.Kubeconfig(t, cfg), "-n", poolNamespace, "scale", "pxp/scaled", "--replicas=5")
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			t.Fatalf("kubectl scale: %v\n%s", err, out.String())
		}
		got, err = pools.Get(ctx, "scaled", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p := decodePool(t, got); *p.Spec.Replicas != 5 {
			t.Errorf("spec.replicas = %d after kubectl scale --replicas=5", *p.Spec.Replicas)
		}
	})
}

func newPoolObj(name string) map[string]any {
	return map[string]any{
		"apiVersion": v1.APIVersion, "kind": v1.PoolKind,
		"metadata": map[string]any{"name": name},
		"spec":     map[string]any{"template": map[string]any{"spec": map[string]any{"mode": "Managed", "provider": "mock"}}},
	}
}

func decodePool(t *testing.T, u *unstructured.Unstructured) v1.ProxyPool {
	t.Helper()
	b, err := u.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	var p v1.ProxyPool
	if err := json.Unmarshal(b, &p); err != nil {
		t.Fatalf("decode ProxyPool: %v\n%s", err, b)
	}
	return p
}
