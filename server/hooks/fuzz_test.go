package hooks_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/internal/fleet"
	"github.com/proxy-operator/proxy-operator/metacontroller"
	"github.com/proxy-operator/proxy-operator/providers"
	"github.com/proxy-operator/proxy-operator/providers/kubernetes"
	"github.com/proxy-operator/proxy-operator/providers/mock"
	"github.com/proxy-operator/proxy-operator/server/hooks"
)

// fuzzHooks is a hook router over a mock provider and a fixed clock.
func fuzzHooks(t testing.TB) http.Handler {
	t.Helper()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	mp, err := mock.New(mock.Config{}, mock.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	pods, err := kubernetes.New(kubernetes.Config{})
	if err != nil {
		t.Fatal(err)
	}
	h := &hooks.Hooks{
		Providers: providers.NewSet(providers.Entry{Name: "mock", Type: "mock", Provider: mp},
			providers.Entry{Name: "pods", Type: "kubernetes", Provider: pods}),
		Fleet: fleet.New(clock, time.Minute),
		Now:   clock,
	}
	return h.Handler()
}

// seedBodies returns the request bodies of every fixture of a hook, plus a few hand-made ones.
func seedBodies(t testing.TB, hook string) [][]byte {
	t.Helper()
	seeds := [][]byte{
		[]byte(`{}`),
		[]byte(`{"parent":null}`),
		[]byte(`{"parent":{"apiVersion":"crawl.example.com/v1alpha1","kind":"Proxy","metadata":{"name":"p","namespace":"n","uid":"u"},"spec":{"mode":"Managed","provider":"mock"}}}`),
		[]byte(`{"parent":{"apiVersion":"crawl.example.com/v1alpha1","kind":"Proxy","metadata":{"name":"p","namespace":"n","uid":"u"},"spec":{"mode":"External","endpoint":{"host":"127.0.0.1","port":3128}}},"finalizing":true}`),
		[]byte(`{"parent":{"metadata":{"name":"p","namespace":"n","uid":"u"},"spec":{"mode":"Managed","provider":"mock","cloudInit":{"secretRef":{"name":"s","key":"k"}}}},"related":{"Secret.v1":{"n/s":{"metadata":{"labels":{"crawl.example.com/cloud-init":"true"}},"data":{"k":"aGk="}}}}}`),
	}
	files, _ := filepath.Glob(filepath.Join("..", "..", "testdata", hook, "*", "request.json"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err == nil {
			seeds = append(seeds, b)
		}
	}
	return seeds
}

func fuzzHook(f *testing.F, hook string) {
	for _, s := range seedBodies(f, hook) {
		f.Add(s)
	}
	h := fuzzHooks(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/"+hook, bytes.NewReader(body)))
		if rec.Code >= 500 {
			t.Fatalf("POST /%s answered %d for body %q: %s", hook, rec.Code, body, rec.Body)
		}
		if rec.Code != http.StatusOK {
			var e struct{ Error string }
			if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Error == "" {
				t.Fatalf("POST /%s answered %d without a JSON error: %s", hook, rec.Code, rec.Body)
			}
			return
		}
		// Metacontroller decodes v2 answers strictly: an unknown field would fail the sync.
		dec := json.NewDecoder(bytes.NewReader(rec.Body.Bytes()))
		dec.DisallowUnknownFields()
		var err error
		if hook == "customize" {
			err = dec.Decode(&metacontroller.CustomizeResponse{})
		} else {
			var resp metacontroller.SyncResponse
			err = dec.Decode(&resp)
			if err == nil && resp.Status == nil {
				t.Fatalf("POST /%s answered 200 without a status: %s", hook, rec.Body)
			}
		}
		if err != nil {
			t.Fatalf("POST /%s answer does not decode strictly: %v: %s", hook, err, rec.Body)
		}
	})
}

func FuzzSync(f *testing.F)      { fuzzHook(f, "sync") }
func FuzzFinalize(f *testing.F)  { fuzzHook(f, "finalize") }
func FuzzCustomize(f *testing.F) { fuzzHook(f, "customize") }
