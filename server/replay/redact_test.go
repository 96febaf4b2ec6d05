package replay

import (
	"strings"
	"testing"
)

// TestRedactSecretsWithoutKind: a related Secret as Metacontroller keys it ("Secret.v1", no
// kind) kept its data in a capture, and stringData was kept everywhere (issue 30, item 7).
func TestRedactSecretsWithoutKind(t *testing.T) {
	tests := []struct {
		name, body string
	}{
		{"related without kind", `{"related":{"Secret.v1":{"team/init":{"metadata":{"name":"init"},"data":{"cloud-init":"c2VjcmV0LXZhbHVl"}}}}}`},
		{"children without kind", `{"children":{"Secret.v1":{"creds":{"apiVersion":"v1","data":{"password":"c2VjcmV0LXZhbHVl"}}}}}`},
		{"stringData of a kind Secret", `{"attachments":[{"kind":"Secret","stringData":{"password":"secret-value"}}]}`},
		{"stringData without kind", `{"related":{"x":{"y":{"stringData":{"password":"secret-value"}}}}}`},
		{"kind Secret data", `{"object":{"kind":"Secret","data":{"password":"c2VjcmV0LXZhbHVl"}}}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := string(redactSecrets([]byte(tc.body)))
			if strings.Contains(got, "secret-value") || strings.Contains(got, "c2VjcmV0LXZhbHVl") {
				t.Errorf("redactSecrets kept a secret: %s", got)
			}
			if !strings.Contains(got, Redacted) {
				t.Errorf("redactSecrets(%s) = %s, want %s in place of the value", tc.body, got, Redacted)
			}
		})
	}
	// Other objects keep their data.
	cm := `{"related":{"ConfigMap.v1":{"a":{"data":{"k":"v"}}}}}`
	if got := string(redactSecrets([]byte(cm))); got != cm {
		t.Errorf("a ConfigMap changed: %s", got)
	}
}
