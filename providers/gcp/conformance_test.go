//go:build !omit_gcp

package gcp

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/api/option"

	"github.com/proxy-operator/proxy-operator/providers"
	"github.com/proxy-operator/proxy-operator/providers/providertest"
)

// statefulCompute is a stand-in for the Compute Engine REST API that keeps instances (where
// computeAPI above answers scripted replies): insert, get, delete and aggregatedList over one
// project, instances turning RUNNING with an address after a provisioning delay on a test
// clock, and the API's own errors injected per call.
type statefulCompute struct {
	srv *httptest.Server

	mu        sync.Mutex
	now       time.Time
	instances map[string]map[string]any // by zone/name
	created   map[string]time.Time
	faults    map[string][]apiFault
	hold      chan struct{}
}

type apiFault struct {
	status int
	reason string
}

func newStatefulCompute(t *testing.T) *statefulCompute {
	t.Helper()
	c := &statefulCompute{now: time.Date(2026, 12, 2, 1, 0, 0, 0, time.UTC), instances: map[string]map[string]any{},
		created: map[string]time.Time{}, faults: map[string][]apiFault{}}
	c.srv = httptest.NewServer(http.HandlerFunc(c.serve))
	t.Cleanup(func() {
		c.release()
		c.srv.Close()
	})
	return c
}

func (c *statefulCompute) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func (c *statefulCompute) fail(op string, f apiFault) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.faults[op] = append(c.faults[op], f)
}

func (c *statefulCompute) holdAll() func() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.hold == nil {
		c.hold = make(chan struct{})
	}
	return c.release
}

func (c *statefulCompute) release() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.hold != nil {
		close(c.hold)
		c.hold = nil
	}
}

func (c *statefulCompute) put(zone, name string, labels map[string]string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.instances[zone+"/"+name] = map[string]any{"name": name, "labels": labels}
	c.created[zone+"/"+name] = c.now.Add(-time.Hour)
}

func write(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (c *statefulCompute) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	c.mu.Lock()
	hold := c.hold
	c.mu.Unlock()
	if hold != nil {
		select {
		case <-hold:
		case <-r.Context().Done():
			return
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	prefix := "/compute/v1/projects/" + testProject + "/"
	rest, ok := strings.CutPrefix(r.URL.Path, prefix)
	if !ok {
		write(w, 404, rawError(404, "no such project", "notFound"))
		return
	}
	parts := strings.Split(rest, "/")
	var op string
	switch {
	case rest == "aggregated/instances" && r.Method == http.MethodGet:
		op = "list"
	case len(parts) == 3 && parts[0] == "zones" && parts[2] == "instances" && r.Method == http.MethodPost:
		op = "create"
	case len(parts) == 4 && parts[0] == "zones" && parts[2] == "instances" && r.Method == http.MethodGet:
		op = "get"
	case len(parts) == 4 && parts[0] == "zones" && parts[2] == "instances" && r.Method == http.MethodDelete:
		op = "delete"
	default:
		write(w, 404, rawError(404, "no route "+r.Method+" "+r.URL.Path, "notFound"))
		return
	}
	if fs := c.faults[op]; len(fs) > 0 {
		c.faults[op] = fs[1:]
		write(w, fs[0].status, rawError(fs[0].status, "injected "+fs[0].reason, fs[0].reason))
		return
	}
	switch op {
	case "create":
		var in map[string]any
		if err := json.Unmarshal(body, &in); err != nil {
			write(w, 400, rawError(400, "bad JSON", "invalid"))
			return
		}
		name, _ := in["name"].(string)
		key := parts[1] + "/" + name
		if _, exists := c.instances[key]; exists {
			write(w, 409, rawError(409, "The resource '"+name+"' already exists", "alreadyExists"))
			return
		}
		c.instances[key], c.created[key] = in, c.now
		write(w, 200, rawJSON(operation("insert", "DONE")))
	case "get":
		key := parts[1] + "/" + parts[3]
		if _, ok := c.instances[key]; !ok {
			write(w, 404, rawError(404, "The resource '"+parts[3]+"' was not found", "notFound"))
			return
		}
		write(w, 200, c.view(parts[1], parts[3]))
	case "delete":
		key := parts[1] + "/" + parts[3]
		if _, ok := c.instances[key]; !ok {
			write(w, 404, rawError(404, "The resource '"+parts[3]+"' was not found", "notFound"))
			return
		}
		delete(c.instances, key)
		write(w, 200, rawJSON(operation("delete", "DONE")))
	case "list":
		items := map[string]any{}
		byZone := map[string][]any{}
		for key := range c.instances {
			zone, name, _ := strings.Cut(key, "/")
			byZone[zone] = append(byZone[zone], c.view(zone, name))
		}
		for zone, insts := range byZone {
			items["zones/"+zone] = map[string]any{"instances": insts}
		}
		write(w, 200, map[string]any{"kind": "compute#instanceAggregatedList", "items": items})
	}
}

// view is an instance as the API shows it now: PROVISIONING, then RUNNING with an address.
func (c *statefulCompute) view(zone, name string) any {
	key := zone + "/" + name
	status, ip := "PROVISIONING", ""
	if !c.now.Before(c.created[key].Add(20 * time.Second)) {
		status, ip = "RUNNING", "127.4.0."+fmt.Sprint(1+len(name)%200)
	}
	labels := map[string]string{}
	if l, ok := c.instances[key]["labels"].(map[string]any); ok {
		for k, v := range l {
			labels[k] = fmt.Sprint(v)
		}
	} else if l, ok := c.instances[key]["labels"].(map[string]string); ok {
		labels = l
	}
	return rawJSON(instanceJSON(name, zone, status, ip, labels))
}

func rawJSON(s string) json.RawMessage { return json.RawMessage(s) }

func rawError(code int, msg, reason string) json.RawMessage {
	return rawJSON(apiError(code, msg, reason))
}

var computeFailures = map[error]apiFault{
	providers.ErrQuotaExceeded: {http.StatusForbidden, "quotaExceeded"},
	providers.ErrTransient:     {http.StatusServiceUnavailable, "backendError"},
	providers.ErrPermanent:     {http.StatusForbidden, "forbidden"},
}

func TestConformance(t *testing.T) {
	providertest.Run(t, func(t *testing.T) providertest.Env {
		c := newStatefulCompute(t)
		p, err := New(context.Background(), Config{Project: testProject},
			option.WithEndpoint(c.srv.URL), option.WithoutAuthentication(), option.WithHTTPClient(c.srv.Client()))
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		t.Cleanup(func() {
			c.release()
			_ = p.Close()
		})
		return providertest.Env{
			Provider:  p,
			Base:      providers.CreateRequest{Zone: testZone, MachineType: "e2-small", Image: "projects/debian-cloud/global/images/family/debian-12"},
			UnknownID: FormatID(testProject, testZone, "proxy-000000000000"),
			Settle:    func() { c.advance(5 * time.Second) },
			Fail: func(op string, kind error) bool {
				c.fail(op, computeFailures[kind])
				return true
			},
			Hold:    c.holdAll,
			Foreign: func() { c.put(testZone, "someones-build-box", map[string]string{"team": "ci"}) },
		}
	})
}
