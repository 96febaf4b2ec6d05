//go:build !omit_aws && !omit_gcp && !omit_hetzner

package factory_test

// The tests that build the cloud providers' real clients: a binary built with the omit tags has
// none (omit_test.go checks what it says instead).

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/proxy-operator/proxy-operator/providers/factory"
)

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
