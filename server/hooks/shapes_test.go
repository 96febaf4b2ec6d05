package hooks_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"testing"

	"github.com/proxy-operator/proxy-operator/server/hooks/membudget"
)

// shapeBodies are the body shapes of issue 21's attack pass, each about 4 MB (the default
// limit): what decoding them costs differs by two orders of magnitude per byte.
func shapeBodies(t *testing.T) map[string]struct {
	path string
	body []byte
} {
	t.Helper()
	const size = 4<<20 - 4096
	parent := func(kind string, spec map[string]any) map[string]any {
		return map[string]any{"apiVersion": "crawl.example.com/v1alpha1", "kind": kind,
			"metadata": map[string]any{"name": "shape", "namespace": "team-a", "uid": "uid-shape", "generation": 1},
			"spec":     spec}
	}
	enc := func(v any) []byte {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	// Tiny attributes: "aN":"" until the body is full.
	attrs := map[string]any{}
	for i, n := 0, 0; n < size-300; i++ {
		k := fmt.Sprintf("a%d", i)
		attrs[k] = ""
		n += len(k) + 6
	}
	// Tiny pool children: as many as fit.
	children := func(max int) map[string]any {
		objs := map[string]any{}
		for i, n := 0, 0; n < size-400 && i < max; i++ {
			name := fmt.Sprintf("p%d", i)
			objs[name] = map[string]any{"metadata": map[string]any{"name": name}}
			n += 2*len(name) + 30
		}
		return map[string]any{"Proxy.crawl.example.com/v1alpha1": objs}
	}
	// A real pool of 1000 members, each a copy of a fixture's member.
	var fixture struct {
		Parent   map[string]any                       `json:"parent"`
		Children map[string]map[string]map[string]any `json:"children"`
	}
	if err := json.Unmarshal(fixtureBody(t, "pools-sync/scale-down-idle-first"), &fixture); err != nil {
		t.Fatal(err)
	}
	real := map[string]any{}
	for _, objs := range fixture.Children {
		for _, m := range objs {
			for i := range 1000 {
				c := map[string]any{}
				for k, v := range m {
					c[k] = v
				}
				md := map[string]any{}
				for k, v := range m["metadata"].(map[string]any) {
					md[k] = v
				}
				md["name"] = fmt.Sprintf("m%d", i)
				c["metadata"] = md
				real[md["name"].(string)] = c
			}
			break
		}
		break
	}
	fixture.Parent["spec"].(map[string]any)["replicas"] = 1000
	pool := parent("ProxyPool", map[string]any{"replicas": 1, "template": map[string]any{"spec": map[string]any{"mode": "Managed", "provider": "mock"}}})
	return map[string]struct {
		path string
		body []byte
	}{
		"tiny parent attributes": {"/sync", enc(map[string]any{"parent": parent("Proxy", map[string]any{"mode": "Managed", "provider": "mock", "attributes": attrs})})},
		"one long attribute":     {"/sync", enc(map[string]any{"parent": parent("Proxy", map[string]any{"mode": "Managed", "provider": "mock", "attributes": map[string]any{"geo": strings.Repeat("x", size-400)}})})},
		"tiny pool children":     {"/pools/sync", enc(map[string]any{"parent": pool, "children": children(1 << 30)})},
		"most pool children":     {"/pools/sync", enc(map[string]any{"parent": pool, "children": children(4000)})},
		"a pool of 1000 members": {"/pools/sync", enc(map[string]any{"parent": fixture.Parent, "children": map[string]any{"Proxy.crawl.example.com/v1alpha1": real}})},
		"tiny related objects":   {"/sync", enc(map[string]any{"parent": parent("Proxy", map[string]any{"mode": "Managed", "provider": "mock"}), "related": children(1 << 30)})},
	}
}

// TestBudgetCoversEveryShape measures what each shape allocates through the real hooks and
// checks the budget's weight for it (factor x length + membudget.ShapeWeight) covers it, so
// the budget bounds memory whatever the shape. Allocation counts are deterministic for a
// given body; no timing is involved.
func TestBudgetCoversEveryShape(t *testing.T) {
	for name, s := range shapeBodies(t) {
		t.Run(name, func(t *testing.T) {
			h := newHooks(t, newMock(t))
			h.Budget = membudget.New(1<<40, membudget.DefaultFactor) // measure, never refuse
			router := h.Handler()
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			rec := post(t, router, s.path, s.body)
			runtime.ReadMemStats(&after)
			allocated := int64(after.TotalAlloc - before.TotalAlloc)
			weight := int64(len(s.body))*membudget.DefaultFactor + membudget.ShapeWeight(s.body)
			t.Logf("%s: %d bytes -> answer %d (%d bytes), allocated %d MiB, weight %d MiB",
				s.path, len(s.body), rec.Code, rec.Body.Len(), allocated>>20, weight>>20)
			if allocated > weight {
				t.Errorf("decoding allocated %d bytes, the budget weighs the body %d: the budget does not bound this shape", allocated, weight)
			}
			if name == "a pool of 1000 members" {
				if b := membudget.ForLimit(256<<20, 0, 0, 4<<20); weight > b.Size() {
					t.Errorf("a real pool of 1000 members weighs %d, more than the budget under a 256 MiB limit (%d)", weight, b.Size())
				}
				if rec.Code != http.StatusOK {
					t.Errorf("a real pool: %d %s", rec.Code, rec.Body)
				}
			}
			if rec.Code == http.StatusInternalServerError {
				t.Errorf("answer %d: %s", rec.Code, rec.Body)
			}
		})
	}
}
