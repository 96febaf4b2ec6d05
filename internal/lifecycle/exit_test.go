package lifecycle_test

import (
	"time"

	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
	"github.com/proxy-operator/proxy-operator/internal/lifecycle"
	"github.com/proxy-operator/proxy-operator/internal/verdict"
)

func condition(st v1.ProxyStatus, typ string) *metav1.Condition {
	for i := range st.Conditions {
		if st.Conditions[i].Type == typ {
			return &st.Conditions[i]
		}
	}
	return nil
}

// TestExitAndBandInStatus: the exit, its verdict and the band reach status, stay
// byte-identical while they hold, change in one write when one moves, and read back as the
// health a restarted prober starts from.
func TestExitAndBandInStatus(t *testing.T) {
	m := managedProxy("a")
	h := healthy
	h.Exit = verdict.Exit{IP: "127.1.2.3", Country: "US", ASN: 64500}
	h.Band = v1.BandGood
	in := settle(t, lifecycle.Input{Proxy: m, ProviderKnown: true, Instance: running(m), Health: h, Now: t0})
	st := in.Proxy.Status
	if diff := cmp.Diff(&v1.ExitStatus{IP: "127.1.2.3", Country: "US", ASN: 64500}, st.Exit); diff != "" {
		t.Errorf("status.exit mismatch (-want +got):\n%s", diff)
	}
	if st.QualityBand != v1.BandGood {
		t.Errorf("qualityBand %q, want Good", st.QualityBand)
	}
	c := condition(st, v1.ConditionExitVerified)
	if c == nil || c.Status != metav1.ConditionTrue || c.Message != "exit 127.1.2.3 (US, AS64500) passes the checks" {
		t.Fatalf("ExitVerified = %+v", c)
	}
	if got := lifecycle.RecordedHealth(st); got.Exit != h.Exit || got.Band != h.Band {
		t.Errorf("RecordedHealth = exit %+v band %s, want %+v %s", got.Exit, got.Band, h.Exit, h.Band)
	}

	// A verdict without an exit yet (a restarted prober that recorded nothing new) keeps it.
	in.Health.Exit = verdict.Exit{}
	in.Health.Band = ""
	in.Now = t0.Add(time.Hour)
	if got, want := mustJSON(t, lifecycle.Decide(in).Status), mustJSON(t, st); got != want {
		t.Errorf("status moved without a transition:\nwant %s\ngot  %s", want, got)
	}

	// A mismatch: the condition goes False with the reason; the band moves in the same write.
	in.Health = h
	in.Health.Exit.Mismatch = "exit 127.9.9.9 differs from the proxy's IP 127.1.2.3"
	in.Health.Band = v1.BandPoor
	d := lifecycle.Decide(in)
	c = condition(d.Status, v1.ConditionExitVerified)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != lifecycle.ReasonExitMismatch || c.Message != in.Health.Exit.Mismatch {
		t.Fatalf("ExitVerified on mismatch = %+v", c)
	}
	if d.Status.QualityBand != v1.BandPoor || d.Status.Phase != v1.PhaseReady {
		t.Errorf("band %s phase %s, want Poor and still Ready", d.Status.QualityBand, d.Status.Phase)
	}
	if got := lifecycle.RecordedHealth(d.Status); got.Exit != in.Health.Exit {
		t.Errorf("RecordedHealth exit = %+v, want %+v", got.Exit, in.Health.Exit)
	}

	// The machine goes away: its exit and grade go with it.
	in.Instance = nil
	in.CredentialsPending = true
	d = lifecycle.Decide(in)
	if d.Status.Exit != nil || d.Status.QualityBand != "" || condition(d.Status, v1.ConditionExitVerified) != nil {
		t.Errorf("without a machine: exit %+v band %q condition %+v, want none", d.Status.Exit, d.Status.QualityBand, condition(d.Status, v1.ConditionExitVerified))
	}
}
