package hooks

import (
	"encoding/json"
	"fmt"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
	"github.com/proxy-operator/proxy-operator/metacontroller"
)

// CloudInitLabel must be "true" on a Secret the operator will read cloud-init from, so that a
// Proxy author cannot make the operator copy an arbitrary Secret into a machine.
const CloudInitLabel = "crawl.example.com/cloud-init"

// secretTypeKey is how Metacontroller keys related Secrets.
var secretTypeKey = metacontroller.TypeKey("Secret", "v1")

type secret struct {
	Metadata struct {
		Name      string            `json:"name"`
		Namespace string            `json:"namespace"`
		Labels    map[string]string `json:"labels"`
	} `json:"metadata"`
	Data map[string][]byte `json:"data"`
}

// resolveCloudInit returns the cloud-init content of a Proxy: inline, or from its labelled Secret.
func resolveCloudInit(p *v1.Proxy, related metacontroller.RelativeObjects) (string, error) {
	ci := p.Spec.CloudInit
	switch {
	case ci == nil:
		return "", nil
	case ci.Inline != nil:
		return *ci.Inline, nil
	case ci.SecretRef == nil:
		return "", nil
	}
	ref := ci.SecretRef
	raw, ok := related.Lookup(secretTypeKey, p.Namespace, ref.Name)
	if !ok {
		return "", fmt.Errorf("secret %s/%s not found, or not labelled %s=true", p.Namespace, ref.Name, CloudInitLabel)
	}
	var s secret
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", fmt.Errorf("secret %s/%s: unreadable: %w", p.Namespace, ref.Name, err)
	}
	if s.Metadata.Namespace != p.Namespace || s.Metadata.Name != ref.Name {
		// The body's key said one thing, the object another: never read a Secret of
		// another namespace into this Proxy's machine.
		return "", fmt.Errorf("secret %s/%s: the related object is %s/%s, not the Proxy's namespace and name", p.Namespace, ref.Name, s.Metadata.Namespace, s.Metadata.Name)
	}
	if s.Metadata.Labels[CloudInitLabel] != "true" {
		return "", fmt.Errorf("secret %s/%s is not labelled %s=true", p.Namespace, ref.Name, CloudInitLabel)
	}
	v, ok := s.Data[ref.Key]
	if !ok {
		return "", fmt.Errorf("secret %s/%s has no key %q", p.Namespace, ref.Name, ref.Key)
	}
	return string(v), nil
}
