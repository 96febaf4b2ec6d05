package hooks

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
	"github.com/proxy-operator/proxy-operator/internal/fleet"
	"github.com/proxy-operator/proxy-operator/internal/lifecycle"
	"github.com/proxy-operator/proxy-operator/providers"
	"github.com/proxy-operator/proxy-operator/providers/credentials"
	"github.com/proxy-operator/proxy-operator/providers/mock"
)

// credHarness plays Metacontroller for one Managed mock Proxy: status and children fed back.
type credHarness struct {
	t      *testing.T
	h      http.Handler
	hooks  *Hooks
	rec    *recording
	mp     *mock.Provider
	now    time.Time
	status json.RawMessage
	secret map[string]any // the stored credentials Secret, nil when there is none
	logs   *bytes.Buffer
}

func newCredHarness(t *testing.T) *credHarness {
	t.Helper()
	c := &credHarness{t: t, now: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC), logs: &bytes.Buffer{}}
	clock := func() time.Time { return c.now }
	mp, err := mock.New(mock.Config{ProvisioningDelay: mock.Duration(time.Second)}, mock.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	c.mp, c.rec = mp, &recording{Provider: mp}
	c.hooks = &Hooks{Providers: providers.NewSet(providers.Entry{Name: "mock", Type: "mock", Provider: c.rec}), Now: clock,
		Fleet: fleet.New(clock, 0), Log: slog.New(slog.NewTextHandler(c.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	c.h = c.hooks.Handler()
	return c
}

type credAnswer struct {
	Status   v1.ProxyStatus   `json:"status"`
	Children []map[string]any `json:"children"`
}

// sync posts one sync and applies the answer: the status, and the Secret created when none
// is stored (an existing one is never updated: OnDelete).
func (c *credHarness) sync() (credAnswer, map[string]any) {
	c.t.Helper()
	parent := map[string]any{
		"apiVersion": v1.APIVersion, "kind": v1.Kind,
		"metadata": map[string]any{"name": "edge", "namespace": "crawl", "uid": "uid-cred", "generation": 1},
		"spec":     map[string]any{"mode": "Managed", "provider": "mock"},
	}
	if c.status != nil {
		parent["status"] = c.status
	}
	children := map[string]any{}
	if c.secret != nil {
		children[credentials.SecretTypeKey] = map[string]any{"crawl/" + credentials.SecretName("uid-cred"): c.secret}
	}
	body, _ := json.Marshal(map[string]any{"parent": parent, "children": children})
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
	var a credAnswer
	if err := json.Unmarshal(rec.Body.Bytes(), &a); err != nil {
		c.t.Fatal(err)
	}
	var returned map[string]any
	for _, ch := range a.Children {
		if ch["kind"] == "Secret" {
			returned = ch
		}
	}
	if returned == nil {
		c.t.Fatalf("answer without the credentials Secret: %s", rec.Body)
	}
	if c.secret == nil {
		returned["metadata"].(map[string]any)["uid"] = "secret-" + c.now.Format("150405.000000000")
		c.secret = returned
	}
	return a, returned
}

func secretCreds(t *testing.T, s map[string]any) providers.Credentials {
	t.Helper()
	data := s["data"].(map[string]any)
	dec := func(k string) string {
		var b []byte
		q, _ := json.Marshal(data[k])
		if err := json.Unmarshal(q, &b); err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	return providers.Credentials{Username: dec(credentials.KeyUsername), Password: dec(credentials.KeyPassword)}
}

// TestCredentialsSecretBeforeMachine: the first sync returns the Secret and creates nothing; the
// machine is created, with the credential, once the Secret is stored; later syncs keep it
// unchanged; the fleet view (probes, leases) gets it; no log line carries the password. Deleting
// the Secret rotates the credential: the machine is kept until the new one is stored, then
// replaced (the mock, like a VM, holds its credential).
func TestCredentialsSecretBeforeMachine(t *testing.T) {
	c := newCredHarness(t)
	a, first := c.sync()
	if len(c.rec.creates) != 0 {
		t.Fatalf("created a machine before its credential was stored: %+v", c.rec.creates)
	}
	if got := reason(a.Status); got != lifecycle.ReasonAwaitingCredentials || a.Status.Phase != v1.PhasePending {
		t.Fatalf("first sync: phase %s reason %s", a.Status.Phase, got)
	}
	creds := secretCreds(t, first)

	a, again := c.sync()
	if len(c.rec.creates) != 1 {
		t.Fatalf("%d creates after the Secret was stored, want 1", len(c.rec.creates))
	}
	if got := c.rec.creates[0].Credentials; got == nil || *got != creds {
		t.Fatalf("create request credentials %v, want the stored %v", got, creds)
	}
	if got := c.rec.creates[0].CredentialsVersion; got != c.secret["metadata"].(map[string]any)["uid"] {
		t.Errorf("create request credentials version %q, want the Secret's UID", got)
	}
	if secretCreds(t, again) != creds {
		t.Fatal("the answer changed the stored credential")
	}
	c.now = c.now.Add(2 * time.Second)
	for range 2 {
		a, again = c.sync()
	}
	if a.Status.Phase != v1.PhaseProvisioning && a.Status.Phase != v1.PhaseReady && a.Status.Phase != v1.PhaseUnhealthy {
		t.Fatalf("phase %s after the machine runs", a.Status.Phase)
	}
	if len(c.rec.creates) != 1 || secretCreds(t, again) != creds {
		t.Fatalf("steady syncs: %d creates, credential kept %v", len(c.rec.creates), secretCreds(t, again) == creds)
	}
	rec, ok := c.hooks.Fleet.Get("crawl/edge")
	if !ok || rec.Credentials == nil || *rec.Credentials != creds {
		t.Fatalf("fleet record credentials %v, want the stored credential", rec.Credentials)
	}
	if strings.Contains(string(a.Status.Conditions[0].Message), creds.Password) {
		t.Fatal("status carries the password")
	}

	// Rotation: the Secret is deleted.
	instances := c.mp.Instances()
	c.secret = nil
	_, rotated := c.sync()
	newCreds := secretCreds(t, rotated)
	if newCreds.Password == creds.Password {
		t.Fatal("a deleted Secret came back with the same password")
	}
	if got := c.mp.Instances(); len(got) != 1 || got[0].ID != instances[0].ID {
		t.Fatalf("machine touched before the new credential was stored: %+v", got)
	}
	if rec, _ := c.hooks.Fleet.Get("crawl/edge"); rec.Credentials == nil || *rec.Credentials != creds {
		t.Fatal("while the new credential is not stored, probes must keep using the one the machine holds")
	}
	c.sync() // the new Secret is stored: the machine holding the old one is deleted
	if got := c.mp.Instances(); len(got) != 0 {
		t.Fatalf("machine with the rotated-away credential still there: %+v", got)
	}
	c.sync() // and a new one is created with the new credential
	if n := len(c.rec.creates); n != 2 || *c.rec.creates[1].Credentials != newCreds {
		t.Fatalf("creates %d, last with the new credential: %v", n, n == 2 && *c.rec.creates[1].Credentials == newCreds)
	}
	for _, pw := range []string{creds.Password, newCreds.Password} {
		if strings.Contains(c.logs.String(), pw) {
			t.Fatalf("a log line carries a password:\n%s", c.logs)
		}
	}
}

// TestExternalCredentials: customize asks for exactly the Secret an External proxy names, and
// sync reads it into the fleet view (probes and leases use it).
func TestExternalCredentials(t *testing.T) {
	c := newCredHarness(t)
	parent := map[string]any{
		"apiVersion": v1.APIVersion, "kind": v1.Kind,
		"metadata": map[string]any{"name": "ext", "namespace": "crawl", "uid": "uid-ext", "generation": 1},
		"spec": map[string]any{"mode": "External", "endpoint": map[string]any{"host": "198.51.100.7", "port": 3128},
			"credentialsSecretRef": map[string]any{"name": "ext-creds"}},
	}
	body, _ := json.Marshal(map[string]any{"parent": parent})
	rec := httptest.NewRecorder()
	c.h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/customize", bytes.NewReader(body)))
	want := `{"relatedResources":[{"apiVersion":"v1","resource":"secrets","namespace":"crawl","names":["ext-creds"]}]}`
	if got := strings.TrimSpace(rec.Body.String()); got != want {
		t.Fatalf("customize: %s\nwant %s", got, want)
	}

	related := map[string]any{credentials.SecretTypeKey: map[string]any{"crawl/ext-creds": map[string]any{
		"apiVersion": "v1", "kind": "Secret", "metadata": map[string]any{"name": "ext-creds", "namespace": "crawl"},
		"data": map[string]any{"username": "YWxpY2U=", "password": "czNjcmV0"}}}}
	body, _ = json.Marshal(map[string]any{"parent": parent, "related": related})
	rec = httptest.NewRecorder()
	c.h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/sync", bytes.NewReader(body)))
	if rec.Code != http.StatusOK {
		t.Fatalf("sync: %d %s", rec.Code, rec.Body)
	}
	if strings.Contains(rec.Body.String(), "Secret") {
		t.Errorf("an External proxy's answer returned a Secret child: %s", rec.Body)
	}
	got, _ := c.hooks.Fleet.Get("crawl/ext")
	if got.Credentials == nil || *got.Credentials != (providers.Credentials{Username: "alice", Password: "s3cret"}) {
		t.Fatalf("fleet credentials %v, want alice's", got.Credentials)
	}
	// Without the Secret the proxy is tracked without a credential (its probes then fail as
	// proxy_auth), and the log says why without the content.
	body, _ = json.Marshal(map[string]any{"parent": parent})
	rec = httptest.NewRecorder()
	c.h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/sync", bytes.NewReader(body)))
	if got, _ := c.hooks.Fleet.Get("crawl/ext"); got.Credentials != nil {
		t.Errorf("credentials kept after the Secret went: %v", got.Credentials)
	}
	if !strings.Contains(c.logs.String(), "credentials secret not found") || strings.Contains(c.logs.String(), "s3cret") {
		t.Errorf("logs:\n%s", c.logs)
	}
}
