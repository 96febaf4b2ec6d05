package hooks

import (
	"strings"
	"testing"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
	"github.com/proxy-operator/proxy-operator/metacontroller"
)

// TestCloudInitSecretMustBeTheProxys: a related object filed under the Proxy's namespace and
// the Secret's name but describing another namespace's Secret is refused (issue 10, item 7).
func TestCloudInitSecretMustBeTheProxys(t *testing.T) {
	p := &v1.Proxy{}
	p.Namespace = "crawl"
	p.Spec.CloudInit = &v1.CloudInitSpec{SecretRef: &v1.SecretKeyRef{Name: "ci", Key: "user-data"}}
	for _, tc := range []struct{ name, ns, obj string }{
		{"other namespace", "team-b", "ci"},
		{"other name", "crawl", "other"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			related := metacontroller.RelativeObjects{"Secret.v1": {"crawl/ci": secretJSON(t, tc.ns, tc.obj, labelled, map[string]string{"user-data": "stolen"})}}
			got, err := resolveCloudInit(p, related)
			if err == nil || got != "" || !strings.Contains(err.Error(), "not the Proxy's namespace and name") {
				t.Fatalf("resolveCloudInit = %q, %v; want an error naming the mismatch", got, err)
			}
		})
	}
}
