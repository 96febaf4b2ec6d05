package lifecycle_test

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
	"github.com/proxy-operator/proxy-operator/internal/lifecycle"
)

// TestForeignInstanceIsNotFound: a status.providerID naming another Proxy's instance (issue
// 10, item 4) is treated as not found: sync creates this Proxy's own instance, finalize
// finishes without deleting, and a condition says what was ignored.
func TestForeignInstanceIsNotFound(t *testing.T) {
	const victim = "mock://proxy-victim"
	evil := func() *v1.Proxy {
		p := managedProxy("a")
		p.Status = v1.ProxyStatus{Phase: v1.PhaseReady, ProviderID: victim}
		return p
	}
	tests := []struct {
		name          string
		finalizing    bool
		wantKind      lifecycle.ActionKind
		wantFinalized bool
	}{
		{"sync", false, lifecycle.ActionCreate, false},
		{"finalize", true, "", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := lifecycle.Input{Proxy: evil(), ProviderKnown: true, Finalizing: tc.finalizing, Now: t0,
				ForeignInstance: victim, ForeignOwner: "uid-victim"}
			d := lifecycle.Decide(in)
			var kind lifecycle.ActionKind
			if d.Action != nil {
				kind = d.Action.Kind
				if d.Action.ProviderID == victim {
					t.Fatalf("action %s on the foreign instance", d.Action.Kind)
				}
				if d.Action.Kind == lifecycle.ActionCreate && d.Action.Create.OwnerUID != "uid-1" {
					t.Errorf("create for owner %q, want uid-1", d.Action.Create.OwnerUID)
				}
			}
			if kind != tc.wantKind || d.Finalized != tc.wantFinalized {
				t.Errorf("action %q finalized %v, want %q %v", kind, d.Finalized, tc.wantKind, tc.wantFinalized)
			}
			if d.Status.ProviderID == victim {
				t.Error("status still names the foreign instance")
			}
			c := findCond(d.Status.Conditions, v1.ConditionForeignInstanceIgnored)
			if c == nil || c.Status != metav1.ConditionTrue || c.Reason != lifecycle.ReasonOwnerMismatch {
				t.Fatalf("condition %+v, want %s True %s", c, v1.ConditionForeignInstanceIgnored, lifecycle.ReasonOwnerMismatch)
			}
			// The next sync of the same generation no longer sees it but keeps the record.
			next := *in.Proxy
			next.Status = d.Status
			in2 := lifecycle.Input{Proxy: &next, ProviderKnown: true, Finalizing: tc.finalizing, Now: t0}
			if c := findCond(lifecycle.Decide(in2).Status.Conditions, v1.ConditionForeignInstanceIgnored); c == nil {
				t.Error("condition dropped within the generation")
			}
			next.Generation++
			if c := findCond(lifecycle.Decide(in2).Status.Conditions, v1.ConditionForeignInstanceIgnored); c != nil {
				t.Error("condition kept into a new generation")
			}
		})
	}
}

func findCond(cs []metav1.Condition, typ string) *metav1.Condition {
	for i := range cs {
		if cs[i].Type == typ {
			return &cs[i]
		}
	}
	return nil
}
