package replay_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
	"github.com/proxy-operator/proxy-operator/internal/lifecycle"
	"github.com/proxy-operator/proxy-operator/internal/verdict"
	"github.com/proxy-operator/proxy-operator/lease"
	"github.com/proxy-operator/proxy-operator/providers"
	"github.com/proxy-operator/proxy-operator/server/hooks"
	"github.com/proxy-operator/proxy-operator/server/hooks/poolhook"
	"github.com/proxy-operator/proxy-operator/server/replay"
)

func writeCase(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestLoadErrors(t *testing.T) {
	tests := []struct {
		name  string
		hook  string
		files map[string]string
		want  string
	}{
		{"no request", "sync", map[string]string{"state.json": `{"now":"2026-11-30T12:00:00Z"}`}, "request.json: no such file"},
		{"no now", "sync", map[string]string{"request.json": `{}`, "state.json": `{}`}, "state.json: now is required"},
		{"unknown state field", "sync", map[string]string{"request.json": `{}`, "state.json": `{"now":"2026-11-30T12:00:00Z","clock":1}`}, `state.json: json: unknown field "clock"`},
		{"unknown hook", "kubernetes", map[string]string{"request.json": `{}`, "state.json": `{"now":"2026-11-30T12:00:00Z"}`}, `hook "kubernetes": want sync, finalize, customize, pools-sync or pools-finalize`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), tc.hook, "case")
			writeCase(t, dir, tc.files)
			_, err := replay.Load(dir)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestDiffNamesWhatDiffers(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "sync", "case")
	writeCase(t, dir, map[string]string{
		"request.json":  `{"parent":`,
		"state.json":    `{"now":"2026-11-30T12:00:00Z"}`,
		"response.json": `{"code":400,"body":{"error":"something else"}}`,
		"calls.json":    `[]`,
	})
	c, err := replay.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	got, err := replay.Run(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	d := replay.Diff(c, got)
	for _, want := range []string{"body mismatch (-want +got)", `-`, `"something else"`, `malformed JSON`} {
		if !strings.Contains(d, want) {
			t.Errorf("diff lacks %q:\n%s", want, d)
		}
	}
	if err := replay.WriteGolden(dir, got); err != nil {
		t.Fatal(err)
	}
	c, _ = replay.Load(dir)
	if d := replay.Diff(c, got); d != "" {
		t.Errorf("after WriteGolden: %s", d)
	}
}

// TestRecorderWritesAReplayableCase: an exchange becomes a folder whose replay gives the same
// answer, with the observed instance seeded and the failed call armed as a fault.
func TestRecorderWritesAReplayableCase(t *testing.T) {
	root := t.TempDir()
	rec, err := replay.NewRecorder(root, nil)
	if err != nil {
		t.Fatal(err)
	}
	src, err := replay.Load(filepath.Join("..", "..", "testdata", "sync", "get-transient"))
	if err != nil {
		t.Fatal(err)
	}
	inst := src.State.Instances[0]
	inst.IP = "127.9.9.9"
	h := src.State.Health["crawl/edge-1"]
	rec.Record(hooks.Exchange{
		Hook: "sync", Now: src.State.Now, Request: src.Request, Code: src.Want.Code, Response: src.Want.Body,
		ProviderType: "mock",
		Input: lifecycle.Input{
			Proxy: &v1.Proxy{Spec: v1.ProxySpec{Provider: "mock"}}, ProviderKnown: true, Instance: &inst,
			Health:     verdict.Health{State: h.State, LatencyMillis: h.LatencyMillis, Since: h.Since},
			ObserveErr: providers.Wrap(providers.ErrTransient, "mock get", nil),
		},
	})
	cases, err := replay.LoadAll(root)
	if err != nil || len(cases) != 1 {
		t.Fatalf("captured %d cases, %v; want 1", len(cases), err)
	}
	c := cases[0]
	if want := "20261130T120000Z-000001-crawl-edge-1"; filepath.Base(c.Dir) != want {
		t.Errorf("folder %s, want %s", filepath.Base(c.Dir), want)
	}
	st, _ := json.Marshal(c.State.Faults)
	if string(st) != `[{"op":"get","kind":"transient","count":1}]` {
		t.Errorf("faults %s, want one transient get", st)
	}
	got, err := replay.Run(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	if d := replay.Diff(c, got); d != "" {
		t.Errorf("replay of the capture differs:\n%s", d)
	}
}

// TestRecorderCapturesPodTraffic: a call for a Pod-backed Proxy is captured with its provider
// type, so it replays through a kubernetes provider reading the same request children.
func TestRecorderCapturesPodTraffic(t *testing.T) {
	root := t.TempDir()
	rec, err := replay.NewRecorder(root, nil)
	if err != nil {
		t.Fatal(err)
	}
	src, err := replay.Load(filepath.Join("..", "..", "testdata", "sync", "pod-running"))
	if err != nil {
		t.Fatal(err)
	}
	h := src.State.Health["crawl/edge-pod"]
	rec.Record(hooks.Exchange{
		Hook: "sync", Now: src.State.Now, Request: src.Request, Code: src.Want.Code, Response: src.Want.Body,
		ProviderType: "kubernetes",
		Input: lifecycle.Input{
			Proxy: &v1.Proxy{Spec: v1.ProxySpec{Provider: src.State.Provider}}, ProviderKnown: true,
			Health: verdict.Health{State: h.State, LatencyMillis: h.LatencyMillis, Since: h.Since},
		},
	})
	cases, err := replay.LoadAll(root)
	if err != nil || len(cases) != 1 {
		t.Fatalf("captured %d cases, %v; want 1", len(cases), err)
	}
	c := cases[0]
	if c.State.ProviderType != "kubernetes" || len(c.State.Instances) != 0 {
		t.Errorf("captured state: providerType %q with %d instances, want kubernetes with none", c.State.ProviderType, len(c.State.Instances))
	}
	got, err := replay.Run(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	if d := replay.Diff(c, got); d != "" {
		t.Errorf("replay of the captured Pod call differs:\n%s", d)
	}
}

// TestRecorderCapturesPoolTraffic: a pool hook call answered by the real router is captured
// with the lease load it met, and the capture replays to the same answer.
func TestRecorderCapturesPoolTraffic(t *testing.T) {
	root := t.TempDir()
	rec, err := replay.NewRecorder(root, nil)
	if err != nil {
		t.Fatal(err)
	}
	src, err := replay.Load(filepath.Join("..", "..", "testdata", "pools-sync", "autoscale-409-counts-as-demand"))
	if err != nil {
		t.Fatal(err)
	}
	now := src.State.Now
	h := &hooks.Hooks{Recorder: rec, Now: func() time.Time { return now },
		Pools: &poolhook.Hooks{Load: srcLoad{src.State}, Now: func() time.Time { return now }}}
	req := httptest.NewRequest(http.MethodPost, "/pools/sync", bytes.NewReader(src.Request))
	w := httptest.NewRecorder()
	h.Handler().ServeHTTP(w, req)
	if w.Code != http.StatusOK {
		t.Fatalf("pool sync: %d %s", w.Code, w.Body.String())
	}
	cases, err := replay.LoadAll(root)
	if err != nil || len(cases) != 1 {
		t.Fatalf("captured %d cases, %v; want 1", len(cases), err)
	}
	c := cases[0]
	if c.Hook != hooks.PoolSyncHook {
		t.Errorf("captured hook %q, want %s", c.Hook, hooks.PoolSyncHook)
	}
	want := replay.State{Now: src.State.Now, Leases: src.State.Leases, Denied: src.State.Denied}
	if d := cmp.Diff(want, c.State); d != "" {
		t.Errorf("captured state (-want +got):\n%s", d)
	}
	got, err := replay.Run(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	if d := replay.Diff(c, got); d != "" {
		t.Errorf("replay of the capture differs:\n%s", d)
	}
}

type srcLoad struct{ st replay.State }

func (l srcLoad) PoolLoad(_ context.Context, q lease.PoolQuery) (lease.PoolView, error) {
	return lease.PoolView{Active: l.st.Leases, Cooling: l.st.Cooling, Denied: l.st.Denied[q.Pool]}, nil
}

// TestLoadRefusesNonRegularAndHugeFiles: a fixture file is read only when it is a regular file
// of at most replay.MaxFileSize bytes; a FIFO (which would block) or a device such as /dev/zero
// (which never ends) is refused by name.
func TestLoadRefusesNonRegularAndHugeFiles(t *testing.T) {
	state := `{"now":"2026-11-30T12:00:00Z"}`
	cases := []struct {
		name, file string
		make       func(t *testing.T, path string)
		want       string
	}{
		{"fifo request", "request.json", func(t *testing.T, p string) {
			if err := syscall.Mkfifo(p, 0o600); err != nil {
				t.Skipf("mkfifo: %v", err)
			}
		}, "request.json: not a regular file"},
		{"dev zero state", "state.json", func(t *testing.T, p string) {
			if err := os.Symlink("/dev/zero", p); err != nil {
				t.Fatal(err)
			}
		}, "state.json: not a regular file"},
		{"huge request", "request.json", func(t *testing.T, p string) {
			f, err := os.Create(p)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if err := f.Truncate(replay.MaxFileSize + 1); err != nil {
				t.Fatal(err)
			}
		}, "request.json: larger than"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "sync", "case")
			files := map[string]string{"request.json": `{}`, "state.json": state}
			delete(files, tc.file)
			writeCase(t, dir, files)
			tc.make(t, filepath.Join(dir, tc.file))
			_, err := replay.Load(dir)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want it to contain %q", err, tc.want)
			}
		})
	}
}
