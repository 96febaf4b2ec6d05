//go:build !omit_aws

package aws

import (
	"testing"

	"github.com/proxy-operator/proxy-operator/internal/lifecycle"
	"github.com/proxy-operator/proxy-operator/providers"
	"github.com/proxy-operator/proxy-operator/providers/providertest"
)

// TestSampleProxyRunsInstance reads the shipped AWS sample Proxy and runs the instance it leads
// to against the stand-in, so the sample cannot drift from what the provider requires.
func TestSampleProxyRunsInstance(t *testing.T) {
	px, req := providertest.Sample(t, "../../crds/samples/proxy_aws.yaml", lifecycle.SpecHash)
	req.Credentials = &providers.Credentials{Username: "proxy-abc", Password: "Z7QK2M4XN5P6R7S8T9V2W3Y4A5"}
	pl := px.Spec.Placement
	p, srv, _ := standIn(t, Config{Region: pl.Region, Spot: true})
	if _, err := p.Create(testCtx(t), req); err != nil {
		t.Fatalf("Create from the sample: %v", err)
	}
	if insts := srv.Instances(); len(insts) != 1 || insts[0].ImageID != pl.Image || insts[0].InstanceType != pl.MachineType || insts[0].Zone != pl.Zone {
		t.Errorf("instances %+v, want one of the sample's placement", insts)
	}
}
