package v1alpha1

import (
	"strings"
	"testing"
)

func TestValidateEndpointHostAndSecretRef(t *testing.T) {
	ext := func(host string) ProxySpec {
		return ProxySpec{Mode: ModeExternal, Endpoint: &EndpointSpec{Host: host, Port: 3128}}
	}
	ref := func(name, key string) ProxySpec {
		return ProxySpec{Mode: ModeManaged, Provider: "mock", CloudInit: &CloudInitSpec{SecretRef: &SecretKeyRef{Name: name, Key: key}}}
	}
	tests := []struct {
		name    string
		spec    ProxySpec
		wantErr string // substring; empty: valid
	}{
		{"ipv4", ext("198.51.100.7"), ""},
		{"ipv6", ext("2001:db8::7"), ""},
		{"name", ext("proxy-1.example.com"), ""},
		{"space", ext("a b"), `spec.endpoint.host: "a b" is not an IP address or a DNS name`},
		{"url", ext("http://x"), "spec.endpoint.host"},
		{"secret", ref("cloud-init.v1", "user-data"), ""},
		{"secret in another namespace", ref("team-b/ci", "user-data"), `spec.cloudInit.secretRef.name: "team-b/ci" is not a Secret name`},
		{"secret key with a slash", ref("ci", "a/b"), "spec.cloudInit.secretRef.key"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.spec.Validate()
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("Validate() = %v, want nil", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("Validate() = %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}
