package crds

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
	"github.com/proxy-operator/proxy-operator/internal/apiservertest"
)

const (
	poolNamespace = "pool-crd-test"
	poolsPath     = "/apis/crawl.example.com/v1alpha1/namespaces/" + poolNamespace + "/proxypools"
	kubectlWait   = 60 * time.Second
)

// TestProxyPoolCRDOnAPIServer applies crds/ to a real kube-apiserver and checks the ProxyPool
// CRD: the sample is accepted and defaulted as Go's Default() says, every CEL rule rejects what
// it should with its message, the template stays mutable (unlike a Proxy's mode and provider),
// status is a subresource, the printer columns resolve, and the scale subresource works through
// its REST endpoint and through `kubectl scale`.
func TestProxyPoolCRDOnAPIServer(t *testing.T) {
	s := apiservertest.Start(t)
	applyCRDs(t, s)
	waitServed(t, s, "/apis/crawl.example.com/v1alpha1/proxypools")
	s.Must(t, http.StatusCreated, http.MethodPost, "/api/v1/namespaces", map[string]any{
		"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": poolNamespace},
	}, "")

	t.Run("sample accepted and defaulted like Go", func(t *testing.T) { testPoolSample(t, s) })
	t.Run("defaults as documented", func(t *testing.T) { testPoolDefaults(t, s) })
	t.Run("bad specs are rejected by the intended rule", func(t *testing.T) { testPoolRejections(t, s) })
	t.Run("template is mutable", func(t *testing.T) { testPoolTemplateMutable(t, s) })
	t.Run("status, columns and the scale subresource", func(t *testing.T) { testPoolStatusScale(t, s) })
}

func waitServed(t *testing.T, s *apiservertest.Server, path string) {
	t.Helper()
	deadline := time.Now().Add(establishedTimeout)
	for {
		code, _, err := s.Do(http.MethodGet, path, nil, "")
		if err == nil && code == http.StatusOK {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not served after %s: %d %v", path, establishedTimeout, code, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func newPoolObj(name string) map[string]any {
	return map[string]any{
		"apiVersion": v1.APIVersion, "kind": v1.PoolKind,
		"metadata": map[string]any{"name": name, "namespace": poolNamespace},
		"spec": map[string]any{
			"template": map[string]any{"spec": map[string]any{"mode": "Managed", "provider": "mock"}},
		},
	}
}

func createPool(t *testing.T, s *apiservertest.Server, obj map[string]any) (int, []byte) {
	t.Helper()
	obj["metadata"].(map[string]any)["namespace"] = poolNamespace
	code, b, err := s.Do(http.MethodPost, poolsPath, obj, "")
	if err != nil {
		t.Fatal(err)
	}
	return code, b
}

func decodePool(t *testing.T, b []byte) v1.ProxyPool {
	t.Helper()
	var p v1.ProxyPool
	if err := json.Unmarshal(b, &p); err != nil {
		t.Fatalf("decode ProxyPool: %v\n%s", err, b)
	}
	return p
}

func testPoolSample(t *testing.T, s *apiservertest.Server) {
	files, err := filepath.Glob("samples/pools/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no samples in crds/samples/pools (%v)", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			raw := yamlFileToJSON(t, f)
			var obj map[string]any
			if err := json.Unmarshal(raw, &obj); err != nil {
				t.Fatal(err)
			}
			code, b := createPool(t, s, obj)
			if code != http.StatusCreated {
				t.Fatalf("sample rejected: %d %s", code, b)
			}
			var sample v1.ProxyPool
			if err := json.Unmarshal(raw, &sample); err != nil {
				t.Fatal(err)
			}
			want := sample.Spec
			want.Default()
			if err := want.Validate(); err != nil {
				t.Errorf("the sample fails Go's Validate: %v", err)
			}
			if diff := cmp.Diff(want, decodePool(t, b).Spec); diff != "" {
				t.Errorf("server-defaulted spec differs from Go's Default() (-want +got):\n%s", diff)
			}
		})
	}
}

func testPoolDefaults(t *testing.T, s *apiservertest.Server) {
	obj := newPoolObj("defaults")
	obj["spec"].(map[string]any)["autoscale"] = map[string]any{"maxReplicas": 4}
	code, b := createPool(t, s, obj)
	if code != http.StatusCreated {
		t.Fatalf("create: %d %s", code, b)
	}
	got := decodePool(t, b).Spec
	var want v1.ProxyPoolSpec
	want.Template.Spec = v1.ProxySpec{Mode: v1.ModeManaged, Provider: "mock"}
	want.Autoscale = &v1.PoolAutoscale{MaxReplicas: 4}
	want.Default()
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("defaults (-want +got):\n%s", diff)
	}
	// Pin the documented values themselves.
	if *got.Replicas != 1 || got.Strategy.MaxSurge.IntValue() != 1 || got.Strategy.MaxUnavailable.IntValue() != 0 ||
		*got.DrainSeconds != 300 || *got.Autoscale.MinReplicas != 1 || *got.Autoscale.TargetLeaseUtilization != 70 ||
		*got.Autoscale.ScaleDownStabilizationSeconds != 300 || got.Template.Spec.Port != 3128 || *got.Template.Spec.MaxLeases != 5 {
		t.Errorf("defaults = %+v", got)
	}
}

func testPoolRejections(t *testing.T, s *apiservertest.Server) {
	tests := []struct {
		name   string
		mutate func(obj, spec map[string]any)
		want   []string
	}{
		{"External template", func(_, sp map[string]any) {
			sp["template"] = map[string]any{"spec": map[string]any{"mode": "External", "endpoint": map[string]any{"host": "198.51.100.7", "port": 3128}}}
		}, []string{"pool members must be Managed"}},
		{"template without provider", func(_, sp map[string]any) {
			sp["template"] = map[string]any{"spec": map[string]any{"mode": "Managed"}}
		}, []string{"provider is required when mode is Managed"}},
		{"negative replicas", func(_, sp map[string]any) { sp["replicas"] = -1 }, []string{"spec.replicas"}},
		{"maxSurge not a percentage", func(_, sp map[string]any) {
			sp["strategy"] = map[string]any{"maxSurge": "many"}
		}, []string{"maxSurge must be 0-1000 or a percentage"}},
		{"maxSurge and maxUnavailable both 0", func(_, sp map[string]any) {
			sp["strategy"] = map[string]any{"maxSurge": 0, "maxUnavailable": "0%"}
		}, []string{"maxSurge and maxUnavailable must not both be 0"}},
		{"maxAge under a minute", func(_, sp map[string]any) {
			sp["rotation"] = map[string]any{"maxAge": "30s"}
		}, []string{"maxAge must be at least 1m"}},
		{"banThreshold 0", func(_, sp map[string]any) {
			sp["rotation"] = map[string]any{"banThreshold": 0}
		}, []string{"spec.rotation.banThreshold"}},
		{"minReplicas above maxReplicas", func(_, sp map[string]any) {
			sp["autoscale"] = map[string]any{"minReplicas": 5, "maxReplicas": 2}
		}, []string{"autoscale.minReplicas must not exceed autoscale.maxReplicas"}},
		{"utilization above 100", func(_, sp map[string]any) {
			sp["autoscale"] = map[string]any{"maxReplicas": 2, "targetLeaseUtilization": 101}
		}, []string{"targetLeaseUtilization"}},
		{"name too long for member names", func(obj, _ map[string]any) {
			obj["metadata"].(map[string]any)["name"] = strings.Repeat("a", 51)
		}, []string{"metadata.name must be at most 50 characters"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			obj := newPoolObj("bad")
			tt.mutate(obj, obj["spec"].(map[string]any))
			code, b := createPool(t, s, obj)
			if code != http.StatusUnprocessableEntity {
				t.Fatalf("status %d, want 422: %s", code, b)
			}
			st, err := apiservertest.DecodeStatus(b)
			if err != nil {
				t.Fatalf("%v: %s", err, b)
			}
			for _, w := range tt.want {
				if !strings.Contains(st.Message, w) {
					t.Errorf("message %q lacks %q", st.Message, w)
				}
			}
			// Go's Validate refuses the same spec (the name rule is the hook's decode).
			var p v1.ProxyPool
			raw, _ := json.Marshal(obj)
			if err := json.Unmarshal(raw, &p); err == nil && tt.name != "name too long for member names" {
				p.Spec.Default()
				if err := p.Spec.Validate(); err == nil {
					t.Errorf("Go's Validate accepts what the API server refused")
				}
			}
		})
	}
}

func testPoolTemplateMutable(t *testing.T, s *apiservertest.Server) {
	code, b := createPool(t, s, newPoolObj("mutable"))
	if code != http.StatusCreated {
		t.Fatalf("create: %d %s", code, b)
	}
	b = s.Must(t, http.StatusOK, http.MethodPatch, poolsPath+"/mutable",
		[]byte(`{"spec":{"template":{"spec":{"provider":"gcp-eu","placement":{"zone":"europe-west1-b"}}}}}`), mergePatch)
	if got := decodePool(t, b).Spec.Template.Spec.Provider; got != "gcp-eu" {
		t.Errorf("template provider = %q after the patch, want gcp-eu", got)
	}
}

func testPoolStatusScale(t *testing.T, s *apiservertest.Server) {
	code, b := createPool(t, s, newPoolObj("scaled"))
	if code != http.StatusCreated {
		t.Fatalf("create: %d %s", code, b)
	}
	path := poolsPath + "/scaled"
	status := `{"status":{"observedGeneration":1,"desiredReplicas":3,"replicas":3,"members":4,"readyReplicas":3,` +
		`"healthyReplicas":2,"updatedReplicas":3,"drainingReplicas":1,"activeLeases":7,"leaseCapacity":10,"utilizationPercent":70,` +
		`"selector":"crawl.example.com/pool=scaled","templateHash":"abc",` +
		`"autoscale":{"recommendation":3,"lowMax":2,"deniedSeen":4,"lowSince":"2026-01-02T03:04:05Z","lastScaleTime":"2026-01-02T03:04:05Z"},` +
		`"conditions":[{"type":"Ready","status":"False","reason":"TooFewHealthy","message":"2 of 3","lastTransitionTime":"2026-01-02T03:04:05Z"}]}}`
	b = s.Must(t, http.StatusOK, http.MethodPatch, path+"/status", []byte(status), mergePatch)
	var raw struct {
		Status map[string]any `json:"status"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"observedGeneration", "desiredReplicas", "replicas", "members", "readyReplicas", "healthyReplicas",
		"updatedReplicas", "drainingReplicas", "activeLeases", "leaseCapacity", "utilizationPercent", "selector", "templateHash", "autoscale", "conditions"} {
		if _, ok := raw.Status[f]; !ok {
			t.Errorf("status.%s was pruned: every field the operator writes must be declared", f)
		}
	}

	// Printer columns.
	code, tb, err := s.DoAccept(http.MethodGet, path, "application/json;as=Table;v=v1;g=meta.k8s.io")
	if err != nil || code != http.StatusOK {
		t.Fatalf("table: %d %v %s", code, err, tb)
	}
	var table struct {
		ColumnDefinitions []struct {
			Name string `json:"name"`
		} `json:"columnDefinitions"`
		Rows []struct {
			Cells []any `json:"cells"`
		} `json:"rows"`
	}
	if err := json.Unmarshal(tb, &table); err != nil {
		t.Fatal(err)
	}
	var cols []string
	for _, c := range table.ColumnDefinitions {
		cols = append(cols, c.Name)
	}
	if diff := cmp.Diff([]string{"Name", "Desired", "Ready", "Healthy", "Leases", "Age"}, cols); diff != "" {
		t.Errorf("columns (-want +got):\n%s", diff)
	}
	if len(table.Rows) != 1 || len(table.Rows[0].Cells) != 6 {
		t.Fatalf("rows = %+v", table.Rows)
	}
	if diff := cmp.Diff([]any{"scaled", float64(3), float64(3), float64(2), float64(7)}, table.Rows[0].Cells[:5]); diff != "" {
		t.Errorf("cells (-want +got):\n%s", diff)
	}

	// The scale subresource reads spec.replicas, status.replicas and status.selector.
	var scale struct {
		Spec struct {
			Replicas int32 `json:"replicas"`
		} `json:"spec"`
		Status struct {
			Replicas int32  `json:"replicas"`
			Selector string `json:"selector"`
		} `json:"status"`
	}
	if err := json.Unmarshal(s.Must(t, http.StatusOK, http.MethodGet, path+"/scale", nil, ""), &scale); err != nil {
		t.Fatal(err)
	}
	if scale.Spec.Replicas != 1 || scale.Status.Replicas != 3 || scale.Status.Selector != "crawl.example.com/pool=scaled" {
		t.Errorf("scale = %+v, want spec 1, status 3, selector crawl.example.com/pool=scaled", scale)
	}

	// kubectl scale, as a user or an HPA would.
	bin := kubectlBin(t)
	ctx, cancel := context.WithTimeout(context.Background(), kubectlWait)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, "--kubeconfig", s.Kubeconfig(t), "-n", poolNamespace, "scale", "pxp/scaled", "--replicas=5")
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("kubectl scale: %v\n%s", err, out.String())
	}
	got := decodePool(t, s.Must(t, http.StatusOK, http.MethodGet, path, nil, ""))
	if *got.Spec.Replicas != 5 {
		t.Errorf("spec.replicas = %d after kubectl scale --replicas=5", *got.Spec.Replicas)
	}
	// The scale subresource refuses what the schema refuses.
	code, b, err = s.Do(http.MethodPatch, path+"/scale", []byte(`{"spec":{"replicas":5000}}`), mergePatch)
	if err != nil || code != http.StatusUnprocessableEntity {
		t.Errorf("scale to 5000: %d %v %s, want 422", code, err, b)
	}
}

// kubectlBin finds kubectl beside kube-apiserver in KUBEBUILDER_ASSETS, then on PATH.
func kubectlBin(t *testing.T) string {
	t.Helper()
	p := filepath.Join(os.Getenv("KUBEBUILDER_ASSETS"), "kubectl")
	if _, err := os.Stat(p); err == nil {
		return p
	}
	if p, err := exec.LookPath("kubectl"); err == nil {
		return p
	}
	t.Skip("no kubectl in KUBEBUILDER_ASSETS or on PATH")
	return ""
}
