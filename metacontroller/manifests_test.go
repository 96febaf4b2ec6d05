package metacontroller_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/proxy-operator/proxy-operator/providers/factory"
	"github.com/proxy-operator/proxy-operator/server/hooks"
	"github.com/proxy-operator/proxy-operator/server/hooks/hookauth"
)

const (
	namespace     = "proxy-operator"
	hookService   = "proxy-operator-hooks"
	discService   = "proxy-operator-discovery"
	gwService     = "proxy-operator-gateway"
	deployment    = "proxy-operator"
	providersCM   = "proxy-operator-providers"
	tokenSecret   = "proxy-operator-discovery"
	renderTimeout = 60 * time.Second
)

// kubectl finds a kubectl to render with: KUBEBUILDER_ASSETS first (CI builds one there), then PATH.
func kubectl(t *testing.T) string {
	t.Helper()
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		p := filepath.Join(dir, "kubectl")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if p, err := exec.LookPath("kubectl"); err == nil {
		return p
	}
	t.Skip("no kubectl to render the kustomization: put one on PATH or in $KUBEBUILDER_ASSETS (.ci/run builds it)")
	return ""
}

// rendered is the kustomization's output, one raw YAML document per "kind/namespace/name".
type rendered map[string][]byte

func render(t *testing.T) rendered {
	t.Helper()
	return renderDir(t, "install")
}

// renderDir renders the kustomization in dir (an overlay such as ha).
func renderDir(t *testing.T, dir string) rendered {
	t.Helper()
	out := rendered{}
	for _, doc := range renderDocsIn(t, dir) {
		var meta struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Metadata   struct {
				Name      string `json:"name"`
				Namespace string `json:"namespace"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatalf("rendered document does not parse: %v\n%s", err, doc)
		}
		if meta.APIVersion == "" || meta.Kind == "" || meta.Metadata.Name == "" {
			t.Fatalf("rendered document lacks apiVersion, kind or name:\n%s", doc)
		}
		key := meta.Kind + "/" + meta.Metadata.Namespace + "/" + meta.Metadata.Name
		if _, dup := out[key]; dup {
			t.Fatalf("%s rendered twice", key)
		}
		out[key] = []byte(doc)
	}
	return out
}

// renderDocs is `kubectl kustomize .`, one YAML document per object, in kustomize's order
// (namespaces and CRDs first), which is the order kubectl apply -k sends them in.
func renderDocs(t *testing.T) []string {
	t.Helper()
	return renderDocsIn(t, "install")
}

// renderDocsIn is renderDocs for the kustomization in dir.
func renderDocsIn(t *testing.T, dir string) []string {
	t.Helper()
	bin := kubectl(t)
	ctx, cancel := context.WithTimeout(context.Background(), renderTimeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, "kustomize", dir)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("kubectl kustomize: %v\n%s", err, stderr.String())
	}
	var docs []string
	for _, doc := range strings.Split(stdout.String(), "\n---\n") {
		if strings.TrimSpace(doc) != "" {
			docs = append(docs, doc)
		}
	}
	return docs
}

// get strictly decodes the object of that key into v: an unknown or misspelt field fails.
func (r rendered) get(t *testing.T, key string, v any) {
	t.Helper()
	doc, ok := r[key]
	if !ok {
		t.Fatalf("kustomization renders no %s (have %v)", key, r.keys())
	}
	if err := yaml.UnmarshalStrict(doc, v); err != nil {
		t.Fatalf("%s: %v", key, err)
	}
}

func (r rendered) keys() []string {
	var ks []string
	for k := range r {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// compositeController mirrors the fields of Metacontroller's CompositeController we rely on.
type compositeController struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name   string            `json:"name"`
		Labels map[string]string `json:"labels"`
	} `json:"metadata"`
	Spec struct {
		GenerateSelector    bool `json:"generateSelector"`
		ResyncPeriodSeconds int  `json:"resyncPeriodSeconds"`
		ParentResource      struct {
			APIVersion string `json:"apiVersion"`
			Resource   string `json:"resource"`
		} `json:"parentResource"`
		ChildResources []struct {
			APIVersion     string         `json:"apiVersion"`
			Resource       string         `json:"resource"`
			UpdateStrategy map[string]any `json:"updateStrategy"`
		} `json:"childResources"`
		// Hooks: version sits beside webhook, as in Metacontroller's type Hook
		// (metacontroller/metacontroller@v4.17.2:pkg/apis/metacontroller/v1alpha1/types.go).
		Hooks map[string]struct {
			Version string `json:"version"`
			Webhook struct {
				URL     string `json:"url"`
				Timeout string `json:"timeout"`
			} `json:"webhook"`
		} `json:"hooks"`
		// EndpointConfigs: TLS and auth matched by the hook URL's host (same file, type
		// EndpointConfig).
		EndpointConfigs []struct {
			Host     string `json:"host"`
			CABundle struct {
				SecretRef secretKeyRef `json:"secretRef"`
			} `json:"caBundle"`
			Authorization struct {
				Type      string       `json:"type"`
				SecretRef secretKeyRef `json:"secretRef"`
			} `json:"authorization"`
		} `json:"endpointConfigs"`
	} `json:"spec"`
}

// secretKeyRef is Metacontroller's SecretKeyRef (and ResourceKeyRef).
type secretKeyRef struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	Key       string `json:"key"`
}

// checkHookAuth: the hook at u is called over TLS, and the CompositeController's endpointConfigs
// entry for u's host points Metacontroller at the Secrets the operator makes in its own
// namespace (-hooks-secrets-namespace $(POD_NAMESPACE)), whose certificate names u's host.
func checkHookAuth(t *testing.T, hook string, u *url.URL, cc compositeController, c corev1.Container, ns string) {
	t.Helper()
	if u.Scheme != "https" {
		t.Errorf("%s url %s is not https", hook, u)
	}
	found := 0
	for _, ec := range cc.Spec.EndpointConfigs {
		if ec.Host != u.Host {
			continue
		}
		found++
		if want := (secretKeyRef{hookauth.TLSSecret, ns, "ca.crt"}); ec.CABundle.SecretRef != want {
			t.Errorf("%s: caBundle.secretRef %+v, want %+v", hook, ec.CABundle.SecretRef, want)
		}
		if want := (secretKeyRef{hookauth.TokenSecret, ns, hookauth.TokenKey}); ec.Authorization.SecretRef != want {
			t.Errorf("%s: authorization.secretRef %+v, want %+v", hook, ec.Authorization.SecretRef, want)
		}
		if ec.Authorization.Type != "Bearer" {
			t.Errorf("%s: authorization.type %q, want Bearer", hook, ec.Authorization.Type)
		}
	}
	if found != 1 {
		t.Errorf("%s: %d endpointConfigs entries for host %q, want 1", hook, found, u.Host)
	}
	if v, ok := argValue(c.Args, "-hooks-secrets-namespace"); !ok || v != "$(POD_NAMESPACE)" {
		t.Errorf("container args %q: -hooks-secrets-namespace = %q, want $(POD_NAMESPACE)", c.Args, v)
	}
	podNS := false
	for _, e := range c.Env {
		if e.Name == "POD_NAMESPACE" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.namespace" {
			podNS = true
		}
	}
	if !podNS {
		t.Error("POD_NAMESPACE does not come from the downward API (metadata.namespace)")
	}
	svc, ok := argValue(c.Args, "-hooks-service")
	if !ok {
		svc = hookauth.DefaultService
	}
	if !slices.Contains(hookauth.DNSNames(svc, ns), u.Hostname()) {
		t.Errorf("%s: the generated certificate names %v, not the URL's host %q", hook, hookauth.DNSNames(svc, ns), u.Hostname())
	}
}

// TestEveryObjectParses decodes each rendered object strictly into its Kubernetes type and checks
// the set of objects is exactly what the install needs.
func TestEveryObjectParses(t *testing.T) {
	r := render(t)
	want := []string{
		"ClusterRole//proxy-operator",
		"ClusterRoleBinding//proxy-operator",
		"CompositeController//proxy-operator",
		"CompositeController//proxy-operator-pools",
		"ConfigMap/proxy-operator/" + providersCM,
		"CustomResourceDefinition//proxies.crawl.example.com",
		"CustomResourceDefinition//proxypools.crawl.example.com",
		"Deployment/proxy-operator/" + deployment,
		"Namespace//proxy-operator",
		"NetworkPolicy/proxy-operator/proxy-operator",
		"Role/proxy-operator/proxy-operator-hook-credentials",
		"RoleBinding/proxy-operator/proxy-operator-hook-credentials",
		"Service/proxy-operator/" + discService,
		"Service/proxy-operator/" + gwService,
		"Service/proxy-operator/" + hookService,
		"ServiceAccount/proxy-operator/proxy-operator",
	}
	if diff := cmp.Diff(want, r.keys()); diff != "" {
		t.Errorf("rendered objects (-want +got):\n%s", diff)
	}
	typed := map[string]func() any{
		"ClusterRole":         func() any { return &rbacv1.ClusterRole{} },
		"ClusterRoleBinding":  func() any { return &rbacv1.ClusterRoleBinding{} },
		"ConfigMap":           func() any { return &corev1.ConfigMap{} },
		"Deployment":          func() any { return &appsv1.Deployment{} },
		"Namespace":           func() any { return &corev1.Namespace{} },
		"NetworkPolicy":       func() any { return &networkingv1.NetworkPolicy{} },
		"Role":                func() any { return &rbacv1.Role{} },
		"RoleBinding":         func() any { return &rbacv1.RoleBinding{} },
		"Service":             func() any { return &corev1.Service{} },
		"ServiceAccount":      func() any { return &corev1.ServiceAccount{} },
		"CompositeController": func() any { return &compositeController{} },
	}
	for _, key := range r.keys() {
		kind := strings.SplitN(key, "/", 2)[0]
		if kind == "CustomResourceDefinition" {
			continue // compared byte for byte with crds/ in TestCRDIsTheGeneratedOne
		}
		mk, ok := typed[kind]
		if !ok {
			t.Errorf("%s: no type to check it against", key)
			continue
		}
		t.Run(key, func(t *testing.T) { r.get(t, key, mk()) })
	}
}

// TestCRDIsTheGeneratedOne: the kustomization's copy must be the generated CRD (make generate copies it).
func TestCRDIsTheGeneratedOne(t *testing.T) {
	for copy, generated := range map[string]string{
		"install/crd.yaml":            "../crds/crawl.example.com_proxies.yaml",
		"install/crd-proxypools.yaml": "../crds/crawl.example.com_proxypools.yaml",
	} {
		want, err := os.ReadFile(generated)
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(copy)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(want, got) {
			t.Errorf("metacontroller/%s differs from %s: run 'make generate'", copy, generated)
		}
	}
}

// routes walks the hook server's router: method+path -> true.
func routes(t *testing.T) map[string]bool {
	t.Helper()
	h := (&hooks.Hooks{}).Handler()
	rs, ok := h.(chi.Routes)
	if !ok {
		t.Fatalf("hooks.Hooks.Handler() is a %T, not a chi router: cannot list its routes", h)
	}
	got := map[string]bool{}
	err := chi.Walk(rs, func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		got[method+" "+route] = true
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// argValue returns the value after flag in args ("-flag value" or "-flag=value").
func argValue(args []string, flag string) (string, bool) {
	for i, a := range args {
		if a == flag && i+1 < len(args) {
			return args[i+1], true
		}
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			return v, true
		}
	}
	return "", false
}

func containerPort(t *testing.T, c corev1.Container, p intstr.IntOrString) int32 {
	t.Helper()
	for _, cp := range c.Ports {
		if (p.Type == intstr.String && cp.Name == p.StrVal) || (p.Type == intstr.Int && cp.ContainerPort == p.IntVal) {
			return cp.ContainerPort
		}
	}
	t.Fatalf("container %s has no port %s", c.Name, p.String())
	return 0
}

func listenPort(t *testing.T, addr string) int32 {
	t.Helper()
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("listen address %q: %v", addr, err)
	}
	n, err := strconv.ParseInt(port, 10, 32)
	if err != nil {
		t.Fatalf("listen address %q: %v", addr, err)
	}
	return int32(n)
}

func servicePort(t *testing.T, svc corev1.Service, port int32) corev1.ServicePort {
	t.Helper()
	for _, p := range svc.Spec.Ports {
		if p.Port == port {
			return p
		}
	}
	t.Fatalf("service %s has no port %d", svc.Name, port)
	return corev1.ServicePort{}
}

func selects(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// TestWiringAgrees follows every reference across objects: hook URL -> Service -> container port
// -> listen flag, the same for discovery, probes -> routes, ConfigMap -> mount -> flag, Secret ->
// env, NetworkPolicy -> pods and ports, RBAC -> ServiceAccount.
func TestWiringAgrees(t *testing.T) {
	r := render(t)
	var (
		cc              compositeController
		dep             appsv1.Deployment
		hooks, disc, gw corev1.Service
		np              networkingv1.NetworkPolicy
		cm              corev1.ConfigMap
		sa              corev1.ServiceAccount
		role            rbacv1.ClusterRole
		binding         rbacv1.ClusterRoleBinding
	)
	r.get(t, "CompositeController//proxy-operator", &cc)
	r.get(t, "Deployment/"+namespace+"/"+deployment, &dep)
	r.get(t, "Service/"+namespace+"/"+hookService, &hooks)
	r.get(t, "Service/"+namespace+"/"+discService, &disc)
	r.get(t, "Service/"+namespace+"/"+gwService, &gw)
	r.get(t, "NetworkPolicy/"+namespace+"/proxy-operator", &np)
	r.get(t, "ConfigMap/"+namespace+"/"+providersCM, &cm)
	r.get(t, "ServiceAccount/"+namespace+"/proxy-operator", &sa)
	r.get(t, "ClusterRole//proxy-operator", &role)
	r.get(t, "ClusterRoleBinding//proxy-operator", &binding)
	served := routes(t)

	pod := dep.Spec.Template
	if len(pod.Spec.Containers) != 1 {
		t.Fatalf("deployment has %d containers, want 1", len(pod.Spec.Containers))
	}
	c := pod.Spec.Containers[0]

	hookAddr, ok := argValue(c.Args, "-hook-addr")
	if !ok {
		t.Fatalf("container args %q lack -hook-addr", c.Args)
	}
	hookPort := listenPort(t, hookAddr)
	discAddr, ok := argValue(c.Args, "-discovery-addr")
	if !ok {
		t.Fatalf("container args %q lack -discovery-addr", c.Args)
	}
	discPort := listenPort(t, discAddr)
	gwAddr, ok := argValue(c.Args, "-gateway-addr")
	if !ok {
		t.Fatalf("container args %q lack -gateway-addr: the base install serves the gateway", c.Args)
	}
	gwPort := listenPort(t, gwAddr)
	socksAddr, ok := argValue(c.Args, "-gateway-socks-addr")
	if !ok {
		t.Fatalf("container args %q lack -gateway-socks-addr: the base install serves SOCKS5 too", c.Args)
	}
	socksPort := listenPort(t, socksAddr)

	var pools compositeController
	r.get(t, "CompositeController//proxy-operator-pools", &pools)
	for _, ctl := range []struct {
		name, parent string
		cc           compositeController
		hooks        []string
	}{
		{"proxy-operator", "proxies", cc, []string{"customize", "finalize", "sync"}},
		{"proxy-operator-pools", "proxypools", pools, []string{"finalize", "sync"}},
	} {
		t.Run(ctl.name+": hook URLs reach the hook listener and its routes", func(t *testing.T) {
			cc := ctl.cc
			if cc.Spec.ParentResource.APIVersion != "crawl.example.com/v1alpha1" || cc.Spec.ParentResource.Resource != ctl.parent {
				t.Errorf("parentResource = %+v, want crawl.example.com/v1alpha1 %s", cc.Spec.ParentResource, ctl.parent)
			}
			var names []string
			for name := range cc.Spec.Hooks {
				names = append(names, name)
			}
			slices.Sort(names)
			if diff := cmp.Diff(ctl.hooks, names); diff != "" {
				t.Errorf("hooks (-want +got):\n%s", diff)
			}
			for _, name := range names {
				wh := cc.Spec.Hooks[name].Webhook
				u, err := url.Parse(wh.URL)
				if err != nil {
					t.Errorf("%s url %q: %v", name, wh.URL, err)
					continue
				}
				if want := fmt.Sprintf("%s.%s.svc", hooks.Name, hooks.Namespace); u.Hostname() != want {
					t.Errorf("%s url host = %q, want %q", name, u.Hostname(), want)
				}
				port, err := strconv.ParseInt(u.Port(), 10, 32)
				if err != nil {
					t.Errorf("%s url %q names no port", name, wh.URL)
					continue
				}
				sp := servicePort(t, hooks, int32(port))
				if got := containerPort(t, c, sp.TargetPort); got != hookPort {
					t.Errorf("%s: service port %d -> container port %d, but -hook-addr listens on %d", name, port, got, hookPort)
				}
				if !served["POST "+u.Path] {
					t.Errorf("%s url path %q is not a POST route of the hook server", name, u.Path)
				}
				if v := cc.Spec.Hooks[name].Version; v != "v2" {
					t.Errorf("%s hook version = %q, want v2 (the server accepts v2 keys)", name, v)
				}
				checkHookAuth(t, name, u, cc, c, dep.Namespace)
			}
		})
	}
	t.Run("the pools controller updates members in place", func(t *testing.T) {
		if len(pools.Spec.ChildResources) != 1 || pools.Spec.ChildResources[0].Resource != "proxies" ||
			pools.Spec.ChildResources[0].UpdateStrategy["method"] != "InPlace" {
			t.Errorf("childResources = %+v, want proxies with method InPlace (the draining label is an update)", pools.Spec.ChildResources)
		}
	})

	t.Run("probes hit GET routes on the hook listener", func(t *testing.T) {
		for name, p := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
			if p == nil || p.HTTPGet == nil {
				t.Errorf("%s probe missing or not httpGet", name)
				continue
			}
			if p.HTTPGet.Scheme != corev1.URISchemeHTTPS {
				t.Errorf("%s probe scheme %q, want HTTPS (the hook listener serves TLS)", name, p.HTTPGet.Scheme)
			}
			if got := containerPort(t, c, p.HTTPGet.Port); got != hookPort {
				t.Errorf("%s probe port %d, want the hook port %d", name, got, hookPort)
			}
			if !served["GET "+p.HTTPGet.Path] {
				t.Errorf("%s probe path %q is not a GET route of the hook server", name, p.HTTPGet.Path)
			}
		}
		if c.LivenessProbe != nil && c.LivenessProbe.HTTPGet != nil && c.LivenessProbe.HTTPGet.Path != "/healthz" {
			t.Errorf("liveness path = %q, want /healthz", c.LivenessProbe.HTTPGet.Path)
		}
		if c.ReadinessProbe != nil && c.ReadinessProbe.HTTPGet != nil && c.ReadinessProbe.HTTPGet.Path != "/readyz" {
			t.Errorf("readiness path = %q, want /readyz", c.ReadinessProbe.HTTPGet.Path)
		}
	})

	t.Run("discovery service reaches the discovery listener", func(t *testing.T) {
		if len(disc.Spec.Ports) != 1 {
			t.Fatalf("discovery service has %d ports, want 1", len(disc.Spec.Ports))
		}
		if got := containerPort(t, c, disc.Spec.Ports[0].TargetPort); got != discPort {
			t.Errorf("discovery service -> container port %d, but -discovery-addr listens on %d", got, discPort)
		}
	})

	t.Run("gateway service reaches the gateway's HTTP and SOCKS5 listeners", func(t *testing.T) {
		got := map[string]int32{}
		for _, p := range gw.Spec.Ports {
			got[p.Name] = containerPort(t, c, p.TargetPort)
		}
		if diff := cmp.Diff(map[string]int32{"gateway": gwPort, "socks": socksPort}, got); diff != "" {
			t.Errorf("gateway service ports -> container ports (-want: -gateway-addr, -gateway-socks-addr +got):\n%s", diff)
		}
	})

	t.Run("services and network policy select the operator pods", func(t *testing.T) {
		for _, svc := range []corev1.Service{hooks, disc, gw} {
			if !selects(svc.Spec.Selector, pod.Labels) {
				t.Errorf("service %s selector %v does not select pod labels %v", svc.Name, svc.Spec.Selector, pod.Labels)
			}
		}
		if !selects(dep.Spec.Selector.MatchLabels, pod.Labels) {
			t.Errorf("deployment selector %v does not select its pod labels %v", dep.Spec.Selector.MatchLabels, pod.Labels)
		}
		if !selects(np.Spec.PodSelector.MatchLabels, pod.Labels) {
			t.Errorf("network policy selector %v does not select pod labels %v", np.Spec.PodSelector.MatchLabels, pod.Labels)
		}
	})

	t.Run("network policy: hooks from metacontroller only, discovery and gateway from anyone", func(t *testing.T) {
		if diff := cmp.Diff([]networkingv1.PolicyType{networkingv1.PolicyTypeIngress}, np.Spec.PolicyTypes); diff != "" {
			t.Errorf("policyTypes (-want +got):\n%s", diff)
		}
		// Who may reach each container port: "metacontroller" or "anyone".
		got := map[int32][]string{}
		for _, rule := range np.Spec.Ingress {
			from := "anyone"
			if len(rule.From) > 0 {
				from = ""
				for _, peer := range rule.From {
					ns := peer.NamespaceSelector
					if peer.PodSelector != nil || peer.IPBlock != nil || ns == nil || ns.MatchLabels["kubernetes.io/metadata.name"] != "metacontroller" || len(ns.MatchExpressions) > 0 {
						t.Errorf("unexpected ingress peer %+v", peer)
						continue
					}
					from = "metacontroller"
				}
			}
			if len(rule.Ports) == 0 {
				t.Errorf("ingress rule from %s opens every port", from)
			}
			for _, p := range rule.Ports {
				if p.Port == nil {
					t.Errorf("ingress rule from %s opens every port", from)
					continue
				}
				port := containerPort(t, c, *p.Port)
				got[port] = append(got[port], from)
			}
		}
		want := map[int32][]string{hookPort: {"metacontroller"}, discPort: {"anyone"}, gwPort: {"anyone"}, socksPort: {"anyone"}}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("ingress by port (-want +got):\n%s", diff)
		}
	})

	t.Run("providers config is mounted where -providers-config reads it", func(t *testing.T) {
		path, ok := argValue(c.Args, "-providers-config")
		if !ok {
			t.Fatalf("container args %q lack -providers-config", c.Args)
		}
		var volume string
		for _, m := range c.VolumeMounts {
			if filepath.Dir(path) == filepath.Clean(m.MountPath) {
				volume = m.Name
			}
		}
		if volume == "" {
			t.Fatalf("no volume is mounted at %s", filepath.Dir(path))
		}
		var src *corev1.ConfigMapVolumeSource
		for _, v := range pod.Spec.Volumes {
			if v.Name == volume {
				src = v.ConfigMap
			}
		}
		if src == nil || src.Name != cm.Name {
			t.Fatalf("volume %s is not ConfigMap %s", volume, cm.Name)
		}
		body, ok := cm.Data[filepath.Base(path)]
		if !ok {
			t.Fatalf("ConfigMap %s has no key %s", cm.Name, filepath.Base(path))
		}
		var cfg struct {
			Providers []struct {
				Name string `json:"name"`
				Type string `json:"type"`
				Mock struct {
					RelayAnywhere bool `json:"relayAnywhere"`
				} `json:"mock"`
			} `json:"providers"`
		}
		if err := yaml.Unmarshal([]byte(body), &cfg); err != nil {
			t.Fatalf("providers config: %v", err)
		}
		var got []string
		for _, p := range cfg.Providers {
			got = append(got, p.Name+":"+p.Type)
			// Issue 21: a leased mock proxy that relays anywhere reaches the operator's
			// own ports and the cluster from inside the operator's Pod.
			if p.Mock.RelayAnywhere {
				t.Errorf("provider %s sets relayAnywhere: the shipped install must not relay beyond loopback", p.Name)
			}
		}
		if diff := cmp.Diff([]string{"kubernetes:kubernetes", "mock:mock"}, got); diff != "" {
			t.Errorf("providers (-want +got):\n%s", diff)
		}
		// The process's own parser must accept it, or the Pod crash-loops at start.
		if _, err := factory.Parse([]byte(body)); err != nil {
			t.Errorf("the operator rejects the shipped providers config: %v", err)
		}
	})

	t.Run("discovery tokens come from a required Secret", func(t *testing.T) {
		path, ok := argValue(c.Args, "-discovery-token-file")
		if !ok {
			t.Fatalf("container args %q lack -discovery-token-file: discovery would not start", c.Args)
		}
		var volume string
		for _, m := range c.VolumeMounts {
			if filepath.Dir(path) == filepath.Clean(m.MountPath) {
				volume = m.Name
			}
		}
		var src *corev1.SecretVolumeSource
		for _, v := range pod.Spec.Volumes {
			if v.Name == volume {
				src = v.Secret
			}
		}
		if src == nil || src.SecretName != tokenSecret {
			t.Fatalf("%s is not mounted from Secret %s", path, tokenSecret)
		}
		if src.Optional != nil && *src.Optional {
			t.Error("the discovery Secret is optional: without it discovery must not start")
		}
		if filepath.Base(path) != "token" {
			t.Errorf("token file %s, want the Secret's key token", path)
		}
		for _, e := range c.Env {
			if e.Name == "DISCOVERY_TOKEN" {
				t.Error("DISCOVERY_TOKEN is still set: the file is the one source")
			}
		}
	})

	t.Run("deployment hardening", func(t *testing.T) {
		if dep.Spec.Replicas == nil || *dep.Spec.Replicas != 1 {
			t.Errorf("replicas = %v, want 1", dep.Spec.Replicas)
		}
		if dep.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
			t.Errorf("strategy = %q, want Recreate (leases live in one process)", dep.Spec.Strategy.Type)
		}
		if c.Image != "proxy-operator:dev" {
			t.Errorf("image = %q, want proxy-operator:dev", c.Image)
		}
		ps := pod.Spec.SecurityContext
		if ps == nil || ps.RunAsNonRoot == nil || !*ps.RunAsNonRoot {
			t.Errorf("pod securityContext.runAsNonRoot not true")
		}
		if ps == nil || ps.SeccompProfile == nil || ps.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
			t.Errorf("pod seccompProfile is not RuntimeDefault")
		}
		sc := c.SecurityContext
		if sc == nil {
			t.Fatal("container has no securityContext")
		}
		if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			t.Errorf("readOnlyRootFilesystem not true")
		}
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			t.Errorf("allowPrivilegeEscalation not false")
		}
		if sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0 {
			t.Errorf("capabilities = %+v, want drop [ALL] and add none", sc.Capabilities)
		}
		for _, res := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			req, hasReq := c.Resources.Requests[res]
			lim, hasLim := c.Resources.Limits[res]
			if !hasReq || !hasLim {
				t.Errorf("%s: request set %v, limit set %v; want both", res, hasReq, hasLim)
				continue
			}
			if req.Cmp(lim) > 0 {
				t.Errorf("%s request %s above limit %s", res, req.String(), lim.String())
			}
		}
		if g := pod.Spec.TerminationGracePeriodSeconds; g == nil || *g < 25 {
			t.Errorf("terminationGracePeriodSeconds = %v, want at least 25 (shutdown grace is 20s)", g)
		}
		if pod.Spec.ServiceAccountName != sa.Name {
			t.Errorf("serviceAccountName = %q, want %q", pod.Spec.ServiceAccountName, sa.Name)
		}
	})

	t.Run("RBAC: list, watch and patch proxies, list and watch proxypools, record events, annotate the two controllers, the hook Secrets, nothing else", func(t *testing.T) {
		// What these rules grant is checked on a real API server by SubjectAccessReview in
		// TestKustomizationAppliesToAPIServer.
		want := []rbacv1.PolicyRule{
			{APIGroups: []string{"crawl.example.com"}, Resources: []string{"proxies"}, Verbs: []string{"list", "watch", "patch"}},
			// The hooks' API server cache (0190).
			{APIGroups: []string{"crawl.example.com"}, Resources: []string{"proxypools"}, Verbs: []string{"list", "watch"}},
			{APIGroups: []string{"", "events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
			{APIGroups: []string{"metacontroller.k8s.io"}, Resources: []string{"compositecontrollers"},
				ResourceNames: hookauth.DefaultControllers, Verbs: []string{"patch"}},
		}
		if diff := cmp.Diff(want, role.Rules); diff != "" {
			t.Errorf("ClusterRole rules (-want +got):\n%s", diff)
		}
		wantRef := rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role.Name}
		if diff := cmp.Diff(wantRef, binding.RoleRef); diff != "" {
			t.Errorf("roleRef (-want +got):\n%s", diff)
		}
		wantSubj := []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa.Name, Namespace: sa.Namespace}}
		if diff := cmp.Diff(wantSubj, binding.Subjects); diff != "" {
			t.Errorf("subjects (-want +got):\n%s", diff)
		}
		var secrets rbacv1.Role
		var secretsBinding rbacv1.RoleBinding
		r.get(t, "Role/"+namespace+"/proxy-operator-hook-credentials", &secrets)
		r.get(t, "RoleBinding/"+namespace+"/proxy-operator-hook-credentials", &secretsBinding)
		wantSecrets := []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{hookauth.TLSSecret, hookauth.TokenSecret}, Verbs: []string{"get"}},
			{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"create"}},
		}
		if diff := cmp.Diff(wantSecrets, secrets.Rules); diff != "" {
			t.Errorf("hook credentials Role rules (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff(wantSubj, secretsBinding.Subjects); diff != "" {
			t.Errorf("hook credentials RoleBinding subjects (-want +got):\n%s", diff)
		}
		if secretsBinding.RoleRef.Name != secrets.Name || secretsBinding.RoleRef.Kind != "Role" {
			t.Errorf("hook credentials RoleBinding roleRef %+v", secretsBinding.RoleRef)
		}
	})
}

// TestChildResources: Metacontroller manages exactly the children the hooks return, Pods of
// the kubernetes provider and the credentials Secret of every Managed Proxy, and never
// updates one in place (a Secret that changed under a running machine would desynchronise
// it; a Pod is replaced by name).
func TestChildResources(t *testing.T) {
	r := render(t)
	var cc compositeController
	r.get(t, "CompositeController//proxy-operator", &cc)
	got := map[string]any{}
	for _, c := range cc.Spec.ChildResources {
		got[c.APIVersion+" "+c.Resource] = c.UpdateStrategy["method"]
	}
	want := map[string]any{"v1 pods": "OnDelete", "v1 secrets": "OnDelete"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("childResources (-want +got):\n%s", diff)
	}
}
