// Package metacontroller owns the wire contract with Metacontroller v4.17 (hook version v2):
// the request and response bodies of the sync, finalize and customize hooks, mirrored here
// because Metacontroller's own module cannot be imported. The YAML beside it installs the
// CompositeController. It knows nothing of what the operator decides.
package metacontroller

import (
	"encoding/json"
	"fmt"
	"strings"
)

// SyncRequest is the body of a sync or finalize call.
type SyncRequest struct {
	Controller json.RawMessage `json:"controller,omitempty"`
	Parent     json.RawMessage `json:"parent"`
	Children   RelativeObjects `json:"children,omitempty"`
	Related    RelativeObjects `json:"related,omitempty"`
	Finalizing bool            `json:"finalizing,omitempty"`
}

// RelativeObjects maps "<Kind>.<group>/<version>" (or "<Kind>.<version>" for the core group)
// to objects keyed by "namespace/name" (v2) or "name" (v1).
type RelativeObjects map[string]map[string]json.RawMessage

// Lookup returns the object of that type with that namespace and name, under either key style.
func (r RelativeObjects) Lookup(typeKey, namespace, name string) (json.RawMessage, bool) {
	objs := r[typeKey]
	if objs == nil {
		return nil, false
	}
	if o, ok := objs[namespace+"/"+name]; ok {
		return o, true
	}
	o, ok := objs[name]
	return o, ok
}

// TypeKey builds the map key Metacontroller uses for a kind in an apiVersion.
func TypeKey(kind, apiVersion string) string { return kind + "." + apiVersion }

// SyncResponse is the answer to a sync or finalize call. Metacontroller decodes it strictly:
// no field may be added here that it does not know.
type SyncResponse struct {
	Status             any               `json:"status"`
	Children           []json.RawMessage `json:"children"`
	ResyncAfterSeconds float64           `json:"resyncAfterSeconds,omitempty"`
	Finalized          bool              `json:"finalized,omitempty"`
}

// CustomizeRequest is the body of a customize call.
type CustomizeRequest struct {
	Controller json.RawMessage `json:"controller,omitempty"`
	Parent     json.RawMessage `json:"parent"`
}

// CustomizeResponse asks Metacontroller for related objects.
type CustomizeResponse struct {
	RelatedResources []RelatedResourceRule `json:"relatedResources"`
}

// RelatedResourceRule selects related objects of one resource type.
type RelatedResourceRule struct {
	APIVersion    string         `json:"apiVersion"`
	Resource      string         `json:"resource"`
	LabelSelector *LabelSelector `json:"labelSelector,omitempty"`
	Namespace     string         `json:"namespace,omitempty"`
	Names         []string       `json:"names,omitempty"`
}

// LabelSelector is the matchLabels form of a Kubernetes label selector.
type LabelSelector struct {
	MatchLabels map[string]string `json:"matchLabels,omitempty"`
}

// Validate checks only that the body carries a parent object, the one field every sync and
// finalize body must have; the parent itself is checked when it is decoded (server/hooks).
func (r *SyncRequest) Validate() error {
	p := strings.TrimSpace(string(r.Parent))
	if p == "" || p == "null" {
		return fmt.Errorf("body has no parent object")
	}
	return nil
}
