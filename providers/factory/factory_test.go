package factory_test

import (
	"context"
	"errors"
	"os"
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

// TestCloudConfigsBuild: aws and hetzner entries parse and build (several accounts are
// several entries); nothing is called until a provider is used.
func TestCloudConfigsBuild(t *testing.T) {
	dir := t.TempDir()
	token := filepath.Join(dir, "token")
	if err := os.WriteFile(token, []byte("hcloud-token-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The second account's profile, as a mounted shared config file would hold it.
	awsConfig := filepath.Join(dir, "aws-config")
	if err := os.WriteFile(awsConfig, []byte("[profile crawl-b]\nregion = us-east-1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("AWS_CONFIG_FILE", awsConfig)
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(dir, "none"))
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	b, err := os.ReadFile(filepath.Join("testdata", "valid-clouds.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := factory.Parse([]byte(strings.ReplaceAll(string(b), "TOKEN_FILE", token)))
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Providers[0].AWS; !got.Spot || got.SpotMaxPrice != "0.0050" || len(got.SecurityGroupIDs) != 1 {
		t.Errorf("aws entry parsed as %+v", got)
	}
	if got := cfg.Providers[2].Hetzner; got.Location != "hel1" || time.Duration(got.RequestTimeout) != 20*time.Second || len(got.FirewallIDs) != 1 {
		t.Errorf("hetzner entry parsed as %+v", got)
	}
	set, err := factory.Build(cfg, factory.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	var names []string
	for _, e := range set.Entries() {
		names = append(names, e.Name+"/"+e.Type)
	}
	if d := cmp.Diff([]string{"ec2-eu/aws", "ec2-us-account-b/aws", "hel/hetzner"}, names); d != "" {
		t.Errorf("entries (-want +got):\n%s", d)
	}
}

// TestBuildNamesMissingCloudSetup: a token file or profile that is not there fails the start,
// naming the entry and what is missing.
func TestBuildNamesMissingCloudSetup(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(dir, "none"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(dir, "none"))
	tests := map[string]struct {
		yaml, want string
	}{
		"hetzner token file": {"providers:\n- name: hel\n  type: hetzner\n  hetzner: {tokenFile: " + filepath.Join(dir, "token") + "}\n",
			"provider hel: hetzner: tokenFile: open " + filepath.Join(dir, "token") + ": no such file or directory"},
		"empty hetzner token": {"providers:\n- name: hel\n  type: hetzner\n  hetzner: {tokenFile: /dev/null}\n",
			"provider hel: hetzner: tokenFile /dev/null"},
		"aws profile": {"providers:\n- name: ec2\n  type: aws\n  aws: {region: eu-west-1, profile: nobody}\n",
			`provider ec2: aws: config (the standard chain: AWS_* environment, web identity for IRSA, shared config profile "nobody")`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			cfg, err := factory.Parse([]byte(tc.yaml))
			if err != nil {
				t.Fatal(err)
			}
			_, err = factory.Build(cfg, factory.Deps{})
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Errorf("Build: %v, want it to start with %q", err, tc.want)
			}
		})
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
