package hooks_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
	"github.com/proxy-operator/proxy-operator/internal/fleet"
	"github.com/proxy-operator/proxy-operator/providers"
	"github.com/proxy-operator/proxy-operator/providers/credentials"
	"github.com/proxy-operator/proxy-operator/providers/mock"
	"github.com/proxy-operator/proxy-operator/server/hooks"
)

var now = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func fixtureBody(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "testdata", name, "request.json"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// withStoredCredentials gives a sync body's parent a stored credentials Secret child (its
// own, replacing any other): the state after the first sync of a Managed Proxy.
func withStoredCredentials(t *testing.T, body []byte) []byte {
	t.Helper()
	var req map[string]any
	if err := json.Unmarshal(body, &req); err != nil {
		t.Fatal(err)
	}
	meta := req["parent"].(map[string]any)["metadata"].(map[string]any)
	parent := providers.Parent{Namespace: meta["namespace"].(string), Name: meta["name"].(string), UID: meta["uid"].(string)}
	cred, err := credentials.ForManaged(parent, nil)
	if err != nil {
		t.Fatal(err)
	}
	var secret map[string]any
	_ = json.Unmarshal(cred.Child, &secret)
	secret["metadata"].(map[string]any)["uid"] = "secret-" + parent.UID
	children, _ := req["children"].(map[string]any)
	if children == nil {
		children = map[string]any{}
	}
	children[credentials.SecretTypeKey] = map[string]any{parent.Namespace + "/" + credentials.SecretName(parent.UID): secret}
	req["children"] = children
	out, _ := json.Marshal(req)
	return out
}

func post(t *testing.T, h http.Handler, path string, body []byte) *httptest.ResponseRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body)))
	return rec
}

func newHooks(t *testing.T, p providers.Provider) *hooks.Hooks {
	t.Helper()
	clock := func() time.Time { return now }
	return &hooks.Hooks{
		Providers: providers.NewSet(providers.Entry{Name: "mock", Type: "mock", Provider: p}),
		Fleet:     fleet.New(clock, 0),
		Now:       clock,
	}
}

func newMock(t *testing.T) *mock.Provider {
	t.Helper()
	mp, err := mock.New(mock.Config{}, mock.WithClock(func() time.Time { return now }))
	if err != nil {
		t.Fatal(err)
	}
	return mp
}

// blockingProvider holds every Get until release is closed.
type blockingProvider struct {
	providers.Provider
	entered chan struct{}
	release chan struct{}
}

func (b *blockingProvider) Get(ctx context.Context, id string) (*providers.Instance, error) {
	b.entered <- struct{}{}
	<-b.release
	return b.Provider.Get(ctx, id)
}

func TestLoadSheddingAnswers429(t *testing.T) {
	bp := &blockingProvider{Provider: newMock(t), entered: make(chan struct{}, 1), release: make(chan struct{})}
	h := newHooks(t, bp)
	h.MaxInFlight = 1
	router := h.Handler()
	body := fixtureBody(t, "sync/managed-ready-steady")
	done := make(chan int)
	go func() { done <- post(t, router, "/sync", body).Code }()
	<-bp.entered
	rec := post(t, router, "/sync", body)
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "1" {
		t.Errorf("second call while one is in flight: %d Retry-After %q, want 429 and 1", rec.Code, rec.Header().Get("Retry-After"))
	}
	close(bp.release)
	if code := <-done; code != http.StatusOK {
		t.Errorf("first call: %d, want 200", code)
	}
	if rec := post(t, router, "/sync", body); rec.Code != http.StatusOK {
		t.Errorf("after the first finished: %d, want 200", rec.Code)
	}
}

type recorder struct {
	mu sync.Mutex
	ex []hooks.Exchange
}

func (r *recorder) Record(e hooks.Exchange) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ex = append(r.ex, e)
}

func TestRecorderSeesEveryAnsweredCall(t *testing.T) {
	h := newHooks(t, newMock(t))
	rec := &recorder{}
	h.Recorder = rec
	router := h.Handler()
	post(t, router, "/sync", fixtureBody(t, "sync/managed-pending-create"))
	post(t, router, "/sync", []byte(`{"parent":`))
	post(t, router, "/customize", fixtureBody(t, "customize/secret-ref"))
	type seen struct {
		Hook          string
		Code          int
		Provider      string
		ProviderKnown bool
		Instance      bool
	}
	var got []seen
	for _, e := range rec.ex {
		got = append(got, seen{e.Hook, e.Code, e.Provider(), e.Input.ProviderKnown, e.Input.Instance != nil})
		if !e.Now.Equal(now) || len(e.Request) == 0 || len(e.Response) == 0 {
			t.Errorf("%s exchange: now %s, %d request bytes, %d response bytes", e.Hook, e.Now, len(e.Request), len(e.Response))
		}
	}
	want := []seen{{"sync", 200, "mock", true, false}, {"sync", 400, "", false, false}, {"customize", 200, "", false, false}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("recorded exchanges (-want +got):\n%s", d)
	}
}

// TestEchoSyncDuringWaitMakesNoCall: the sync Metacontroller sends right after writing a
// failure's status leaves the provider alone and answers the same status; a new generation
// does not wait.
func TestEchoSyncDuringWaitMakesNoCall(t *testing.T) {
	mp := newMock(t)
	if err := mp.Inject(mock.Fault{Op: "create", Kind: "transient", Count: 5}); err != nil {
		t.Fatal(err)
	}
	router := newHooks(t, mp).Handler()
	var req map[string]any
	if err := json.Unmarshal(fixtureBody(t, "sync/managed-pending-create"), &req); err != nil {
		t.Fatal(err)
	}
	send := func() map[string]any {
		t.Helper()
		b, _ := json.Marshal(req)
		rec := post(t, router, "/sync", b)
		var resp map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &resp); err != nil || rec.Code != 200 {
			t.Fatalf("HTTP %d %s", rec.Code, rec.Body.String())
		}
		return resp
	}
	// Each create attempt is a tag lookup (no instance is recorded) and a create.
	first := send()
	req["parent"].(map[string]any)["status"] = first["status"]
	echo := send()
	if d := cmp.Diff(first, echo); d != "" {
		t.Errorf("echo answer differs (-first +echo):\n%s", d)
	}
	if n := len(mp.Calls()); n != 2 {
		t.Errorf("%d provider calls %v, want 2 (list, create; the echo waits)", n, mp.Calls())
	}
	req["parent"].(map[string]any)["metadata"].(map[string]any)["generation"] = 2
	send()
	if n := len(mp.Calls()); n != 4 {
		t.Errorf("%d provider calls %v, want 4 (a new generation does not wait)", n, mp.Calls())
	}
}

func TestProbesAndMetrics(t *testing.T) {
	h := newHooks(t, newMock(t))
	reg := prometheus.NewRegistry()
	h.Registerer, h.Gatherer = reg, reg
	var ready error = fmt.Errorf("fleet view warming up")
	h.Ready = func() error { return ready }
	router := h.Handler()
	if again := h.Handler(); again != router {
		t.Error("a second Handler call built another router (and would register the metrics twice)")
	}
	get := func(path string) (int, string) {
		rec := httptest.NewRecorder()
		router.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		b, _ := io.ReadAll(rec.Body)
		return rec.Code, string(b)
	}
	if code, _ := get("/healthz"); code != 200 {
		t.Errorf("/healthz %d", code)
	}
	if code, body := get("/readyz"); code != 503 || !strings.Contains(body, "fleet view warming up") {
		t.Errorf("/readyz while not ready: %d %s", code, body)
	}
	ready = nil
	if code, _ := get("/readyz"); code != 200 {
		t.Errorf("/readyz when ready: %d", code)
	}
	post(t, router, "/sync", fixtureBody(t, "sync/external-pending"))
	_, body := get("/metrics")
	for _, want := range []string{`proxy_operator_hook_duration_seconds_count{hook="sync"} 1`, `proxy_operator_proxies{phase="Pending"} 1`} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if code, body := get("/sync"); code != http.StatusMethodNotAllowed || !strings.Contains(body, "method GET not allowed on /sync") {
		t.Errorf("GET /sync: %d %s", code, body)
	}
	if code, _ := get("/nope"); code != http.StatusNotFound {
		t.Errorf("/nope: %d", code)
	}
}

// TestParallelParents syncs many parents at once through one router; run with -race.
func TestParallelParents(t *testing.T) {
	mp := newMock(t)
	h := newHooks(t, mp)
	router := h.Handler()
	base := fixtureBody(t, "sync/managed-pending-create")
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			b := bytes.Replace(base, []byte(`"name": "edge-1"`), []byte(fmt.Sprintf(`"name": "edge-p%d"`, i)), 1)
			b = bytes.Replace(b, []byte(`000000000001"`), []byte(fmt.Sprintf(`%012d"`, 100+i)), 1)
			b = withStoredCredentials(t, b)
			if rec := post(t, router, "/sync", b); rec.Code != 200 {
				t.Errorf("parent %d: %d %s", i, rec.Code, rec.Body.String())
			}
		})
	}
	wg.Wait()
	if n := len(mp.Instances()); n != 20 {
		t.Errorf("%d instances, want 20", n)
	}
	if n := h.Fleet.Len(); n != 20 {
		t.Errorf("fleet view holds %d, want 20", n)
	}
	for _, p := range h.Fleet.List() {
		if p.Phase != v1.PhaseProvisioning {
			t.Errorf("%s: %s, want Provisioning", p.Key, p.Phase)
		}
	}
}
