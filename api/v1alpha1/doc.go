// Package v1alpha1 owns the Proxy API (crawl.example.com/v1alpha1): the Go types, their
// kubebuilder markers (from which crds/ is generated) and the defaults the operator applies
// to bodies that did not pass through the API server. It knows nothing of providers or hooks.
//
// +kubebuilder:object:generate=false
// +groupName=crawl.example.com
package v1alpha1

// Group and Version name the API; Kind is the one kind it has.
const (
	Group   = "crawl.example.com"
	Version = "v1alpha1"
	Kind    = "Proxy"
)

// APIVersion is the apiVersion field of every Proxy.
const APIVersion = Group + "/" + Version

// Resource is the plural resource name of Proxies (the short name is px).
const Resource = "proxies"
