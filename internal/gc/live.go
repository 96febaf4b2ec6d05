package gc

import (
	"context"
	"errors"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
	"github.com/proxy-operator/proxy-operator/internal/fleet"
	"github.com/proxy-operator/proxy-operator/internal/kube"
)

// FleetSource trusts the in-process fleet view once it is complete: --fleet-warmup after
// start, by when Metacontroller's resyncPeriodSeconds has synced every Proxy at least once.
// It is for running outside a cluster (the mock fleet on a laptop); in a cluster, APISource is
// the authority, because a view that only waited can be incomplete if Metacontroller was
// down the whole time.
type FleetSource struct {
	View *fleet.View
}

// Name implements LiveSource.
func (FleetSource) Name() string { return "fleet" }

// LiveUIDs implements LiveSource. An incomplete or empty view is an error: empty after the
// warmup more likely means nothing was synced than that no Proxy exists.
func (s FleetSource) LiveUIDs(context.Context) (map[string]bool, error) {
	if s.View == nil {
		return nil, errors.New("no fleet view")
	}
	if !s.View.Complete() {
		return nil, fmt.Errorf("fleet view not complete before %s", s.View.CompleteAt().UTC().Format(time.RFC3339))
	}
	all := s.View.List()
	if len(all) == 0 {
		return nil, errors.New("fleet view is empty")
	}
	out := make(map[string]bool, len(all))
	for _, p := range all {
		out[p.UID] = true
	}
	return out, nil
}

// Defaults for APISource fields left zero.
const DefaultPageSize = 500

// ProxyResource is the Proxies' resource, listed across all namespaces.
var ProxyResource = kube.ProxyResource

// APISource lists Proxies from the Kubernetes API server with client-go's dynamic client: a
// paginated list across all namespaces (the ClusterRole grants list). Only a list read to its
// last page counts; any error (an expired continue token included), a wrong kind or an item
// without a UID fails the whole answer. The client's config carries the timeout and the
// rate limit (package kube).
type APISource struct {
	Client   dynamic.Interface
	PageSize int64
}

// Name implements LiveSource.
func (*APISource) Name() string { return "api" }

// LiveUIDs implements LiveSource.
func (s *APISource) LiveUIDs(ctx context.Context) (map[string]bool, error) {
	if s.Client == nil {
		return nil, errors.New("no Kubernetes client")
	}
	pageSize := s.PageSize
	if pageSize <= 0 {
		pageSize = DefaultPageSize
	}
	out := map[string]bool{}
	opts := metav1.ListOptions{Limit: pageSize}
	for page := 1; ; page++ {
		// 410 Gone (an expired continue token) is an error like any other: the next sweep
		// starts over rather than mixing two snapshots.
		l, err := s.Client.Resource(ProxyResource).List(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("list proxies page %d: %w", page, err)
		}
		if l.GetKind() != v1.Kind+"List" {
			return nil, fmt.Errorf("list proxies page %d: answer kind %q, want %sList", page, l.GetKind(), v1.Kind)
		}
		for _, it := range l.Items {
			uid := string(it.GetUID())
			if uid == "" {
				return nil, fmt.Errorf("list proxies page %d: %s/%s has no uid", page, it.GetNamespace(), it.GetName())
			}
			out[uid] = true
		}
		if l.GetContinue() == "" {
			return out, nil
		}
		opts.Continue = l.GetContinue()
	}
}

// Sources picks the live-UID authority: the API server's list when the operator has a
// Kubernetes client (in a cluster, or given a kubeconfig), else the fleet view once complete.
func Sources(view *fleet.View, client dynamic.Interface) []LiveSource {
	if client != nil {
		return []LiveSource{&APISource{Client: client}}
	}
	return []LiveSource{FleetSource{View: view}}
}
