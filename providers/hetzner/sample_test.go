//go:build !omit_hetzner

package hetzner

import (
	"testing"

	"github.com/proxy-operator/proxy-operator/internal/lifecycle"
	"github.com/proxy-operator/proxy-operator/providers"
	"github.com/proxy-operator/proxy-operator/providers/providertest"
)

// TestSampleProxyCreatesServer reads the shipped Hetzner sample Proxy and creates the server it
// leads to against the stand-in, so the sample cannot drift from what the provider requires.
func TestSampleProxyCreatesServer(t *testing.T) {
	px, req := providertest.Sample(t, "../../crds/samples/proxy_hetzner.yaml", lifecycle.SpecHash)
	req.Credentials = &providers.Credentials{Username: "proxy-abc", Password: "Z7QK2M4XN5P6R7S8T9V2W3Y4A5"}
	pl := px.Spec.Placement
	p, api, _ := standIn(t, Config{})
	if _, err := p.Create(testCtx(t), req); err != nil {
		t.Fatalf("Create from the sample: %v", err)
	}
	if s := api.Servers(); len(s) != 1 || s[0].Image != pl.Image || s[0].ServerType != pl.MachineType || s[0].Location != pl.Zone {
		t.Errorf("servers %+v, want one of the sample's placement", s)
	}
}
