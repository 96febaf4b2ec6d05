package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
	"github.com/proxy-operator/proxy-operator/client"
	"github.com/proxy-operator/proxy-operator/internal/kube"
	"github.com/proxy-operator/proxy-operator/internal/kubetest"
	"github.com/proxy-operator/proxy-operator/providers"
	"github.com/proxy-operator/proxy-operator/providers/factory"
	"github.com/proxy-operator/proxy-operator/providers/mock"
	"github.com/proxy-operator/proxy-operator/server"
	"github.com/proxy-operator/proxy-operator/server/hooks/poolhook"
)

const (
	trustNS    = "team-a"
	trustToken = "t0ken-0123456789abcdef"
	// mcFinalizer is the finalizer Metacontroller puts on a parent of the proxy-operator
	// CompositeController; the test plays Metacontroller and removes it once finalized.
	mcFinalizer = "metacontroller.io/compositecontroller-proxy-operator"
)

// hookAnswer is what the test reads of a hook's answer.
type hookAnswer struct {
	Status             map[string]any   `json:"status"`
	Children           []map[string]any `json:"children"`
	ResyncAfterSeconds float64          `json:"resyncAfterSeconds"`
	Finalized          bool             `json:"finalized"`
}

// handMC plays Metacontroller against a real API server: it reads the live parent, sends it to
// the hook with the children it keeps and the related credentials Secret, and writes the
// answered status back.
type handMC struct {
	t        *testing.T
	hookURL  string
	px       dynamic.ResourceInterface
	core     kubernetes.Interface
	children map[string]map[string]any // by Proxy name: type -> key -> object
}

func newHandMC(t *testing.T, rc *rest.Config, hookAddr string) *handMC {
	return &handMC{t: t, hookURL: "http://" + hookAddr, px: kubetest.Dynamic(t, rc).Resource(kube.ProxyResource).Namespace(trustNS),
		core: kubetest.Core(t, rc), children: map[string]map[string]any{}}
}

func (m *handMC) live(name string) *unstructured.Unstructured {
	m.t.Helper()
	obj, err := m.px.Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		m.t.Fatal(err)
	}
	return obj
}

// related is the credentials Secret the Proxy names, as Metacontroller's customize rule asks.
func (m *handMC) related(obj *unstructured.Unstructured) map[string]any {
	m.t.Helper()
	name, _, _ := unstructured.NestedString(obj.Object, "spec", "credentialsSecretRef", "name")
	if name == "" {
		return map[string]any{}
	}
	s, err := m.core.CoreV1().Secrets(trustNS).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		m.t.Fatal(err)
	}
	s.APIVersion, s.Kind = "v1", "Secret"
	return map[string]any{"Secret.v1": map[string]any{trustNS + "/" + name: s}}
}

// post sends one hook body and decodes the 200 answer.
func (m *handMC) post(path string, body map[string]any) hookAnswer {
	m.t.Helper()
	b, _ := json.Marshal(body)
	res, err := http.Post(m.hookURL+path, "application/json", bytes.NewReader(b))
	if err != nil {
		m.t.Fatal(err)
	}
	out, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		m.t.Fatalf("%s: %d %s", path, res.StatusCode, out)
	}
	var ans hookAnswer
	if err := json.Unmarshal(out, &ans); err != nil {
		m.t.Fatal(err)
	}
	return ans
}

func hookBody(parent map[string]any, children, related map[string]any, finalizing bool) map[string]any {
	return map[string]any{"controller": map[string]any{"metadata": map[string]any{"name": "proxy-operator"}},
		"parent": parent, "children": children, "related": related, "finalizing": finalizing}
}

// call plays one sync (or finalize) of the live Proxy name and writes the status back.
func (m *handMC) call(name string, finalize bool) hookAnswer {
	m.t.Helper()
	obj := m.live(name)
	kids := m.children[name]
	if kids == nil {
		kids = map[string]any{}
		m.children[name] = kids
	}
	path := "/sync"
	if finalize {
		path = "/finalize"
	}
	ans := m.post(path, hookBody(obj.Object, kids, m.related(obj), finalize))
	for _, c := range ans.Children {
		md := c["metadata"].(map[string]any)
		typ := c["kind"].(string) + "." + c["apiVersion"].(string)
		objs, _ := kids[typ].(map[string]any)
		if objs == nil {
			objs = map[string]any{}
			kids[typ] = objs
		}
		key := trustNS + "/" + md["name"].(string)
		if _, ok := objs[key]; !ok {
			md["uid"] = "child-" + md["name"].(string)
			objs[key] = c
		}
	}
	obj.Object["status"] = ans.Status
	if _, err := m.px.UpdateStatus(context.Background(), obj, metav1.UpdateOptions{}); err != nil && !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
		m.t.Fatal(err)
	}
	return ans
}

// until calls the hook for name until cond holds (as resyncs would).
func (m *handMC) until(what, name string, finalize bool, cond func(hookAnswer) bool) {
	m.t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		ans := m.call(name, finalize)
		if cond(ans) {
			return
		}
		if time.Now().After(deadline) {
			m.t.Fatalf("%s: not reached; last answer status %v", what, ans.Status)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func phaseIs(p v1.ProxyPhase) func(hookAnswer) bool {
	return func(a hookAnswer) bool { return a.Status["phase"] == string(p) }
}

// disagreements reads proxy_operator_hook_disagreements_total{hook,reason}.
func disagreements(t *testing.T, op *server.Operator, hook, reason string) float64 {
	t.Helper()
	mfs, err := op.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "proxy_operator_hook_disagreements_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, lp := range m.GetLabel() {
				l[lp.GetName()] = lp.GetValue()
			}
			if l["hook"] == hook && l["reason"] == reason {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// trustFixture is the operator with a real API server, a Managed Proxy "victim" on the mock
// provider (a real forward proxy) and an External Proxy "va" on a real mock forward proxy
// that demands the credentials of the Secret "va-creds"; both Ready and leased once.
type trustFixture struct {
	rc            *rest.Config
	op            *server.Operator
	mc            *handMC
	lc            *client.Client
	mock          *mock.Provider
	victimUID     types.UID
	port          string
	probeURL      string
	realCreds     providers.Credentials
	victimLeaseID string
}

func startTrustFixture(t *testing.T) *trustFixture {
	rc := kubetest.Start(t)
	kubetest.Namespace(t, rc, trustNS)
	f := &trustFixture{rc: rc, realCreds: providers.Credentials{Username: "real-user", Password: "real-pass-0123456789"}}

	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	t.Cleanup(target.Close)
	f.probeURL = target.URL + "/generate_204"
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, f.port, _ = net.SplitHostPort(ln.Addr().String())
	ln.Close()
	// va's proxy now, the one its spec moves to later, and the attacker's.
	for _, ip := range []string{"127.0.9.1", "127.0.9.2", "127.0.66.6"} {
		creds := f.realCreds
		stop, err := mock.ServeForwardProxyWith(net.JoinHostPort(ip, f.port), mock.ForwardConfig{Credentials: &creds})
		if err != nil {
			t.Skipf("cannot listen on %s: %v", ip, err)
		}
		t.Cleanup(stop)
	}
	if _, err := kubetest.Core(t, rc).CoreV1().Secrets(trustNS).Create(context.Background(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "va-creds"},
		Data:       map[string][]byte{"username": []byte(f.realCreds.Username), "password": []byte(f.realCreds.Password)},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	hc := map[string]any{"probeURL": f.probeURL, "intervalSeconds": 1, "timeoutSeconds": 1, "failureThreshold": 3}
	port, _ := strconv.Atoi(f.port)
	kubetest.CreateProxy(t, rc, trustNS, map[string]any{
		"metadata": map[string]any{"name": "va"},
		"spec": map[string]any{"mode": "External", "endpoint": map[string]any{"host": "127.0.9.1", "port": port},
			"credentialsSecretRef": map[string]any{"name": "va-creds"}, "attributes": map[string]any{"who": "va"}, "healthCheck": hc},
	})
	victim := kubetest.CreateProxy(t, rc, trustNS, map[string]any{
		"metadata": map[string]any{"name": "victim", "finalizers": []any{mcFinalizer}},
		"spec":     map[string]any{"mode": "Managed", "provider": "mock", "attributes": map[string]any{"who": "victim"}, "healthCheck": hc},
	})
	f.victimUID = victim.GetUID()

	zero := mock.Duration(0)
	f.op, err = server.New(server.Config{
		Hooks:     server.HooksConfig{Addr: "127.0.0.1:0"},
		Discovery: server.DiscoveryAPIConfig{Addr: "127.0.0.1:0", Token: trustToken},
		Egress:    server.EgressConfig{AllowLoopback: true},
		Kube:      server.KubeConfig{Kubeconfig: kubetest.Kubeconfig(t, rc)},
		Providers: server.ProvidersConfig{Parsed: &factory.Config{Providers: []factory.Entry{{Name: "mock", Type: "mock", Mock: &mock.Config{ServeProxies: true, ProvisioningDelay: zero}}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.op.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	e, ok := f.op.Providers().Lookup("mock")
	if !ok {
		t.Fatal("no mock provider")
	}
	p := e.Provider
	for {
		u, ok := p.(interface{ Unwrap() providers.Provider })
		if !ok {
			break
		}
		p = u.Unwrap()
	}
	f.mock = p.(*mock.Provider)
	f.mc = newHandMC(t, rc, f.op.HookAddr())
	if f.lc, err = client.New("http://"+f.op.DiscoveryAddr(), client.WithToken(trustToken)); err != nil {
		t.Fatal(err)
	}

	f.mc.until("va Ready", "va", false, phaseIs(v1.PhaseReady))
	f.mc.until("victim Ready", "victim", false, phaseIs(v1.PhaseReady))
	f.leaseVA(t, "127.0.9.1")
	l := f.lease(t, "victim")
	f.victimLeaseID = l.ID
	return f
}

// lease takes a lease on the proxy whose attribute who is who, waiting for it to turn healthy.
func (f *trustFixture) lease(t *testing.T, who string) *client.Lease {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		l, err := f.lc.Lease(context.Background(), client.LeaseRequest{Selector: map[string]string{"who": who}, TTL: 5 * time.Minute})
		if err == nil {
			return l
		}
		var nm *client.NoMatchError
		if !errors.As(err, &nm) || time.Now().After(deadline) {
			t.Fatalf("lease on %s: %v", who, err)
		}
		f.mc.call(who, false)
		time.Sleep(100 * time.Millisecond)
	}
}

// leaseVA takes a lease on va and checks it hands out ip with the real credentials.
func (f *trustFixture) leaseVA(t *testing.T, ip string) {
	t.Helper()
	l := f.lease(t, "va")
	defer func() { _ = f.lc.Release(context.Background(), l.ID) }()
	if l.Proxy.IP != ip || strconv.Itoa(l.Proxy.Port) != f.port || l.Username != f.realCreds.Username || l.Password != f.realCreds.Password {
		t.Errorf("lease on va hands out %s:%d as %q (password kept: %v), want %s:%s as %q",
			l.Proxy.IP, l.Proxy.Port, l.Username, l.Password == f.realCreds.Password, ip, f.port, f.realCreds.Username)
	}
}

// victimInstance is the mock instance the victim owns, if any.
func (f *trustFixture) victimInstance() (providers.Instance, bool) {
	for _, in := range f.mock.Instances() {
		if in.OwnerUID == string(f.victimUID) {
			return in, true
		}
	}
	return providers.Instance{}, false
}

func (f *trustFixture) deletes() int {
	n := 0
	for _, c := range f.mock.Calls() {
		if c.Op == "delete" {
			n++
		}
	}
	return n
}

// TestForgedHooksChangeNothing sends the three forged hook calls of issue 21 to the real hook
// server of an operator that has a real API server: a /finalize with the victim's name and
// uid, a /finalize with a random uid, a /sync for team-a/va with the attacker's endpoint and
// credentials. None acts: the victim's instance still exists in the mock provider, the fleet
// view is unchanged, the victim's lease is still there and a lease on va hands out the real
// endpoint with the real credentials. Each is counted with its reason.
func TestForgedHooksChangeNothing(t *testing.T) {
	f := startTrustFixture(t)
	inst, ok := f.victimInstance()
	if !ok {
		t.Fatal("victim has no instance after Ready")
	}
	beforeVictim, _ := f.op.Fleet().Get(trustNS + "/victim")
	beforeVA, _ := f.op.Fleet().Get(trustNS + "/va")
	deletes := f.deletes()
	victim := f.mc.live("victim")
	kids := f.mc.children["victim"]

	t.Run("finalize with the victim's name and uid", func(t *testing.T) {
		forged := victim.DeepCopy()
		forged.SetDeletionTimestamp(&metav1.Time{Time: time.Now()})
		ans := f.mc.post("/finalize", hookBody(forged.Object, kids, map[string]any{}, true))
		if ans.Finalized {
			t.Error("forged finalize answered finalized=true")
		}
		if got := disagreements(t, f.op, "finalize", "not_deleting"); got != 1 {
			t.Errorf("disagreements{finalize,not_deleting} = %v, want 1", got)
		}
	})
	t.Run("finalize with a random uid", func(t *testing.T) {
		forged := victim.DeepCopy()
		forged.SetUID("0b4d1d00-0000-4000-8000-00000000f00d")
		forged.SetDeletionTimestamp(&metav1.Time{Time: time.Now()})
		ans := f.mc.post("/finalize", hookBody(forged.Object, map[string]any{}, map[string]any{}, true))
		if ans.Finalized {
			t.Error("forged finalize answered finalized=true")
		}
		if got := disagreements(t, f.op, "finalize", "uid"); got != 1 {
			t.Errorf("disagreements{finalize,uid} = %v, want 1", got)
		}
	})
	t.Run("sync for team-a/va with the attacker's endpoint and credentials", func(t *testing.T) {
		forged := f.mc.live("va").DeepCopy()
		_ = unstructured.SetNestedField(forged.Object, "127.0.66.6", "spec", "endpoint", "host")
		_ = unstructured.SetNestedField(forged.Object, "evil", "spec", "credentialsSecretRef", "name")
		evil := map[string]any{"apiVersion": "v1", "kind": "Secret", "metadata": map[string]any{"name": "evil", "namespace": trustNS},
			"data": map[string]any{"username": []byte("evil"), "password": []byte("evilpass-0123456789")}}
		f.mc.post("/sync", hookBody(forged.Object, map[string]any{}, map[string]any{"Secret.v1": map[string]any{trustNS + "/evil": evil}}, false))
		if got := disagreements(t, f.op, "sync", "spec"); got != 1 {
			t.Errorf("disagreements{sync,spec} = %v, want 1", got)
		}
	})

	t.Run("pool finalize with the pool's name and uid", func(t *testing.T) {
		pools := kubetest.Dynamic(t, f.rc).Resource(kube.PoolResource).Namespace(trustNS)
		pool, err := pools.Create(context.Background(), &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": v1.APIVersion, "kind": v1.PoolKind, "metadata": map[string]any{"name": "web"},
			"spec": map[string]any{"replicas": int64(2), "template": map[string]any{"spec": map[string]any{"mode": "Managed", "provider": "mock"}}},
		}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// The pool's first legitimate sync (once the cache has the pool) answers its members.
		var members map[string]any
		deadline := time.Now().Add(60 * time.Second)
		for {
			live, err := pools.Get(context.Background(), "web", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			ans := f.mc.post("/pools/sync", hookBody(live.Object, map[string]any{}, map[string]any{}, false))
			if len(ans.Children) == 2 {
				members = map[string]any{}
				for _, c := range ans.Children {
					members[trustNS+"/"+c["metadata"].(map[string]any)["name"].(string)] = c
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("pool sync never answered 2 members: %d", len(ans.Children))
			}
			time.Sleep(100 * time.Millisecond)
		}
		forged := pool.DeepCopy()
		forged.SetDeletionTimestamp(&metav1.Time{Time: time.Now()})
		ans := f.mc.post("/pools/finalize", hookBody(forged.Object, map[string]any{poolhook.ChildType: members}, map[string]any{}, true))
		if ans.Finalized || len(ans.Children) != 2 {
			t.Errorf("forged pool finalize: finalized %v with %d members, want false with the 2 it was shown", ans.Finalized, len(ans.Children))
		}
		if got := disagreements(t, f.op, "pools-finalize", "not_deleting"); got != 1 {
			t.Errorf("disagreements{pools-finalize,not_deleting} = %v, want 1", got)
		}
	})

	if got, ok := f.victimInstance(); !ok || got.ID != inst.ID {
		t.Errorf("victim's instance %s: gone (now %+v, %v)", inst.ID, got, ok)
	}
	if n := f.deletes(); n != deletes {
		t.Errorf("the mock provider saw %d deletes, want %d", n, deletes)
	}
	if got, ok := f.op.Fleet().Get(trustNS + "/victim"); !ok || got.UID != beforeVictim.UID || got.IP != beforeVictim.IP || got.Deleting {
		t.Errorf("fleet view of victim: %+v (present %v), want %+v", got, ok, beforeVictim)
	}
	if got, ok := f.op.Fleet().Get(trustNS + "/va"); !ok || got.IP != beforeVA.IP || got.Credentials == nil || *got.Credentials != *beforeVA.Credentials {
		t.Errorf("fleet view of va: IP %s credentials kept %v (present %v), want IP %s", got.IP, ok && got.Credentials != nil && *got.Credentials == f.realCreds, ok, beforeVA.IP)
	}
	if _, err := f.lc.Renew(context.Background(), f.victimLeaseID, 5*time.Minute); err != nil {
		t.Errorf("renew the victim's lease after the forged calls: %v", err)
	}
	f.leaseVA(t, "127.0.9.1")
}

// TestLegitChangesGoThroughOnceTheAPIServerAgrees: an endpoint change and a delete made in the
// API server reach the fleet and the provider through the same hook calls, once the
// operator's cache has seen them (Metacontroller keeps calling until they do).
func TestLegitChangesGoThroughOnceTheAPIServerAgrees(t *testing.T) {
	f := startTrustFixture(t)

	va := f.mc.live("va")
	_ = unstructured.SetNestedField(va.Object, "127.0.9.2", "spec", "endpoint", "host")
	if _, err := f.mc.px.Update(context.Background(), va, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		f.mc.call("va", false)
		if p, ok := f.op.Fleet().Get(trustNS + "/va"); ok && p.IP == "127.0.9.2" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("va's new endpoint never reached the fleet view")
		}
		time.Sleep(100 * time.Millisecond)
	}
	f.leaseVA(t, "127.0.9.2")

	// Metacontroller's view may run ahead of the operator's: a finalize the API server does
	// not back yet is answered, not acted on; it goes through once the delete is seen.
	if ans := f.mc.call("victim", true); ans.Finalized || ans.ResyncAfterSeconds <= 0 || ans.ResyncAfterSeconds > 5 {
		t.Errorf("finalize before the delete: finalized %v, resyncAfterSeconds %v; want false and a short resync", ans.Finalized, ans.ResyncAfterSeconds)
	}
	if _, ok := f.victimInstance(); !ok {
		t.Error("a finalize before the delete removed the victim's instance")
	}
	if err := f.mc.px.Delete(context.Background(), "victim", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.mc.until("victim finalized", "victim", true, func(a hookAnswer) bool { return a.Finalized })
	if in, ok := f.victimInstance(); ok {
		t.Errorf("victim's instance %s still exists after finalize", in.ID)
	}
	if _, ok := f.op.Fleet().Get(trustNS + "/victim"); ok {
		t.Error("victim still in the fleet view after finalize")
	}
	// Metacontroller then removes its finalizer and the Proxy is gone.
	victim := f.mc.live("victim")
	victim.SetFinalizers(nil)
	if _, err := f.mc.px.Update(context.Background(), victim, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}
