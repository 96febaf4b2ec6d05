package lifecycle_test

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"testing"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
	"github.com/proxy-operator/proxy-operator/internal/lifecycle"
	"github.com/proxy-operator/proxy-operator/providers"
)

// TestCreateWaitsForStoredCredentials: no machine is created before the credential Secret is
// stored; once it is, the create request carries the credential.
func TestCreateWaitsForStoredCredentials(t *testing.T) {
	creds := &providers.Credentials{Username: "u", Password: "p"}
	pending := lifecycle.Decide(lifecycle.Input{Proxy: managedProxy("a"), ProviderKnown: true, Now: t0,
		Credentials: creds, CredentialsPending: true})
	if pending.Action != nil {
		t.Fatalf("created before the Secret was stored: %+v", pending.Action)
	}
	if pending.Status.Phase != v1.PhasePending || pending.ResyncAfter != lifecycle.ProvisionPoll {
		t.Fatalf("phase %s resync %s", pending.Status.Phase, pending.ResyncAfter)
	}
	if c := cond(pending.Status, v1.ConditionProvisioned); c == nil || c.Reason != lifecycle.ReasonAwaitingCredentials {
		t.Fatalf("Provisioned condition %+v", c)
	}

	d := lifecycle.Decide(lifecycle.Input{Proxy: managedProxy("a"), ProviderKnown: true, Now: t0,
		Credentials: creds, CredentialsVersion: "secret-uid-1"})
	if d.Action == nil || d.Action.Kind != lifecycle.ActionCreate {
		t.Fatalf("want a create, got %+v", d.Action)
	}
	if got := d.Action.Create.Credentials; got == nil || *got != *creds || got == creds {
		t.Fatalf("create request credentials %v (a copy of %v wanted)", got, creds)
	}
}

// TestRotatedBakedCredentialReplaces: a provider that bakes the credential into its machine
// replaces it when the stored credential changes, but not while the new one is still pending.
func TestRotatedBakedCredentialReplaces(t *testing.T) {
	p := managedProxy("a")
	creds := &providers.Credentials{Username: "u", Password: "p"}
	first := lifecycle.Decide(lifecycle.Input{Proxy: p, ProviderKnown: true, Now: t0, Credentials: creds, CredentialsVersion: "v1"})
	if got := first.Action.Create; got.CredentialsVersion != "v1" || got.Tags()["proxy-operator-credentials"] != "v1" {
		t.Fatalf("create request version %q tags %v, want v1 tagged", got.CredentialsVersion, got.Tags())
	}
	inst := running(p)
	inst.CredentialsVersion = "v1"
	same := lifecycle.Decide(lifecycle.Input{Proxy: p, ProviderKnown: true, Now: t0, Instance: inst, Health: healthy,
		Credentials: creds, CredentialsVersion: "v1"})
	if same.Action != nil {
		t.Fatalf("steady proxy acted: %+v", same.Action)
	}
	pending := lifecycle.Decide(lifecycle.Input{Proxy: p, ProviderKnown: true, Now: t0, Instance: inst, Health: healthy,
		Credentials: creds, CredentialsPending: true})
	if pending.Action != nil {
		t.Fatalf("machine deleted before the new credential was stored: %+v", pending.Action)
	}
	rotated := lifecycle.Decide(lifecycle.Input{Proxy: p, ProviderKnown: true, Now: t0, Instance: inst, Health: healthy,
		Credentials: creds, CredentialsVersion: "v2"})
	if rotated.Action == nil || rotated.Action.Kind != lifecycle.ActionDelete {
		t.Fatalf("rotated credential: want the machine replaced, got %+v", rotated.Action)
	}
	inst.CredentialsVersion = ""
	old := lifecycle.Decide(lifecycle.Input{Proxy: p, ProviderKnown: true, Now: t0, Instance: inst, Health: healthy,
		Credentials: creds, CredentialsVersion: "v1"})
	if old.Action == nil || old.Action.Kind != lifecycle.ActionDelete {
		t.Fatalf("machine made before credentials existed: want it replaced, got %+v", old.Action)
	}
	mounted := lifecycle.Decide(lifecycle.Input{Proxy: p, ProviderKnown: true, Now: t0, Instance: inst, Health: healthy,
		Credentials: creds})
	if mounted.Action != nil {
		t.Fatalf("a machine reading the Secret (no version) was acted on: %+v", mounted.Action)
	}
}

func cond(st v1.ProxyStatus, typ string) *metav1.Condition {
	for i := range st.Conditions {
		if st.Conditions[i].Type == typ {
			return &st.Conditions[i]
		}
	}
	return nil
}
