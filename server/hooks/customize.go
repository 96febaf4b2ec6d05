package hooks

import (
	"context"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
	"github.com/proxy-operator/proxy-operator/metacontroller"
	"github.com/proxy-operator/proxy-operator/server/httpx"
)

// customize asks Metacontroller for the labelled cloud-init Secrets in the parent's namespace,
// and for an External proxy's credentials Secret by name.
// The answer depends only on the parent's namespace, as Metacontroller caches it per generation.
func (h *Hooks) customize(_ context.Context, hook string, body []byte, _ *Exchange) (any, error) {
	var req metacontroller.CustomizeRequest
	if err := httpx.DecodeJSON(body, &req, hook+" request"); err != nil {
		return nil, err
	}
	if len(req.Parent) == 0 || string(req.Parent) == "null" {
		return nil, httpx.Errorf(400, "%s request: body has no parent object", hook)
	}
	p, err := decodeParent(req.Parent)
	if err != nil {
		return nil, err
	}
	rules := []metacontroller.RelatedResourceRule{}
	if p.Spec.CloudInit != nil && p.Spec.CloudInit.SecretRef != nil {
		rules = append(rules, metacontroller.RelatedResourceRule{
			APIVersion:    "v1",
			Resource:      "secrets",
			Namespace:     p.Namespace,
			LabelSelector: &metacontroller.LabelSelector{MatchLabels: map[string]string{CloudInitLabel: "true"}},
		})
	}
	if r := p.Spec.CredentialsSecretRef; r != nil && p.Spec.Mode == v1.ModeExternal {
		// Exactly the Secret the spec names, nothing else of the namespace.
		rules = append(rules, metacontroller.RelatedResourceRule{
			APIVersion: "v1",
			Resource:   "secrets",
			Namespace:  p.Namespace,
			Names:      []string{r.Name},
		})
	}
	return metacontroller.CustomizeResponse{RelatedResources: rules}, nil
}
