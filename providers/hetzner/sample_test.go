package hetzner

import (
	"os"
	"testing"

	"sigs.k8s.io/yaml"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
	"github.com/proxy-operator/proxy-operator/internal/lifecycle"
	"github.com/proxy-operator/proxy-operator/providers"
)

// TestSampleProxyCreatesServer reads the shipped Hetzner sample Proxy and creates the server it
// leads to against the stand-in, so the sample cannot drift from what the provider requires.
func TestSampleProxyCreatesServer(t *testing.T) {
	b, err := os.ReadFile("../../crds/samples/proxy_hetzner.yaml")
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
	ci := *px.Spec.CloudInit.Inline
	hash := lifecycle.SpecHash(&px.Spec, ci)
	pl := px.Spec.Placement
	p, api, _ := standIn(t, Config{})
	_, err = p.Create(testCtx(t), providers.CreateRequest{
		Name: providers.InstanceName(testUID, hash), OwnerUID: testUID, SpecHash: hash, Namespace: px.Namespace, ProxyName: px.Name,
		Region: pl.Region, Zone: pl.Zone, MachineType: pl.MachineType, Image: pl.Image, Port: px.Spec.Port, CloudInit: ci,
		Credentials: &providers.Credentials{Username: "proxy-abc", Password: "Z7QK2M4XN5P6R7S8T9V2W3Y4A5"},
	})
	if err != nil {
		t.Fatalf("Create from the sample: %v", err)
	}
	if s := api.Servers(); len(s) != 1 || s[0].Image != pl.Image || s[0].ServerType != pl.MachineType || s[0].Location != pl.Zone {
		t.Errorf("servers %+v, want one of the sample's placement", s)
	}
}
