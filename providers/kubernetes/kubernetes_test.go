package kubernetes_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/proxy-operator/proxy-operator/providers"
	"github.com/proxy-operator/proxy-operator/providers/kubernetes"
	"github.com/proxy-operator/proxy-operator/providers/mock"
)

var parent = providers.Parent{Namespace: "crawl", Name: "edge", UID: "uid-1"}

func newProvider(t *testing.T, cfg kubernetes.Config) *kubernetes.Provider {
	t.Helper()
	p, err := kubernetes.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func observed(pods ...string) map[string]map[string]json.RawMessage {
	objs := map[string]json.RawMessage{}
	for i, p := range pods {
		objs[string(rune('a'+i))] = json.RawMessage(p)
	}
	return map[string]map[string]json.RawMessage{kubernetes.PodTypeKey: objs}
}

func TestGetMapsPodState(t *testing.T) {
	const meta = `"metadata":{"name":"p","namespace":"crawl","creationTimestamp":"2026-11-30T11:00:00Z","labels":{"proxy-operator-uid":"uid-1","proxy-operator-spec-hash":"abc"}%s}`
	ready := `"conditions":[{"type":"Ready","status":"True"}]`
	notReady := `"conditions":[{"type":"Ready","status":"False"}]`
	for _, tc := range []struct {
		name, extraMeta, status string
		wantState               providers.State
		wantIP                  string
	}{
		{"pending", "", `{"phase":"Pending"}`, providers.StateProvisioning, ""},
		{"running and ready", "", `{"phase":"Running","podIP":"10.0.0.7",` + ready + `}`, providers.StateRunning, "10.0.0.7"},
		{"running, not ready", "", `{"phase":"Running","podIP":"10.0.0.7",` + notReady + `}`, providers.StateProvisioning, ""},
		{"ready without an address", "", `{"phase":"Running",` + ready + `}`, providers.StateProvisioning, ""},
		{"node unreachable", "", `{"phase":"Unknown","podIP":"10.0.0.7"}`, providers.StateProvisioning, ""},
		{"failed", "", `{"phase":"Failed","podIP":"10.0.0.7"}`, providers.StateTerminated, "10.0.0.7"},
		{"succeeded", "", `{"phase":"Succeeded"}`, providers.StateTerminated, ""},
		{"being deleted", `,"deletionTimestamp":"2026-11-30T11:59:00Z"`, `{"phase":"Running","podIP":"10.0.0.7",` + ready + `}`, providers.StateTerminated, "10.0.0.7"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := `{"apiVersion":"v1","kind":"Pod",` + strings.Replace(meta, "%s", tc.extraMeta, 1) + `,"status":` + tc.status + `}`
			b := newProvider(t, kubernetes.Config{}).Bind(parent, observed(pod))
			got, err := b.Get(context.Background(), "p")
			if err != nil {
				t.Fatal(err)
			}
			want := &providers.Instance{ID: "p", Name: "p", IP: tc.wantIP, State: tc.wantState, OwnerUID: "uid-1", SpecHash: "abc",
				CreatedAt: time.Date(2026, 11, 30, 11, 0, 0, 0, time.UTC)}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("instance (-want +got):\n%s", diff)
			}
		})
	}
}

func TestGetMissingIsNotFound(t *testing.T) {
	b := newProvider(t, kubernetes.Config{}).Bind(parent, nil)
	if _, err := b.Get(context.Background(), "nope"); !errors.Is(err, providers.ErrNotFound) {
		t.Errorf("Get of an absent Pod: err %v, want ErrNotFound", err)
	}
	if got := b.Children(false); len(got) != 0 {
		t.Errorf("children %s, want none", got)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cfg     kubernetes.Config
		wantErr string
	}{
		{"defaults", kubernetes.Config{}, ""},
		{"all set", kubernetes.Config{Image: "squid:6", CPURequest: "50m", MemoryRequest: "64Mi", CPULimit: "1", MemoryLimit: "1Gi"}, ""},
		{"bad memory request", kubernetes.Config{MemoryRequest: "lots"}, `memoryRequest "lots"`},
		{"bad cpu limit", kubernetes.Config{CPULimit: "1 core"}, `cpuLimit "1 core"`},
		{"denied CIDRs", kubernetes.Config{DeniedCIDRs: []string{"10.96.0.0/12", "2001:db8::/32"}}, ""},
		{"bad denied CIDR", kubernetes.Config{DeniedCIDRs: []string{"10.96.0.0/12", "10.244.0.0"}}, `deniedCIDRs[1] "10.244.0.0"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("Validate: %v, want nil", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("Validate: %v, want an error naming %s", err, tc.wantErr)
			}
		})
	}
}

// TestUnboundRefuses: outside a sync the provider cannot act, and has nothing for orphan GC.
func TestUnboundRefuses(t *testing.T) {
	p := newProvider(t, kubernetes.Config{})
	ctx := context.Background()
	if _, err := p.Create(ctx, providers.CreateRequest{Name: "x"}); !errors.Is(err, providers.ErrPermanent) {
		t.Errorf("Create: %v, want ErrPermanent", err)
	}
	if _, err := p.Get(ctx, "x"); !errors.Is(err, providers.ErrPermanent) {
		t.Errorf("Get: %v, want ErrPermanent", err)
	}
	if err := p.Delete(ctx, "x"); !errors.Is(err, providers.ErrPermanent) {
		t.Errorf("Delete: %v, want ErrPermanent", err)
	}
	if got, err := p.ListByTag(ctx); err != nil || len(got) != 0 {
		t.Errorf("ListByTag = %v, %v; want nothing and no error", got, err)
	}
}

// TestCreateBuildsPod checks the fields a request maps onto; the golden fixtures under
// testdata/<hook>/pod-* hold the whole object.
func TestCreateBuildsPod(t *testing.T) {
	p := newProvider(t, kubernetes.Config{Image: "registry.local/squid:6", CPULimit: "500m"})
	b := p.Bind(parent, nil)
	req := providers.CreateRequest{Name: providers.InstanceName("uid-1", "0123456789abcdef"), OwnerUID: "uid-1", SpecHash: "0123456789abcdef", Namespace: "crawl", ProxyName: "edge", Zone: "europe-west1-b", Port: 3128}
	base := providers.InstanceName("uid-1", "")
	id, err := b.Create(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if want := base + "-0123456789"; id != want {
		t.Errorf("id %q, want %q", id, want)
	}
	req.Image = "other/squid:7"
	req.SpecHash = "fedcba9876543210"
	req.Name = providers.InstanceName("uid-1", req.SpecHash)
	if _, err := b.Create(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	children := b.Children(false)
	if len(children) != 2 {
		t.Fatalf("children %d, want 2", len(children))
	}
	type pod struct {
		Metadata struct {
			Name string `json:"name"`
		} `json:"metadata"`
		Spec struct {
			NodeSelector map[string]string `json:"nodeSelector"`
			Containers   []struct {
				Image     string `json:"image"`
				Resources struct {
					Limits map[string]string `json:"limits"`
				} `json:"resources"`
			} `json:"containers"`
		} `json:"spec"`
	}
	var got []pod
	for _, c := range children {
		var p pod
		if err := json.Unmarshal(c, &p); err != nil {
			t.Fatal(err)
		}
		got = append(got, p)
	}
	if got[0].Metadata.Name != base+"-0123456789" || got[1].Metadata.Name != base+"-fedcba9876" {
		t.Errorf("names %q %q, want sorted by name", got[0].Metadata.Name, got[1].Metadata.Name)
	}
	if got[0].Spec.Containers[0].Image != "registry.local/squid:6" || got[1].Spec.Containers[0].Image != "other/squid:7" {
		t.Errorf("images %q %q: want the config's, then placement.image", got[0].Spec.Containers[0].Image, got[1].Spec.Containers[0].Image)
	}
	if diff := cmp.Diff(map[string]string{"topology.kubernetes.io/zone": "europe-west1-b"}, got[0].Spec.NodeSelector); diff != "" {
		t.Errorf("nodeSelector (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]string{"cpu": "500m", "memory": "256Mi"}, got[0].Spec.Containers[0].Resources.Limits); diff != "" {
		t.Errorf("limits (-want +got):\n%s", diff)
	}
	if err := b.Delete(context.Background(), base+"-0123456789"); err != nil {
		t.Fatal(err)
	}
	if got := len(b.Children(false)); got != 1 {
		t.Errorf("after Delete: %d children, want 1", got)
	}
	if got := len(b.Children(true)); got != 0 {
		t.Errorf("finalizing: %d children, want 0", got)
	}
}

// TestBindChildrenFindsWrappedBinder: the metrics wrapper must not hide the capability, and
// the bound provider stays counted.
func TestBindChildrenFindsWrappedBinder(t *testing.T) {
	kp := newProvider(t, kubernetes.Config{})
	mp, err := mock.New(mock.Config{})
	if err != nil {
		t.Fatal(err)
	}
	m := providers.NewMetrics(prometheus.NewRegistry())
	for _, tc := range []struct {
		name   string
		p      providers.Provider
		wantOK bool
	}{
		{"kubernetes", kp, true},
		{"instrumented kubernetes", m.Instrument("pods", kp), true},
		{"mock", mp, false},
		{"instrumented mock", m.Instrument("mock", mp), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bound, children, ok := providers.BindChildren(tc.p, parent, nil)
			if ok != tc.wantOK {
				t.Fatalf("ok = %t, want %t", ok, tc.wantOK)
			}
			if !ok {
				if bound != tc.p || children != nil {
					t.Errorf("a provider without the capability must come back unchanged")
				}
				return
			}
			if _, err := bound.Create(context.Background(), providers.CreateRequest{Name: "proxy-x", SpecHash: "h", Port: 3128}); err != nil {
				t.Fatalf("bound Create: %v", err)
			}
			if got := len(children.Children(false)); got != 1 {
				t.Errorf("children after Create through the bound provider: %d, want 1", got)
			}
		})
	}
}

// TestPortRewriteParses runs the shell part of the port-rewriting command against this
// machine's Debian squid.conf (the package the ubuntu/squid image installs) and asks squid
// to parse the result. It skips where squid is not installed.
