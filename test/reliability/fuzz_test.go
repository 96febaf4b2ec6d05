package reliability

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"

	"github.com/proxy-operator/proxy-operator/providers/factory"
)

// entryRE is how a validation error names the entry at fault.
var entryRE = regexp.MustCompile(`providers\[\d+\]`)

// FuzzProvidersConfig feeds arbitrary bytes to the providers config parser, seeded with every
// committed config: it never panics, every error says it is about the providers config, an
// error found by validation names the entry at fault, and an accepted config survives a
// round trip through YAML unchanged (what the process runs is what the file said).
func FuzzProvidersConfig(f *testing.F) {
	for _, glob := range []string{
		filepath.Join("..", "..", "providers", "factory", "testdata", "*.yaml"),
		filepath.Join("..", "..", "metacontroller", "install", "providers-config.yaml"),
	} {
		files, _ := filepath.Glob(glob)
		for _, file := range files {
			if b, err := os.ReadFile(file); err == nil {
				f.Add(b)
			}
		}
	}
	f.Add([]byte("providers:\n- {name: a, type: mock}\n- {name: b, type: kubernetes}\n"))
	f.Add([]byte("providers:\n- name: g\n  type: gcp\n  gcp: {project: my-project, network: default}\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := factory.Parse(b)
		if err != nil {
			msg := err.Error()
			if !strings.HasPrefix(msg, "providers config: ") {
				t.Fatalf("error does not say it is about the providers config: %q", msg)
			}
			// A decoding error says YAML (not the JSON of the converter underneath).
			decoding := strings.Contains(msg, "YAML")
			if strings.Contains(msg, "unmarshaling JSON") || strings.Contains(msg, "decoding JSON") {
				t.Fatalf("error about a YAML file says JSON: %q", msg)
			}
			if !decoding && !strings.Contains(msg, "no providers listed") && !entryRE.MatchString(msg) {
				t.Fatalf("validation error does not name the entry: %q", msg)
			}
			return
		}
		out, err := yaml.Marshal(c)
		if err != nil {
			t.Fatalf("accepted config does not marshal: %v", err)
		}
		again, err := factory.Parse(out)
		if err != nil {
			t.Fatalf("accepted config rejected after a round trip: %v\n%s", err, out)
		}
		if diff := cmp.Diff(c, again); diff != "" {
			t.Fatalf("round trip changed the config (-first +again):\n%s", diff)
		}
	})
}
