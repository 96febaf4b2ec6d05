package providers

import (
	"encoding/json"
	"maps"
	"slices"
)

// Parent identifies the Proxy a sync is about, for providers whose instances are its children.
type Parent struct {
	Namespace string
	Name      string
	UID       string
}

// ChildBinder is an optional capability of a Provider whose instances are Kubernetes objects
// that Metacontroller creates and deletes as children of the Proxy (a Pod, say), rather than
// machines the operator creates through an API. Such a provider cannot act on its own: it only
// sees what the sync request shows and only changes what the sync response returns.
//
// Bind returns a provider scoped to one sync call. Its Get and ListByTag read the observed
// children; its Create and Delete change the desired set, which Children returns for the
// response. The sync core drives it through the same four methods as any cloud.
type ChildBinder interface {
	// Bind scopes the provider to one sync of parent. observed is the request's children,
	// keyed "<Kind>.<version>" then "namespace/name" or "name".
	Bind(parent Parent, observed map[string]map[string]json.RawMessage) BoundProvider
}

// BoundProvider is a request-scoped Provider whose effect is the children it returns.
type BoundProvider interface {
	Provider
	// Children returns the desired children for the sync response: the instance Get found
	// (unless Delete dropped it) and the one Create made. When the sync made no provider call
	// it returns every observed child unchanged, so a skipped observation deletes nothing.
	// Finalizing drops them all.
	Children(finalizing bool) []json.RawMessage
}

// BindChildren binds p when it (or the provider it instruments) is a ChildBinder. The bound
// provider is counted under the same metrics as p. ok is false for every other provider.
func BindChildren(p Provider, parent Parent, observed map[string]map[string]json.RawMessage) (bound Provider, children BoundProvider, ok bool) {
	inner := p
	var counted *instrumented
	for {
		if b, isBinder := inner.(ChildBinder); isBinder {
			children = b.Bind(parent, observed)
			break
		}
		u, canUnwrap := inner.(interface{ Unwrap() Provider })
		if !canUnwrap {
			return p, nil, false
		}
		if i, isCounted := inner.(*instrumented); isCounted && counted == nil {
			counted = i
		}
		inner = u.Unwrap()
	}
	if counted != nil {
		return &instrumented{name: counted.name, p: children, m: counted.m}, children, true
	}
	return children, children, true
}

// DesiredChildren is the children list of a sync response: the bound provider's when there is
// one, else every observed child unchanged (a Proxy whose spec is invalid or whose provider is
// gone from the config keeps what runs, as a cloud machine would). Finalizing returns none:
// the finalize hook tears children down and reports the Proxy finalized once they are gone.
// Never nil, so the response never carries a null.
func DesiredChildren(b BoundProvider, observed map[string]map[string]json.RawMessage, finalizing bool) []json.RawMessage {
	if b != nil {
		return b.Children(finalizing)
	}
	out := []json.RawMessage{}
	if finalizing {
		return out
	}
	for _, typ := range slices.Sorted(maps.Keys(observed)) {
		objs := observed[typ]
		for _, key := range slices.Sorted(maps.Keys(objs)) {
			if c, ok := keptChild(objs[key]); ok {
				out = append(out, c)
			}
		}
	}
	return out
}

// keptChild returns an observed object as a desired child: without status and server-set
// metadata, and not at all when it is already being deleted.
func keptChild(raw json.RawMessage) (json.RawMessage, bool) {
	var obj map[string]any
	if err := json.Unmarshal(raw, &obj); err != nil {
		return nil, false
	}
	meta, _ := obj["metadata"].(map[string]any)
	if meta == nil || meta["deletionTimestamp"] != nil {
		return nil, false
	}
	kept := map[string]any{}
	for _, k := range []string{"name", "namespace", "labels", "annotations"} {
		if v, ok := meta[k]; ok && v != nil {
			kept[k] = v
		}
	}
	out := map[string]any{"metadata": kept}
	for k, v := range obj {
		if k != "metadata" && k != "status" && v != nil {
			out[k] = v
		}
	}
	b, err := json.Marshal(out)
	return b, err == nil
}
