package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/replay"
)

func TestReplayCommand(t *testing.T) {
	var out bytes.Buffer
	if err := runReplay([]string{filepath.Join("testdata", "sync", "create-quota")}, &out); err != nil {
		t.Fatalf("replay of a committed fixture: %v\n%s", err, out.String())
	}
	for _, want := range []string{"HTTP 200", `"reason": "QuotaExceeded"`, "create proxy-30027a145f80 -> mock create: quota exceeded", "golden: match"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}

	// A fixture whose golden is wrong makes the command fail and print the diff.
	dir := t.TempDir()
	for _, f := range []string{replay.RequestFile, replay.StateFile, replay.CallsFile} {
		b, err := os.ReadFile(filepath.Join("testdata", "sync", "create-quota", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, replay.ResponseFile), []byte(`{"code":200,"body":{"status":{"phase":"Ready"},"children":[]}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	// The hook comes from the folder's parent name unless state.json says it.
	st := filepath.Join(dir, replay.StateFile)
	b, _ := os.ReadFile(st)
	if err := os.WriteFile(st, bytes.Replace(b, []byte(`{`), []byte(`{"hook":"sync",`), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	err := runReplay([]string{dir}, &out)
	if err == nil || !strings.Contains(out.String(), "golden: differs") || !strings.Contains(out.String(), `-`) {
		t.Errorf("wrong golden: err %v, output:\n%s", err, out.String())
	}

	if err := runReplay(nil, io.Discard); err == nil {
		t.Error("replay without a directory: no error")
	}
}

// TestCaptureThenReplay boots the operator with -capture-dir, sends it real hook calls, and
// replays what it captured: every answer must come out the same.
func TestCaptureThenReplay(t *testing.T) {
	dir := t.TempDir()
	capture := filepath.Join(dir, "capture")
	pcfg := filepath.Join(dir, "providers.yaml")
	// A quota fault on the first create, so a provider error is captured too.
	yaml := "providers:\n- name: mock\n  type: mock\n  mock:\n    provisioningDelay: 1h\n    faults:\n    - {op: create, kind: quota, count: 1}\n"
	if err := os.WriteFile(pcfg, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := parseFlags([]string{"-hook-addr", "127.0.0.1:0", "-discovery-addr", "127.0.0.1:0", "-providers-config", pcfg, "-capture-dir", capture}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan listening, 1)
	done := make(chan error, 1)
	go func() { done <- run(ctx, cfg, slog.New(slog.DiscardHandler), ready) }()
	var addr string
	select {
	case l := <-ready:
		addr = l.Hook
	case err := <-done:
		t.Fatalf("run: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("server did not start")
	}
	client := &http.Client{Timeout: 10 * time.Second}
	post := func(hook string, body []byte) map[string]any {
		t.Helper()
		res, err := client.Post("http://"+addr+"/"+hook, "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var v map[string]any
		_ = json.NewDecoder(res.Body).Decode(&v)
		return v
	}
	fixture := func(name string) map[string]any {
		t.Helper()
		b, err := os.ReadFile(filepath.Join("testdata", name, replay.RequestFile))
		if err != nil {
			t.Fatal(err)
		}
		var v map[string]any
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	marshal := func(v any) []byte { b, _ := json.Marshal(v); return b }

	// Create fails on quota, then (new generation: the server does not wait) succeeds, then
	// the instance is observed Provisioning; an External proxy and a bad request complete it.
	req := fixture("sync/managed-pending-create")
	resp := post("sync", marshal(req))
	parent := req["parent"].(map[string]any)
	parent["status"] = resp["status"]
	parent["metadata"].(map[string]any)["generation"] = 2
	resp = post("sync", marshal(req))
	parent["status"] = resp["status"]
	post("sync", marshal(req))
	post("sync", marshal(fixture("sync/external-pending")))
	post("sync", []byte(`{"parent":`))
	// Finalize with the status lost: the instance is found by its tags and deleted.
	delete(parent, "status")
	parent["metadata"].(map[string]any)["deletionTimestamp"] = "2026-11-30T12:00:00Z"
	req["finalizing"] = true
	post("finalize", marshal(req))

	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
	cases, err := replay.LoadAll(capture)
	if err != nil {
		t.Fatal(err)
	}
	if len(cases) != 6 {
		t.Fatalf("captured %d fixtures, want 6", len(cases))
	}
	var faults, instances int
	for _, c := range cases {
		faults += len(c.State.Faults)
		instances += len(c.State.Instances)
		got, err := replay.Run(c, nil)
		if err != nil {
			t.Fatal(err)
		}
		if d := replay.Diff(c, got); d != "" {
			t.Errorf("%s: replay of the capture differs:\n%s", c.Dir, d)
		}
	}
	// The quota error became a fault; the Provisioning and the listed instances were seeded.
	if faults != 1 || instances != 2 {
		t.Errorf("captured %d faults and %d instances, want 1 and 2", faults, instances)
	}
	var out bytes.Buffer
	if err := runReplay([]string{capture}, &out); err != nil {
		t.Errorf("replay %s: %v\n%s", capture, err, out.String())
	}
}
