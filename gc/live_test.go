package gc_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/proxy-operator/proxy-operator/fleet"
	"github.com/proxy-operator/proxy-operator/gc"
	"github.com/proxy-operator/proxy-operator/internal/clocktest"
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
	const page1 = `{"kind":"ProxyList","metadata":{"continue":"c1"},"items":[{"metadata":{"name":"a","uid":"u1"}}]}`
	for _, tc := range []struct {
		name    string
		serve   func(w http.ResponseWriter, r *http.Request)
		wantErr string
	}{
		{"server error", func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, `{"kind":"Status"}`, http.StatusInternalServerError)
		}, "status 500"},
		{"forbidden", func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, `{"kind":"Status","reason":"Forbidden"}`, http.StatusForbidden)
		}, "status 403"},
		{"expired continue token on page 2", func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Query().Get("continue") == "" {
				_, _ = w.Write([]byte(page1))
				return
			}
			http.Error(w, `{"kind":"Status","reason":"Expired"}`, http.StatusGone)
		}, "page 2: status 410"},
		{"not a ProxyList", func(w http.ResponseWriter, r *http.Request) {
			_, _ = w.Write([]byte(`{"kind":"Status","items":[]}`))
		}, `kind "Status"`},
		{"item without uid", func(w http.ResponseWriter, r *http.Request) {
			_, _ = w.Write([]byte(`{"kind":"ProxyList","items":[{"metadata":{"namespace":"crawl","name":"a"}}]}`))
		}, "crawl/a has no uid"},
		{"truncated body", func(w http.ResponseWriter, r *http.Request) {
			_, _ = w.Write([]byte(`{"kind":"ProxyList","items":[`))
		}, "decode"},
		{"oversized page", func(w http.ResponseWriter, r *http.Request) {
			_, _ = w.Write([]byte(`{"kind":"ProxyList","items":[]}` + strings.Repeat(" ", 2048)))
		}, "larger than 1024 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewTLSServer(http.HandlerFunc(tc.serve))
			defer srv.Close()
			tok := filepath.Join(t.TempDir(), "token")
			if err := os.WriteFile(tok, []byte("t"), 0o600); err != nil {
				t.Fatal(err)
			}
			src := &gc.APISource{BaseURL: srv.URL, TokenFile: tok, Client: srv.Client(), MaxPageBytes: 1024}
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

func TestAPISourceNeedsToken(t *testing.T) {
	a := &apiServer{}
	a.set(false, "u1")
	src := newAPISource(t, a)
	src.TokenFile = filepath.Join(t.TempDir(), "missing")
	if _, err := src.LiveUIDs(context.Background()); err == nil {
		t.Error("LiveUIDs without a token file succeeded")
	}
	if err := os.WriteFile(src.TokenFile, []byte("wrong"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := src.LiveUIDs(context.Background()); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("LiveUIDs with a wrong token: %v, want status 401", err)
	}
	// A rotated token is picked up without a restart.
	if err := os.WriteFile(src.TokenFile, []byte("sa-token"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := src.LiveUIDs(context.Background()); err != nil {
		t.Errorf("LiveUIDs after the token rotated: %v", err)
	}
}

func TestInClusterOutsideACluster(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	if _, err := gc.InCluster(); !errors.Is(err, gc.ErrNotInCluster) {
		t.Errorf("InCluster outside a cluster: %v, want ErrNotInCluster", err)
	}
	srcs, err := gc.DefaultSources(fleet.New(time.Now, 0))
	if err != nil || len(srcs) != 1 || srcs[0].Name() != "fleet" {
		t.Errorf("DefaultSources outside a cluster = %v, %v; want the fleet view", srcs, err)
	}
}

// TestInClusterWithoutServiceAccount: the environment says cluster but the CA cannot be read
// (here: this test machine has none): an error, not a quiet fallback to the fleet view.
func TestInClusterWithoutServiceAccount(t *testing.T) {
	if _, err := os.Stat(gc.ServiceAccountCAFile); err == nil {
		t.Skip("this machine has a service account CA")
	}
	t.Setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
	t.Setenv("KUBERNETES_SERVICE_PORT", "6443")
	_, err := gc.InCluster()
	if err == nil || errors.Is(err, gc.ErrNotInCluster) {
		t.Errorf("InCluster without a CA: %v, want an error other than ErrNotInCluster", err)
	}
	if srcs, err := gc.DefaultSources(nil); err == nil {
		t.Errorf("DefaultSources without a CA = %v, want an error", srcs)
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
