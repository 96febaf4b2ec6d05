package server_test

import (
	"errors"
	"net"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
	"github.com/proxy-operator/proxy-operator/client"
	"github.com/proxy-operator/proxy-operator/metacontroller/driver"
	"github.com/proxy-operator/proxy-operator/providers/mock"
	"github.com/proxy-operator/proxy-operator/server"
)

// TestExternalOutsideExpectedExitIsNotLeased runs the operator with its echo, two External
// proxies that are real mock forward proxies on their own 127.x addresses, and plays
// Metacontroller until both statuses show their exits: the one outside its expectedExit gets
// ExitVerified False and is not leased; the other is.
func TestExternalOutsideExpectedExitIsNotLeased(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	ln.Close()
	for _, ip := range []string{"127.0.8.1", "127.0.8.2"} {
		stop, err := mock.ServeForwardProxyWith(net.JoinHostPort(ip, port), mock.ForwardConfig{})
		if err != nil {
			t.Skipf("cannot listen on %s: %v", ip, err)
		}
		t.Cleanup(stop)
	}
	op, err := server.New(server.Config{Hooks: server.HooksConfig{Addr: "127.0.0.1:0"},
		Discovery: server.DiscoveryAPIConfig{Addr: "127.0.0.1:0", Token: "t0ken-0123456789abcdef"},
		Quality:   server.QualityConfig{EchoAddr: "127.0.0.1:0"}, Egress: server.EgressConfig{AllowLoopback: true}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := runOperator(t, op)
	echo := "http://" + op.EchoAddr() + "/ip"
	d := &driver.Driver{URL: "http://" + op.HookAddr(), Clock: driver.NewClock(time.Now()), ResyncPeriod: time.Minute}
	n, _ := net.LookupPort("tcp", port)
	for name, host := range map[string]string{"bad": "127.0.8.1", "good": "127.0.8.2"} {
		expected := "127.0.8.2"
		if name == "bad" {
			expected = "203.0.113.0/24"
		}
		if err := d.Apply(&v1.Proxy{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "crawl"},
			Spec: v1.ProxySpec{Mode: v1.ModeExternal, Endpoint: &v1.EndpointSpec{Host: host, Port: int32(n)},
				Attributes:  map[string]string{"which": name},
				HealthCheck: &v1.HealthCheckSpec{ProbeURL: echo, IntervalSeconds: 1, TimeoutSeconds: 1, FailureThreshold: 3, SuccessThreshold: 1},
				Verify:      &v1.VerifySpec{ExitURL: echo, ExpectedExit: []string{expected}},
			},
		}); err != nil {
			t.Fatal(err)
		}
	}
	verified := func(key string) *metav1.Condition {
		st, _ := d.Status(key)
		for i := range st.Conditions {
			if st.Conditions[i].Type == v1.ConditionExitVerified {
				return &st.Conditions[i]
			}
		}
		return nil
	}
	deadline := time.Now().Add(60 * time.Second)
	for verified("crawl/bad") == nil || verified("crawl/good") == nil {
		if time.Now().After(deadline) {
			bad, _ := d.Status("crawl/bad")
			good, _ := d.Status("crawl/good")
			t.Fatalf("no ExitVerified after 60s:\nbad %+v\ngood %+v", bad, good)
		}
		d.Clock.AdvanceTo(time.Now())
		if err := d.RunUntilIdle(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if c := verified("crawl/bad"); c.Status != metav1.ConditionFalse || c.Message != "exit 127.0.8.1 is outside expectedExit 203.0.113.0/24" {
		t.Errorf("bad: ExitVerified %+v", c)
	}
	if st, _ := d.Status("crawl/bad"); st.Exit == nil || st.Exit.IP != "127.0.8.1" {
		t.Errorf("bad: status.exit %+v", st.Exit)
	}
	if c := verified("crawl/good"); c.Status != metav1.ConditionTrue {
		t.Errorf("good: ExitVerified %+v", c)
	}

	c, err := client.New("http://"+op.DiscoveryAddr(), client.WithToken("t0ken-0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	var nm *client.NoMatchError
	if _, err := c.Lease(ctx, client.LeaseRequest{Selector: map[string]string{"which": "bad"}, TTL: time.Minute}); !errors.As(err, &nm) {
		t.Errorf("lease on the mismatching proxy: %v, want no match", err)
	}
	l, err := c.Lease(ctx, client.LeaseRequest{Selector: map[string]string{"which": "good"}, TTL: time.Minute})
	if err != nil {
		t.Fatalf("lease on the verified proxy: %v", err)
	}
	_ = c.Release(ctx, l.ID)
}
