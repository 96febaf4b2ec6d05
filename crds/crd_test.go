// Package crds holds the generated CRD YAML and samples; it is a Go package only for its tests,
// which check the CRD against a real kube-apiserver (etcd + kube-apiserver from KUBEBUILDER_ASSETS).
package crds

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
	"github.com/proxy-operator/proxy-operator/internal/apiservertest"
)

const (
	testNamespace      = "crd-test"
	proxiesPath        = "/apis/crawl.example.com/v1alpha1/namespaces/" + testNamespace + "/proxies"
	establishedTimeout = 30 * time.Second
	mergePatch         = "application/merge-patch+json"
)

// TestCRDOnAPIServer applies crds/ to a real kube-apiserver and checks what only it can check:
// the schema and CEL rules accept the samples and reject each bad spec with the intended
// message, defaults land as documented, immutability holds on update, printer columns resolve
// and status is a subresource.
func TestCRDOnAPIServer(t *testing.T) {
	s := apiservertest.Start(t)
	applyCRDs(t, s)
	s.Must(t, http.StatusCreated, http.MethodPost, "/api/v1/namespaces", map[string]any{
		"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": testNamespace},
	}, "")

	t.Run("good samples are accepted and defaulted", func(t *testing.T) { testSamples(t, s) })
	t.Run("defaults as documented", func(t *testing.T) { testDefaults(t, s) })
	t.Run("bad specs are rejected by the intended rule", func(t *testing.T) { testRejections(t, s) })
	t.Run("immutable fields", func(t *testing.T) { testImmutability(t, s) })
	t.Run("status subresource and printer columns", func(t *testing.T) { testStatusAndColumns(t, s) })
}

// applyCRDs creates every CRD in this folder and waits until each is Established and served.
func applyCRDs(t *testing.T, s *apiservertest.Server) {
	t.Helper()
	files, err := filepath.Glob("*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no CRD YAML in crds/ (%v)", err)
	}
	for _, f := range files {
		body := yamlFileToJSON(t, f)
		var crd struct {
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(body, &crd); err != nil {
			t.Fatal(err)
		}
		s.Must(t, http.StatusCreated, http.MethodPost, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", body, "")
		deadline := time.Now().Add(establishedTimeout)
		for {
			b := s.Must(t, http.StatusOK, http.MethodGet, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"+crd.Metadata.Name, nil, "")
			var got struct {
				Status struct {
					Conditions []struct{ Type, Status, Message string } `json:"conditions"`
				} `json:"status"`
			}
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatal(err)
			}
			established := false
			for _, c := range got.Status.Conditions {
				if c.Type == "NonStructuralSchema" && c.Status == "True" {
					t.Fatalf("%s: non-structural schema: %s", f, c.Message)
				}
				established = established || (c.Type == "Established" && c.Status == "True")
			}
			if established {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s not Established after %s: %s", crd.Metadata.Name, establishedTimeout, b)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	// Established can precede the discovery of the new resource by a moment.
	deadline := time.Now().Add(establishedTimeout)
	for {
		code, _, err := s.Do(http.MethodGet, "/apis/crawl.example.com/v1alpha1/proxies", nil, "")
		if err == nil && code == http.StatusOK {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("proxies not served after %s: %d %v", establishedTimeout, code, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func yamlFileToJSON(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	j, err := yaml.YAMLToJSON(b)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return j
}

// create posts obj (moved into the test namespace) and returns the answer's code and body.
func create(t *testing.T, s *apiservertest.Server, obj map[string]any) (int, []byte) {
	t.Helper()
	meta, _ := obj["metadata"].(map[string]any)
	if meta == nil {
		meta = map[string]any{}
		obj["metadata"] = meta
	}
	meta["namespace"] = testNamespace
	code, b, err := s.Do(http.MethodPost, proxiesPath, obj, "")
	if err != nil {
		t.Fatal(err)
	}
	return code, b
}

func decodeProxy(t *testing.T, b []byte) v1.Proxy {
	t.Helper()
	var p v1.Proxy
	if err := json.Unmarshal(b, &p); err != nil {
		t.Fatalf("decode Proxy: %v\n%s", err, b)
	}
	return p
}

func int32p(v int32) *int32 { return &v }

// testSamples creates every sample in samples/ and checks the server's defaulting equals the Go
// Default() applied to the sample: the two must never drift apart.
func testSamples(t *testing.T, s *apiservertest.Server) {
	files, err := filepath.Glob("samples/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no samples in crds/samples (%v)", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			raw := yamlFileToJSON(t, f)
			var obj map[string]any
			if err := json.Unmarshal(raw, &obj); err != nil {
				t.Fatal(err)
			}
			code, b := create(t, s, obj)
			if code != http.StatusCreated {
				t.Fatalf("sample rejected: %d %s", code, b)
			}
			var sample v1.Proxy
			if err := json.Unmarshal(raw, &sample); err != nil {
				t.Fatal(err)
			}
			want := sample.Spec
			want.Default()
			got := decodeProxy(t, b)
			if diff := cmp.Diff(want, got.Spec); diff != "" {
				t.Errorf("server-defaulted spec differs from Go's Default() (-want +got):\n%s", diff)
			}
		})
	}
}

// testDefaults pins the documented default values themselves, not just their agreement with Go.
func testDefaults(t *testing.T, s *apiservertest.Server) {
	code, b := create(t, s, managed("defaults"))
	if code != http.StatusCreated {
		t.Fatalf("create: %d %s", code, b)
	}
	got := decodeProxy(t, b).Spec
	want := v1.ProxySpec{
		Mode:      v1.ModeManaged,
		Provider:  "mock",
		Port:      3128,
		MaxLeases: int32p(5),
		HealthCheck: &v1.HealthCheckSpec{
			ProbeURL:            "https://www.gstatic.com/generate_204",
			IntervalSeconds:     30,
			TimeoutSeconds:      5,
			FailureThreshold:    3,
			SuccessThreshold:    1,
			ExpectedStatusCodes: []int32{200, 204},
		},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("defaults (-want +got):\n%s", diff)
	}

	// An explicit zero is kept, not defaulted: maxLeases 0 means "list but never lease".
	obj := managed("zero-leases")
	spec(obj)["maxLeases"] = 0
	code, b = create(t, s, obj)
	if code != http.StatusCreated {
		t.Fatalf("create: %d %s", code, b)
	}
	if got := decodeProxy(t, b).Spec.MaxLeases; got == nil || *got != 0 {
		t.Errorf("maxLeases 0 became %v", got)
	}
}

func managed(name string) map[string]any {
	return map[string]any{
		"apiVersion": "crawl.example.com/v1alpha1",
		"kind":       "Proxy",
		"metadata":   map[string]any{"name": name},
		"spec":       map[string]any{"mode": "Managed", "provider": "mock"},
	}
}

func external(name string) map[string]any {
	return map[string]any{
		"apiVersion": "crawl.example.com/v1alpha1",
		"kind":       "Proxy",
		"metadata":   map[string]any{"name": name},
		"spec":       map[string]any{"mode": "External", "endpoint": map[string]any{"host": "198.51.100.7", "port": 3128}},
	}
}

func spec(obj map[string]any) map[string]any { return obj["spec"].(map[string]any) }

func testRejections(t *testing.T, s *apiservertest.Server) {
	const (
		providerRule = "provider is required when mode is Managed and must be empty when mode is External"
		endpointRule = "endpoint is required when mode is External and must be absent when mode is Managed"
		cloudInit    = "exactly one of inline or secretRef must be set"
		timeoutRule  = "timeoutSeconds must not exceed intervalSeconds"
		probeScheme  = "probeURL must be an http:// or https:// URL"
	)
	tests := []struct {
		name string
		obj  map[string]any
		edit func(spec map[string]any)
		// want are substrings of the rejection message: the field path and the rule's message.
		want []string
	}{
		{"managed without provider", managed("x"), func(s map[string]any) { delete(s, "provider") }, []string{"spec: Invalid value", providerRule}},
		{"managed with empty provider", managed("x"), func(s map[string]any) { s["provider"] = "" }, []string{"spec: Invalid value", providerRule}},
		{"external with provider", external("x"), func(s map[string]any) { s["provider"] = "mock" }, []string{"spec: Invalid value", providerRule}},
		{"external without endpoint", external("x"), func(s map[string]any) { delete(s, "endpoint") }, []string{"spec: Invalid value", endpointRule}},
		{"managed with endpoint", managed("x"), func(s map[string]any) {
			s["endpoint"] = map[string]any{"host": "198.51.100.7", "port": 3128}
		}, []string{"spec: Invalid value", endpointRule}},
		{"cloud-init inline and secretRef", managed("x"), func(s map[string]any) {
			s["cloudInit"] = map[string]any{"inline": "#cloud-config\n", "secretRef": map[string]any{"name": "ci", "key": "user-data"}}
		}, []string{"spec.cloudInit: Invalid value", cloudInit}},
		{"cloud-init neither", managed("x"), func(s map[string]any) { s["cloudInit"] = map[string]any{} }, []string{"spec.cloudInit: Invalid value", cloudInit}},
		{"timeout above interval", managed("x"), func(s map[string]any) {
			s["healthCheck"] = map[string]any{"intervalSeconds": 10, "timeoutSeconds": 11}
		}, []string{"spec.healthCheck: Invalid value", timeoutRule}},
		{"interval below the defaulted timeout", managed("x"), func(s map[string]any) {
			s["healthCheck"] = map[string]any{"intervalSeconds": 3}
		}, []string{"spec.healthCheck: Invalid value", timeoutRule}},
		{"probe URL with another scheme", managed("x"), func(s map[string]any) {
			s["healthCheck"] = map[string]any{"probeURL": "ftp://example.com/"}
		}, []string{"spec.healthCheck.probeURL: Invalid value", probeScheme}},
		{"port above range", managed("x"), func(s map[string]any) { s["port"] = 65536 }, []string{"spec.port: Invalid value: 65536", "less than or equal to 65535"}},
		{"port zero", managed("x"), func(s map[string]any) { s["port"] = 0 }, []string{"spec.port: Invalid value: 0", "greater than or equal to 1"}},
		{"endpoint port above range", external("x"), func(s map[string]any) {
			s["endpoint"] = map[string]any{"host": "198.51.100.7", "port": 70000}
		}, []string{"spec.endpoint.port: Invalid value: 70000", "less than or equal to 65535"}},
		{"endpoint host with a space", external("x"), func(s map[string]any) {
			s["endpoint"] = map[string]any{"host": "a b", "port": 3128}
		}, []string{"spec.endpoint.host: Invalid value: \"a b\"", "should match"}},
		{"endpoint host a URL", external("x"), func(s map[string]any) {
			s["endpoint"] = map[string]any{"host": "http://x/", "port": 3128}
		}, []string{"spec.endpoint.host: Invalid value", "should match"}},
		{"secretRef name with a slash", managed("x"), func(s map[string]any) {
			s["cloudInit"] = map[string]any{"secretRef": map[string]any{"name": "other-ns/ci", "key": "user-data"}}
		}, []string{"spec.cloudInit.secretRef.name: Invalid value: \"other-ns/ci\"", "should match"}},
		{"unknown mode", managed("x"), func(s map[string]any) { s["mode"] = "Hybrid" }, []string{`spec.mode: Unsupported value: "Hybrid"`, `"Managed"`, `"External"`}},
		{"mode missing", managed("x"), func(s map[string]any) { delete(s, "mode") }, []string{"spec.mode: Required value"}},
		{"negative maxLeases", managed("x"), func(s map[string]any) { s["maxLeases"] = -1 }, []string{"spec.maxLeases: Invalid value: -1", "greater than or equal to 0"}},
		{"expected status code out of range", managed("x"), func(s map[string]any) {
			s["healthCheck"] = map[string]any{"expectedStatusCodes": []int{200, 600}}
		}, []string{"spec.healthCheck.expectedStatusCodes[1]: Invalid value: 600"}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			obj := tt.obj
			obj["metadata"] = map[string]any{"name": fmt.Sprintf("bad-%d", i)}
			tt.edit(spec(obj))
			code, b := create(t, s, obj)
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
		})
	}
}

func testImmutability(t *testing.T, s *apiservertest.Server) {
	code, b := create(t, s, managed("immutable"))
	if code != http.StatusCreated {
		t.Fatalf("create: %d %s", code, b)
	}
	path := proxiesPath + "/immutable"

	// A mutable field changes: the rules below reject the field, not every update.
	s.Must(t, http.StatusOK, http.MethodPatch, path, []byte(`{"spec":{"attributes":{"geo":"eu"},"maxLeases":9}}`), mergePatch)

	tests := []struct {
		name  string
		patch string
		want  []string
	}{
		{"changing provider", `{"spec":{"provider":"gcp-eu"}}`, []string{"spec.provider: Invalid value", "provider is immutable"}},
		{"changing mode", `{"spec":{"mode":"External","provider":null,"endpoint":{"host":"198.51.100.7","port":3128}}}`, []string{"spec.mode: Invalid value", "mode is immutable"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, b, err := s.Do(http.MethodPatch, path, []byte(tt.patch), mergePatch)
			if err != nil {
				t.Fatal(err)
			}
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
		})
	}
	got := decodeProxy(t, s.Must(t, http.StatusOK, http.MethodGet, path, nil, ""))
	if got.Spec.Mode != v1.ModeManaged || got.Spec.Provider != "mock" || *got.Spec.MaxLeases != 9 {
		t.Errorf("after the rejected updates: mode %q provider %q maxLeases %d, want Managed mock 9", got.Spec.Mode, got.Spec.Provider, *got.Spec.MaxLeases)
	}
}

func testStatusAndColumns(t *testing.T, s *apiservertest.Server) {
	code, b := create(t, s, managed("with-status"))
	if code != http.StatusCreated {
		t.Fatalf("create: %d %s", code, b)
	}
	path := proxiesPath + "/with-status"
	created := decodeProxy(t, b)

	// Status written on the main resource is ignored.
	b = s.Must(t, http.StatusOK, http.MethodPatch, path, []byte(`{"status":{"phase":"Failed"}}`), mergePatch)
	if got := decodeProxy(t, b).Status.Phase; got != "" {
		t.Errorf("status via the main resource was kept: phase %q", got)
	}

	// Status written via /status lands; a spec change in the same write is ignored.
	status := `{"phase":"Ready","ip":"192.0.2.7","providerID":"mock-1","specHash":"abc",` +
		`"conditions":[{"type":"Healthy","status":"True","reason":"ProbeSucceeded","message":"ok","lastTransitionTime":"2026-01-02T03:04:05Z"},` +
		`{"type":"Provisioned","status":"True","reason":"Running","message":"","lastTransitionTime":"2026-01-02T03:04:05Z"}],` +
		`"observedGeneration":1,"latencyMillis":42,"lastHealthCheckTime":"2026-01-02T03:04:05Z","unknownField":"pruned"}`
	b = s.Must(t, http.StatusOK, http.MethodPatch, path+"/status", []byte(`{"spec":{"maxLeases":77},"status":`+status+`}`), mergePatch)
	got := decodeProxy(t, b)
	if got.Status.Phase != v1.PhaseReady || got.Status.IP != "192.0.2.7" || got.Status.LatencyMillis != 42 || len(got.Status.Conditions) != 2 {
		t.Errorf("status after /status write = %+v", got.Status)
	}
	if *got.Spec.MaxLeases != 5 {
		t.Errorf("spec.maxLeases = %d after a /status write, want 5 (spec is ignored there)", *got.Spec.MaxLeases)
	}
	if got.Generation != created.Generation {
		t.Errorf("generation moved from %d to %d on a status write", created.Generation, got.Generation)
	}
	var raw struct {
		Status map[string]any `json:"status"`
	}
	if err := json.Unmarshal(s.Must(t, http.StatusOK, http.MethodGet, path, nil, ""), &raw); err != nil {
		t.Fatal(err)
	}
	if _, kept := raw.Status["unknownField"]; kept {
		t.Errorf("an undeclared status field was stored: %v", raw.Status)
	}
	for _, f := range []string{"phase", "ip", "providerID", "specHash", "conditions", "observedGeneration", "latencyMillis", "lastHealthCheckTime"} {
		if _, ok := raw.Status[f]; !ok {
			t.Errorf("status.%s was pruned: every field the operator writes must be declared", f)
		}
	}

	// Printer columns, as kubectl get asks for them.
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
	if diff := cmp.Diff([]string{"Name", "Mode", "Provider", "Phase", "IP", "Healthy", "Age"}, cols); diff != "" {
		t.Errorf("columns (-want +got):\n%s", diff)
	}
	if len(table.Rows) != 1 || len(table.Rows[0].Cells) != 7 {
		t.Fatalf("rows = %+v, want one row of 7 cells", table.Rows)
	}
	cells := table.Rows[0].Cells
	if diff := cmp.Diff([]any{"with-status", "Managed", "mock", "Ready", "192.0.2.7", "True"}, cells[:6]); diff != "" {
		t.Errorf("cells (-want +got):\n%s", diff)
	}
	if age, _ := cells[6].(string); age == "" {
		t.Errorf("Age cell = %v, want a duration", cells[6])
	}
}
