package kube_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/proxy-operator/proxy-operator/internal/kube"
)

const kubeconfig = `apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://127.0.0.1:6443"}
users:
- name: u
  user: {token: abc}
contexts:
- name: x
  context: {cluster: c, user: u}
current-context: x
`

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestConfig(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	if err := os.WriteFile(good, []byte(kubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad")
	if err := os.WriteFile(bad, []byte("clusters: [not yaml"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		o       kube.Options
		want    kube.Source
		wantErr string
		noClust bool
	}{
		{name: "flag", o: kube.Options{Kubeconfig: good}, want: kube.SourceFlag},
		{name: "flag wins over env", o: kube.Options{Kubeconfig: good, Getenv: env(map[string]string{"KUBECONFIG": bad})}, want: kube.SourceFlag},
		{name: "env", o: kube.Options{Getenv: env(map[string]string{"KUBECONFIG": good})}, want: kube.SourceEnv},
		{name: "nothing", o: kube.Options{Getenv: env(nil)}, noClust: true},
		{name: "missing flag file", o: kube.Options{Kubeconfig: filepath.Join(dir, "absent")}, wantErr: "kubeconfig flag config"},
		{name: "bad env file", o: kube.Options{Getenv: env(map[string]string{"KUBECONFIG": bad})}, wantErr: "KUBECONFIG config"},
		// In a cluster (the service env set) but without the service account files: an error,
		// not a quiet client-less run.
		{name: "in cluster without token", o: kube.Options{Getenv: env(map[string]string{"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"})}, wantErr: "in-cluster config"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, src, err := kube.Config(tc.o)
			switch {
			case tc.noClust:
				if !errors.Is(err, kube.ErrNoCluster) {
					t.Fatalf("err = %v, want ErrNoCluster", err)
				}
				return
			case tc.wantErr != "":
				if err == nil || errors.Is(err, kube.ErrNoCluster) || !contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			case err != nil:
				t.Fatal(err)
			}
			if src != tc.want {
				t.Errorf("source %q, want %q", src, tc.want)
			}
			if cfg.Host != "https://127.0.0.1:6443" || cfg.BearerToken != "abc" {
				t.Errorf("host %q token %q", cfg.Host, cfg.BearerToken)
			}
			if cfg.QPS != kube.DefaultQPS || cfg.Burst != kube.DefaultBurst || cfg.Timeout != kube.DefaultTimeout || cfg.UserAgent != kube.UserAgent {
				t.Errorf("budget qps=%v burst=%d timeout=%s ua=%q", cfg.QPS, cfg.Burst, cfg.Timeout, cfg.UserAgent)
			}
		})
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
