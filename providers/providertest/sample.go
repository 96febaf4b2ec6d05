package providertest

import (
	"os"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
	"github.com/proxy-operator/proxy-operator/providers"
)

// SampleUID is the owner uid Sample gives the sample Proxy.
const SampleUID = "5d0c6a1e-2f3b-4c5d-8e9f-0a1b2c3d4e5f"

// Sample reads a shipped sample Proxy (a path under crds/samples, relative to the test's
// package), checks that it decodes strictly, validates, and carries an inline #cloud-config
// that installs squid, and returns the create request the sync core would make from it, so a
// provider's test can send it and the sample cannot drift from what the provider requires.
// specHash is the sync core's (lifecycle.SpecHash: providers may not import it).
func Sample(t *testing.T, path string, specHash func(*v1.ProxySpec, string) string) (v1.Proxy, providers.CreateRequest) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var px v1.Proxy
	if err := yaml.UnmarshalStrict(b, &px); err != nil {
		t.Fatalf("%s does not decode strictly: %v", path, err)
	}
	px.Spec.Default()
	if err := px.Spec.Validate(); err != nil {
		t.Fatalf("%s: spec invalid: %v", path, err)
	}
	if px.Spec.CloudInit == nil || px.Spec.CloudInit.Inline == nil {
		t.Fatalf("%s has no inline cloud-init", path)
	}
	ci := *px.Spec.CloudInit.Inline
	if !strings.HasPrefix(ci, "#cloud-config\n") {
		t.Errorf("%s: cloud-init does not start with #cloud-config: %q", path, ci[:min(len(ci), 40)])
	}
	var parsed struct {
		Packages []string `json:"packages"`
	}
	if err := yaml.Unmarshal([]byte(ci), &parsed); err != nil {
		t.Fatalf("%s: cloud-init is not YAML: %v", path, err)
	}
	if len(parsed.Packages) == 0 || parsed.Packages[0] != "squid" {
		t.Errorf("%s: cloud-init packages = %v, want squid first", path, parsed.Packages)
	}
	hash := specHash(&px.Spec, ci)
	pl := px.Spec.Placement
	return px, providers.CreateRequest{
		Name: providers.InstanceName(SampleUID, hash), OwnerUID: SampleUID, SpecHash: hash,
		Namespace: px.Namespace, ProxyName: px.Name, Region: pl.Region, Zone: pl.Zone,
		MachineType: pl.MachineType, Image: pl.Image, Port: px.Spec.Port, CloudInit: ci,
	}
}
