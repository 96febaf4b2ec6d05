package gcp

import (
	"os"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
	"github.com/proxy-operator/proxy-operator/internal/lifecycle"
	"github.com/proxy-operator/proxy-operator/providers"
)

// TestSampleProxyCreatesInstance reads the shipped GCP sample Proxy and sends the insert it
// leads to, so the sample cannot drift from what the provider requires.
func TestSampleProxyCreatesInstance(t *testing.T) {
	b, err := os.ReadFile("../../crds/samples/proxy_gcp.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var px v1.Proxy
	if err := yaml.UnmarshalStrict(b, &px); err != nil {
		t.Fatalf("sample does not decode strictly: %v", err)
	}
	px.Spec.Default()
	if err := px.Spec.Validate(); err != nil {
		t.Fatalf("sample spec invalid: %v", err)
	}
	if px.Spec.CloudInit == nil || px.Spec.CloudInit.Inline == nil {
		t.Fatal("sample has no inline cloud-init")
	}
	cloudInit := *px.Spec.CloudInit.Inline
	if !strings.HasPrefix(cloudInit, "#cloud-config\n") {
		t.Errorf("cloud-init does not start with #cloud-config: %q", cloudInit[:min(len(cloudInit), 40)])
	}
	var parsed struct {
		Packages []string `json:"packages"`
	}
	if err := yaml.Unmarshal([]byte(cloudInit), &parsed); err != nil {
		t.Fatalf("cloud-init is not YAML: %v", err)
	}
	if len(parsed.Packages) == 0 || parsed.Packages[0] != "squid" {
		t.Errorf("cloud-init packages = %v, want squid", parsed.Packages)
	}

	uid := "5d0c6a1e-2f3b-4c5d-8e9f-0a1b2c3d4e5f"
	pl := px.Spec.Placement
	req := providers.CreateRequest{
		Name: providers.InstanceName(uid, lifecycle.SpecHash(&px.Spec, cloudInit)), OwnerUID: uid, SpecHash: lifecycle.SpecHash(&px.Spec, cloudInit),
		Namespace: px.Namespace, ProxyName: px.Name, Region: pl.Region, Zone: pl.Zone,
		MachineType: pl.MachineType, Image: pl.Image, Port: px.Spec.Port, CloudInit: cloudInit,
	}
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
