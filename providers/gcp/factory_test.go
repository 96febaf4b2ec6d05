//go:build !omit_gcp

package gcp_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/proxy-operator/proxy-operator/providers/factory"
	"github.com/proxy-operator/proxy-operator/providers/gcp"
)

// These tests read gcp entries through the operator's own config parser and builder.

func TestFactoryParsesGCPEntry(t *testing.T) {
	c, err := factory.Parse([]byte(`
providers:
  - name: gcp-eu
    type: gcp
    gcp:
      project: crawl-proj-1
      network: global/networks/egress
      subnetwork: regions/europe-west1/subnetworks/proxies
      networkTag: egress-proxy
      serviceAccount: proxy-vm@crawl-proj-1.iam.gserviceaccount.com
      diskSizeGb: 20
      requestTimeout: 45s
`))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	want := &gcp.Config{
		Project:        "crawl-proj-1",
		Network:        "global/networks/egress",
		Subnetwork:     "regions/europe-west1/subnetworks/proxies",
		NetworkTag:     "egress-proxy",
		ServiceAccount: "proxy-vm@crawl-proj-1.iam.gserviceaccount.com",
		DiskSizeGb:     20,
		RequestTimeout: gcp.Duration(45 * time.Second),
	}
	if diff := cmp.Diff(want, c.Providers[0].GCP); diff != "" {
		t.Errorf("gcp block (-want +got):\n%s", diff)
	}
}

func TestFactoryRejectsBadGCPEntries(t *testing.T) {
	tests := []struct {
		name, yaml, want string
	}{
		{"no block", "providers:\n  - name: gcp-eu\n    type: gcp\n",
			"providers config: providers[0] (gcp-eu): type gcp needs a gcp block with at least project"},
		{"no project", "providers:\n  - name: gcp-eu\n    type: gcp\n    gcp:\n      networkTag: proxy\n",
			"providers config: providers[0] (gcp-eu): gcp: project is required"},
		{"block on another type", "providers:\n  - name: east\n    type: mock\n    gcp:\n      project: crawl-proj-1\n",
			`providers config: providers[0] (east): has a "gcp" block but type "mock"`},
		{"unknown field", "providers:\n  - name: gcp-eu\n    type: gcp\n    gcp:\n      project: crawl-proj-1\n      zone: europe-west1-b\n",
			`providers config: YAML line 6: providers[0] (gcp-eu): unknown field "zone"`},
		{"bad timeout", "providers:\n  - name: gcp-eu\n    type: gcp\n    gcp:\n      project: crawl-proj-1\n      requestTimeout: soon\n",
			`providers config: YAML line 6: providers[0] (gcp-eu): bad duration "soon": want a number with a unit, such as 300ms, 5s, 2m or 1h30m (time: invalid duration "soon")`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := factory.Parse([]byte(tt.yaml))
			if err == nil {
				t.Fatalf("parsed without error, want %q", tt.want)
			}
			if got := err.Error(); got != tt.want {
				t.Errorf("error mismatch\n got: %s\nwant: %s", got, tt.want)
			}
		})
	}
}

// TestFactoryBuildsWithADC builds a gcp entry from Application Default Credentials found
// through GOOGLE_APPLICATION_CREDENTIALS. The credentials are fake: building reads them and
// fetches nothing, and no call is made.
func TestFactoryBuildsWithADC(t *testing.T) {
	cfg := factory.Config{Providers: []factory.Entry{{Name: "gcp-eu", Type: "gcp", GCP: &gcp.Config{Project: "crawl-proj-1"}}}}

	t.Run("credentials found", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "adc.json")
		creds := `{"type":"authorized_user","client_id":"test.apps.googleusercontent.com","client_secret":"not-a-secret","refresh_token":"not-a-token"}`
		if err := os.WriteFile(path, []byte(creds), 0o600); err != nil {
			t.Fatal(err)
		}
		t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", path)
		set, err := factory.Build(cfg, factory.Deps{})
		if err != nil {
			t.Fatalf("Build: %v", err)
		}
		e, ok := set.Lookup("gcp-eu")
		if !ok || e.Type != "gcp" {
			t.Fatalf("Lookup(gcp-eu) = %+v, %v; want a gcp entry", e, ok)
		}
		if _, isGCP := e.Provider.(*gcp.Provider); !isGCP {
			t.Errorf("provider is %T, want *gcp.Provider", e.Provider)
		}
	})
	t.Run("credentials missing", func(t *testing.T) {
		t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", filepath.Join(t.TempDir(), "missing.json"))
		_, err := factory.Build(cfg, factory.Deps{})
		if err == nil || !strings.HasPrefix(err.Error(), "provider gcp-eu: gcp: credentials (Application Default Credentials") {
			t.Errorf("err = %v, want the provider and ADC named", err)
		}
	})
}
