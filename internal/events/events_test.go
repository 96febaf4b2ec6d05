package events_test

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
	"github.com/proxy-operator/proxy-operator/internal/events"
	"github.com/proxy-operator/proxy-operator/internal/lifecycle"
)

func st(phase v1.ProxyPhase, providerID, ip string, conds ...metav1.Condition) v1.ProxyStatus {
	return v1.ProxyStatus{Phase: phase, ProviderID: providerID, IP: ip, SpecHash: "0123456789abcdef", Conditions: conds}
}

func prov(reason, msg string) metav1.Condition {
	return metav1.Condition{Type: v1.ConditionProvisioned, Status: metav1.ConditionFalse, Reason: reason, Message: msg}
}

func healthy(s metav1.ConditionStatus, msg string) metav1.Condition {
	return metav1.Condition{Type: v1.ConditionHealthy, Status: s, Reason: "x", Message: msg}
}

func proxy(status v1.ProxyStatus) *v1.Proxy {
	return &v1.Proxy{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "crawl"},
		Spec: v1.ProxySpec{Mode: v1.ModeManaged, Provider: "mock"}, Status: status}
}

func TestFor(t *testing.T) {
	running := st(v1.PhaseReady, "mock://a", "10.0.0.1", healthy(metav1.ConditionTrue, "ok"))
	for _, tc := range []struct {
		name    string
		prev    v1.ProxyStatus
		outcome *lifecycle.Outcome
		next    v1.ProxyStatus
		final   bool
		want    []events.Event
	}{
		{name: "steady: nothing", prev: running, next: running},
		{name: "create started", prev: v1.ProxyStatus{},
			outcome: &lifecycle.Outcome{Action: lifecycle.Action{Kind: lifecycle.ActionCreate}, ProviderID: "mock://a"},
			next:    st(v1.PhaseProvisioning, "mock://a", "", prov(lifecycle.ReasonCreating, "starting")),
			want:    []events.Event{{"Normal", events.ReasonCreating, "creating instance mock://a on provider mock"}}},
		{name: "replacement created", prev: st(v1.PhaseProvisioning, "mock://old", "", prov(lifecycle.ReasonReplacing, "")),
			outcome: &lifecycle.Outcome{Action: lifecycle.Action{Kind: lifecycle.ActionCreate}, ProviderID: "mock://new"},
			next:    st(v1.PhaseProvisioning, "mock://new", "", prov(lifecycle.ReasonCreating, "")),
			want:    []events.Event{{"Normal", events.ReasonCreating, "creating instance mock://new on provider mock, replacing mock://old"}}},
		{name: "failed create is no creation event", prev: v1.ProxyStatus{},
			outcome: &lifecycle.Outcome{Action: lifecycle.Action{Kind: lifecycle.ActionCreate}, Err: errors.New("boom")},
			next:    st(v1.PhasePending, "", "", prov(lifecycle.ReasonTransientError, "boom"))},
		{name: "replacement delete", prev: running,
			outcome: &lifecycle.Outcome{Action: lifecycle.Action{Kind: lifecycle.ActionDelete, ProviderID: "mock://a"}},
			next:    st(v1.PhaseProvisioning, "mock://a", "", prov(lifecycle.ReasonReplacing, "")),
			want:    []events.Event{{"Normal", events.ReasonReplacing, "deleting instance mock://a to replace it: spec changed (hash 0123456789 -> " + lifecycle.SpecHash(&v1.ProxySpec{Mode: v1.ModeManaged, Provider: "mock"}, "")[:10] + ")"}}},
		{name: "lost machine", prev: running,
			outcome: &lifecycle.Outcome{Action: lifecycle.Action{Kind: lifecycle.ActionDelete, ProviderID: "mock://a"}},
			next:    st(v1.PhaseProvisioning, "mock://a", "", prov(lifecycle.ReasonInstanceLost, "")),
			want:    []events.Event{{"Warning", events.ReasonInstanceLost, "instance mock://a stopped or terminated: deleting it to create a replacement"}}},
		{name: "quota, first time", prev: v1.ProxyStatus{},
			outcome: &lifecycle.Outcome{Action: lifecycle.Action{Kind: lifecycle.ActionCreate}, Err: errors.New("quota")},
			next:    st(v1.PhasePending, "", "", prov(lifecycle.ReasonQuotaExceeded, "CPUS quota exceeded")),
			want:    []events.Event{{"Warning", events.ReasonQuotaExceeded, "CPUS quota exceeded"}}},
		{name: "quota, retried", prev: st(v1.PhasePending, "", "", prov(lifecycle.ReasonQuotaExceeded, "CPUS quota exceeded")),
			outcome: &lifecycle.Outcome{Action: lifecycle.Action{Kind: lifecycle.ActionCreate}, Err: errors.New("quota")},
			next:    st(v1.PhasePending, "", "", prov(lifecycle.ReasonQuotaExceeded, "CPUS quota exceeded"))},
		{name: "permanent failure", prev: v1.ProxyStatus{},
			next: st(v1.PhaseFailed, "", "", prov(lifecycle.ReasonPermanentError, "image not found")),
			want: []events.Event{{"Warning", events.ReasonProvisioningFail, "image not found"}}},
		{name: "health lost", prev: running,
			next: st(v1.PhaseUnhealthy, "mock://a", "10.0.0.1", healthy(metav1.ConditionFalse, "probe failed: timeout")),
			want: []events.Event{{"Warning", events.ReasonHealthLost, "probe failed: timeout"}}},
		{name: "health regained", prev: st(v1.PhaseUnhealthy, "mock://a", "10.0.0.1", healthy(metav1.ConditionFalse, "x")),
			next: running,
			want: []events.Event{{"Normal", events.ReasonHealthRegained, "ok"}}},
		{name: "first verdict healthy is no regain", prev: st(v1.PhaseProvisioning, "mock://a", "10.0.0.1", healthy(metav1.ConditionUnknown, "")),
			next: running},
		{name: "finalized", prev: st(v1.PhaseDeleting, "mock://a", ""), next: st(v1.PhaseDeleting, "", ""), final: true,
			want: []events.Event{{"Normal", events.ReasonInstanceDeleted, "instance mock://a is gone; the Proxy can go"}}},
		{name: "finalized with nothing created", prev: st(v1.PhaseDeleting, "", ""), next: st(v1.PhaseDeleting, "", ""), final: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := lifecycle.Input{Proxy: proxy(tc.prev), Outcome: tc.outcome}
			got := events.For(in, lifecycle.Decision{Status: tc.next, Finalized: tc.final})
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
		})
	}
}
