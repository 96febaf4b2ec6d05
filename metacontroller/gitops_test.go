package metacontroller_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"testing"
	"time"

	lua "github.com/yuin/gopher-lua"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/yaml"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
	"github.com/proxy-operator/proxy-operator/internal/lifecycle"
	"github.com/proxy-operator/proxy-operator/internal/verdict"
	"github.com/proxy-operator/proxy-operator/providers"
)

const (
	argoHealthKey = "resource.customizations.health.crawl.example.com_Proxy"
	luaTimeout    = 5 * time.Second
)

var gitopsT0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// gitopsCase is one Proxy whose status the real decision code wrote, and what GitOps tools must
// make of it.
type gitopsCase struct {
	name       string
	proxy      *v1.Proxy
	kstatus    status.Status
	argo       string // Healthy, Progressing, Degraded
	readyTrue  bool
	readyCause string // Ready's reason when False
}

func gitopsProxy(uid string) *v1.Proxy {
	p := &v1.Proxy{
		TypeMeta:   metav1.TypeMeta{APIVersion: "crawl.example.com/v1alpha1", Kind: "Proxy"},
		ObjectMeta: metav1.ObjectMeta{Name: "px-" + uid, Namespace: "crawl", UID: types.UID("uid-" + uid), Generation: 1},
		Spec:       v1.ProxySpec{Mode: v1.ModeManaged, Provider: "mock", Placement: &v1.PlacementSpec{Region: "local"}},
	}
	p.Spec.Default()
	return p
}

// decide runs lifecycle.Decide as the sync hook does (first pass, the action's outcome, second
// pass) and returns the Proxy with the status Metacontroller would write.
func decide(t *testing.T, p *v1.Proxy, in lifecycle.Input, outcome func(lifecycle.Action) lifecycle.Outcome) *v1.Proxy {
	t.Helper()
	in.Proxy, in.Now = p, gitopsT0
	d := lifecycle.Decide(in)
	if d.Action != nil {
		if outcome == nil {
			t.Fatalf("%s: unexpected action %+v", p.Name, d.Action)
		}
		o := outcome(*d.Action)
		in.Outcome = &o
		d = lifecycle.Decide(in)
	}
	out := copyProxy(t, p)
	out.Status = d.Status
	return out
}

// copyProxy is a deep copy (the API types have no generated DeepCopy).
func copyProxy(t *testing.T, p *v1.Proxy) *v1.Proxy {
	t.Helper()
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	out := &v1.Proxy{}
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatal(err)
	}
	return out
}

func runningInstance(p *v1.Proxy) *providers.Instance {
	name := providers.InstanceName(string(p.UID), lifecycle.SpecHash(&p.Spec, ""))
	return &providers.Instance{ID: "mock://" + name, Name: name, State: providers.StateRunning, IP: "127.0.0.9",
		OwnerUID: string(p.UID), SpecHash: lifecycle.SpecHash(&p.Spec, "")}
}

// gitopsCases walks one proxy from apply to Ready and others into each state a user waits on,
// every status produced by lifecycle.Decide.
func gitopsCases(t *testing.T) []gitopsCase {
	t.Helper()
	created := func(a lifecycle.Action) lifecycle.Outcome {
		return lifecycle.Outcome{Action: a, ProviderID: "mock://" + a.Create.Name}
	}
	failWith := func(err error) func(lifecycle.Action) lifecycle.Outcome {
		return func(a lifecycle.Action) lifecycle.Outcome {
			return lifecycle.Outcome{Action: a, Err: providers.Wrap(err, "mock create", nil)}
		}
	}
	healthy := verdict.Health{State: verdict.Healthy, LatencyMillis: 30, Since: gitopsT0}

	p := gitopsProxy("a")
	creating := decide(t, p, lifecycle.Input{ProviderKnown: true}, created)
	starting := runningInstance(p)
	starting.State, starting.IP = providers.StateProvisioning, ""
	booting := decide(t, creating, lifecycle.Input{ProviderKnown: true, Instance: starting}, nil)
	awaitingProbe := decide(t, booting, lifecycle.Input{ProviderKnown: true, Instance: runningInstance(p)}, nil)
	ready := decide(t, awaitingProbe, lifecycle.Input{ProviderKnown: true, Instance: runningInstance(p), Health: healthy}, nil)
	unhealthy := decide(t, ready, lifecycle.Input{ProviderKnown: true, Instance: runningInstance(p),
		Health: verdict.Health{State: verdict.Unhealthy, Since: gitopsT0, Reason: "timeout"}}, nil)
	respecced := copyProxy(t, ready)
	respecced.Generation = 2 // the user edited the spec; the operator has not synced it yet
	deleting := copyProxy(t, ready)
	now := metav1.NewTime(gitopsT0)
	deleting.DeletionTimestamp = &now
	deleting = decide(t, deleting, lifecycle.Input{ProviderKnown: true, Instance: runningInstance(p), Finalizing: true},
		func(a lifecycle.Action) lifecycle.Outcome { return lifecycle.Outcome{Action: a} })

	quota := decide(t, gitopsProxy("b"), lifecycle.Input{ProviderKnown: true}, failWith(providers.ErrQuotaExceeded))
	permanent := decide(t, gitopsProxy("c"), lifecycle.Input{ProviderKnown: true}, failWith(providers.ErrPermanent))
	unknown := decide(t, gitopsProxy("d"), lifecycle.Input{}, nil)

	ext := gitopsProxy("e")
	ext.Spec = v1.ProxySpec{Mode: v1.ModeExternal, Endpoint: &v1.EndpointSpec{Host: "198.51.100.7", Port: 3128}}
	ext.Spec.Default()
	extReady := decide(t, ext, lifecycle.Input{Health: healthy}, nil)

	return []gitopsCase{
		{"creating", creating, status.InProgressStatus, "Progressing", false, lifecycle.ReasonCreating},
		{"instance starting", booting, status.InProgressStatus, "Progressing", false, lifecycle.ReasonCreating},
		// A running instance awaiting its first verdict keeps the "starting" status (no write).
		{"running, first probe pending", awaitingProbe, status.InProgressStatus, "Progressing", false, lifecycle.ReasonCreating},
		{"ready", ready, status.CurrentStatus, "Healthy", true, ""},
		{"running, probe failing", unhealthy, status.InProgressStatus, "Degraded", false, lifecycle.ReasonProbeFailed},
		{"spec changed, not yet synced", respecced, status.InProgressStatus, "Progressing", true, ""},
		{"being deleted", deleting, status.TerminatingStatus, "Progressing", false, lifecycle.ReasonDeleting},
		{"quota exceeded", quota, status.InProgressStatus, "Progressing", false, lifecycle.ReasonQuotaExceeded},
		{"permanent provider failure", permanent, status.FailedStatus, "Degraded", false, lifecycle.ReasonPermanentError},
		{"unknown provider", unknown, status.FailedStatus, "Degraded", false, lifecycle.ReasonUnknownProvider},
		{"external, ready", extReady, status.CurrentStatus, "Healthy", true, ""},
	}
}

func toUnstructured(t *testing.T, p *v1.Proxy) *unstructured.Unstructured {
	t.Helper()
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(b); err != nil {
		t.Fatal(err)
	}
	return u
}

func condition(p *v1.Proxy, typ string) *metav1.Condition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == typ {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

// TestKstatusReadsProxyStatus: kstatus (what Flux and kpt wait with) computes Current for a Ready
// Proxy, InProgress while it is provisioned, Failed for phase Failed, on statuses written by
// lifecycle.Decide.
func TestKstatusReadsProxyStatus(t *testing.T) {
	for _, tc := range gitopsCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			ready := condition(tc.proxy, v1.ConditionReady)
			if ready == nil {
				t.Fatalf("no Ready condition in %+v", tc.proxy.Status.Conditions)
			}
			if got := ready.Status == metav1.ConditionTrue; got != tc.readyTrue || got != (tc.proxy.Status.Phase == v1.PhaseReady) {
				t.Errorf("Ready %s with phase %s, want True iff phase Ready", ready.Status, tc.proxy.Status.Phase)
			}
			if !tc.readyTrue && ready.Reason != tc.readyCause {
				t.Errorf("Ready reason %q, want %q (what holds it back)", ready.Reason, tc.readyCause)
			}
			stalled := condition(tc.proxy, v1.ConditionStalled)
			if (stalled != nil) != (tc.proxy.Status.Phase == v1.PhaseFailed) {
				t.Errorf("Stalled %+v with phase %s: want it present iff Failed", stalled, tc.proxy.Status.Phase)
			}
			res, err := status.Compute(toUnstructured(t, tc.proxy))
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != tc.kstatus {
				t.Errorf("kstatus %s (%s), want %s", res.Status, res.Message, tc.kstatus)
			}
		})
	}
}

// argoHealthScript is the Lua shipped in metacontroller/argocd/argocd-cm.yaml.
func argoHealthScript(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("argocd/argocd-cm.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cm corev1.ConfigMap
	if err := yaml.UnmarshalStrict(b, &cm); err != nil {
		t.Fatalf("argocd-cm.yaml: %v", err)
	}
	script := cm.Data[argoHealthKey]
	if cm.Kind != "ConfigMap" || script == "" {
		t.Fatalf("argocd-cm.yaml: kind %q, no %s", cm.Kind, argoHealthKey)
	}
	return script
}

// runArgoHealth runs the health Lua as Argo CD does (gopher-lua, the object as the global obj)
// and returns the status and message it answers.
func runArgoHealth(t *testing.T, script string, obj map[string]any) (string, string) {
	t.Helper()
	L := lua.NewState(lua.Options{SkipOpenLibs: true})
	defer L.Close()
	for _, lib := range []struct {
		name string
		open lua.LGFunction
	}{{lua.BaseLibName, lua.OpenBase}, {lua.TabLibName, lua.OpenTable}, {lua.StringLibName, lua.OpenString}, {lua.MathLibName, lua.OpenMath}} {
		L.Push(L.NewFunction(lib.open))
		L.Push(lua.LString(lib.name))
		L.Call(1, 0)
	}
	ctx, cancel := context.WithTimeout(context.Background(), luaTimeout)
	defer cancel()
	L.SetContext(ctx)
	L.SetGlobal("obj", toLua(L, obj))
	if err := L.DoString(script); err != nil {
		t.Fatalf("health script: %v", err)
	}
	hs, ok := L.Get(-1).(*lua.LTable)
	if !ok {
		t.Fatalf("health script returned %s, want a table", L.Get(-1).Type())
	}
	return lua.LVAsString(hs.RawGetString("status")), lua.LVAsString(hs.RawGetString("message"))
}

// toLua converts decoded JSON into Lua values: objects become tables, arrays 1-based tables.
func toLua(L *lua.LState, v any) lua.LValue {
	switch v := v.(type) {
	case map[string]any:
		tb := L.NewTable()
		for k, e := range v {
			tb.RawSetString(k, toLua(L, e))
		}
		return tb
	case []any:
		tb := L.NewTable()
		for _, e := range v {
			tb.Append(toLua(L, e))
		}
		return tb
	case string:
		return lua.LString(v)
	case bool:
		return lua.LBool(v)
	case int64:
		return lua.LNumber(v)
	case float64:
		return lua.LNumber(v)
	case nil:
		return lua.LNil
	}
	panic(fmt.Sprintf("toLua: %T", v))
}

// TestArgoCDHealthCheck runs the shipped Argo CD health Lua on the same statuses: Healthy when
// Ready, Progressing while provisioning or deleting, Degraded when Failed or failing its probe.
func TestArgoCDHealthCheck(t *testing.T) {
	script := argoHealthScript(t)
	for _, tc := range gitopsCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			got, msg := runArgoHealth(t, script, toUnstructured(t, tc.proxy).Object)
			if got != tc.argo {
				t.Errorf("health %s (%s), want %s", got, msg, tc.argo)
			}
			if msg == "" {
				t.Errorf("health %s without a message", got)
			}
		})
	}
	t.Run("no status yet", func(t *testing.T) {
		p := gitopsProxy("z")
		obj := toUnstructured(t, p).Object
		delete(obj, "status")
		if got, _ := runArgoHealth(t, script, obj); got != "Progressing" {
			t.Errorf("health %s, want Progressing", got)
		}
	})
	// Whatever sits in a status (hand-written, an older operator), the script answers.
	for _, tc := range []struct {
		name   string
		status any
		want   string
	}{
		{"Ready without reason or message", map[string]any{"phase": "Ready", "conditions": []any{map[string]any{"type": "Ready", "status": "True"}}}, "Healthy"},
		{"conditions not a list", map[string]any{"phase": "Pending", "conditions": "nope"}, "Progressing"},
		{"condition not an object", map[string]any{"phase": "Failed", "conditions": []any{"x", 3.0}}, "Degraded"},
		{"observedGeneration a string", map[string]any{"phase": "Ready", "observedGeneration": "1"}, "Progressing"},
		{"status a string", "weird", "Progressing"},
	} {
		t.Run("odd status: "+tc.name, func(t *testing.T) {
			obj := toUnstructured(t, gitopsProxy("y")).Object
			obj["status"] = tc.status
			if got, msg := runArgoHealth(t, script, obj); got != tc.want {
				t.Errorf("health %s (%s), want %s", got, msg, tc.want)
			}
		})
	}
}
