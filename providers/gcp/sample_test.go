//go:build !omit_gcp

package gcp

import (
	"testing"

	"github.com/proxy-operator/proxy-operator/internal/lifecycle"
	"github.com/proxy-operator/proxy-operator/providers/providertest"
)

// TestSampleProxyCreatesInstance reads the shipped GCP sample Proxy and sends the insert it
// leads to, so the sample cannot drift from what the provider requires.
func TestSampleProxyCreatesInstance(t *testing.T) {
	px, req := providertest.Sample(t, "../../crds/samples/proxy_gcp.yaml", lifecycle.SpecHash)
	pl := px.Spec.Placement
	api := newComputeAPI(t)
	api.on("POST", instancesPath(pl.Zone), reply{200, operation("insert", "RUNNING")})
	p := api.provider(t, Config{})
	if _, err := p.Create(testCtx(t), req); err != nil {
		t.Fatalf("Create from the sample: %v", err)
	}
	calls := api.recorded()
	if len(calls) != 1 {
		t.Fatalf("%d requests, want 1", len(calls))
	}
	got := calls[0]
	if got.Path != instancesPath("europe-west1-b") || len(got.Query) != 0 {
		t.Errorf("request %s %s?%s", got.Method, got.Path, got.Query.Encode())
	}
	if mt := got.Body["machineType"]; mt != "zones/europe-west1-b/machineTypes/e2-small" {
		t.Errorf("machineType = %v", mt)
	}
	if img := disk(got.Body)["initializeParams"].(map[string]any)["sourceImage"]; img != pl.Image {
		t.Errorf("sourceImage = %v, want %s", img, pl.Image)
	}
}
