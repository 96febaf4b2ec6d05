// Package parents owns the operator's own view, from the API server, of the parents
// Metacontroller calls the hooks about (Proxies and ProxyPools): one dynamic informer per
// resource, its objects trimmed to identity and spec. It answers "what does the API server say
// about this parent", never what to do about a disagreement (the hooks decide that).
package parents

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
	"github.com/proxy-operator/proxy-operator/internal/kube"
)

// Kind names the resource a parent is of.
type Kind int

// The kinds of parents the hooks serve.
const (
	Proxy Kind = iota
	Pool
)

func (k Kind) String() string {
	if k == Pool {
		return "proxypools"
	}
	return "proxies"
}

// Parent is what the API server says about one parent: its identity, whether it is being
// deleted, and its spec (decoded once, when the watch delivered it).
type Parent struct {
	UID        types.UID
	Generation int64
	Deleting   bool
	// spec is a *v1.ProxySpec or a *v1.ProxyPoolSpec; nil when the stored spec did not decode.
	spec any
	// labels are the parent's CheckedLabels (nil when it has none).
	labels map[string]string
}

// CheckedLabels are the labels a body must agree on besides the spec, because they change
// what leases hand out: a pool's draining mark on a member Proxy (the lease store grants a
// draining member nothing). Only these labels are kept in the cache.
var CheckedLabels = []string{v1.PoolDrainingLabel}

// object is what the cache holds of a parent: its identity and deletion, and its spec decoded
// into the Go type, and its CheckedLabels. Status, other labels, annotations, finalizers and
// managedFields are not kept.
type object struct {
	metav1.TypeMeta
	metav1.ObjectMeta
	spec any
}

// DeepCopyObject implements runtime.Object; the spec is never modified, so it is shared.
func (o *object) DeepCopyObject() runtime.Object {
	c := *o
	o.ObjectMeta.DeepCopyInto(&c.ObjectMeta)
	return &c
}

// syncWarnAfter is how long Run waits for the first list before it says, once, that the
// hooks are still waiting on it (the most likely cause: a CRD not installed, or no list/watch
// right on it).
const syncWarnAfter = 30 * time.Second

// Cache is the informer cache of Proxies and ProxyPools. Build it with New, run it with Run;
// until Synced, it knows nothing.
type Cache struct {
	proxies cache.SharedIndexInformer
	pools   cache.SharedIndexInformer
	log     *slog.Logger
	synced  atomic.Bool
}

// New builds the cache over a dynamic client (cluster-wide; no resync: a watch keeps it
// current, and a periodic resync would only repeat what it holds).
func New(dyn dynamic.Interface, log *slog.Logger) (*Cache, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Cache{log: log, proxies: informer(dyn, kube.ProxyResource), pools: informer(dyn, kube.PoolResource)}
	if err := c.proxies.SetTransform(Trim(Proxy)); err != nil {
		return nil, fmt.Errorf("parents: %w", err)
	}
	if err := c.pools.SetTransform(Trim(Pool)); err != nil {
		return nil, fmt.Errorf("parents: %w", err)
	}
	return c, nil
}

// informer is the cluster-wide informer of gvr over the dynamic client, as client-go's
// dynamicinformer builds it; that package is not imported because it brings client-go's typed
// informers, every API group of Kubernetes, into the binary (decision 0284).
func informer(dyn dynamic.Interface, gvr schema.GroupVersionResource) cache.SharedIndexInformer {
	r := dyn.Resource(gvr)
	lw := &cache.ListWatch{
		ListFunc:             func(o metav1.ListOptions) (runtime.Object, error) { return r.List(context.Background(), o) },
		WatchFunc:            func(o metav1.ListOptions) (watch.Interface, error) { return r.Watch(context.Background(), o) },
		ListWithContextFunc:  func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return r.List(ctx, o) },
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) { return r.Watch(ctx, o) },
	}
	return cache.NewSharedIndexInformerWithOptions(cache.ToListWatcherWithWatchListSemantics(lw, dyn), &unstructured.Unstructured{},
		cache.SharedIndexInformerOptions{Indexers: cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}, ObjectDescription: gvr.String()})
}

// Run starts the informers and blocks until ctx ends. It returns nil then: an informer that
// cannot list retries with backoff, and meanwhile Synced stays false.
func (c *Cache) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	for _, inf := range []cache.SharedIndexInformer{c.proxies, c.pools} {
		wg.Go(func() { inf.RunWithContext(ctx) })
	}
	start := time.Now()
	warn := time.AfterFunc(syncWarnAfter, func() {
		c.log.Warn("API server cache of proxies and proxypools not synced yet: hooks act on nothing until it is", "waited", time.Since(start).Round(time.Second).String())
	})
	synced := cache.WaitForCacheSync(ctx.Done(), c.proxies.HasSynced, c.pools.HasSynced)
	warn.Stop()
	if synced {
		c.synced.Store(true)
		c.log.Info("API server cache of proxies and proxypools synced", "proxies", len(c.proxies.GetStore().ListKeys()),
			"pools", len(c.pools.GetStore().ListKeys()), "after", time.Since(start).Round(time.Millisecond).String())
	}
	<-ctx.Done()
	return nil
}

// Synced says whether the first list of both resources has been read.
func (c *Cache) Synced() bool { return c.synced.Load() }

// Get returns what the cache holds for the parent namespace/name of kind k; false when it
// holds nothing (absent, or not synced yet).
func (c *Cache) Get(k Kind, namespace, name string) (Parent, bool) {
	inf := c.proxies
	if k == Pool {
		inf = c.pools
	}
	// The indexer, not the dynamic lister: the lister asserts *unstructured.Unstructured, and
	// the cache holds trimmed objects.
	obj, exists, err := inf.GetIndexer().GetByKey(namespace + "/" + name)
	if err != nil {
		c.log.Error("API server cache lookup failed", "kind", k.String(), "key", namespace+"/"+name, "err", err)
		return Parent{}, false
	}
	if !exists {
		return Parent{}, false
	}
	o, ok := obj.(*object)
	if !ok {
		return Parent{}, false
	}
	return Parent{UID: o.UID, Generation: o.Generation, Deleting: o.DeletionTimestamp != nil, spec: o.spec, labels: o.Labels}, true
}

// Trim returns the transform of the informer of kind k: it keeps of an object only what a
// hook call is checked against (name, namespace, uid, generation, resourceVersion,
// deletionTimestamp) and its spec, decoded into the kind's Go type once here rather than on
// every hook call, and the CheckedLabels. Status, other labels, annotations, finalizers and
// managedFields are dropped, so
// 10,000 Proxies cost their specs and little more. Objects it does not know pass unchanged
// (the informer's tombstones).
func Trim(k Kind) cache.TransformFunc {
	return func(obj any) (any, error) {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			return obj, nil
		}
		o := &object{
			TypeMeta: metav1.TypeMeta{APIVersion: u.GetAPIVersion(), Kind: u.GetKind()},
			ObjectMeta: metav1.ObjectMeta{Name: u.GetName(), Namespace: u.GetNamespace(), UID: u.GetUID(),
				Generation: u.GetGeneration(), ResourceVersion: u.GetResourceVersion(), DeletionTimestamp: u.GetDeletionTimestamp()},
		}
		for _, key := range CheckedLabels {
			if v, ok := u.GetLabels()[key]; ok {
				if o.Labels == nil {
					o.Labels = map[string]string{}
				}
				o.Labels[key] = v
			}
		}
		raw, _, _ := unstructured.NestedMap(u.Object, "spec")
		var spec any = &v1.ProxySpec{}
		if k == Pool {
			spec = &v1.ProxyPoolSpec{}
		}
		// A spec that does not decode (the CRD's schema makes that unlikely) is kept as nil:
		// every body then disagrees with it, as it should.
		if runtime.DefaultUnstructuredConverter.FromUnstructured(raw, spec) == nil {
			o.spec = spec
		}
		return o, nil
	}
}

// Reasons a hook body disagrees with the API server (the label of the disagreement metric).
const (
	// ReasonNotSynced: the cache has not read its first list yet, so it cannot agree.
	ReasonNotSynced = "not_synced"
	// ReasonAbsent: the API server holds no such parent (not yet seen, or gone).
	ReasonAbsent = "absent"
	// ReasonUID: the API server's parent of that name is another object.
	ReasonUID = "uid"
	// ReasonNotDeleting: a finalize call for a parent the API server is not deleting.
	ReasonNotDeleting = "not_deleting"
	// ReasonSpec: the body's spec is not the API server's.
	ReasonSpec = "spec"
	// ReasonLabels: the body's value of a CheckedLabels label is not the API server's.
	ReasonLabels = "labels"
)

// Reasons lists every reason, for metrics to start at zero.
var Reasons = []string{ReasonNotSynced, ReasonAbsent, ReasonUID, ReasonNotDeleting, ReasonSpec, ReasonLabels}

// Source is what Check reads: the Cache, or a stand-in in tests.
type Source interface {
	Synced() bool
	Get(k Kind, namespace, name string) (Parent, bool)
}

// Check says whether src agrees with a hook body about the parent namespace/name of kind k:
// "" when it does, else the reason it does not. The body agrees when the API server holds the
// parent with its uid, is deleting it if the body is a finalize call, holds spec (S is
// v1.ProxySpec for Proxy, v1.ProxyPoolSpec for Pool; nil and empty maps and slices are equal)
// and the same CheckedLabels as labels.
func Check[S any](src Source, k Kind, namespace, name string, uid types.UID, finalizing bool, labels map[string]string, spec *S) string {
	if !src.Synced() {
		return ReasonNotSynced
	}
	cached, ok := src.Get(k, namespace, name)
	switch {
	case !ok:
		return ReasonAbsent
	case cached.UID != uid:
		return ReasonUID
	case finalizing && !cached.Deleting:
		return ReasonNotDeleting
	}
	want, ok := cached.spec.(*S)
	if !ok || !equality.Semantic.DeepEqual(want, spec) {
		return ReasonSpec
	}
	for _, key := range CheckedLabels {
		bv, bok := labels[key]
		cv, cok := cached.labels[key]
		if bv != cv || bok != cok {
			return ReasonLabels
		}
	}
	return ""
}
