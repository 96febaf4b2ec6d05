package metacontroller_test

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"

	"github.com/proxy-operator/proxy-operator/internal/apiservertest"
)

const (
	applyTimeout = 2 * time.Minute
	// rbacTimeout bounds the wait for the RBAC authorizer's caches to see the new ClusterRole.
	rbacTimeout  = time.Minute
	fieldManager = "proxy-operator-apply-test"
	operatorSA   = "system:serviceaccount:" + namespace + ":proxy-operator"
)

var compositeControllers = schema.GroupVersionResource{Group: "metacontroller.k8s.io", Version: "v1alpha1", Resource: "compositecontrollers"}

// cluster is a real kube-apiserver with Metacontroller's v4.17.2 CRDs installed, and clients for it.
type cluster struct {
	dyn    dynamic.Interface
	kube   kubernetes.Interface
	mapper *restmapper.DeferredDiscoveryRESTMapper
}

func startCluster(t *testing.T) *cluster {
	t.Helper()
	cfg := apiservertest.Start(t, upstreamDir)
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &cluster{dyn: dyn, kube: kube, mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc))}
}

// resource finds where obj lives; a kind the discovery cache does not know yet (a CRD created a
// moment ago) is looked up again once.
func (c *cluster) resource(obj *unstructured.Unstructured) (dynamic.ResourceInterface, error) {
	gvk := obj.GroupVersionKind()
	m, err := c.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if meta.IsNoMatchError(err) {
		c.mapper.Reset()
		m, err = c.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", gvk, err)
	}
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		return c.dyn.Resource(m.Resource).Namespace(obj.GetNamespace()), nil
	}
	return c.dyn.Resource(m.Resource), nil
}

func decodeDoc(t *testing.T, doc string) *unstructured.Unstructured {
	t.Helper()
	obj := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(doc), &obj.Object); err != nil {
		t.Fatalf("rendered document does not parse: %v\n%s", err, doc)
	}
	return obj
}

func objKey(o *unstructured.Unstructured) string {
	return o.GetKind() + "/" + o.GetNamespace() + "/" + o.GetName()
}

// TestKustomizationAppliesToAPIServer applies the whole rendered install (`kubectl kustomize
// metacontroller/`, CompositeController included) object by object, in kustomize's order, to a
// real kube-apiserver that has Metacontroller's own v4.17.2 CRDs, with strict field validation:
// what `kubectl apply -k metacontroller/` sends (kubectl validates strictly on the server by
// default). Then it applies it again server-side, as a re-apply does, and checks what was stored.
func TestKustomizationAppliesToAPIServer(t *testing.T) {
	docs := renderDocs(t)
	c := startCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), applyTimeout)
	defer cancel()

	var objs []*unstructured.Unstructured
	for _, doc := range docs {
		objs = append(objs, decodeDoc(t, doc))
	}
	kinds := map[string]int{}
	for _, obj := range objs {
		kinds[obj.GetKind()]++
		res, err := c.resource(obj)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := res.Create(ctx, obj, metav1.CreateOptions{FieldManager: fieldManager, FieldValidation: metav1.FieldValidationStrict}); err != nil {
			t.Fatalf("create %s: %v", objKey(obj), err)
		}
		if obj.GetKind() == "CustomResourceDefinition" {
			waitEstablished(ctx, t, c, obj.GetName())
		}
	}
	if kinds["CompositeController"] != 2 || kinds["CustomResourceDefinition"] != 2 {
		t.Fatalf("render has %d CompositeControllers and %d CRDs, want 2 of each (proxies, proxypools)", kinds["CompositeController"], kinds["CustomResourceDefinition"])
	}
	t.Logf("created %d objects: %v", len(objs), kinds)

	t.Run("re-applied server-side, strictly, it converges", func(t *testing.T) {
		// The first server-side apply takes over the fields (managedFields change); the second
		// of the same manifest must then write nothing.
		for _, obj := range objs {
			res, err := c.resource(obj)
			if err != nil {
				t.Fatal(err)
			}
			body, err := obj.MarshalJSON()
			if err != nil {
				t.Fatal(err)
			}
			force := true
			opts := metav1.PatchOptions{FieldManager: fieldManager, FieldValidation: metav1.FieldValidationStrict, Force: &force}
			first, err := res.Patch(ctx, obj.GetName(), types.ApplyPatchType, body, opts)
			if err != nil {
				t.Errorf("server-side apply %s: %v", objKey(obj), err)
				continue
			}
			second, err := res.Patch(ctx, obj.GetName(), types.ApplyPatchType, body, opts)
			if err != nil {
				t.Errorf("server-side apply %s again: %v", objKey(obj), err)
				continue
			}
			if first.GetResourceVersion() != second.GetResourceVersion() {
				t.Errorf("%s: re-applying the same manifest wrote a new version (%s -> %s)", objKey(obj), first.GetResourceVersion(), second.GetResourceVersion())
			}
		}
	})

	t.Run("stored CompositeControllers keep every field we set and hook version v2", func(t *testing.T) {
		for _, want := range objs {
			if want.GetKind() != "CompositeController" {
				continue
			}
			got, err := c.dyn.Resource(compositeControllers).Get(ctx, want.GetName(), metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if missing := notKept("spec", want.Object["spec"], got.Object["spec"]); len(missing) > 0 {
				t.Errorf("%s: the server dropped or changed fields: %v", want.GetName(), missing)
			}
			hooks, _, _ := unstructured.NestedMap(want.Object, "spec", "hooks")
			for hook := range hooks {
				v, _, _ := unstructured.NestedString(got.Object, "spec", "hooks", hook, "version")
				if v != "v2" {
					t.Errorf("%s: stored spec.hooks.%s.version = %q, want v2 (the server accepts v2 keys)", want.GetName(), hook, v)
				}
			}
		}
	})

	t.Run("the misplaced hook version of issue 16 is refused", func(t *testing.T) {
		cc := compositeControllerDoc(t, docs)
		cc.SetName("proxy-operator-misplaced")
		misplaceHookVersions(t, cc.Object)
		_, err := c.dyn.Resource(compositeControllers).Create(ctx, cc, metav1.CreateOptions{FieldValidation: metav1.FieldValidationStrict})
		if !apierrors.IsBadRequest(err) {
			t.Fatalf("create with the misplaced version: err = %v, want 400 strict decoding error", err)
		}
		for _, want := range []string{
			"strict decoding error",
			`unknown field "spec.hooks.sync.webhook.version"`,
			`unknown field "spec.hooks.finalize.webhook.version"`,
			`unknown field "spec.hooks.customize.webhook.version"`,
		} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q lacks %q", err, want)
			}
		}

		// Without strict validation the same object is accepted and silently becomes a v1 hook:
		// why the test must validate strictly.
		cc.SetName("proxy-operator-misplaced-lax")
		stored, err := c.dyn.Resource(compositeControllers).Create(ctx, cc, metav1.CreateOptions{FieldValidation: metav1.FieldValidationIgnore})
		if err != nil {
			t.Fatalf("lax create: %v", err)
		}
		if v, _, _ := unstructured.NestedString(stored.Object, "spec", "hooks", "sync", "version"); v != "v1" {
			t.Errorf("lax create stored sync version %q, want the upstream default v1", v)
		}
		if _, found, _ := unstructured.NestedString(stored.Object, "spec", "hooks", "sync", "webhook", "version"); found {
			t.Errorf("lax create kept spec.hooks.sync.webhook.version: the schema is not pruning as upstream does")
		}
	})

	t.Run("stored CompositeControllers send the hook token and verify the hook CA", func(t *testing.T) {
		for _, name := range []string{"proxy-operator", "proxy-operator-pools"} {
			got, err := c.dyn.Resource(compositeControllers).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			ecs, _, _ := unstructured.NestedSlice(got.Object, "spec", "endpointConfigs")
			if len(ecs) != 1 {
				t.Fatalf("%s: %d endpointConfigs, want 1", name, len(ecs))
			}
			ec, _ := ecs[0].(map[string]any)
			for path, want := range map[string]string{
				"host":                              "proxy-operator-hooks.proxy-operator.svc:8080",
				"caBundle.secretRef.name":           "proxy-operator-hooks-tls",
				"caBundle.secretRef.namespace":      namespace,
				"caBundle.secretRef.key":            "ca.crt",
				"authorization.type":                "Bearer",
				"authorization.secretRef.name":      "proxy-operator-hooks-token",
				"authorization.secretRef.namespace": namespace,
				"authorization.secretRef.key":       "token",
			} {
				if v, _, _ := unstructured.NestedString(ec, strings.Split(path, ".")...); v != want {
					t.Errorf("%s: stored endpointConfigs[0].%s = %q, want %q", name, path, v, want)
				}
			}
			hooks, _, _ := unstructured.NestedMap(got.Object, "spec", "hooks")
			for hook := range hooks {
				u, _, _ := unstructured.NestedString(got.Object, "spec", "hooks", hook, "webhook", "url")
				if !strings.HasPrefix(u, "https://proxy-operator-hooks.proxy-operator.svc:8080/") {
					t.Errorf("%s: %s url %q is not on the endpointConfigs host over https", name, hook, u)
				}
			}
		}
	})

	t.Run("the Deployment as stored", func(t *testing.T) {
		dep, err := c.kube.AppsV1().Deployments(namespace).Get(ctx, deployment, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cs := dep.Spec.Template.Spec.Containers
		if len(cs) != 1 || cs[0].Image != "proxy-operator:dev" || cs[0].SecurityContext == nil ||
			cs[0].SecurityContext.ReadOnlyRootFilesystem == nil || !*cs[0].SecurityContext.ReadOnlyRootFilesystem {
			t.Errorf("stored deployment containers = %+v", cs)
		}
	})

	t.Run("RBAC: the operator's ServiceAccount may do what it needs and nothing more", func(t *testing.T) {
		testRBAC(ctx, t, c)
	})
}

func compositeControllerDoc(t *testing.T, docs []string) *unstructured.Unstructured {
	t.Helper()
	for _, doc := range docs {
		if obj := decodeDoc(t, doc); obj.GetKind() == "CompositeController" {
			return obj
		}
	}
	t.Fatal("the render has no CompositeController")
	return nil
}

// waitEstablished waits until the CRD of that name is Established.
func waitEstablished(ctx context.Context, t *testing.T, c *cluster, name string) {
	t.Helper()
	crds := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		obj, err := c.dyn.Resource(crds).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
		for _, cond := range conds {
			m, _ := cond.(map[string]any)
			if m["type"] == "Established" && m["status"] == "True" {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("CRD %s not Established: %v", name, err)
	}
}

// notKept lists the paths of want's leaves that got lacks or holds with another value: what the
// server pruned or rewrote. Fields the server added (defaults) are fine.
func notKept(path string, want, got any) []string {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return []string{path}
		}
		var out []string
		for k, v := range w {
			out = append(out, notKept(path+"."+k, v, g[k])...)
		}
		return out
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return []string{path}
		}
		var out []string
		for i := range w {
			out = append(out, notKept(fmt.Sprintf("%s[%d]", path, i), w[i], g[i])...)
		}
		return out
	default:
		// YAML numbers decode as int64 or float64 on either side; compare their text.
		if !reflect.DeepEqual(want, got) && fmt.Sprint(want) != fmt.Sprint(got) {
			return []string{path}
		}
		return nil
	}
}

// testRBAC asks the API server's own authorizer (SubjectAccessReview) what the operator's
// ServiceAccount may do, as bound by rbac.yaml.
func testRBAC(ctx context.Context, t *testing.T, c *cluster) {
	type check struct {
		group, resource, subresource, verb string
		allowed                            bool
		// ns is the namespace asked about ("crawlers" when empty; "-" for cluster scope) and
		// name the object's name (any when empty).
		ns, name string
	}
	const crawl = "crawl.example.com"
	checks := []check{
		// The orphan GC lists Proxies; a watch keeps a cache; a metadata patch wakes Metacontroller on a health transition.
		{crawl, "proxies", "", "list", true, "", ""},
		{crawl, "proxies", "", "watch", true, "", ""},
		{crawl, "proxies", "", "patch", true, "", ""},
		// The hooks check bodies against an informer cache of Proxies and ProxyPools.
		{crawl, "proxypools", "", "list", true, "", ""},
		{crawl, "proxypools", "", "watch", true, "", ""},
		// Events on Proxies, through either Events API.
		{"", "events", "", "create", true, "", ""},
		{"", "events", "", "patch", true, "", ""},
		{"events.k8s.io", "events", "", "create", true, "", ""},
		{"events.k8s.io", "events", "", "patch", true, "", ""},
		// Everything else is Metacontroller's (status, finalizers, children) or nobody's.
		{crawl, "proxies", "", "get", false, "", ""},
		{crawl, "proxies", "", "create", false, "", ""},
		{crawl, "proxies", "", "update", false, "", ""},
		{crawl, "proxies", "", "delete", false, "", ""},
		{crawl, "proxies", "", "deletecollection", false, "", ""},
		{crawl, "proxies", "status", "patch", false, "", ""},
		{crawl, "proxies", "status", "update", false, "", ""},
		{crawl, "proxypools", "", "get", false, "", ""},
		{crawl, "proxypools", "", "patch", false, "", ""},
		{crawl, "proxypools", "", "delete", false, "", ""},
		{crawl, "proxypools", "status", "update", false, "", ""},
		{"", "events", "", "delete", false, "", ""},
		{"", "events", "", "update", false, "", ""},
		{"events.k8s.io", "events", "", "delete", false, "", ""},
		{"", "secrets", "", "get", false, "", ""},
		{"", "secrets", "", "list", false, "", ""},
		{"", "secrets", "", "create", false, "", ""},
		// The hook credentials (decision 0181): get exactly the two Secrets in the operator's
		// namespace, create Secrets there (create cannot be limited by name), nothing more.
		{"", "secrets", "", "get", true, namespace, "proxy-operator-hooks-tls"},
		{"", "secrets", "", "get", true, namespace, "proxy-operator-hooks-token"},
		{"", "secrets", "", "get", false, namespace, "proxy-operator-discovery"},
		{"", "secrets", "", "create", true, namespace, ""},
		{"", "secrets", "", "list", false, namespace, ""},
		{"", "secrets", "", "update", false, namespace, "proxy-operator-hooks-token"},
		{"", "secrets", "", "delete", false, namespace, "proxy-operator-hooks-token"},
		// Annotate the two CompositeControllers once the Secrets exist, nothing else.
		{"metacontroller.k8s.io", "compositecontrollers", "", "patch", true, "-", "proxy-operator"},
		{"metacontroller.k8s.io", "compositecontrollers", "", "patch", true, "-", "proxy-operator-pools"},
		{"metacontroller.k8s.io", "compositecontrollers", "", "patch", false, "-", "someone-elses"},
		{"", "pods", "", "create", false, "", ""},
		{"", "pods", "", "delete", false, "", ""},
		{"", "configmaps", "", "get", false, "", ""},
		{"metacontroller.k8s.io", "compositecontrollers", "", "update", false, "", ""},
		{"rbac.authorization.k8s.io", "clusterroles", "", "escalate", false, "", ""},
	}
	review := func(ctx context.Context, ch check) (bool, string, error) {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:   operatorSA,
			Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: ch.ns, Name: ch.name, Verb: ch.verb, Group: ch.group, Version: "*", Resource: ch.resource, Subresource: ch.subresource,
			},
		}}
		switch ch.ns {
		case "":
			sar.Spec.ResourceAttributes.Namespace = "crawlers"
		case "-":
			sar.Spec.ResourceAttributes.Namespace = ""
		}
		got, err := c.kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
		if err != nil {
			return false, "", err
		}
		return got.Status.Allowed, got.Status.Reason, nil
	}

	// The RBAC authorizer reads roles from an informer: wait until it has seen ours.
	wctx, cancel := context.WithTimeout(ctx, rbacTimeout)
	defer cancel()
	if err := wait.PollUntilContextCancel(wctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		ok, _, err := review(ctx, checks[0])
		return ok, err
	}); err != nil {
		t.Fatalf("the ServiceAccount never got %s %s: %v", checks[0].verb, checks[0].resource, err)
	}
	for _, ch := range checks {
		name := strings.TrimPrefix(ch.group+"/", "/") + ch.resource
		if ch.subresource != "" {
			name += "/" + ch.subresource
		}
		if ch.name != "" {
			name += " " + ch.name
		}
		if ch.ns != "" && ch.ns != "-" {
			name += " in " + ch.ns
		}
		t.Run(ch.verb+" "+name, func(t *testing.T) {
			allowed, reason, err := review(ctx, ch)
			if err != nil {
				t.Fatal(err)
			}
			if allowed != ch.allowed {
				t.Errorf("allowed = %v (%s), want %v", allowed, reason, ch.allowed)
			}
		})
	}
}
