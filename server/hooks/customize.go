package hooks

import (
	"context"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
	"github.com/proxy-operator/proxy-operator/metacontroller"
	"github.com/proxy-operator/proxy-operator/server/httpx"
)

// customize asks Metacontroller for the one Secret the parent's cloud-init names, in the
// parent's namespace: asking for every labelled Secret let other Secrets of the namespace
// swell each sync body past its limit. Metacontroller does not combine names with a label
// selector (metacontroller/metacontroller@v4.17.2:pkg/controller/common/customize/manager.go,
// getRelatedObjectsSelectionType), so the label is checked when the Secret is read.
// An External proxy's credentials Secret is asked for by name too.
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
			APIVersion: "v1",
			Resource:   "secrets",
			Namespace:  p.Namespace,
			Names:      []string{p.Spec.CloudInit.SecretRef.Name},
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
