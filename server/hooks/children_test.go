package hooks_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/proxy-operator/proxy-operator/internal/fleet"
	"github.com/proxy-operator/proxy-operator/internal/healthtest"
	"github.com/proxy-operator/proxy-operator/internal/lifecycle"
	"github.com/proxy-operator/proxy-operator/internal/verdict"
	"github.com/proxy-operator/proxy-operator/providers"
	"github.com/proxy-operator/proxy-operator/providers/credentials"
	"github.com/proxy-operator/proxy-operator/providers/kubernetes"
	"github.com/proxy-operator/proxy-operator/server/hooks"
	"github.com/proxy-operator/proxy-operator/server/replay"
)

var writeKubernetesFixtures = flag.Bool("write-kubernetes-fixtures", false,
	"rewrite the request.json and state.json of testdata/<hook>/pod-* from TestKubernetesPodLifecycle (then run -update)")

const (
	podParentUID = "7a2d9c1e-5b3f-4e8a-b6c2-000000000042"
	podProvider  = "pods"
)

// fakeMC is the part of Metacontroller the children tests need: it holds one Proxy and its
// Pods, calls the hooks with them, and applies each answer as Metacontroller does: status
// replaced, a new child created with the controller-uid label, an existing child left alone
// (OnDelete), a child missing from the answer deleted.
type fakeMC struct {
	t      *testing.T
	h      http.Handler
	now    *time.Time
	v1Keys bool // key children by "name" (hook v1) instead of "namespace/name"
	parent map[string]any
	pods   map[string]map[string]any
	// secrets are the stored Secret children (the Proxy's credentials), by name.
	secrets map[string]map[string]any
	// record, when set, receives every request body with a step name, for fixtures.
	record func(step string, body []byte)
}

type syncAnswer struct {
	Status             map[string]any   `json:"status"`
	Children           []map[string]any `json:"children"`
	ResyncAfterSeconds float64          `json:"resyncAfterSeconds"`
	Finalized          bool             `json:"finalized"`
}

func newFakeMC(t *testing.T, h http.Handler, now *time.Time, spec map[string]any) *fakeMC {
	t.Helper()
	// The credentials Secret an earlier sync returned is stored already: these tests are
	// about Pods (TestCredentialsSecretBeforePod covers the first sync).
	cred, err := credentials.ForManaged(providers.Parent{Namespace: "crawl", Name: "edge-pod", UID: podParentUID}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var secret map[string]any
	if err := json.Unmarshal(cred.Child, &secret); err != nil {
		t.Fatal(err)
	}
	secret["metadata"].(map[string]any)["uid"] = "secret-uid-1"
	name := credentials.SecretName(podParentUID)
	return &fakeMC{t: t, h: h, now: now, pods: map[string]map[string]any{}, secrets: map[string]map[string]any{name: secret}, parent: map[string]any{
		"apiVersion": "crawl.example.com/v1alpha1",
		"kind":       "Proxy",
		"metadata": map[string]any{
			"name": "edge-pod", "namespace": "crawl", "uid": podParentUID, "generation": 1,
			"creationTimestamp": "2026-11-30T11:00:00Z",
			"finalizers":        []any{"metacontroller.io/compositecontroller-proxy-operator"},
		},
		"spec": spec,
	}}
}

func (m *fakeMC) request(finalizing bool) []byte {
	m.t.Helper()
	objs := map[string]any{}
	for name, pod := range m.pods {
		key := "crawl/" + name
		if m.v1Keys {
			key = name
		}
		objs[key] = pod
	}
	children := map[string]any{}
	if len(objs) > 0 {
		children[kubernetes.PodTypeKey] = objs
	}
	secrets := map[string]any{}
	for name, s := range m.secrets {
		key := "crawl/" + name
		if m.v1Keys {
			key = name
		}
		secrets[key] = s
	}
	if len(secrets) > 0 {
		children[credentials.SecretTypeKey] = secrets
	}
	b, err := json.Marshal(map[string]any{"parent": m.parent, "children": children, "related": map[string]any{}, "finalizing": finalizing})
	if err != nil {
		m.t.Fatal(err)
	}
	return b
}

// sync calls the hook (finalize when the parent is being deleted) and applies the answer.
func (m *fakeMC) sync(step string) syncAnswer {
	m.t.Helper()
	_, finalizing := m.parent["metadata"].(map[string]any)["deletionTimestamp"]
	hook := "/sync"
	if finalizing {
		hook = "/finalize"
	}
	body := m.request(finalizing)
	if m.record != nil {
		m.record(step, body)
	}
	req := httptest.NewRequest(http.MethodPost, hook, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	m.h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		m.t.Fatalf("%s: %s answered %d: %s", step, hook, rec.Code, rec.Body)
	}
	if bytes.Contains(rec.Body.Bytes(), []byte("null")) {
		m.t.Errorf("%s: answer carries a null: %s", step, rec.Body)
	}
	var ans syncAnswer
	dec := json.NewDecoder(bytes.NewReader(rec.Body.Bytes()))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&ans); err != nil {
		m.t.Fatalf("%s: answer does not decode strictly: %v", step, err)
	}
	m.parent["status"] = ans.Status
	if finalizing && ans.Finalized {
		// Children of the final answer are not applied.
		return ans
	}
	returned := map[string]bool{}
	for _, c := range ans.Children {
		name := c["metadata"].(map[string]any)["name"].(string)
		returned[name] = true
		if c["kind"] == "Secret" {
			if _, ok := m.secrets[name]; !ok {
				c["metadata"].(map[string]any)["uid"] = "secret-uid-" + name
				m.secrets[name] = c
			}
			continue
		}
		m.applyChild(step, c)
	}
	for name := range m.secrets {
		if !returned[name] {
			delete(m.secrets, name)
		}
	}
	for name, pod := range m.pods {
		if !returned[name] {
			pod["metadata"].(map[string]any)["deletionTimestamp"] = m.now.Format(time.RFC3339)
		}
	}
	return ans
}

func (m *fakeMC) applyChild(step string, c map[string]any) {
	m.t.Helper()
	meta, _ := c["metadata"].(map[string]any)
	if c["apiVersion"] != "v1" || c["kind"] != "Pod" || meta == nil || meta["name"] == "" || meta["namespace"] != "crawl" {
		m.t.Fatalf("%s: child is not a Pod in the parent's namespace: %v", step, c)
	}
	labels, _ := meta["labels"].(map[string]any)
	if uid, set := labels["controller-uid"]; set && uid != podParentUID {
		m.t.Fatalf("%s: child label controller-uid=%v does not match the selector", step, uid)
	}
	name := meta["name"].(string)
	if _, exists := m.pods[name]; exists {
		return
	}
	var pod map[string]any
	b, _ := json.Marshal(c)
	_ = json.Unmarshal(b, &pod)
	pm := pod["metadata"].(map[string]any)
	pl := maps.Clone(labels)
	if pl == nil {
		pl = map[string]any{}
	}
	pl["controller-uid"] = podParentUID
	pm["labels"] = pl
	pm["uid"] = fmt.Sprintf("pod-uid-%d", len(m.pods)+1)
	pm["resourceVersion"] = "1"
	pm["creationTimestamp"] = m.now.Format(time.RFC3339)
	pm["ownerReferences"] = []any{map[string]any{"apiVersion": "crawl.example.com/v1alpha1", "kind": "Proxy", "name": "edge-pod", "uid": podParentUID, "controller": true, "blockOwnerDeletion": true}}
	pod["status"] = map[string]any{"phase": "Pending", "qosClass": "Burstable"}
	m.pods[name] = pod
}

// run makes a Pod Running and Ready with an address.
func (m *fakeMC) run(name, ip string) {
	m.t.Helper()
	pod, ok := m.pods[name]
	if !ok {
		m.t.Fatalf("no pod %s to run (have %v)", name, slices.Sorted(maps.Keys(m.pods)))
	}
	pod["status"] = map[string]any{
		"phase": "Running", "podIP": ip, "hostIP": "10.0.0.5",
		"conditions": []any{
			map[string]any{"type": "PodScheduled", "status": "True"},
			map[string]any{"type": "Ready", "status": "True"},
		},
	}
}

// kill starts deleting a Pod, as kubectl delete would.
func (m *fakeMC) kill(name string) {
	m.pods[name]["metadata"].(map[string]any)["deletionTimestamp"] = m.now.Format(time.RFC3339)
}

// reap removes the Pods whose deletion has finished.
func (m *fakeMC) reap() {
	for name, pod := range m.pods {
		if _, gone := pod["metadata"].(map[string]any)["deletionTimestamp"]; gone {
			delete(m.pods, name)
		}
	}
}

func (m *fakeMC) podNames() []string { return slices.Sorted(maps.Keys(m.pods)) }

// childNames are the Pods among the children (the credentials Secret is checked apart).
func childNames(a syncAnswer) []string {
	out := []string{}
	for _, c := range a.Children {
		if c["kind"] == "Pod" {
			out = append(out, c["metadata"].(map[string]any)["name"].(string))
		}
	}
	return out
}

func statusString(a syncAnswer, field string) string {
	s, _ := a.Status[field].(string)
	return s
}

func provisionedReason(a syncAnswer) string {
	conds, _ := a.Status["conditions"].([]any)
	for _, c := range conds {
		if m := c.(map[string]any); m["type"] == "Provisioned" {
			return m["reason"].(string)
		}
	}
	return ""
}

// podHooks is a hook router whose only provider is a kubernetes provider named "pods",
// counted by the provider metrics as in production.
func podHooks(t *testing.T, now *time.Time, health hooks.HealthSource) (http.Handler, *prometheus.Registry) {
	t.Helper()
	kp, err := kubernetes.New(kubernetes.Config{})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	metrics := providers.NewMetrics(reg)
	clock := func() time.Time { return *now }
	h := &hooks.Hooks{
		Providers: providers.NewSet(providers.Entry{Name: podProvider, Type: "kubernetes", Provider: metrics.Instrument(podProvider, kp)}),
		Fleet:     fleet.New(clock, 0),
		Health:    health,
		Now:       clock,
	}
	return h.Handler(), reg
}

func podSpec(port int) map[string]any {
	return map[string]any{"mode": "Managed", "provider": podProvider, "port": port}
}

// TestKubernetesPodLifecycle drives one Proxy through create, running, replaced, lost and
// finalized against a fake Metacontroller, under both child key styles.
func TestKubernetesPodLifecycle(t *testing.T) {
	for _, v1Keys := range []bool{false, true} {
		t.Run(fmt.Sprintf("v1Keys=%t", v1Keys), func(t *testing.T) {
			now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
			health := &healthtest.Map{}
			h, reg := podHooks(t, &now, health)
			m := newFakeMC(t, h, &now, podSpec(3128))
			m.v1Keys = v1Keys
			if *writeKubernetesFixtures && !v1Keys {
				m.record = fixtureWriter(t, &now, health)
			}
			first := providers.InstanceName(podParentUID, "")

			// create: one Pod child, the status points at it.
			a := m.sync("create")
			if got := childNames(a); len(got) != 1 || !strings.HasPrefix(got[0], first+"-") {
				t.Fatalf("create: children %v, want one named %s-<hash>", got, first)
			}
			podA := childNames(a)[0]
			if got, want := statusString(a, "providerID"), podA; got != want {
				t.Errorf("create: providerID %q, want %q", got, want)
			}
			if got, want := podA, providers.InstanceName(podParentUID, statusString(a, "specHash")); got != want {
				t.Errorf("create: pod name %q, want %q (the spec hash in the name)", got, want)
			}
			checkPod(t, a.Children[0], 3128, statusString(a, "specHash"), false)

			// provisioning: the Pending Pod is kept and waited for.
			a = m.sync("provisioning")
			if diff := cmp.Diff([]string{podA}, childNames(a)); diff != "" {
				t.Errorf("provisioning: children (-want +got):\n%s", diff)
			}
			if got := statusString(a, "phase"); got != "Provisioning" {
				t.Errorf("provisioning: phase %q, want Provisioning", got)
			}

			// running: the Ready Pod's address is the proxy's.
			m.run(podA, "10.244.1.7")
			health.SetDefault(verdict.Health{State: verdict.Healthy, LatencyMillis: 12, Since: now.Add(-5 * time.Second)})
			a = m.sync("running")
			if got, want := [3]string{statusString(a, "phase"), statusString(a, "ip"), provisionedReason(a)}, [3]string{"Ready", "10.244.1.7", lifecycle.ReasonRunning}; got != want {
				t.Errorf("running: phase, ip, reason = %v, want %v", got, want)
			}
			if diff := cmp.Diff([]string{podA}, childNames(a)); diff != "" {
				t.Errorf("running: children (-want +got):\n%s", diff)
			}
			steady := m.sync("running-again")
			if diff := cmp.Diff(a, steady); diff != "" {
				t.Errorf("a steady resync changed the answer (-first +second):\n%s", diff)
			}

			// replaced: a new port is a new hash; the old Pod is dropped and waited out,
			// then the new one is returned.
			m.parent["spec"] = podSpec(3129)
			m.parent["metadata"].(map[string]any)["generation"] = 2
			health.SetDefault(verdict.Health{State: verdict.Unknown})
			a = m.sync("replaced")
			if got := childNames(a); len(got) != 0 {
				t.Errorf("replaced: children %v, want none (the old Pod dropped)", got)
			}
			if got := provisionedReason(a); got != lifecycle.ReasonReplacing {
				t.Errorf("replaced: reason %q, want %s", got, lifecycle.ReasonReplacing)
			}
			a = m.sync("replaced-terminating")
			if got := childNames(a); len(got) != 0 {
				t.Errorf("replaced while the old Pod terminates: children %v, want none", got)
			}
			m.reap()
			a = m.sync("replaced-old-gone")
			if got := childNames(a); len(got) != 1 || got[0] == podA {
				t.Fatalf("replaced-old-gone: children %v, want one new Pod (not %s)", got, podA)
			}
			podB := childNames(a)[0]
			checkPod(t, a.Children[0], 3129, statusString(a, "specHash"), true)

			// deleted: someone deletes the running Pod; it is replaced by the same name.
			m.run(podB, "10.244.2.9")
			m.sync("running-b")
			m.kill(podB)
			a = m.sync("deleted")
			if got := provisionedReason(a); got != lifecycle.ReasonInstanceLost {
				t.Errorf("deleted: reason %q, want %s", got, lifecycle.ReasonInstanceLost)
			}
			if got := childNames(a); len(got) != 0 {
				t.Errorf("deleted: children %v, want none until the Pod is gone", got)
			}
			m.reap()
			a = m.sync("deleted-gone")
			if diff := cmp.Diff([]string{podB}, childNames(a)); diff != "" {
				t.Errorf("deleted-gone: children (-want +got):\n%s", diff)
			}

			// finalize: no children while finalizing; finalized once the Pod is absent.
			m.parent["metadata"].(map[string]any)["deletionTimestamp"] = now.Format(time.RFC3339)
			a = m.sync("finalize")
			if a.Finalized || len(a.Children) != 0 {
				t.Errorf("finalize with a Pod: finalized=%t children=%v, want false and none", a.Finalized, childNames(a))
			}
			if got := m.podNames(); len(got) != 1 {
				t.Fatalf("finalize: pods %v, want the one being deleted", got)
			}
			m.reap()
			a = m.sync("finalize-gone")
			if !a.Finalized {
				t.Errorf("finalize once the Pod is gone: finalized=false, want true (status %v)", a.Status)
			}

			// Every call of the bound provider was counted under the configured name.
			if got := providerCalls(t, reg, "create"); got != 3 {
				t.Errorf("provider create calls counted %v, want 3", got)
			}
		})
	}
}

// providerCalls is the value of proxy_operator_provider_requests_total{provider="pods",op,result="ok"}.
func providerCalls(t *testing.T, reg *prometheus.Registry, op string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, mf := range mfs {
		if mf.GetName() != "proxy_operator_provider_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			lbl := map[string]string{}
			for _, l := range m.GetLabel() {
				lbl[l.GetName()] = l.GetValue()
			}
			if lbl["provider"] == podProvider && lbl["op"] == op && lbl["result"] == "ok" {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return n
}

// checkPod checks the desired Pod a create returned.
func checkPod(t *testing.T, child map[string]any, port int, hash string, rewritesPort bool) {
	t.Helper()
	var got struct {
		Metadata struct {
			Name      string            `json:"name"`
			Namespace string            `json:"namespace"`
			Labels    map[string]string `json:"labels"`
		} `json:"metadata"`
		Spec struct {
			Containers []struct {
				Image   string   `json:"image"`
				Command []string `json:"command"`
				Env     []struct {
					Name, Value string
				} `json:"env"`
				Ports []struct {
					ContainerPort int `json:"containerPort"`
				} `json:"ports"`
				Resources struct {
					Requests map[string]string `json:"requests"`
					Limits   map[string]string `json:"limits"`
				} `json:"resources"`
				ReadinessProbe struct {
					TCPSocket struct {
						Port int `json:"port"`
					} `json:"tcpSocket"`
				} `json:"readinessProbe"`
			} `json:"containers"`
			AutomountServiceAccountToken *bool `json:"automountServiceAccountToken"`
			Volumes                      []struct {
				Secret struct {
					SecretName string `json:"secretName"`
				} `json:"secret"`
			} `json:"volumes"`
		} `json:"spec"`
		Status any `json:"status"`
	}
	b, _ := json.Marshal(child)
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	wantLabels := map[string]string{
		providers.TagOwnerUID: podParentUID, providers.TagManaged: "true", providers.TagSpecHash: hash,
		kubernetes.LabelName: "squid", kubernetes.LabelManagedBy: "proxy-operator",
	}
	if diff := cmp.Diff(wantLabels, got.Metadata.Labels); diff != "" {
		t.Errorf("pod labels (-want +got):\n%s", diff)
	}
	if got.Status != nil {
		t.Errorf("desired pod carries a status: %v", got.Status)
	}
	if len(got.Spec.Containers) != 1 {
		t.Fatalf("pod has %d containers, want 1", len(got.Spec.Containers))
	}
	c := got.Spec.Containers[0]
	if c.Image != kubernetes.DefaultImage {
		t.Errorf("image %q, want %q", c.Image, kubernetes.DefaultImage)
	}
	if len(c.Ports) != 1 || c.Ports[0].ContainerPort != port || c.ReadinessProbe.TCPSocket.Port != port {
		t.Errorf("ports %v and readiness port %d, want %d", c.Ports, c.ReadinessProbe.TCPSocket.Port, port)
	}
	wantRes := map[string]string{"cpu": kubernetes.DefaultCPURequest, "memory": kubernetes.DefaultMemoryRequest}
	if diff := cmp.Diff(wantRes, c.Resources.Requests); diff != "" {
		t.Errorf("requests (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]string{"memory": kubernetes.DefaultMemoryLimit}, c.Resources.Limits); diff != "" {
		t.Errorf("limits (-want +got):\n%s", diff)
	}
	// Every Pod runs the generated squid.conf (listening on spec.port, demanding the
	// credential) and mounts the Proxy's credentials Secret.
	_ = rewritesPort
	if len(c.Env) != 1 || c.Env[0].Value != kubernetes.SquidConfig(int32(port), kubernetes.CredentialsDir, kubernetes.RunDir) {
		t.Errorf("env %v: want SQUID_CONF for port %d", c.Env, port)
	}
	if v := got.Spec.Volumes; len(v) != 1 || v[0].Secret.SecretName != credentials.SecretName(podParentUID) {
		t.Errorf("volumes %+v: want the credentials Secret", v)
	}
	if a := got.Spec.AutomountServiceAccountToken; a == nil || *a {
		t.Errorf("automountServiceAccountToken = %v, want false", a)
	}
}

// TestChildrenWithoutBoundProvider: a Proxy whose provider is no longer configured, or whose
// spec became invalid, keeps the Pods it has (nothing deleted, as for a cloud machine); a
// finalize returns none.
func TestChildrenWithoutBoundProvider(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	h, _ := podHooks(t, &now, &healthtest.Map{})
	m := newFakeMC(t, h, &now, podSpec(3128))
	pod := m.sync("create").Children[0]
	name := pod["metadata"].(map[string]any)["name"].(string)
	m.run(name, "10.244.1.7")
	m.sync("running")

	for _, tc := range []struct {
		name string
		spec map[string]any
	}{
		{"unknown provider", map[string]any{"mode": "Managed", "provider": "gone", "port": 3128}},
		{"invalid spec", map[string]any{"mode": "Managed", "provider": podProvider, "port": 3128, "endpoint": map[string]any{"host": "x", "port": 1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m.parent["spec"] = tc.spec
			a := m.sync(tc.name)
			if diff := cmp.Diff([]string{name}, childNames(a)); diff != "" {
				t.Errorf("children (-want +got):\n%s", diff)
			}
			if _, has := a.Children[0]["status"]; has {
				t.Errorf("kept child carries its status")
			}
			if got := a.Children[0]["metadata"].(map[string]any)["uid"]; got != nil {
				t.Errorf("kept child carries server metadata uid=%v", got)
			}
		})
	}
	m.parent["metadata"].(map[string]any)["deletionTimestamp"] = now.Format(time.RFC3339)
	if a := m.sync("finalize"); len(a.Children) != 0 {
		t.Errorf("finalize returned children %v, want none", childNames(a))
	}
}

// fixtureWriter writes the scenario's requests of interest as fixtures.
func fixtureWriter(t *testing.T, now *time.Time, health *healthtest.Map) func(string, []byte) {
	t.Helper()
	keep := map[string]bool{"create": true, "provisioning": true, "running": true, "replaced": true,
		"replaced-terminating": true, "replaced-old-gone": true, "deleted": true, "deleted-gone": true,
		"finalize": true, "finalize-gone": true}
	return func(step string, body []byte) {
		if !keep[step] {
			return
		}
		hook := "sync"
		if strings.HasPrefix(step, "finalize") {
			hook = "finalize"
		}
		dir := filepath.Join("..", "..", "testdata", hook, "pod-"+step)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		var pretty bytes.Buffer
		if err := json.Indent(&pretty, body, "", "  "); err != nil {
			t.Fatal(err)
		}
		st := replay.State{Now: *now, Provider: podProvider, ProviderType: "kubernetes"}
		if h := health.Health("crawl/edge-pod"); h.State == verdict.Healthy {
			st.Health = map[string]replay.Health{"crawl/edge-pod": {State: h.State, LatencyMillis: h.LatencyMillis, Since: h.Since}}
		}
		sb, _ := json.MarshalIndent(st, "", "  ")
		if err := os.WriteFile(filepath.Join(dir, replay.RequestFile), append(pretty.Bytes(), '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, replay.StateFile), append(sb, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestPodLostStatusWrite: a status write lost after the Pod was returned leaves a Proxy with no
// providerID and a Pod. Sync adopts it by name (no second Pod); finalize finds it by its tags.
func TestPodLostStatusWrite(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	h, _ := podHooks(t, &now, &healthtest.Map{})
	m := newFakeMC(t, h, &now, podSpec(3128))
	pod := childNames(m.sync("create"))[0]
	m.run(pod, "10.244.1.7")

	delete(m.parent, "status")
	a := m.sync("status lost")
	if diff := cmp.Diff([]string{pod}, childNames(a)); diff != "" {
		t.Errorf("sync after a lost status: children (-want +got):\n%s", diff)
	}
	if got := statusString(a, "providerID"); got != pod {
		t.Errorf("providerID %q, want %q", got, pod)
	}

	delete(m.parent, "status")
	m.parent["metadata"].(map[string]any)["deletionTimestamp"] = now.Format(time.RFC3339)
	a = m.sync("finalize, status lost")
	if a.Finalized || len(a.Children) != 0 || statusString(a, "phase") != "Deleting" {
		t.Errorf("finalize with an untracked Pod: finalized=%t children=%v phase=%s, want false, none, Deleting",
			a.Finalized, childNames(a), statusString(a, "phase"))
	}
	m.reap()
	delete(m.parent, "status")
	if a = m.sync("finalize, gone"); !a.Finalized {
		t.Errorf("finalize once the Pod is gone: not finalized (status %v)", a.Status)
	}
}
