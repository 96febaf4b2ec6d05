package metacontroller_test

import (
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
)

const (
	discDeployment = "proxy-operator-discovery"
	redisConfig    = "proxy-operator-redis"
)

// TestHAOverlay follows the ha/ overlay's wiring: 2 discovery replicas running the discovery
// subcommand behind the discovery Service, a PodDisruptionBudget that keeps one, and the
// operator and the replicas pointed at the same Redis URL from one ConfigMap, with the password
// from one optional Secret.
func TestHAOverlay(t *testing.T) {
	r := renderDir(t, "ha")
	var (
		opDep, discDep appsv1.Deployment
		disc           corev1.Service
		pdb            policyv1.PodDisruptionBudget
		cm             corev1.ConfigMap
	)
	r.get(t, "Deployment/"+namespace+"/"+deployment, &opDep)
	r.get(t, "Deployment/"+namespace+"/"+discDeployment, &discDep)
	r.get(t, "Service/"+namespace+"/"+discService, &disc)
	r.get(t, "PodDisruptionBudget/"+namespace+"/"+discDeployment, &pdb)
	r.get(t, "ConfigMap/"+namespace+"/"+redisConfig, &cm)

	url := cm.Data["REDIS_URL"]
	if _, err := strconv.Atoi(cm.Data["REDIS_WAIT_REPLICAS"]); err != nil {
		t.Errorf("ConfigMap %s REDIS_WAIT_REPLICAS = %q, want a number", redisConfig, cm.Data["REDIS_WAIT_REPLICAS"])
	}
	if !strings.HasPrefix(url, "redis://") && !strings.HasPrefix(url, "rediss://") {
		t.Errorf("ConfigMap %s REDIS_URL = %q, want a redis:// or rediss:// URL", redisConfig, url)
	}
	if strings.Contains(url, "@") {
		t.Errorf("REDIS_URL %q carries credentials: the password belongs in the Secret", url)
	}

	if discDep.Spec.Replicas == nil || *discDep.Spec.Replicas != 2 {
		t.Errorf("discovery replicas = %v, want 2", discDep.Spec.Replicas)
	}
	if opDep.Spec.Replicas == nil || *opDep.Spec.Replicas != 1 {
		t.Errorf("operator replicas = %v, want 1 (it runs the prober and serves the hooks)", opDep.Spec.Replicas)
	}
	for _, dep := range []appsv1.Deployment{opDep, discDep} {
		pod := dep.Spec.Template
		if len(pod.Spec.Containers) != 1 {
			t.Fatalf("%s has %d containers, want 1", dep.Name, len(pod.Spec.Containers))
		}
		c := pod.Spec.Containers[0]
		if got, ok := argValue(c.Args, "-lease-store"); !ok || got != "$(REDIS_URL)" {
			t.Errorf("%s: -lease-store %q, want $(REDIS_URL)", dep.Name, got)
		}
		var fromCM bool
		for _, e := range c.Env {
			if e.Name == "REDIS_URL" && e.ValueFrom != nil && e.ValueFrom.ConfigMapKeyRef != nil &&
				e.ValueFrom.ConfigMapKeyRef.Name == redisConfig && e.ValueFrom.ConfigMapKeyRef.Key == "REDIS_URL" {
				fromCM = true
			}
		}
		if !fromCM {
			t.Errorf("%s: REDIS_URL does not come from ConfigMap %s", dep.Name, redisConfig)
		}
		// Both wait for the same number of replicas, from the same ConfigMap key.
		if got, ok := argValue(c.Args, "-lease-store-wait-replicas"); !ok || got != "$(REDIS_WAIT_REPLICAS)" {
			t.Errorf("%s: -lease-store-wait-replicas %q, want $(REDIS_WAIT_REPLICAS)", dep.Name, got)
		}
		if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool {
			return e.Name == "REDIS_WAIT_REPLICAS" && e.ValueFrom != nil && e.ValueFrom.ConfigMapKeyRef != nil &&
				e.ValueFrom.ConfigMapKeyRef.Name == redisConfig && e.ValueFrom.ConfigMapKeyRef.Key == "REDIS_WAIT_REPLICAS"
		}) {
			t.Errorf("%s: REDIS_WAIT_REPLICAS does not come from ConfigMap %s", dep.Name, redisConfig)
		}
		pwFile, ok := argValue(c.Args, "-lease-store-password-file")
		if !ok {
			t.Errorf("%s: no -lease-store-password-file", dep.Name)
			continue
		}
		mounted := false
		for _, m := range c.VolumeMounts {
			if !strings.HasPrefix(pwFile, m.MountPath+"/") {
				continue
			}
			for _, v := range pod.Spec.Volumes {
				if v.Name == m.Name && v.Secret != nil && v.Secret.SecretName == redisConfig {
					mounted = true
				}
			}
		}
		if !mounted {
			t.Errorf("%s: password file %s is not in a mount of Secret %s", dep.Name, pwFile, redisConfig)
		}
	}

	dc := discDep.Spec.Template.Spec.Containers[0]
	if len(dc.Args) == 0 || dc.Args[0] != "discovery" {
		t.Errorf("discovery container args %q, want the discovery subcommand first", dc.Args)
	}
	podLabels := discDep.Spec.Template.Labels
	if !selects(disc.Spec.Selector, podLabels) || selects(disc.Spec.Selector, opDep.Spec.Template.Labels) {
		t.Errorf("discovery Service selector %v: want the discovery replicas %v only", disc.Spec.Selector, podLabels)
	}
	addr, ok := argValue(dc.Args, "-discovery-addr")
	if !ok {
		t.Fatalf("discovery container args %q lack -discovery-addr", dc.Args)
	}
	if got := containerPort(t, dc, disc.Spec.Ports[0].TargetPort); got != listenPort(t, addr) {
		t.Errorf("discovery Service -> container port %d, but -discovery-addr listens on %s", got, addr)
	}
	if pdb.Spec.Selector == nil || !selects(pdb.Spec.Selector.MatchLabels, podLabels) || selects(pdb.Spec.Selector.MatchLabels, opDep.Spec.Template.Labels) {
		t.Errorf("PodDisruptionBudget selector %v: want the discovery replicas only", pdb.Spec.Selector)
	}
	if pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.IntValue() < 1 || pdb.Spec.MinAvailable.IntValue() >= 2 {
		t.Errorf("PodDisruptionBudget minAvailable %v, want 1 of the 2 replicas", pdb.Spec.MinAvailable)
	}
}

// TestRedisExampleIsMarkedNotHA: the example Redis renders, persists with an append-only file,
// and says it is not HA where a user reads it.
func TestRedisExampleIsMarkedNotHA(t *testing.T) {
	r := renderDir(t, "ha/redis-example")
	var sts appsv1.StatefulSet
	r.get(t, "StatefulSet/"+namespace+"/proxy-operator-redis", &sts)
	if got, _ := argValue(sts.Spec.Template.Spec.Containers[0].Args, "--appendonly"); got != "yes" {
		t.Errorf("example Redis --appendonly %q, want yes", got)
	}
	if len(sts.Spec.VolumeClaimTemplates) != 1 {
		t.Errorf("example Redis has %d volume claims, want 1 for its append-only file", len(sts.Spec.VolumeClaimTemplates))
	}
	for _, f := range []string{"ha/redis-example/kustomization.yaml", "ha/kustomization.yaml"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), "NOT HA") {
			t.Errorf("%s does not say the example Redis is NOT HA", f)
		}
	}
	var svc corev1.Service
	r.get(t, "Service/"+namespace+"/proxy-operator-redis", &svc)
	b, _ := os.ReadFile("ha/redis.env")
	if !strings.Contains(string(b), svc.Name+"."+namespace+".svc:6379") {
		t.Errorf("metacontroller/ha/redis.env does not point at the example Redis Service by default")
	}
}
