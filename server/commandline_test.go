package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/server"
	"github.com/proxy-operator/proxy-operator/server/replay"
)

// boot parses args as the command line would, builds the operator through server.New and
// runs it until the test ends. It returns the bound hook and discovery addresses.
func boot(t *testing.T, args ...string) (hook, disc string, stop func()) {
	t.Helper()
	c, err := server.OperatorFlags(args, nil, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	c.Log = slog.New(slog.DiscardHandler)
	op, err := server.New(c)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- op.Run(ctx) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}
	t.Cleanup(stop)
	return op.HookAddr(), op.DiscoveryAddr(), stop
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
	addr, _, stop := boot(t, "-hook-addr", "127.0.0.1:0", "-hooks-insecure", "-discovery-addr", "127.0.0.1:0", "-discovery-insecure", "-providers-config", pcfg, "-capture-dir", capture,
		"-allow-loopback-proxies") // the External fixture lives on 127.0.0.1; replay applies no egress policy
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
		b, err := os.ReadFile(filepath.Join("..", "testdata", name, replay.RequestFile))
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

	stop()
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
	if err := replay.Command([]string{capture}, &out); err != nil {
		t.Errorf("replay %s: %v\n%s", capture, err, out.String())
	}
}
