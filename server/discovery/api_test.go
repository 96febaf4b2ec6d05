package discovery_test

import (
	"net/http"
	"os"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/proxy-operator/proxy-operator/internal/fleet"
	"github.com/proxy-operator/proxy-operator/internal/healthtest"
	"github.com/proxy-operator/proxy-operator/lease"
	"github.com/proxy-operator/proxy-operator/server/discovery"
)

var apiHeading = regexp.MustCompile(`(?m)^### (GET|POST|PUT|PATCH|DELETE|HEAD) (\S+)$`)

// TestAPIDocumentCoversRouter walks the discovery router and fails for any route that
// docs/api.md does not describe under a "### METHOD /path" heading, and for any documented
// route the router does not serve.
func TestAPIDocumentCoversRouter(t *testing.T) {
	doc, err := os.ReadFile("../../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	var documented []string
	for _, m := range apiHeading.FindAllStringSubmatch(string(doc), -1) {
		documented = append(documented, m[1]+" "+m[2])
	}

	view := fleet.New(time.Now, 0)
	d := &discovery.Discovery{Fleet: view, Leases: lease.NewMemory(lease.Config{Fleet: view, Health: &healthtest.Map{}})}
	routes, ok := d.Handler().(chi.Routes)
	if !ok {
		t.Fatal("discovery handler is not a chi router")
	}
	var served []string
	err = chi.Walk(routes, func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		served = append(served, method+" "+route)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(served) < 6 {
		t.Fatalf("walked only %v", served)
	}
	for _, r := range served {
		if !slices.Contains(documented, r) {
			t.Errorf("route %q is served but not documented in docs/api.md", r)
		}
	}
	for _, r := range documented {
		if !slices.Contains(served, r) {
			t.Errorf("docs/api.md documents %q, which the router does not serve", r)
		}
	}
}
