package hooks_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
	"github.com/proxy-operator/proxy-operator/internal/netpolicy"
	"github.com/proxy-operator/proxy-operator/providers"
	"github.com/proxy-operator/proxy-operator/server/hooks/membudget"
)

// syncBody is a sync request for a Managed mock Proxy with the given status.
func syncBody(t *testing.T, ns, name, uid string, status map[string]any, finalizing bool) []byte {
	t.Helper()
	b, err := json.Marshal(map[string]any{
		"controller": map[string]any{"apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController", "metadata": map[string]any{"name": "proxy-operator"}},
		"parent": map[string]any{"apiVersion": "crawl.example.com/v1alpha1", "kind": "Proxy",
			"metadata": map[string]any{"name": name, "namespace": ns, "uid": uid, "generation": 1},
			"spec":     map[string]any{"mode": "Managed", "provider": "mock"}, "status": status},
		"children": map[string]any{}, "related": map[string]any{}, "finalizing": finalizing,
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestForeignInstanceNeverTouched is issue 10, item 4: a Proxy whose status.providerID names
// another tenant's instance deleted it through /finalize.
func TestForeignInstanceNeverTouched(t *testing.T) {
	mp := newMock(t)
	victimID, err := mp.Create(context.Background(), providers.CreateRequest{Name: providers.InstanceName("uid-victim", "h"), OwnerUID: "uid-victim", SpecHash: "h"})
	if err != nil {
		t.Fatal(err)
	}
	router := newHooks(t, mp).Handler()
	evil := map[string]any{"phase": "Ready", "providerID": victimID}
	for _, tc := range []struct {
		hook       string
		finalizing bool
	}{{"/sync", false}, {"/finalize", true}} {
		t.Run(tc.hook, func(t *testing.T) {
			mp.ResetCalls()
			rec := post(t, router, tc.hook, syncBody(t, "team-b", "evil", "uid-evil", evil, tc.finalizing))
			if rec.Code != http.StatusOK {
				t.Fatalf("%s: %d %s", tc.hook, rec.Code, rec.Body)
			}
			for _, c := range mp.Calls() {
				if c.Op == "delete" && c.Arg == victimID {
					t.Fatalf("%s deleted the victim's instance", tc.hook)
				}
			}
			var resp syncResp
			if err := json.Unmarshal(rec.Body.Bytes(), &resp); err != nil {
				t.Fatal(err)
			}
			if resp.Status.ProviderID == victimID {
				t.Errorf("status still names the victim's instance")
			}
			found := false
			for _, c := range resp.Status.Conditions {
				found = found || c.Type == v1.ConditionForeignInstanceIgnored && c.Status == "True"
			}
			if !found {
				t.Errorf("no %s condition: %+v", v1.ConditionForeignInstanceIgnored, resp.Status.Conditions)
			}
			if tc.finalizing != resp.Finalized {
				t.Errorf("finalized %v, want %v", resp.Finalized, tc.finalizing)
			}
		})
	}
	if _, err := mp.Get(context.Background(), victimID); err != nil {
		t.Errorf("the victim's instance is gone: %v", err)
	}
}

// TestSlowBodiesHoldNoSlot is issue 10, item 3: bodies trickled by as many connections as
// there are slots used to make every real call 429.
func TestSlowBodiesHoldNoSlot(t *testing.T) {
	h := newHooks(t, newMock(t))
	h.MaxInFlight = 4
	h.BodyReadTimeout = 300 * time.Millisecond
	srv := httptest.NewServer(h.Handler())
	defer srv.Close()
	type answer struct {
		code int
		err  error
	}
	slow := make(chan answer, 8)
	for range 8 { // twice the slots
		go func() {
			c, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
			if err != nil {
				slow <- answer{err: err}
				return
			}
			defer c.Close()
			_, _ = io.WriteString(c, "POST /sync HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n{")
			res, err := http.ReadResponse(bufioReader(c), nil)
			if err != nil {
				slow <- answer{err: err}
				return
			}
			res.Body.Close()
			slow <- answer{code: res.StatusCode}
		}()
	}
	// While the trickles wait for their deadline, real calls go through.
	body := fixtureBody(t, "sync/managed-ready-steady")
	for range 10 {
		res, err := http.Post(srv.URL+"/sync", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Fatalf("real call beside trickled bodies: %d, want 200", res.StatusCode)
		}
	}
	for range 8 {
		if a := <-slow; a.err != nil || a.code != http.StatusRequestTimeout {
			t.Errorf("trickled body: %d %v, want 408", a.code, a.err)
		}
	}
}

// TestMemoryBudgetAnswers429 is issue 10, item 2: the budget is in bytes, not in calls.
func TestMemoryBudgetAnswers429(t *testing.T) {
	h := newHooks(t, newMock(t))
	body := fixtureBody(t, "sync/managed-ready-steady")
	h.Budget = membudget.New(int64(len(body))*3/2+membudget.ShapeWeight(body), 1) // room for one body, not two
	srv := httptest.NewServer(h.Handler())
	defer srv.Close()
	// One reservation held by a body that is still arriving.
	c, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	half := body[:len(body)/2+1]
	if _, err := io.WriteString(c, "POST /sync HTTP/1.1\r\nHost: x\r\nContent-Length: "+itoa(len(body))+"\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(half); err != nil {
		t.Fatal(err)
	}
	for h.Budget.InUse() == 0 {
		time.Sleep(time.Millisecond)
	}
	res, err := http.Post(srv.URL+"/sync", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusTooManyRequests || res.Header.Get("Retry-After") == "" {
		t.Fatalf("second body over the budget: %d Retry-After %q, want 429 with Retry-After", res.StatusCode, res.Header.Get("Retry-After"))
	}
	if _, err := c.Write(body[len(half):]); err != nil {
		t.Fatal(err)
	}
	r, err := http.ReadResponse(bufioReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	if r.StatusCode != http.StatusOK {
		t.Fatalf("the first body: %d, want 200", r.StatusCode)
	}
	for h.Budget.InUse() != 0 {
		time.Sleep(time.Millisecond)
	}
	res, err = http.Post(srv.URL+"/sync", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Errorf("after the budget freed: %d, want 200", res.StatusCode)
	}
}

// TestEgressDeniedEndpointFails is issue 10, item 6: a denied External endpoint gets a clear
// condition, no address in the fleet, so it is never probed or leased.
func TestEgressDeniedEndpointFails(t *testing.T) {
	h := newHooks(t, newMock(t))
	pol, err := netpolicy.New(netpolicy.Config{})
	if err != nil {
		t.Fatal(err)
	}
	h.Egress = pol
	router := h.Handler()
	for _, host := range []string{"169.254.169.254", "metadata.google.internal", "127.0.0.1", "fd00:ec2::254"} {
		b, _ := json.Marshal(map[string]any{
			"controller": map[string]any{"apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController", "metadata": map[string]any{"name": "proxy-operator"}},
			"parent": map[string]any{"apiVersion": "crawl.example.com/v1alpha1", "kind": "Proxy",
				"metadata": map[string]any{"name": "ext", "namespace": "team-b", "uid": "uid-ext", "generation": 1},
				"spec":     map[string]any{"mode": "External", "endpoint": map[string]any{"host": host, "port": 80}}, "status": map[string]any{}},
			"children": map[string]any{}, "related": map[string]any{},
		})
		rec := post(t, router, "/sync", b)
		var resp syncResp
		if err := json.Unmarshal(rec.Body.Bytes(), &resp); err != nil {
			t.Fatal(err)
		}
		msg := ""
		for _, c := range resp.Status.Conditions {
			if c.Type == v1.ConditionProvisioned {
				msg = c.Message
			}
		}
		if resp.Status.Phase != v1.PhaseFailed || resp.Status.IP != "" || !strings.Contains(msg, "egress denied") {
			t.Errorf("%s: phase %s ip %q message %q; want Failed, no IP, egress denied", host, resp.Status.Phase, resp.Status.IP, msg)
		}
		if p, ok := h.Fleet.Get("team-b/ext"); ok && p.IP != "" {
			t.Errorf("%s: in the fleet with address %s", host, p.IP)
		}
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

func bufioReader(c net.Conn) *bufio.Reader { return bufio.NewReader(c) }

type syncResp struct {
	Status    v1.ProxyStatus `json:"status"`
	Finalized bool           `json:"finalized"`
}

// TestInvalidSpecKeepsNothing is issue 21, item 3: 61 Proxies whose attribute values were
// 44 KB each were kept in the fleet view (254 MiB) and listed whole. An invalid spec is
// recorded Failed, without its attributes and leasing nothing.
func TestInvalidSpecKeepsNothing(t *testing.T) {
	h := newHooks(t, newMock(t))
	router := h.Handler()
	big := strings.Repeat("v", 44<<10)
	b, _ := json.Marshal(map[string]any{
		"controller": map[string]any{"apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController", "metadata": map[string]any{"name": "proxy-operator"}},
		"parent": map[string]any{"apiVersion": "crawl.example.com/v1alpha1", "kind": "Proxy",
			"metadata": map[string]any{"name": "bloat", "namespace": "team-a", "uid": "uid-bloat", "generation": 1},
			"spec": map[string]any{"mode": "External", "endpoint": map[string]any{"host": "192.0.2.1", "port": 3128},
				"maxLeases": 100000, "attributes": map[string]any{"geo": "bloat", "a": big}}, "status": map[string]any{}},
		"children": map[string]any{}, "related": map[string]any{},
	})
	rec := post(t, router, "/sync", b)
	var resp syncResp
	if err := json.Unmarshal(rec.Body.Bytes(), &resp); err != nil {
		t.Fatal(err)
	}
	if resp.Status.Phase != v1.PhaseFailed {
		t.Fatalf("phase %s, want Failed", resp.Status.Phase)
	}
	p, ok := h.Fleet.Get("team-a/bloat")
	if !ok {
		t.Fatal("an invalid Proxy is not listed at all: want it listed Failed")
	}
	if len(p.Attributes) != 0 || p.MaxLeases != 0 {
		t.Errorf("fleet keeps %d attributes and maxLeases %d of an invalid spec; want none and 0", len(p.Attributes), p.MaxLeases)
	}
}
