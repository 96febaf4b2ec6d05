//go:build omit_aws && omit_gcp && omit_hetzner

package factory_test

import (
	"strings"
	"testing"

	"github.com/proxy-operator/proxy-operator/providers/factory"
)

// TestOmittedProvidersSayHowToGetThem runs under make test-go's second pass, with the tags
// make build uses (decision 0282): a cloud entry still parses and validates, and building it
// names the tag and the way to a binary that has the client, instead of a provider that fails
// at its first call.
func TestOmittedProvidersSayHowToGetThem(t *testing.T) {
	for name, cfg := range map[string]string{
		"gcp":     "providers:\n- name: g\n  type: gcp\n  gcp: {project: my-project}\n",
		"aws":     "providers:\n- name: a\n  type: aws\n  aws: {region: eu-central-1}\n",
		"hetzner": "providers:\n- name: h\n  type: hetzner\n  hetzner: {tokenFile: /nonexistent}\n",
	} {
		t.Run(name, func(t *testing.T) {
			c, err := factory.Parse([]byte(cfg))
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			set, err := factory.Build(c, factory.Deps{})
			if err == nil {
				set.Close()
				t.Fatal("built a provider the binary has no client for")
			}
			for _, want := range []string{"-tags omit_" + name, "make build GO_TAGS=", "container image"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
		})
	}
	// A wrong block is still refused by the provider's own Validate, tags or not.
	if _, err := factory.Parse([]byte("providers:\n- name: g\n  type: gcp\n  gcp: {project: X}\n")); err == nil || !strings.Contains(err.Error(), `gcp: project "X" is not a project ID`) {
		t.Errorf("bad gcp project: got %v", err)
	}
}
