package server_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestMetricsMoveWithAScenario boots the whole process, drives a scripted scenario through its
// hooks and discovery API, and checks that every metric of the brief moved as it should.
func TestMetricsMoveWithAScenario(t *testing.T) {
	dir := t.TempDir()
	pcfg := filepath.Join(dir, "providers.yaml")
	if err := os.WriteFile(pcfg, []byte("providers:\n  - name: mock\n    type: mock\n    mock:\n      provisioningDelay: 100ms\n      serveProxies: true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var addr struct{ Hook, Discovery string }
	addr.Hook, addr.Discovery, _ = boot(t, "-hook-addr", "127.0.0.1:0", "-hooks-insecure", "-discovery-addr", "127.0.0.1:0", "-discovery-insecure", "-providers-config", pcfg,
		"-fleet-warmup", "0s", "-gc-interval", "100ms", "-allow-loopback-proxies") // b is an External proxy on loopback
	client := &http.Client{Timeout: 10 * time.Second}
	call := func(method, url string, body any) (int, map[string]any) {
		t.Helper()
		var r io.Reader
		if body != nil {
			b, _ := json.Marshal(body)
			r = bytes.NewReader(b)
		}
		req, _ := http.NewRequest(method, url, r)
		res, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var out map[string]any
		_ = json.NewDecoder(res.Body).Decode(&out)
		return res.StatusCode, out
	}

	// A closed loopback port: an External proxy there fails every probe.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadPort := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	probe := "http://" + addr.Hook + "/healthz"
	parents := map[string]map[string]any{
		"a": proxy("a", "uid-metrics-a", map[string]any{"mode": "Managed", "provider": "mock", "attributes": map[string]any{"geo": "local"},
			"healthCheck": map[string]any{"probeURL": probe, "intervalSeconds": 1, "timeoutSeconds": 1}}),
		"b": proxy("b", "uid-metrics-b", map[string]any{"mode": "External", "endpoint": map[string]any{"host": "127.0.0.1", "port": deadPort},
			"attributes": map[string]any{"geo": "dead"}, "healthCheck": map[string]any{"probeURL": probe, "intervalSeconds": 1, "timeoutSeconds": 1, "failureThreshold": 1}}),
	}
	phases := map[string]string{}
	children := map[string]map[string]any{}
	// Play Metacontroller: sync both parents, feeding status and children (the credentials
	// Secret) back, until a is Ready and b Unhealthy.
	deadline := time.Now().Add(30 * time.Second)
	for phases["a"] != "Ready" || phases["b"] != "Unhealthy" {
		if time.Now().After(deadline) {
			t.Fatalf("fleet did not converge: %v", phases)
		}
		for name, p := range parents {
			code, resp := call(http.MethodPost, "http://"+addr.Hook+"/sync", map[string]any{"parent": p, "children": children[name]})
			if code != http.StatusOK {
				t.Fatalf("sync %s: %d %v", name, code, resp)
			}
			observed := map[string]any{}
			for _, c := range resp["children"].([]any) {
				obj := c.(map[string]any)
				meta := obj["metadata"].(map[string]any)
				meta["uid"] = "child-" + meta["name"].(string)
				typ := obj["kind"].(string) + "." + obj["apiVersion"].(string)
				if observed[typ] == nil {
					observed[typ] = map[string]any{}
				}
				observed[typ].(map[string]any)[meta["namespace"].(string)+"/"+meta["name"].(string)] = obj
			}
			children[name] = observed
			st := resp["status"].(map[string]any)
			p["status"] = st
			phases[name], _ = st["phase"].(string)
		}
		time.Sleep(200 * time.Millisecond)
	}

	disc := "http://" + addr.Discovery
	code, lease := call(http.MethodPost, disc+"/v1/leases", map[string]any{"selector": map[string]any{"geo": "local"}, "target": "example.com"})
	if code != http.StatusOK {
		t.Fatalf("lease: %d %v", code, lease)
	}
	if code, body := call(http.MethodPost, disc+"/v1/leases", map[string]any{"selector": map[string]any{"geo": "mars"}}); code != http.StatusConflict {
		t.Fatalf("lease for no match: %d %v, want 409", code, body)
	}
	mid := scrape(t, client, addr.Hook)
	id := lease["leaseID"].(string)
	if code, body := call(http.MethodPost, disc+"/v1/leases/"+id+"/report", map[string]any{"result": "rate_limited", "target": "example.com"}); code != http.StatusOK {
		t.Fatalf("report: %d %v", code, body)
	}
	if code, _ := call(http.MethodDelete, disc+"/v1/leases/"+id, nil); code != http.StatusNoContent {
		t.Fatalf("release: %d", code)
	}
	var end map[string]float64
	for deadline := time.Now().Add(10 * time.Second); ; {
		end = scrape(t, client, addr.Hook)
		if end[`proxy_operator_gc_sweeps_total{result="done"}`] > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}

	checks := []struct {
		name string
		got  float64
		ok   func(float64) bool
		want string
	}{
		{"proxies Ready", end[`proxy_operator_proxies{phase="Ready"}`], eq(1), "1"},
		{"proxies Unhealthy", end[`proxy_operator_proxies{phase="Unhealthy"}`], eq(1), "1"},
		{"probes of a", end[`proxy_operator_healthcheck_duration_seconds_count{proxy="t/a"}`], gt(0), "> 0"},
		{"probe failures of b", end[`proxy_operator_healthcheck_failures_total{proxy="t/b"}`], gt(0), "> 0"},
		{"leases active while held", mid[`proxy_operator_leases_active`], eq(1), "1"},
		{"leases active after release", end[`proxy_operator_leases_active`], eq(0), "0"},
		{"leases granted", end[`proxy_operator_lease_requests_total{outcome="granted"}`], eq(1), "1"},
		{"leases no_match", end[`proxy_operator_lease_requests_total{outcome="no_match"}`], eq(1), "1"},
		{"reports rate_limited", end[`proxy_operator_lease_reports_total{result="rate_limited",source="api"}`], eq(1), "1"},
		{"provider creates", end[`proxy_operator_provider_requests_total{op="create",provider="mock",result="ok"}`], eq(1), "1"},
		{"provider gets", end[`proxy_operator_provider_requests_total{op="get",provider="mock",result="ok"}`], gt(0), "> 0"},
		{"provider lists (gc)", end[`proxy_operator_provider_requests_total{op="list",provider="mock",result="ok"}`], gt(0), "> 0"},
		{"sync hook calls", end[`proxy_operator_hook_duration_seconds_count{hook="sync"}`], gt(3), "> 3"},
		{"gc sweeps", end[`proxy_operator_gc_sweeps_total{result="done"}`], gt(0), "> 0"},
		{"gc deletions (none: a is live)", end[`proxy_operator_gc_deletions_total{provider="mock"}`], eq(0), "0"},
	}
	for _, c := range checks {
		if !c.ok(c.got) {
			t.Errorf("%s: got %v, want %s", c.name, c.got, c.want)
		}
	}
}

func eq(v float64) func(float64) bool { return func(g float64) bool { return g == v } }
func gt(v float64) func(float64) bool { return func(g float64) bool { return g > v } }

func proxy(name, uid string, spec map[string]any) map[string]any {
	return map[string]any{
		"apiVersion": "crawl.example.com/v1alpha1", "kind": "Proxy",
		"metadata": map[string]any{"name": name, "namespace": "t", "uid": uid, "generation": 1},
		"spec":     spec,
	}
}

// scrape reads /metrics into "name{labels}" -> value. A series absent from the answer reads 0.
func scrape(t *testing.T, client *http.Client, hookAddr string) map[string]float64 {
	t.Helper()
	res, err := client.Get("http://" + hookAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") || line == "" {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
