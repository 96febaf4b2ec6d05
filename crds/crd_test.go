// Package crds holds the generated CRD YAML and samples; it is a Go package only for its tests,
// which check the CRD against a real kube-apiserver (etcd + kube-apiserver from KUBEBUILDER_ASSETS,
// started by envtest) through client-go.
package crds

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
	"github.com/proxy-operator/proxy-operator/internal/apiservertest"
)

const (
	testNamespace      = "crd-test"
	establishedTimeout = 30 * time.Second
	testTimeout        = 2 * time.Minute
)

var proxiesGVR = schema.GroupVersionResource{Group: "crawl.example.com", Version: "v1alpha1", Resource: "proxies"}

// server is a real kube-apiserver with clients for it.
type server struct {
	ctx     context.Context
	kube    kubernetes.Interface
	ext     apiextensionsclient.Interface
	proxies dynamic.ResourceInterface // in testNamespace
	warned  *warnings
}

// warnings keeps the API server's warning headers (a pruned unknown field is one).
type warnings struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.msgs = append(w.msgs, text)
}

func (w *warnings) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.msgs
	w.msgs = nil
	return out
}

// TestCRDOnAPIServer applies crds/ to a real kube-apiserver and checks what only it can check:
// the schema and CEL rules accept the samples and reject each bad spec with the intended
// message, defaults land as documented, immutability holds on update, printer columns resolve
// and status is a subresource.
func TestCRDOnAPIServer(t *testing.T) {
	cfg := apiservertest.Start(t)
	warned := &warnings{}
	cfg.WarningHandler = warned
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
	s := &server{ctx: ctx, kube: kube, ext: ext, proxies: dyn.Resource(proxiesGVR).Namespace(testNamespace), warned: warned}
	applyCRDs(t, s)
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: testNamespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	t.Run("good samples are accepted and defaulted", func(t *testing.T) { testSamples(t, s) })
	t.Run("defaults as documented", func(t *testing.T) { testDefaults(t, s) })
	t.Run("bad specs are rejected by the intended rule", func(t *testing.T) { testRejections(t, s) })
	t.Run("immutable fields", func(t *testing.T) { testImmutability(t, s) })
	t.Run("status subresource and printer columns", func(t *testing.T) { testStatusAndColumns(t, s) })
}

// applyCRDs creates every CRD in this folder and waits until each is Established and served.
func applyCRDs(t *testing.T, s *server) {
	t.Helper()
	files, err := filepath.Glob("*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no CRD YAML in crds/ (%v)", err)
	}
	for _, f := range files {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.UnmarshalStrict(yamlFileToJSON(t, f), crd); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if _, err := s.ext.ApiextensionsV1().CustomResourceDefinitions().Create(s.ctx, crd, metav1.CreateOptions{FieldValidation: metav1.FieldValidationStrict}); err != nil {
			t.Fatalf("create %s: %v", f, err)
		}
		ctx, cancel := context.WithTimeout(s.ctx, establishedTimeout)
		err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			got, err := s.ext.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, crd.Name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			established := false
			for _, c := range got.Status.Conditions {
				if c.Type == apiextensionsv1.NonStructuralSchema && c.Status == apiextensionsv1.ConditionTrue {
					return false, fmt.Errorf("%s: non-structural schema: %s", f, c.Message)
				}
				established = established || (c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue)
			}
			return established, nil
		})
		cancel()
		if err != nil {
			t.Fatalf("%s not Established: %v", crd.Name, err)
		}
	}
	// Established can precede the discovery of the new resource by a moment.
	ctx, cancel := context.WithTimeout(s.ctx, establishedTimeout)
	defer cancel()
	if err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		_, err := s.proxies.List(ctx, metav1.ListOptions{})
		return err == nil, nil
	}); err != nil {
		t.Fatalf("proxies not served: %v", err)
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

// create creates obj (moved into the test namespace) and returns the Proxy as stored, or the
// server's refusal.
func create(t *testing.T, s *server, obj map[string]any) (v1.Proxy, error) {
	t.Helper()
	meta, _ := obj["metadata"].(map[string]any)
	if meta == nil {
		meta = map[string]any{}
		obj["metadata"] = meta
	}
	meta["namespace"] = testNamespace
	got, err := s.proxies.Create(s.ctx, &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{})
	if err != nil {
		return v1.Proxy{}, err
	}
	return decodeProxy(t, got), nil
}

// mustCreate is create for objects the schema must accept.
func mustCreate(t *testing.T, s *server, obj map[string]any) v1.Proxy {
	t.Helper()
	p, err := create(t, s, obj)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	return p
}

// mergePatch sends a JSON merge patch to the Proxy (or to its subresource).
func mergePatch(t *testing.T, s *server, name, patch string, subresource ...string) (v1.Proxy, error) {
	t.Helper()
	got, err := s.proxies.Patch(s.ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}, subresource...)
	if err != nil {
		return v1.Proxy{}, err
	}
	return decodeProxy(t, got), nil
}

func getProxy(t *testing.T, s *server, name string) *unstructured.Unstructured {
	t.Helper()
	got, err := s.proxies.Get(s.ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func decodeProxy(t *testing.T, u *unstructured.Unstructured) v1.Proxy {
	t.Helper()
	b, err := u.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	var p v1.Proxy
	if err := json.Unmarshal(b, &p); err != nil {
		t.Fatalf("decode Proxy: %v\n%s", err, b)
	}
	return p
}

// wantInvalid fails unless err is the API server's 422 and its message holds every wanted
// substring (the field path and the rule's message).
func wantInvalid(t *testing.T, err error, want []string) {
	t.Helper()
	if !apierrors.IsInvalid(err) {
		t.Fatalf("err = %v, want 422 Invalid", err)
	}
	msg := err.Error()
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		msg = status.Status().Message
	}
	for _, w := range want {
		if !strings.Contains(msg, w) {
			t.Errorf("message %q lacks %q", msg, w)
		}
	}
}

func int32p(v int32) *int32 { return &v }

// testSamples creates every sample in samples/ and checks the server's defaulting equals the Go
// Default() applied to the sample: the two must never drift apart.
func testSamples(t *testing.T, s *server) {
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
			got, err := create(t, s, obj)
			if err != nil {
				t.Fatalf("sample rejected: %v", err)
			}
			var sample v1.Proxy
			if err := json.Unmarshal(raw, &sample); err != nil {
				t.Fatal(err)
			}
			want := sample.Spec
			want.Default()
			if diff := cmp.Diff(want, got.Spec); diff != "" {
				t.Errorf("server-defaulted spec differs from Go's Default() (-want +got):\n%s", diff)
			}
		})
	}
}

// testDefaults pins the documented default values themselves, not just their agreement with Go.
func testDefaults(t *testing.T, s *server) {
	got := mustCreate(t, s, managed("defaults")).Spec
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
	if got := mustCreate(t, s, obj).Spec.MaxLeases; got == nil || *got != 0 {
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

func testRejections(t *testing.T, s *server) {
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
		{"managed with credentialsSecretRef", managed("x"), func(s map[string]any) {
			s["credentialsSecretRef"] = map[string]any{"name": "creds"}
		}, []string{"spec: Invalid value", "credentialsSecretRef is only for External proxies"}},
		{"vendor on a managed proxy", managed("x"), func(s map[string]any) {
			s["vendor"] = map[string]any{"usernameTemplate": "customer-{user}-sessid-{session}"}
		}, []string{"spec: Invalid value", "vendor is only for External proxies with a credentialsSecretRef"}},
		{"vendor without credentials", external("x"), func(s map[string]any) {
			s["vendor"] = map[string]any{"usernameTemplate": "customer-{user}-sessid-{session}"}
		}, []string{"spec: Invalid value", "vendor is only for External proxies with a credentialsSecretRef"}},
		{"vendor template with an unknown placeholder", external("x"), func(s map[string]any) {
			s["credentialsSecretRef"] = map[string]any{"name": "oxylabs"}
			s["vendor"] = map[string]any{"usernameTemplate": "customer-{user}-zip-{zip}-sessid-{session}"}
		}, []string{"spec.vendor.usernameTemplate: Invalid value", "unknown placeholder"}},
		{"vendor template without a session", external("x"), func(s map[string]any) {
			s["credentialsSecretRef"] = map[string]any{"name": "oxylabs"}
			s["vendor"] = map[string]any{"usernameTemplate": "customer-{user}-cc-{country}"}
		}, []string{"spec.vendor.usernameTemplate: Invalid value", "{session} is required"}},
		{"vendor country in lower case", external("x"), func(s map[string]any) {
			s["credentialsSecretRef"] = map[string]any{"name": "oxylabs"}
			s["vendor"] = map[string]any{"usernameTemplate": "customer-{user}-sessid-{session}", "countries": []any{"us"}}
		}, []string{"spec.vendor.countries[0]: Invalid value"}},
		{"credentialsSecretRef not a Secret name", external("x"), func(s map[string]any) {
			s["credentialsSecretRef"] = map[string]any{"name": "Not_A_Name"}
		}, []string{"spec.credentialsSecretRef.name: Invalid value"}},
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
		{"maxLeases above the ceiling", managed("x"), func(s map[string]any) { s["maxLeases"] = 1001 }, []string{"spec.maxLeases: Invalid value: 1001", "less than or equal to 1000"}},
		{"attribute value too long", managed("x"), func(s map[string]any) {
			s["attributes"] = map[string]any{"geo": strings.Repeat("v", 257)}
		}, []string{"spec.attributes: Invalid value", "attribute names are 1-63 characters and values at most 256"}},
		{"attribute name too long", managed("x"), func(s map[string]any) {
			s["attributes"] = map[string]any{strings.Repeat("k", 64): "v"}
		}, []string{"spec.attributes: Invalid value", "attribute names are 1-63 characters and values at most 256"}},
		{"expected status code out of range", managed("x"), func(s map[string]any) {
			s["healthCheck"] = map[string]any{"expectedStatusCodes": []int{200, 600}}
		}, []string{"spec.healthCheck.expectedStatusCodes[1]: Invalid value: 600"}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			obj := tt.obj
			obj["metadata"] = map[string]any{"name": fmt.Sprintf("bad-%d", i)}
			tt.edit(spec(obj))
			_, err := create(t, s, obj)
			wantInvalid(t, err, tt.want)
		})
	}
}

func testImmutability(t *testing.T, s *server) {
	mustCreate(t, s, managed("immutable"))

	// A mutable field changes: the rules below reject the field, not every update.
	if _, err := mergePatch(t, s, "immutable", `{"spec":{"attributes":{"geo":"eu"},"maxLeases":9}}`); err != nil {
		t.Fatalf("patch a mutable field: %v", err)
	}

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
			_, err := mergePatch(t, s, "immutable", tt.patch)
			wantInvalid(t, err, tt.want)
		})
	}
	got := decodeProxy(t, getProxy(t, s, "immutable"))
	if got.Spec.Mode != v1.ModeManaged || got.Spec.Provider != "mock" || *got.Spec.MaxLeases != 9 {
		t.Errorf("after the rejected updates: mode %q provider %q maxLeases %d, want Managed mock 9", got.Spec.Mode, got.Spec.Provider, *got.Spec.MaxLeases)
	}
}

func testStatusAndColumns(t *testing.T, s *server) {
	const name = "with-status"
	created := mustCreate(t, s, managed(name))

	// Status written on the main resource is ignored.
	got, err := mergePatch(t, s, name, `{"status":{"phase":"Failed"}}`)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.Phase != "" {
		t.Errorf("status via the main resource was kept: phase %q", got.Status.Phase)
	}

	// Status written via /status lands; a spec change in the same write is ignored. The patch
	// carries no fieldValidation, like Metacontroller's status writes, so the unknown field is
	// pruned (with a warning) rather than refused.
	status := `{"phase":"Ready","ip":"192.0.2.7","providerID":"mock-1","specHash":"abc",` +
		`"conditions":[{"type":"Healthy","status":"True","reason":"ProbeSucceeded","message":"ok","lastTransitionTime":"2026-01-02T03:04:05Z"},` +
		`{"type":"Provisioned","status":"True","reason":"Running","message":"","lastTransitionTime":"2026-01-02T03:04:05Z"}],` +
		`"observedGeneration":1,"latencyMillis":42,"lastHealthCheckTime":"2026-01-02T03:04:05Z","unknownField":"pruned"}`
	s.warned.take()
	got, err = mergePatch(t, s, name, `{"spec":{"maxLeases":77},"status":`+status+`}`, "status")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{`unknown field "status.unknownField"`}, s.warned.take()); diff != "" {
		t.Errorf("warnings of the status write (-want +got):\n%s", diff)
	}
	if got.Status.Phase != v1.PhaseReady || got.Status.IP != "192.0.2.7" || got.Status.LatencyMillis != 42 || len(got.Status.Conditions) != 2 {
		t.Errorf("status after /status write = %+v", got.Status)
	}
	if *got.Spec.MaxLeases != 5 {
		t.Errorf("spec.maxLeases = %d after a /status write, want 5 (spec is ignored there)", *got.Spec.MaxLeases)
	}
	if got.Generation != created.Generation {
		t.Errorf("generation moved from %d to %d on a status write", created.Generation, got.Generation)
	}
	raw, _, _ := unstructured.NestedMap(getProxy(t, s, name).Object, "status")
	if _, kept := raw["unknownField"]; kept {
		t.Errorf("an undeclared status field was stored: %v", raw)
	}
	for _, f := range []string{"phase", "ip", "providerID", "specHash", "conditions", "observedGeneration", "latencyMillis", "lastHealthCheckTime"} {
		if _, ok := raw[f]; !ok {
			t.Errorf("status.%s was pruned: every field the operator writes must be declared", f)
		}
	}

	// Printer columns, as kubectl get asks for them.
	tb, err := s.kube.CoreV1().RESTClient().Get().
		AbsPath("/apis", proxiesGVR.Group, proxiesGVR.Version, "namespaces", testNamespace, proxiesGVR.Resource, name).
		SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").
		DoRaw(s.ctx)
	if err != nil {
		t.Fatalf("table: %v %s", err, tb)
	}
	var table struct {
		ColumnDefinitions []struct {
			Name     string `json:"name"`
			Priority int    `json:"priority"`
		} `json:"columnDefinitions"`
		Rows []struct {
			Cells []any `json:"cells"`
		} `json:"rows"`
	}
	if err := json.Unmarshal(tb, &table); err != nil {
		t.Fatal(err)
	}
	// kubectl get shows the priority-0 columns; -o wide adds the others.
	var cols, wide []string
	at := map[string]int{}
	for i, c := range table.ColumnDefinitions {
		at[c.Name] = i
		if c.Priority == 0 {
			cols = append(cols, c.Name)
		} else {
			wide = append(wide, c.Name)
		}
	}
	if diff := cmp.Diff([]string{"Name", "Mode", "Provider", "Phase", "IP", "Healthy", "Age"}, cols); diff != "" {
		t.Errorf("columns (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"Exit", "Country", "Band"}, wide); diff != "" {
		t.Errorf("wide columns (-want +got):\n%s", diff)
	}
	if len(table.Rows) != 1 || len(table.Rows[0].Cells) != len(table.ColumnDefinitions) {
		t.Fatalf("rows = %+v, want one row of %d cells", table.Rows, len(table.ColumnDefinitions))
	}
	row := table.Rows[0].Cells
	var cells []any
	for _, c := range cols {
		cells = append(cells, row[at[c]])
	}
	if diff := cmp.Diff([]any{"with-status", "Managed", "mock", "Ready", "192.0.2.7", "True"}, cells[:6]); diff != "" {
		t.Errorf("cells (-want +got):\n%s", diff)
	}
	if age, _ := cells[6].(string); age == "" {
		t.Errorf("Age cell = %v, want a duration", cells[6])
	}
}
