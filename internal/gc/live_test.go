package gc_test

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/proxy-operator/proxy-operator/internal/clocktest"
	"github.com/proxy-operator/proxy-operator/internal/fleet"
	"github.com/proxy-operator/proxy-operator/internal/gc"
)

func TestAPISourcePages(t *testing.T) {
	a := &apiServer{}
	a.set(false, "u1", "u2", "u3", "u4", "u5")
	src := newAPISource(t, a)
	got, err := src.LiveUIDs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"u1": true, "u2": true, "u3": true, "u4": true, "u5": true}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("live UIDs over three pages (-want +got):\n%s", diff)
	}
}

// TestAPISourceRefuses: every answer short of a whole, well-formed list is an error.
func TestAPISourceRefuses(t *testing.T) {
	const page1 = `{"kind":"ProxyList","apiVersion":"crawl.example.com/v1alpha1","metadata":{"continue":"c1"},"items":[{"metadata":{"name":"a","uid":"u1"}}]}`
	status := func(code int, reason string) string {
		return `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"` + reason + `","code":` + strconv.Itoa(code) + `}`
	}
	for _, tc := range []struct {
		name    string
		serve   func(w http.ResponseWriter, r *http.Request)
		wantErr string
	}{
		{"server error", func(w http.ResponseWriter, r *http.Request) {
			writeJSON(w, http.StatusInternalServerError, status(500, "InternalError"))
		}, "page 1"},
		{"forbidden", func(w http.ResponseWriter, r *http.Request) {
			writeJSON(w, http.StatusForbidden, status(403, "Forbidden"))
		}, "page 1"},
		{"expired continue token on page 2", func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Query().Get("continue") == "" {
				writeJSON(w, http.StatusOK, page1)
				return
			}
			writeJSON(w, http.StatusGone, status(410, "Expired"))
		}, "page 2"},
		{"not a ProxyList", func(w http.ResponseWriter, r *http.Request) {
			writeJSON(w, http.StatusOK, `{"kind":"PodList","apiVersion":"v1","items":[]}`)
		}, `kind "PodList"`},
		{"item without uid", func(w http.ResponseWriter, r *http.Request) {
			writeJSON(w, http.StatusOK, `{"kind":"ProxyList","apiVersion":"crawl.example.com/v1alpha1","items":[{"metadata":{"namespace":"crawl","name":"a"}}]}`)
		}, "crawl/a has no uid"},
		{"truncated body", func(w http.ResponseWriter, r *http.Request) {
			writeJSON(w, http.StatusOK, `{"kind":"ProxyList","items":[`)
		}, "page 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := &gc.APISource{Client: fakeAPIClient(t, http.HandlerFunc(tc.serve), "t")}
			got, err := src.LiveUIDs(context.Background())
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("LiveUIDs = %v, %v; want an error containing %q", got, err, tc.wantErr)
			}
			if got != nil {
				t.Errorf("a failed list returned a partial set %v", got)
			}
		})
	}
}

func TestAPISourceWrongToken(t *testing.T) {
	a := &apiServer{}
	a.set(false, "u1")
	src := &gc.APISource{Client: fakeAPIClient(t, a, "wrong")}
	if _, err := src.LiveUIDs(context.Background()); !apierrors.IsUnauthorized(err) {
		t.Errorf("LiveUIDs with a wrong token: %v, want Unauthorized", err)
	}
}

func TestSources(t *testing.T) {
	view := fleet.New(time.Now, 0)
	if s := gc.Sources(view, nil); len(s) != 1 || s[0].Name() != "fleet" {
		t.Errorf("Sources without a client = %v, want the fleet view", s)
	}
	a := &apiServer{}
	if s := gc.Sources(view, fakeAPIClient(t, a, "t")); len(s) != 1 || s[0].Name() != "api" {
		t.Errorf("Sources with a client = %v, want the API server", s)
	}
}

func TestFleetSource(t *testing.T) {
	clk := clocktest.New(t0)
	view := fleet.New(clk.Now, warmup)
	src := gc.FleetSource{View: view}
	if _, err := src.LiveUIDs(context.Background()); err == nil || !strings.Contains(err.Error(), "not complete") {
		t.Errorf("during warmup: %v, want not complete", err)
	}
	clk.Set(t0.Add(warmup))
	if _, err := src.LiveUIDs(context.Background()); err == nil || !strings.Contains(err.Error(), "empty") {
		t.Errorf("empty after warmup: %v, want empty", err)
	}
	view.Upsert(fleet.Proxy{Key: "crawl/a", UID: uidA})
	got, err := src.LiveUIDs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]bool{uidA: true}, got); diff != "" {
		t.Errorf("live UIDs (-want +got):\n%s", diff)
	}
}

func writeJSON(w http.ResponseWriter, code int, body string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write([]byte(body))
}
