package server

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
	"github.com/proxy-operator/proxy-operator/internal/verdict"
	"github.com/proxy-operator/proxy-operator/metacontroller/driver"
)

// Demo fleet (-demo-proxies): Proxies the process defines itself and syncs through its own hook
// server, playing Metacontroller's loop in process (metacontroller/driver, on real time), so a
// first `make run` without a cluster serves leasable mock proxies within seconds.
const (
	// DemoNamespace holds the demo Proxies; with their "demo": "true" attribute it marks them in
	// /v1/proxies as what they are.
	DemoNamespace = "demo"
	// MaxDemoProxies bounds -demo-proxies: each is a real forward proxy on loopback.
	MaxDemoProxies = 50
	demoProvider   = "mock"
	demoTick       = 250 * time.Millisecond
	demoResync     = 30 * time.Second
)

// errDemoNeedsNoCluster refuses a demo fleet beside a Kubernetes client: GC would find the
// demo's mock instances in no cluster and take them for orphans.
var errDemoNeedsNoCluster = errors.New("-demo-proxies runs without a cluster: clear KUBECONFIG (and -kubeconfig); with a client, GC would take the demo's instances for orphans")

// checkDemo says whether a demo fleet can run here.
func (o *Operator) checkDemo() error {
	n := o.cfg.Demo.Proxies
	switch {
	case n == 0:
		return nil
	case n < 0 || n > MaxDemoProxies:
		return fmt.Errorf("-demo-proxies %d: want 0 to %d", n, MaxDemoProxies)
	case o.kube != nil:
		return errDemoNeedsNoCluster
	case o.hookCreds != nil:
		return errors.New("-demo-proxies plays Metacontroller over plain HTTP: it needs -hooks-insecure")
	}
	for _, e := range o.providers.Entries() {
		if e.Name == demoProvider && e.Type == "mock" {
			return nil
		}
	}
	return fmt.Errorf("-demo-proxies needs a mock provider named %q (the default when -providers-config is not given)", demoProvider)
}

// demoProxy is the i-th demo Proxy: Managed on the mock provider, probed through itself
// against the operator's own /healthz, so nothing leaves loopback.
func demoProxy(i int, probeURL string) *v1.Proxy {
	maxLeases := int32(4)
	return &v1.Proxy{
		// A fresh UID per process: instance names and the mock's loopback addresses follow
		// from it, so two demo fleets on one machine never collide.
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("demo-%d", i), Namespace: DemoNamespace, UID: k8stypes.UID(rand.Text())},
		Spec: v1.ProxySpec{Mode: v1.ModeManaged, Provider: demoProvider, MaxLeases: &maxLeases,
			Attributes:  map[string]string{"demo": "true", "geo": "local"},
			HealthCheck: &v1.HealthCheckSpec{ProbeURL: probeURL, IntervalSeconds: 2, TimeoutSeconds: 2, FailureThreshold: 3, SuccessThreshold: 1}},
	}
}

// runDemo defines the demo Proxies and plays Metacontroller's loop for them until ctx ends:
// each sync's status is written back, its children applied, resyncs made when asked.
func (o *Operator) runDemo(ctx context.Context) error {
	n := o.cfg.Demo.Proxies
	host, port, err := net.SplitHostPort(o.HookAddr())
	if err != nil {
		return fmt.Errorf("demo fleet: %w", err)
	}
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		host = "127.0.0.1" // the hooks listen on every address: loopback is one
	}
	hookURL := "http://" + net.JoinHostPort(host, port)
	log := o.log.With("component", "demo")
	d := &driver.Driver{URL: hookURL, Clock: driver.NewClock(time.Now()), ResyncPeriod: demoResync}
	for i := 1; i <= n; i++ {
		if err := d.Apply(demoProxy(i, hookURL+"/healthz")); err != nil {
			return fmt.Errorf("demo fleet: %w", err)
		}
	}
	log.Warn("DEMO FLEET: mock proxies defined in this process, not in a cluster (-demo-proxies); for trying the API only",
		"proxies", n, "namespace", DemoNamespace, "attributes", "demo=true,geo=local")
	start := time.Now()
	ready := false
	t := time.NewTicker(demoTick)
	defer t.Stop()
	for {
		d.Clock.AdvanceTo(time.Now())
		if err := d.RunUntilIdle(); err != nil {
			// A failing sync is retried with Metacontroller's backoff; the process stays up.
			log.Warn("demo fleet: sync failed", "err", err)
		}
		if !ready {
			healthy := 0
			for i := 1; i <= n; i++ {
				key := fmt.Sprintf("%s/demo-%d", DemoNamespace, i)
				if st, _ := d.Status(key); st.Phase == v1.PhaseReady && o.sched.Health(key).State == verdict.Healthy {
					healthy++
				}
			}
			if ready = healthy == n; ready {
				log.Info("demo fleet ready: every demo proxy is Ready and probed healthy; lease one from the discovery API, crawl through the gateway, look in the console",
					"proxies", n, "after", time.Since(start).Round(100*time.Millisecond).String(), "discovery", o.DiscoveryAddr(), "gateway", o.GatewayAddr(), "console", o.consoleURL())
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
