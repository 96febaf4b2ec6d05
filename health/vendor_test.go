package health

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
	"github.com/proxy-operator/proxy-operator/internal/fleet"
	"github.com/proxy-operator/proxy-operator/internal/verdict"
	"github.com/proxy-operator/proxy-operator/server/gateway/vendortest"
)

// TestVendorProbedThroughItsEndpoint: a vendor proxy's probe goes through the vendor's
// endpoint with a username rendered for the probe's own session; the account's bare username
// is refused (407), as a real vendor would.
func TestVendorProbedThroughItsEndpoint(t *testing.T) {
	vendor, err := vendortest.Start(vendortest.Config{Customer: "acme", Password: "pw"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(vendor.Close)
	target := newPlainTarget(t)
	view := fleet.New(time.Now, 0)
	rendered := proxyAt(t, "ns/oxylabs", vendor.Addr(), target, 20, 20, 1, 1)
	rendered.Mode = v1.ModeExternal
	rendered.Credentials = &fleet.Credentials{Username: "acme", Password: "pw"}
	rendered.Vendor = &v1.VendorSpec{UsernameTemplate: "customer-{user}[-cc-{country}]-sessid-{session}-sesstime-{lifetimeMinutes}"}
	bare := rendered
	bare.Key, bare.UID, bare.Vendor = "ns/bare", "uid-bare", nil
	view.Upsert(rendered)
	view.Upsert(bare)
	s := startScheduler(t, view, NewHTTPProber(nil), prometheus.NewRegistry())
	waitHealth(t, s, "ns/oxylabs", verdict.Healthy)
	if h := waitHealth(t, s, "ns/bare", verdict.Unhealthy); h.Reason != KindProxyAuth {
		t.Errorf("the bare account username: reason %q, want %q", h.Reason, KindProxyAuth)
	}
	if n := vendor.Sessions(); n != 1 {
		t.Errorf("the vendor handed out %d sessions, want 1 (the probe's)", n)
	}
}
