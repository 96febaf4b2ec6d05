package hooks

import (
	"context"

	"github.com/proxy-operator/proxy-operator/metacontroller"
	"github.com/proxy-operator/proxy-operator/server/httpx"
)

// customize asks Metacontroller for the labelled cloud-init Secrets in the parent's namespace.
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
	return metacontroller.CustomizeResponse{RelatedResources: rules}, nil
}
