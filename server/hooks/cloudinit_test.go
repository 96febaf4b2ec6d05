package hooks

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
	"github.com/proxy-operator/proxy-operator/internal/lifecycle"
	"github.com/proxy-operator/proxy-operator/metacontroller"
	"github.com/proxy-operator/proxy-operator/providers"
	"github.com/proxy-operator/proxy-operator/providers/credentials"
	"github.com/proxy-operator/proxy-operator/providers/mock"
)

// secretJSON is a Secret as Metacontroller sends it: data base64-encoded.
func secretJSON(t *testing.T, ns, name string, labels map[string]string, data map[string]string) json.RawMessage {
	t.Helper()
	enc := map[string]string{}
	for k, v := range data {
		enc[k] = base64.StdEncoding.EncodeToString([]byte(v))
	}
	b, err := json.Marshal(map[string]any{
		"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
		"metadata": map[string]any{"name": name, "namespace": ns, "labels": labels, "resourceVersion": "7"},
		"data":     enc,
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var labelled = map[string]string{CloudInitLabel: "true"}

func TestResolveCloudInit(t *testing.T) {
	inline := "#cloud-config\npackages: [squid]\n"
	ref := &v1.CloudInitSpec{SecretRef: &v1.SecretKeyRef{Name: "ci", Key: "user-data"}}
	binary := "\x00\xffbinary\n"
	for _, tc := range []struct {
		name    string
		spec    *v1.CloudInitSpec
		related func(t *testing.T) metacontroller.RelativeObjects
		want    string
		wantErr string
	}{
		{name: "none", spec: nil, want: ""},
		{name: "inline", spec: &v1.CloudInitSpec{Inline: &inline}, want: inline},
		{name: "secret, v2 key", spec: ref, related: func(t *testing.T) metacontroller.RelativeObjects {
			return metacontroller.RelativeObjects{"Secret.v1": {"crawl/ci": secretJSON(t, "crawl", "ci", labelled, map[string]string{"user-data": "from-secret"})}}
		}, want: "from-secret"},
		{name: "secret, v1 key", spec: ref, related: func(t *testing.T) metacontroller.RelativeObjects {
			return metacontroller.RelativeObjects{"Secret.v1": {"ci": secretJSON(t, "crawl", "ci", labelled, map[string]string{"user-data": "from-secret"})}}
		}, want: "from-secret"},
		{name: "binary content kept byte for byte", spec: ref, related: func(t *testing.T) metacontroller.RelativeObjects {
			return metacontroller.RelativeObjects{"Secret.v1": {"crawl/ci": secretJSON(t, "crawl", "ci", labelled, map[string]string{"user-data": binary})}}
		}, want: binary},
		{name: "secret missing", spec: ref, related: func(*testing.T) metacontroller.RelativeObjects { return nil },
			wantErr: "secret crawl/ci not found, or not labelled crawl.example.com/cloud-init=true"},
		{name: "same name in another namespace", spec: ref, related: func(t *testing.T) metacontroller.RelativeObjects {
			return metacontroller.RelativeObjects{"Secret.v1": {"other/ci": secretJSON(t, "other", "ci", labelled, map[string]string{"user-data": "x"})}}
		}, wantErr: "secret crawl/ci not found"},
		{name: "a ConfigMap of that name", spec: ref, related: func(t *testing.T) metacontroller.RelativeObjects {
			return metacontroller.RelativeObjects{"ConfigMap.v1": {"crawl/ci": secretJSON(t, "crawl", "ci", labelled, map[string]string{"user-data": "x"})}}
		}, wantErr: "secret crawl/ci not found"},
		{name: "unlabelled", spec: ref, related: func(t *testing.T) metacontroller.RelativeObjects {
			return metacontroller.RelativeObjects{"Secret.v1": {"crawl/ci": secretJSON(t, "crawl", "ci", nil, map[string]string{"user-data": "x"})}}
		}, wantErr: "secret crawl/ci is not labelled crawl.example.com/cloud-init=true"},
		{name: "label not true", spec: ref, related: func(t *testing.T) metacontroller.RelativeObjects {
			return metacontroller.RelativeObjects{"Secret.v1": {"crawl/ci": secretJSON(t, "crawl", "ci", map[string]string{CloudInitLabel: "yes"}, map[string]string{"user-data": "x"})}}
		}, wantErr: "secret crawl/ci is not labelled"},
		{name: "key missing", spec: ref, related: func(t *testing.T) metacontroller.RelativeObjects {
			return metacontroller.RelativeObjects{"Secret.v1": {"crawl/ci": secretJSON(t, "crawl", "ci", labelled, map[string]string{"other": "x"})}}
		}, wantErr: `secret crawl/ci has no key "user-data"`},
		{name: "data not base64", spec: ref, related: func(*testing.T) metacontroller.RelativeObjects {
			return metacontroller.RelativeObjects{"Secret.v1": {"crawl/ci": json.RawMessage(`{"metadata":{"labels":{"crawl.example.com/cloud-init":"true"}},"data":{"user-data":"%%%"}}`)}}
		}, wantErr: "secret crawl/ci: unreadable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &v1.Proxy{}
			p.Namespace, p.Name = "crawl", "edge"
			p.Spec.CloudInit = tc.spec
			var related metacontroller.RelativeObjects
			if tc.related != nil {
				related = tc.related(t)
			}
			got, err := resolveCloudInit(p, related)
			switch {
			case tc.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("err %v, want one containing %q", err, tc.wantErr)
				}
			case err != nil:
				t.Errorf("err %v, want nil", err)
			case got != tc.want:
				t.Errorf("content %q, want %q", got, tc.want)
			}
		})
	}
}

// recording is a provider that keeps every CreateRequest, over the mock.
type recording struct {
	providers.Provider
	mu      sync.Mutex
	creates []providers.CreateRequest
}

func (r *recording) Create(ctx context.Context, req providers.CreateRequest) (string, error) {
	r.mu.Lock()
	r.creates = append(r.creates, req)
	r.mu.Unlock()
	return r.Provider.Create(ctx, req)
}

// cloudInitHarness syncs one Proxy whose cloud-init comes from a Secret, keeping its status
// between calls as the API server would.
type cloudInitHarness struct {
	t      *testing.T
	h      http.Handler
	mp     *mock.Provider
	rec    *recording
	now    time.Time
	status json.RawMessage
	secret map[string]any
}

func newCloudInitHarness(t *testing.T) *cloudInitHarness {
	t.Helper()
	c := &cloudInitHarness{t: t, now: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)}
	clock := func() time.Time { return c.now }
	mp, err := mock.New(mock.Config{ProvisioningDelay: mock.Duration(time.Second)}, mock.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	c.mp, c.rec = mp, &recording{Provider: mp}
	hooks := &Hooks{Providers: providers.NewSet(providers.Entry{Name: "mock", Type: "mock", Provider: c.rec}), Now: clock}
	c.h = hooks.Handler()
	return c
}

type syncResult struct {
	Status v1.ProxyStatus `json:"status"`
}

func (c *cloudInitHarness) sync(related metacontroller.RelativeObjects) v1.ProxyStatus {
	c.t.Helper()
	parent := map[string]any{
		"apiVersion": v1.APIVersion, "kind": v1.Kind,
		"metadata": map[string]any{"name": "edge", "namespace": "crawl", "uid": "uid-ci", "generation": 1},
		"spec": map[string]any{"mode": "Managed", "provider": "mock",
			"cloudInit": map[string]any{"secretRef": map[string]any{"name": "ci", "key": "user-data"}}},
	}
	if c.status != nil {
		parent["status"] = c.status
	}
	if c.secret == nil {
		cred, err := credentials.ForManaged(providers.Parent{Namespace: "crawl", Name: "edge", UID: "uid-ci"}, nil)
		if err != nil {
			c.t.Fatal(err)
		}
		var s map[string]any
		_ = json.Unmarshal(cred.Child, &s)
		s["metadata"].(map[string]any)["uid"] = "secret-uid-ci"
		c.secret = s
	}
	// The credentials Secret is stored already: these tests are about cloud-init.
	children := map[string]any{credentials.SecretTypeKey: map[string]any{"crawl/" + credentials.SecretName("uid-ci"): c.secret}}
	body, _ := json.Marshal(map[string]any{"parent": parent, "related": related, "children": children})
	rec := httptest.NewRecorder()
	c.h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/sync", bytes.NewReader(body)))
	if rec.Code != http.StatusOK {
		c.t.Fatalf("sync: %d %s", rec.Code, rec.Body)
	}
	var raw struct {
		Status json.RawMessage `json:"status"`
	}
	_ = json.Unmarshal(rec.Body.Bytes(), &raw)
	c.status = raw.Status
	var res syncResult
	if err := json.Unmarshal(rec.Body.Bytes(), &res); err != nil {
		c.t.Fatal(err)
	}
	return res.Status
}

func reason(st v1.ProxyStatus) string {
	for _, c := range st.Conditions {
		if c.Type == v1.ConditionProvisioned {
			return c.Reason
		}
	}
	return ""
}

// TestSecretRotationReplacesInstance: the Secret's content, not its name, is in the spec hash,
// so rotating it replaces the machine, and the new machine gets the new content.
func TestSecretRotationReplacesInstance(t *testing.T) {
	c := newCloudInitHarness(t)
	secret := func(content string) metacontroller.RelativeObjects {
		return metacontroller.RelativeObjects{"Secret.v1": {"crawl/ci": secretJSON(t, "crawl", "ci", labelled, map[string]string{"user-data": content})}}
	}
	spec := v1.ProxySpec{Mode: v1.ModeManaged, Provider: "mock", CloudInit: &v1.CloudInitSpec{SecretRef: &v1.SecretKeyRef{Name: "ci", Key: "user-data"}}}
	spec.Default()

	st := c.sync(secret("v1"))
	if want := lifecycle.SpecHash(&spec, "v1"); st.SpecHash != want || st.ProviderID == "" {
		t.Fatalf("first sync: specHash %q providerID %q, want hash %q and an instance", st.SpecHash, st.ProviderID, want)
	}
	first := st.ProviderID
	c.now = c.now.Add(5 * time.Second)
	st = c.sync(secret("v1"))
	// Running, but with no probe verdict yet the answer keeps the instance's Creating status
	// (lifecycle: one write from Provisioning to Ready): what matters is that it is kept.
	if reason(st) != lifecycle.ReasonCreating || st.ProviderID != first || len(c.mp.Instances()) != 1 {
		t.Fatalf("same content: reason %q providerID %q, want %s kept", reason(st), st.ProviderID, first)
	}

	st = c.sync(secret("v2"))
	if reason(st) != lifecycle.ReasonReplacing {
		t.Fatalf("rotated content: reason %q, want %s", reason(st), lifecycle.ReasonReplacing)
	}
	if got := len(c.mp.Instances()); got != 0 {
		t.Fatalf("rotated content: %d instances left, want the old one deleted", got)
	}
	st = c.sync(secret("v2"))
	if want := lifecycle.SpecHash(&spec, "v2"); st.SpecHash != want {
		t.Errorf("after rotation: specHash %q, want %q", st.SpecHash, want)
	}
	if n := len(c.rec.creates); n != 2 {
		t.Fatalf("creates %d, want 2", n)
	}
	if got := c.rec.creates[0].CloudInit + "|" + c.rec.creates[1].CloudInit; got != "v1|v2" {
		t.Errorf("cloud-init handed to the provider: %q, want v1|v2", got)
	}

	// Losing the Secret keeps the running machine and says why nothing new is made.
	c.now = c.now.Add(5 * time.Second)
	st = c.sync(nil)
	if reason(st) != lifecycle.ReasonCloudInitError || len(c.mp.Instances()) != 1 || len(c.rec.creates) != 2 {
		t.Errorf("secret gone: reason %q, %d instances, %d creates; want CloudInitError, the machine kept, no create",
			reason(st), len(c.mp.Instances()), len(c.rec.creates))
	}
}

// TestCloudInitErrorsThroughSync: each resolution failure becomes a CloudInitError condition
// naming the Secret, and nothing is created.
func TestCloudInitErrorsThroughSync(t *testing.T) {
	for _, tc := range []struct {
		name    string
		related func(t *testing.T) metacontroller.RelativeObjects
		wantMsg string
	}{
		{"missing", func(*testing.T) metacontroller.RelativeObjects { return nil }, "secret crawl/ci not found"},
		{"unlabelled", func(t *testing.T) metacontroller.RelativeObjects {
			return metacontroller.RelativeObjects{"Secret.v1": {"crawl/ci": secretJSON(t, "crawl", "ci", nil, map[string]string{"user-data": "x"})}}
		}, "secret crawl/ci is not labelled crawl.example.com/cloud-init=true"},
		{"key missing", func(t *testing.T) metacontroller.RelativeObjects {
			return metacontroller.RelativeObjects{"Secret.v1": {"crawl/ci": secretJSON(t, "crawl", "ci", labelled, map[string]string{"userdata": "x"})}}
		}, `secret crawl/ci has no key "user-data"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCloudInitHarness(t)
			st := c.sync(tc.related(t))
			var msg string
			for _, cond := range st.Conditions {
				if cond.Type == v1.ConditionProvisioned {
					msg = cond.Message
				}
			}
			if reason(st) != lifecycle.ReasonCloudInitError || !strings.Contains(msg, tc.wantMsg) {
				t.Errorf("condition %s %q, want %s containing %q", reason(st), msg, lifecycle.ReasonCloudInitError, tc.wantMsg)
			}
			if st.Phase != v1.PhasePending || len(c.rec.creates) != 0 {
				t.Errorf("phase %s with %d creates, want Pending and none", st.Phase, len(c.rec.creates))
			}
		})
	}
}
