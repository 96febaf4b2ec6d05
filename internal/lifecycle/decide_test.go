package lifecycle_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
	"github.com/proxy-operator/proxy-operator/internal/lifecycle"
	"github.com/proxy-operator/proxy-operator/internal/verdict"
	"github.com/proxy-operator/proxy-operator/providers"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func managedProxy(zone string) *v1.Proxy {
	p := &v1.Proxy{
		ObjectMeta: metav1.ObjectMeta{Name: "edge-1", Namespace: "crawl", UID: "uid-1", Generation: 1},
		Spec: v1.ProxySpec{Mode: v1.ModeManaged, Provider: "mock",
			Placement: &v1.PlacementSpec{Region: "local", Zone: zone}},
	}
	p.Spec.Default()
	return p
}

func externalProxy() *v1.Proxy {
	p := &v1.Proxy{
		ObjectMeta: metav1.ObjectMeta{Name: "ext-1", Namespace: "crawl", UID: "uid-2", Generation: 1},
		Spec:       v1.ProxySpec{Mode: v1.ModeExternal, Endpoint: &v1.EndpointSpec{Host: "10.0.0.1", Port: 3128}},
	}
	p.Spec.Default()
	return p
}

func running(p *v1.Proxy) *providers.Instance {
	name := providers.InstanceName(string(p.UID), lifecycle.SpecHash(&p.Spec, ""))
	return &providers.Instance{ID: "mock://" + name, Name: name, State: providers.StateRunning, IP: "127.1.2.3",
		OwnerUID: string(p.UID), SpecHash: lifecycle.SpecHash(&p.Spec, "")}
}

var healthy = verdict.Health{State: verdict.Healthy, LatencyMillis: 40, Since: t0.Add(-10 * time.Second)}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// settle runs Decide until the status is a fixpoint, as Metacontroller's loop would with the
// world unchanged, and returns the last input.
func settle(t *testing.T, in lifecycle.Input) lifecycle.Input {
	t.Helper()
	for range 5 {
		d := lifecycle.Decide(in)
		if d.Action != nil {
			t.Fatalf("settle: unexpected action %+v", d.Action)
		}
		if mustJSON(t, d.Status) == mustJSON(t, in.Proxy.Status) {
			return in
		}
		p := *in.Proxy
		p.Status = d.Status
		in.Proxy = &p
	}
	t.Fatal("status never settled")
	return in
}

// TestSteadyStatusIsAFixpoint: re-deciding a settled proxy gives byte-identical status, for
// every steady shape, even as the clock moves.
func TestSteadyStatusIsAFixpoint(t *testing.T) {
	m := managedProxy("a")
	tests := []struct {
		name string
		in   lifecycle.Input
		want v1.ProxyPhase
	}{
		{"managed ready", lifecycle.Input{Proxy: m, ProviderKnown: true, Instance: running(m), Health: healthy}, v1.PhaseReady},
		{"managed unhealthy", lifecycle.Input{Proxy: m, ProviderKnown: true, Instance: running(m),
			Health: verdict.Health{State: verdict.Unhealthy, Since: t0, Reason: "timeout"}}, v1.PhaseUnhealthy},
		{"managed no verdict", lifecycle.Input{Proxy: m, ProviderKnown: true, Instance: running(m)}, v1.PhaseProvisioning},
		{"managed unknown provider", lifecycle.Input{Proxy: m}, v1.PhaseFailed},
		{"external ready", lifecycle.Input{Proxy: externalProxy(), Health: healthy}, v1.PhaseReady},
		{"external pending", lifecycle.Input{Proxy: externalProxy()}, v1.PhasePending},
		{"invalid spec", lifecycle.Input{Proxy: m, SpecErr: errors.New("spec.port: bad")}, v1.PhaseFailed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.in.Now = t0
			in := settle(t, tc.in)
			if in.Proxy.Status.Phase != tc.want {
				t.Fatalf("phase %s, want %s", in.Proxy.Status.Phase, tc.want)
			}
			want := mustJSON(t, in.Proxy.Status)
			for _, later := range []time.Duration{time.Second, time.Hour, 48 * time.Hour} {
				in.Now = t0.Add(later)
				if got := mustJSON(t, lifecycle.Decide(in).Status); got != want {
					t.Errorf("%s later: status changed\nwant %s\ngot  %s", later, want, got)
				}
			}
		})
	}
}

func TestSameInputsSameBytes(t *testing.T) {
	m := managedProxy("a")
	in := lifecycle.Input{Proxy: m, ProviderKnown: true, Instance: running(m), Health: healthy, Now: t0}
	a, b := lifecycle.Decide(in), lifecycle.Decide(in)
	if mustJSON(t, a) != mustJSON(t, b) {
		t.Errorf("two decisions differ:\n%s\n%s", mustJSON(t, a), mustJSON(t, b))
	}
}

func TestTransitionTimes(t *testing.T) {
	m := managedProxy("a")
	in := settle(t, lifecycle.Input{Proxy: m, ProviderKnown: true, Instance: running(m), Health: healthy, Now: t0})
	ltt := func(st v1.ProxyStatus, typ string) time.Time {
		for _, c := range st.Conditions {
			if c.Type == typ {
				return c.LastTransitionTime.Time
			}
		}
		return time.Time{}
	}
	tests := []struct {
		name   string
		health verdict.Health
		want   time.Time
	}{
		{"same verdict keeps the time", healthy, t0},
		{"new latency keeps the time", verdict.Health{State: verdict.Healthy, LatencyMillis: 400, Since: t0}, t0},
		{"flip takes now", verdict.Health{State: verdict.Unhealthy, Since: t0.Add(time.Hour)}, t0.Add(time.Hour)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := in
			in.Now, in.Health = t0.Add(time.Hour+500*time.Millisecond), tc.health
			d := lifecycle.Decide(in)
			if got := ltt(d.Status, v1.ConditionHealthy); !got.Equal(tc.want) {
				t.Errorf("Healthy lastTransitionTime %s, want %s", got, tc.want)
			}
			if got := ltt(d.Status, v1.ConditionProvisioned); !got.Equal(t0) {
				t.Errorf("Provisioned lastTransitionTime %s, want %s (unchanged)", got, t0)
			}
		})
	}
}

func TestActions(t *testing.T) {
	m := managedProxy("a")
	changed := managedProxy("b")
	changed.Status = v1.ProxyStatus{Phase: v1.PhaseReady, ProviderID: running(m).ID, SpecHash: running(m).SpecHash}
	lost := running(m)
	lost.State, lost.IP = providers.StateTerminated, ""
	provisioning := running(m)
	provisioning.State, provisioning.IP = providers.StateProvisioning, ""
	failed := managedProxy("a")
	failed.Status = v1.ProxyStatus{Phase: v1.PhaseFailed, SpecHash: lifecycle.SpecHash(&failed.Spec, ""),
		Conditions: []metav1.Condition{{Type: v1.ConditionProvisioned, Status: metav1.ConditionFalse, Reason: lifecycle.ReasonPermanentError,
			Message: "Create: mock create: permanent provider error"}}}
	// The same Failed status left by an observation (a lookup by tags that failed as
	// permanent) holds nothing back: the spec was never refused.
	observeFailed := managedProxy("a")
	observeFailed.Status = failed.Status
	observeFailed.Status.Conditions = []metav1.Condition{{Type: v1.ConditionProvisioned, Status: metav1.ConditionFalse, Reason: lifecycle.ReasonPermanentError,
		Message: "observe: mock list: permanent provider error"}}
	type want struct {
		Kind       lifecycle.ActionKind
		Phase      v1.ProxyPhase
		Reason     string
		Resync     time.Duration
		Finalized  bool
		ProviderID string
	}
	tests := []struct {
		name string
		in   lifecycle.Input
		want want
	}{
		{"nothing exists: create", lifecycle.Input{Proxy: m, ProviderKnown: true},
			want{Kind: lifecycle.ActionCreate, Phase: v1.PhaseProvisioning, Reason: lifecycle.ReasonCreating}},
		{"still provisioning: poll", lifecycle.Input{Proxy: m, ProviderKnown: true, Instance: provisioning},
			want{Phase: v1.PhaseProvisioning, Reason: lifecycle.ReasonCreating, Resync: lifecycle.ProvisionPoll, ProviderID: provisioning.ID}},
		{"spec hash changed: delete", lifecycle.Input{Proxy: changed, ProviderKnown: true, Instance: running(m)},
			want{Kind: lifecycle.ActionDelete, Phase: v1.PhaseProvisioning, Reason: lifecycle.ReasonReplacing, ProviderID: running(m).ID}},
		{"instance lost: delete", lifecycle.Input{Proxy: m, ProviderKnown: true, Instance: lost},
			want{Kind: lifecycle.ActionDelete, Phase: v1.PhaseProvisioning, Reason: lifecycle.ReasonInstanceLost, ProviderID: lost.ID}},
		{"permanent failure, same spec: nothing", lifecycle.Input{Proxy: failed, ProviderKnown: true},
			want{Phase: v1.PhaseFailed, Reason: lifecycle.ReasonPermanentError}},
		{"permanent observe failure, same spec: create", lifecycle.Input{Proxy: observeFailed, ProviderKnown: true},
			want{Kind: lifecycle.ActionCreate, Phase: v1.PhaseProvisioning, Reason: lifecycle.ReasonCreating}},
		{"finalize, instance exists: delete", lifecycle.Input{Proxy: m, ProviderKnown: true, Finalizing: true, Instance: running(m)},
			want{Kind: lifecycle.ActionDelete, Phase: v1.PhaseDeleting, Reason: lifecycle.ReasonDeleting, ProviderID: running(m).ID}},
		{"finalize, gone: finalized", lifecycle.Input{Proxy: m, ProviderKnown: true, Finalizing: true},
			want{Phase: v1.PhaseDeleting, Reason: lifecycle.ReasonDeleting, Finalized: true}},
		{"finalize external: finalized", lifecycle.Input{Proxy: externalProxy(), Finalizing: true},
			want{Phase: v1.PhaseDeleting, Reason: lifecycle.ReasonExternal, Finalized: true}},
		{"finalize unknown provider, nothing recorded: finalized", lifecycle.Input{Proxy: m, Finalizing: true},
			want{Phase: v1.PhaseDeleting, Reason: lifecycle.ReasonUnknownProvider, Finalized: true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.in.Now = t0
			d := lifecycle.Decide(tc.in)
			got := want{Phase: d.Status.Phase, Resync: d.ResyncAfter, Finalized: d.Finalized, ProviderID: d.Status.ProviderID}
			if d.Action != nil {
				got.Kind = d.Action.Kind
			}
			for _, c := range d.Status.Conditions {
				if c.Type == v1.ConditionProvisioned {
					got.Reason = c.Reason
				}
			}
			if d.Action != nil {
				// The first pass of an action reports the status that holds while it runs.
				got.Resync, got.ProviderID = 0, d.Action.ProviderID
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("decision mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestProviderErrors(t *testing.T) {
	m := managedProxy("a")
	create := lifecycle.Action{Kind: lifecycle.ActionCreate, Create: providers.CreateRequest{Name: "proxy-x", SpecHash: "h"}}
	tests := []struct {
		name      string
		prevFails int32
		err       error
		phase     v1.ProxyPhase
		reason    string
		fails     int32
		resync    time.Duration
		waits     bool
	}{
		{"quota", 0, providers.ErrQuotaExceeded, v1.PhasePending, lifecycle.ReasonQuotaExceeded, 0, lifecycle.QuotaResync, true},
		{"transient first", 0, providers.ErrTransient, v1.PhasePending, lifecycle.ReasonTransientError, 1, 5 * time.Second, true},
		{"transient fourth", 3, providers.ErrTransient, v1.PhasePending, lifecycle.ReasonTransientError, 4, 40 * time.Second, true},
		{"unclassified is transient", 0, errors.New("boom"), v1.PhasePending, lifecycle.ReasonTransientError, 1, 5 * time.Second, true},
		{"permanent", 2, providers.ErrPermanent, v1.PhaseFailed, lifecycle.ReasonPermanentError, 0, 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := *m
			p.Status.FailureCount = tc.prevFails
			in := lifecycle.Input{Proxy: &p, ProviderKnown: true, Now: t0,
				Outcome: &lifecycle.Outcome{Action: create, Err: providers.Wrap(tc.err, "mock create", nil)}}
			d := lifecycle.Decide(in)
			var reason string
			for _, c := range d.Status.Conditions {
				if c.Type == v1.ConditionProvisioned {
					reason = c.Reason
				}
			}
			if d.Action != nil || d.Status.Phase != tc.phase || reason != tc.reason || d.Status.FailureCount != tc.fails || d.ResyncAfter != tc.resync {
				t.Errorf("got action %v phase %s reason %s failures %d resync %s; want none %s %s %d %s",
					d.Action, d.Status.Phase, reason, d.Status.FailureCount, d.ResyncAfter, tc.phase, tc.reason, tc.fails, tc.resync)
			}
			if got := !d.RetryAt.IsZero(); got != tc.waits || (tc.waits && !d.RetryAt.Equal(t0.Add(tc.resync))) {
				t.Errorf("RetryAt %s, want waiting=%v until %s", d.RetryAt, tc.waits, t0.Add(tc.resync))
			}
		})
	}
}

// TestWaitCarriesStatus: inside a provider-error wait no action is taken and the status is
// carried over byte for byte, so the echo sync of the failure's status write costs nothing.
func TestWaitCarriesStatus(t *testing.T) {
	m := managedProxy("a")
	first := lifecycle.Decide(lifecycle.Input{Proxy: m, ProviderKnown: true, Now: t0,
		Outcome: &lifecycle.Outcome{Action: lifecycle.Action{Kind: lifecycle.ActionCreate}, Err: providers.ErrTransient}})
	p := *m
	p.Status = first.Status
	in := lifecycle.Input{Proxy: &p, ProviderKnown: true, Now: t0.Add(2 * time.Second), RetryAt: first.RetryAt}
	d := lifecycle.Decide(in)
	if d.Action != nil {
		t.Fatalf("action %+v during the wait", d.Action)
	}
	if diff := cmp.Diff(mustJSON(t, first.Status), mustJSON(t, d.Status)); diff != "" {
		t.Errorf("status during the wait (-want +got):\n%s", diff)
	}
	if d.ResyncAfter != 3*time.Second || !d.RetryAt.Equal(first.RetryAt) {
		t.Errorf("resync %s retryAt %s, want 3s and %s", d.ResyncAfter, d.RetryAt, first.RetryAt)
	}
	in.Now = first.RetryAt
	if d := lifecycle.Decide(in); d.Action == nil || d.Action.Kind != lifecycle.ActionCreate {
		t.Errorf("after the wait: action %+v, want Create", d.Action)
	}
}

func TestBackoff(t *testing.T) {
	var got []time.Duration
	for n := int32(1); n <= 9; n++ {
		got = append(got, lifecycle.Backoff(n))
	}
	s := time.Second
	want := []time.Duration{5 * s, 10 * s, 20 * s, 40 * s, 80 * s, 160 * s, 300 * s, 300 * s, 300 * s}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("Backoff (-want +got):\n%s", d)
	}
}

func TestSpecHash(t *testing.T) {
	base := managedProxy("a")
	h := lifecycle.SpecHash(&base.Spec, "")
	mod := func(f func(s *v1.ProxySpec)) v1.ProxySpec {
		s := managedProxy("a").Spec
		f(&s)
		return s
	}
	tests := []struct {
		name      string
		spec      v1.ProxySpec
		cloudInit string
		same      bool
	}{
		{"zone", mod(func(s *v1.ProxySpec) { s.Placement.Zone = "b" }), "", false},
		{"image", mod(func(s *v1.ProxySpec) { s.Placement.Image = "squid-7" }), "", false},
		{"port", mod(func(s *v1.ProxySpec) { s.Port = 8080 }), "", false},
		{"cloud-init content", base.Spec, "#cloud-config\n", false},
		{"default port spelled out", mod(func(s *v1.ProxySpec) { s.Port = 0 }), "", true},
		{"attributes", mod(func(s *v1.ProxySpec) { s.Attributes = map[string]string{"country": "de"} }), "", true},
		{"health check", mod(func(s *v1.ProxySpec) { s.HealthCheck.IntervalSeconds = 60 }), "", true},
		{"max leases", mod(func(s *v1.ProxySpec) { n := int32(9); s.MaxLeases = &n }), "", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := lifecycle.SpecHash(&tc.spec, tc.cloudInit) == h; got != tc.same {
				t.Errorf("same hash = %v, want %v", got, tc.same)
			}
		})
	}
}

// TestReadyCondition: Ready is True iff the phase is Ready, names what holds the proxy back
// otherwise, and its lastTransitionTime moves only when its status does.
func TestReadyCondition(t *testing.T) {
	m := managedProxy("a")
	cond := func(st v1.ProxyStatus, typ string) *metav1.Condition {
		for i := range st.Conditions {
			if st.Conditions[i].Type == typ {
				return &st.Conditions[i]
			}
		}
		return nil
	}
	// Provisioning: Ready False since t0, reason Creating.
	in := lifecycle.Input{Proxy: m, ProviderKnown: true, Now: t0}
	first := lifecycle.Decide(in)
	in.Outcome = &lifecycle.Outcome{Action: *first.Action, ProviderID: "mock://x"}
	st := lifecycle.Decide(in).Status
	if c := cond(st, v1.ConditionReady); c == nil || c.Status != metav1.ConditionFalse || c.Reason != lifecycle.ReasonCreating || !c.LastTransitionTime.Time.Equal(t0) {
		t.Fatalf("while creating: Ready = %+v, want False Creating since %s", c, t0)
	}

	step := func(prev v1.ProxyStatus, at time.Duration, health verdict.Health) v1.ProxyStatus {
		p := *m
		p.Status = prev
		return lifecycle.Decide(lifecycle.Input{Proxy: &p, ProviderKnown: true, Instance: running(m), Health: health, Now: t0.Add(at)}).Status
	}
	// Running, no verdict yet: still False, new reason, same transition time.
	st = step(st, time.Minute, verdict.Health{})
	if c := cond(st, v1.ConditionReady); c.Status != metav1.ConditionFalse || c.Reason != lifecycle.ReasonAwaitingProbe || !c.LastTransitionTime.Time.Equal(t0) {
		t.Errorf("awaiting probe: Ready = %+v, want False AwaitingProbe, time kept at %s", c, t0)
	}
	// Healthy: True from now on.
	st = step(st, 2*time.Minute, healthy)
	if c := cond(st, v1.ConditionReady); st.Phase != v1.PhaseReady || c.Status != metav1.ConditionTrue || !c.LastTransitionTime.Time.Equal(t0.Add(2*time.Minute)) {
		t.Errorf("ready: phase %s Ready = %+v, want True since %s", st.Phase, c, t0.Add(2*time.Minute))
	}
	steady := mustJSON(t, st)
	if got := mustJSON(t, step(st, time.Hour, healthy)); got != steady {
		t.Errorf("steady Ready proxy re-decided an hour later changed:\nwant %s\ngot  %s", steady, got)
	}
	// Unhealthy: False, ProbeFailed, now.
	st = step(st, 3*time.Hour, verdict.Health{State: verdict.Unhealthy, Since: t0.Add(3 * time.Hour), Reason: "timeout"})
	if c := cond(st, v1.ConditionReady); c.Status != metav1.ConditionFalse || c.Reason != lifecycle.ReasonProbeFailed || !c.LastTransitionTime.Time.Equal(t0.Add(3*time.Hour)) {
		t.Errorf("unhealthy: Ready = %+v, want False ProbeFailed since %s", c, t0.Add(3*time.Hour))
	}
	if c := cond(st, v1.ConditionStalled); c != nil {
		t.Errorf("Stalled %+v on an Unhealthy proxy, want it only when Failed", c)
	}
	var types []string
	for _, c := range st.Conditions {
		types = append(types, c.Type)
	}
	if diff := cmp.Diff([]string{v1.ConditionProvisioned, v1.ConditionHealthy, v1.ConditionReady}, types); diff != "" {
		t.Errorf("condition order (-want +got):\n%s", diff)
	}
}

// TestLatencyOnlyAtHealthTransitions (decision 0170): a steady proxy's status is the same bytes
// whatever latency the prober reports, and the latency of the verdict that changes the Healthy
// condition is recorded with that transition.
func TestLatencyOnlyAtHealthTransitions(t *testing.T) {
	m := managedProxy("a")
	in := settle(t, lifecycle.Input{Proxy: m, ProviderKnown: true, Instance: running(m), Health: healthy, Now: t0})
	if got := in.Proxy.Status.LatencyMillis; got != healthy.LatencyMillis {
		t.Fatalf("first verdict recorded latency %d, want %d", got, healthy.LatencyMillis)
	}
	want := mustJSON(t, in.Proxy.Status)
	for _, ms := range []int64{4, 400, 1, 4000, 0, 39} {
		in.Health.LatencyMillis, in.Now = ms, in.Now.Add(time.Minute)
		if got := mustJSON(t, lifecycle.Decide(in).Status); got != want {
			t.Errorf("steady proxy, latency %d ms: status changed\nwant %s\ngot  %s", ms, want, got)
		}
	}

	flips := []struct {
		state   verdict.State
		latency int64
	}{{verdict.Unhealthy, 900}, {verdict.Healthy, 7}}
	for _, f := range flips {
		in.Health = verdict.Health{State: f.state, LatencyMillis: f.latency, Since: in.Now}
		in = settle(t, in)
		if got := in.Proxy.Status.LatencyMillis; got != f.latency {
			t.Errorf("transition to %s recorded latency %d, want %d", f.state, got, f.latency)
		}
	}
}
