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
	tests := []validateCase{
		{"ipv4", ext("198.51.100.7"), ""},
		{"ipv6", ext("2001:db8::7"), ""},
		{"name", ext("proxy-1.example.com"), ""},
		{"space", ext("a b"), `spec.endpoint.host: "a b" is not an IP address or a DNS name`},
		{"url", ext("http://x"), "spec.endpoint.host"},
		{"secret", ref("cloud-init.v1", "user-data"), ""},
		{"secret in another namespace", ref("team-b/ci", "user-data"), `spec.cloudInit.secretRef.name: "team-b/ci" is not a Secret name`},
		{"secret key with a slash", ref("ci", "a/b"), "spec.cloudInit.secretRef.key"},
	}
	runValidate(t, tests)
}

// TestValidateBounds: what one Proxy may ask for is bounded the same as in the CRD schema, so a
// body that skipped the API server cannot make the operator hold more (issue 21).
func TestValidateBounds(t *testing.T) {
	spec := func(f func(*ProxySpec)) ProxySpec {
		s := ProxySpec{Mode: ModeManaged, Provider: "mock"}
		f(&s)
		return s
	}
	many := map[string]string{}
	for i := range MaxAttributes + 1 {
		many[strings.Repeat("k", i+1)] = "v"
	}
	ml := func(v int32) *int32 { return &v }
	tests := []validateCase{
		{"longest key and value", spec(func(s *ProxySpec) {
			s.Attributes = map[string]string{strings.Repeat("k", MaxAttributeKeyLength): strings.Repeat("v", MaxAttributeValueLength)}
		}), ""},
		{"key too long", spec(func(s *ProxySpec) { s.Attributes = map[string]string{strings.Repeat("k", 64): "v"} }), "spec.attributes: name"},
		{"empty key", spec(func(s *ProxySpec) { s.Attributes = map[string]string{"": "v"} }), "spec.attributes: name"},
		{"value too long", spec(func(s *ProxySpec) { s.Attributes = map[string]string{"geo": strings.Repeat("v", 44000)} }), "spec.attributes[geo]: value of 44000 characters, at most 256"},
		{"too many", spec(func(s *ProxySpec) { s.Attributes = many }), "spec.attributes: 33 attributes, at most 32"},
		{"maxLeases at the ceiling", spec(func(s *ProxySpec) { s.MaxLeases = ml(MaxMaxLeases) }), ""},
		{"maxLeases over the ceiling", spec(func(s *ProxySpec) { s.MaxLeases = ml(10000) }), "spec.maxLeases: 10000 is out of range 0-1000"},
	}
	runValidate(t, tests)
}

// validateCase is one spec and a substring of the error Validate must give (empty: valid).
type validateCase struct {
	name    string
	spec    ProxySpec
	wantErr string
}

func runValidate(t *testing.T, tests []validateCase) {
	t.Helper()
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
