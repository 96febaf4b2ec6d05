package factory_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/proxy-operator/proxy-operator/providers"
	"github.com/proxy-operator/proxy-operator/providers/factory"
	"github.com/proxy-operator/proxy-operator/providers/mock"
)

// TestInvalidConfigs checks every bad config fixture against its exact error message.
func TestInvalidConfigs(t *testing.T) {
	tests := map[string]string{
		"invalid-empty.yaml":              "providers config: no providers listed",
		"invalid-name.yaml":               `providers config: providers[0] (Mock_1): name "Mock_1" must be a DNS label (lowercase letters, digits, '-', at most 63)`,
		"invalid-duplicate.yaml":          `providers config: providers[1] (mock): name "mock" already used by providers[0]`,
		"invalid-no-type.yaml":            "providers config: providers[0] (east): type is required (one of: mock, kubernetes, gcp, aws, hetzner)",
		"invalid-unknown-type.yaml":       `providers config: providers[0] (east): unknown type "nimbus" (one of: mock, kubernetes, gcp, aws, hetzner)`,
		"invalid-block-mismatch.yaml":     `providers config: providers[0] (east): has a "mock" block but type "nimbus"`,
		"invalid-fault-kind.yaml":         `providers config: providers[0] (mock): mock.faults[0]: fault kind "flaky": want quota, transient or permanent`,
		"invalid-duration.yaml":           `providers config: YAML line 5: providers[0] (mock): bad duration "soon": want a number with a unit, such as 300ms, 5s, 2m or 1h30m (time: invalid duration "soon")`,
		"invalid-unknown-field.yaml":      `providers config: YAML line 4: providers[0] (mock): unknown field "zone"`,
		"invalid-typo-second.yaml":        `providers config: YAML line 9: providers[1] (local): unknown field "serveProxy"`,
		"invalid-top-level.yaml":          `providers config: YAML line 1: unknown field "provider" (the file has one field: providers)`,
		"invalid-not-yaml.yaml":           `providers config: invalid YAML: line 3: found a tab character that violates indentation`,
		"invalid-aws-no-block.yaml":       "providers config: providers[0] (ec2-eu): type aws needs an aws block with at least region",
		"invalid-aws-region.yaml":         `providers config: providers[0] (ec2-eu): aws: region "Frankfurt" is not a region name (e.g. eu-central-1)`,
		"invalid-aws-security-group.yaml": `providers config: providers[0] (ec2-eu): aws: securityGroupIds[1] "default" is not a security group ID (sg-0123abcd...)`,
		"invalid-aws-spot-price.yaml":     "providers config: providers[0] (ec2-spot): aws: spotMaxPrice is set but spot is not",
		"invalid-hetzner-no-token.yaml":   "providers config: providers[0] (hel): hetzner: tokenFile is required (the path of a mounted Secret holding the project's API token)",
		"invalid-hetzner-location.yaml":   `providers config: providers[0] (hel): hetzner: location "Helsinki" is not a location name (e.g. fsn1)`,
		"invalid-hetzner-field.yaml":      `providers config: YAML line 5: providers[0] (hel): unknown field "token"`,
	}
	files, err := filepath.Glob(filepath.Join("testdata", "invalid-*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != len(tests) {
		t.Errorf("%d invalid-*.yaml fixtures, %d expected messages: keep them in step", len(files), len(tests))
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			want, ok := tests[filepath.Base(f)]
			if !ok {
				t.Fatalf("no expected message for %s", f)
			}
			_, err := factory.Load(f)
			if err == nil {
				t.Fatalf("loaded without error, want %q", want)
			}
			if got := err.Error(); got != want {
				t.Errorf("error mismatch\n got: %s\nwant: %s", got, want)
			}
		})
	}
}

func TestLoadMissingFile(t *testing.T) {
	_, err := factory.Load(filepath.Join("testdata", "nope.yaml"))
	if err == nil || !strings.HasPrefix(err.Error(), "providers config: open testdata/nope.yaml") {
		t.Errorf("error %v, want the path named", err)
	}
}

func TestValidConfigBuilds(t *testing.T) {
	cfg, err := factory.Load(filepath.Join("testdata", "valid.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	want := factory.Config{Providers: []factory.Entry{
		{Name: "mock", Type: "mock", Mock: &mock.Config{ProvisioningDelay: mock.Duration(2 * time.Second),
			Faults: []mock.Fault{{Op: "get", Kind: "transient", Count: 2}}}},
		{Name: "mock-slow", Type: "mock", Mock: &mock.Config{ProvisioningDelay: mock.Duration(time.Minute)}},
	}}
	if d := cmp.Diff(want, cfg); d != "" {
		t.Fatalf("parsed config (-want +got):\n%s", d)
	}
	reg := prometheus.NewRegistry()
	set, err := factory.Build(cfg, factory.Deps{Metrics: providers.NewMetrics(reg)})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range set.Entries() {
		names = append(names, e.Name+"/"+e.Type)
	}
	if d := cmp.Diff([]string{"mock/mock", "mock-slow/mock"}, names); d != "" {
		t.Errorf("entries (-want +got):\n%s", d)
	}
	// The configured fault reaches the built provider, and calls are counted by class.
	e, _ := set.Lookup("mock")
	for range 3 {
		_, err = e.Provider.Get(context.Background(), "mock://x")
	}
	if !errors.Is(err, providers.ErrNotFound) {
		t.Errorf("third get: %v, want ErrNotFound once the two faults are used", err)
	}
	for result, want := range map[string]float64{"transient": 2, "not_found": 1} {
		if got := requests(t, reg, "mock", "get", result); got != want {
			t.Errorf("requests{get,%s} = %v, want %v", result, got, want)
		}
	}
}
func TestDefaultIsValid(t *testing.T) {
	if err := factory.Default().Validate(); err != nil {
		t.Fatal(err)
	}
}

// requests reads proxy_operator_provider_requests_total{provider,op,result} from reg.
func requests(t *testing.T, reg *prometheus.Registry, provider, op, result string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "proxy_operator_provider_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, lp := range m.GetLabel() {
				l[lp.GetName()] = lp.GetValue()
			}
			if l["provider"] == provider && l["op"] == op && l["result"] == result {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}
