package providers_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/proxy-operator/proxy-operator/providers"
)

func TestInstanceName(t *testing.T) {
	a1 := providers.InstanceName("uid-a", "0123456789abcdef")
	if a1 != providers.InstanceName("uid-a", "0123456789abcdef") {
		t.Error("same UID and spec hash give two names: Create would not be idempotent")
	}
	if a2 := providers.InstanceName("uid-a", "fedcba9876543210"); a2 == a1 {
		t.Errorf("a new spec hash keeps the name %s: a replacement would keep its provider ID", a1)
	}
	if b := providers.InstanceName("uid-b", "0123456789abcdef"); b == a1 {
		t.Errorf("two owners share the name %s", a1)
	}
	base := providers.InstanceName("uid-a", "")
	if want := base + "-0123456789"; a1 != want {
		t.Errorf("name %q, want %q (the pre-hash name, a dash and 10 characters of the hash)", a1, want)
	}
	if len(base) != len("proxy-")+12 || !strings.HasPrefix(base, "proxy-") {
		t.Errorf("name without a hash %q, want proxy- and 12 hex (what earlier releases named machines)", base)
	}
}

// listing serves ListByTag from a fixed list and counts its calls.
type listing struct {
	closing
	all   []providers.Instance
	lists int
}

func (l *listing) ListByTag(context.Context) ([]providers.Instance, error) {
	l.lists++
	return l.all, nil
}

// TestListByOwner: without an OwnerLister the helper filters ListByTag by the owner tag, and
// the metrics wrapper keeps the capability visible while counting the call as a list.
func TestListByOwner(t *testing.T) {
	l := &listing{all: []providers.Instance{
		{ID: "a-old", OwnerUID: "uid-a"}, {ID: "b", OwnerUID: "uid-b"}, {ID: "a-new", OwnerUID: "uid-a"},
	}}
	reg := prometheus.NewRegistry()
	m := providers.NewMetrics(reg)
	wrapped := m.Instrument("cloud", l)
	for name, p := range map[string]providers.Provider{"plain": l, "instrumented": wrapped} {
		got, err := providers.ListByOwner(context.Background(), p, "uid-a")
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, in := range got {
			ids = append(ids, in.ID)
		}
		if diff := cmp.Diff([]string{"a-old", "a-new"}, ids); diff != "" {
			t.Errorf("%s: instances (-want +got):\n%s", name, diff)
		}
	}
	if _, ok := wrapped.(providers.OwnerLister); !ok {
		t.Error("the metrics wrapper hides ListByOwner")
	}
	if l.lists != 2 {
		t.Errorf("%d ListByTag calls, want 2", l.lists)
	}
	want := `
# HELP proxy_operator_provider_requests_total Provider calls by provider name, operation and result class.
# TYPE proxy_operator_provider_requests_total counter
proxy_operator_provider_requests_total{op="list",provider="cloud",result="ok"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "proxy_operator_provider_requests_total"); err != nil {
		t.Errorf("lists counted through the wrapper: %v", err)
	}
}

// refusing refuses every create request without a call.
type refusing struct{ closing }

func (refusing) CheckCreate(providers.CreateRequest) error {
	return providers.Wrap(providers.ErrPermanent, "refusing", nil)
}

// TestCheckCreate: the capability is found through the metrics wrapper; a provider without it
// cannot tell (nil).
func TestCheckCreate(t *testing.T) {
	m := providers.NewMetrics(prometheus.NewRegistry())
	if err := providers.CheckCreate(m.Instrument("r", &refusing{}), providers.CreateRequest{}); !errors.Is(err, providers.ErrPermanent) {
		t.Errorf("through the wrapper: %v, want ErrPermanent", err)
	}
	if err := providers.CheckCreate(m.Instrument("c", &closing{}), providers.CreateRequest{}); err != nil {
		t.Errorf("a provider without CheckCreate: %v, want nil", err)
	}
}
