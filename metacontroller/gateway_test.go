package metacontroller_test

import (
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"
)

const gwName = "proxy-operator-gateway"

// TestHAOverlayGateway follows the gateway's wiring in the ha/ overlay: replicas running the
// gateway subcommand on the shared Redis, a Service and NetworkPolicy on the port -gateway-addr
// listens on, a PodDisruptionBudget keeping one, probes on its /healthz, a memory limit that
// holds 10,000 idle connections, and an HPA example aimed at it.
func TestHAOverlayGateway(t *testing.T) {
	r := renderDir(t, "ha")
	var (
		dep, opDep appsv1.Deployment
		svc        corev1.Service
		pdb        policyv1.PodDisruptionBudget
		np         networkingv1.NetworkPolicy
	)
	r.get(t, "Deployment/"+namespace+"/"+gwName, &dep)
	r.get(t, "Deployment/"+namespace+"/"+deployment, &opDep)
	r.get(t, "Service/"+namespace+"/"+gwName, &svc)
	r.get(t, "PodDisruptionBudget/"+namespace+"/"+gwName, &pdb)
	r.get(t, "NetworkPolicy/"+namespace+"/"+gwName, &np)

	c := dep.Spec.Template.Spec.Containers[0]
	if len(c.Args) == 0 || c.Args[0] != "gateway" {
		t.Fatalf("gateway container args %q, want the gateway subcommand first", c.Args)
	}
	if got, ok := argValue(c.Args, "-lease-store"); !ok || got != "$(REDIS_URL)" {
		t.Errorf("-lease-store %q, want $(REDIS_URL) (the discovery replicas' Redis)", got)
	}
	if _, ok := argValue(c.Args, "-lease-store-password-file"); !ok {
		t.Error("no -lease-store-password-file")
	}
	addr, ok := argValue(c.Args, "-gateway-addr")
	if !ok {
		t.Fatalf("args %q lack -gateway-addr", c.Args)
	}
	port := listenPort(t, addr)
	labels := dep.Spec.Template.Labels
	if !selects(svc.Spec.Selector, labels) || selects(svc.Spec.Selector, opDep.Spec.Template.Labels) {
		t.Errorf("gateway Service selector %v: want the gateway replicas %v only", svc.Spec.Selector, labels)
	}
	if got := containerPort(t, c, svc.Spec.Ports[0].TargetPort); got != port {
		t.Errorf("gateway Service -> container port %d, but -gateway-addr listens on %s", got, addr)
	}
	if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil || c.ReadinessProbe.HTTPGet.Path != "/healthz" ||
		containerPort(t, c, c.ReadinessProbe.HTTPGet.Port) != port {
		t.Errorf("readiness probe %+v, want GET /healthz on the gateway port", c.ReadinessProbe)
	}
	if lim := c.Resources.Limits.Memory(); lim.Value() < 300<<20 {
		t.Errorf("memory limit %s: 10,000 idle connections alone take about 200 MiB", lim)
	}
	if pdb.Spec.Selector == nil || !selects(pdb.Spec.Selector.MatchLabels, labels) || pdb.Spec.MinAvailable.IntValue() != 1 {
		t.Errorf("PodDisruptionBudget %+v, want minAvailable 1 of the gateway replicas", pdb.Spec)
	}
	if !selects(np.Spec.PodSelector.MatchLabels, labels) {
		t.Errorf("NetworkPolicy selects %v, not the gateway pods", np.Spec.PodSelector.MatchLabels)
	}
	socksAddr, ok := argValue(c.Args, "-gateway-socks-addr")
	if !ok {
		t.Fatalf("args %q lack -gateway-socks-addr", c.Args)
	}
	socksPort := listenPort(t, socksAddr)
	svcPorts := map[string]int32{}
	for _, p := range svc.Spec.Ports {
		if p.Name != "metrics" {
			svcPorts[p.Name] = containerPort(t, c, p.TargetPort)
		}
	}
	if diff := cmp.Diff(map[string]int32{"gateway": port, "socks": socksPort}, svcPorts); diff != "" {
		t.Errorf("gateway Service ports -> the replicas' container ports (-want +got):\n%s", diff)
	}
	for _, want := range []int32{port, socksPort} {
		open := false
		for _, in := range np.Spec.Ingress {
			for _, p := range in.Ports {
				if p.Port != nil && p.Port.IntValue() == int(want) {
					open = true
				}
			}
		}
		if !open {
			t.Errorf("NetworkPolicy does not admit the gateway port %d", want)
		}
	}
	for _, e := range c.Env {
		if e.Name == "DISCOVERY_TOKEN" && (e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil) {
			t.Error("DISCOVERY_TOKEN is not from a Secret")
		}
	}

	b, err := os.ReadFile("ha/gateway-hpa-example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var hpa autoscalingv2.HorizontalPodAutoscaler
	if err := yaml.UnmarshalStrict(b, &hpa); err != nil {
		t.Fatalf("HPA example: %v", err)
	}
	if hpa.Spec.ScaleTargetRef.Kind != "Deployment" || hpa.Spec.ScaleTargetRef.Name != gwName || *hpa.Spec.MinReplicas < 2 {
		t.Errorf("HPA example targets %+v (min %d), want the gateway Deployment with at least 2", hpa.Spec.ScaleTargetRef, *hpa.Spec.MinReplicas)
	}
	for _, k := range r.keys() {
		if strings.HasPrefix(k, "HorizontalPodAutoscaler/") {
			t.Errorf("the overlay applies %s; the HPA example is meant to be opted into", k)
		}
	}
}
