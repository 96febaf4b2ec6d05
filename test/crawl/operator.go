package crawl

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
	"github.com/proxy-operator/proxy-operator/internal/fleet"
	"github.com/proxy-operator/proxy-operator/internal/verdict"
	"github.com/proxy-operator/proxy-operator/lease"
	"github.com/proxy-operator/proxy-operator/metacontroller/driver"
	"github.com/proxy-operator/proxy-operator/providers/factory"
	"github.com/proxy-operator/proxy-operator/providers/mock"
	"github.com/proxy-operator/proxy-operator/server"
	"github.com/proxy-operator/proxy-operator/server/gateway"
)

// OperatorConfig is what the benchmark sets of the operator; the rest is main.go's default.
type OperatorConfig struct {
	// Proxies is the fleet size: Managed Proxies on the mock provider, each a real forward
	// proxy on its own 127.x address.
	Proxies int
	// MaxLeases per Proxy.
	MaxLeases int
	// Token is the discovery API's bearer token.
	Token string
	// Cooldowns as -lease-cooldown, -lease-ban-cooldown, -lease-max-cooldown (zero: defaults).
	RateLimitedCooldown, BannedCooldown, MaxCooldown time.Duration
	// Namespace of the Proxies (default "crawl"). A mock proxy's address derives from its
	// name, so two benchmarks on one machine at once need different namespaces.
	Namespace string
	// IgnoreBand is -lease-by-quality=false: leases ignore the quality band.
	IgnoreBand bool
	// SlowProbe is -score-slow-probe (zero: its default).
	SlowProbe time.Duration
	// ProbeDelay, when set, delays the probe target's answer to a proxy by what it returns
	// for the proxy's address (a farm's slow treatment applies to probes too).
	ProbeDelay func(ip string) time.Duration
}

// Operator is a running operator with its fleet Ready and healthy.
type Operator struct {
	DiscoveryURL string
	// GatewayAddr is the operator's proxy gateway (-gateway-addr), over the same leases.
	GatewayAddr string
	Token       string
	View        *fleet.View
	health      interface{ Health(string) verdict.Health }
	cancel      context.CancelFunc
	done        chan error
}

// Close stops the operator (servers, loops) and its mock proxies.
func (o *Operator) Close() {
	o.cancel()
	<-o.done
}

// WaitGraded waits until every proxy at one of ips has a quality band below Good: the
// operator has seen what the farm does to them. The score is kept whether or not leases
// prefer bands, so runs with and without the preference start from the same knowledge.
func (o *Operator) WaitGraded(ctx context.Context, ips []string) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		left := 0
		for _, p := range o.View.List() {
			if slices.Contains(ips, p.IP) && o.health.Health(p.Key).Band == v1.BandGood {
				left++
			}
		}
		if left == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d degraded proxies still graded Good after 2 minutes", left, len(ips))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// StartOperator runs the real operator in-process (server.New and Run, as main does, with
// the mock provider serving real forward proxies and the discovery API behind a token), then
// plays Metacontroller with cfg.Proxies Managed mock Proxies until each is Ready and probed
// healthy through itself.
func StartOperator(ctx context.Context, cfg OperatorConfig) (*Operator, error) {
	pcfg := factory.Config{Providers: []factory.Entry{{Name: "mock", Type: "mock",
		Mock: &mock.Config{ProvisioningDelay: mock.Duration(200 * time.Millisecond), ServeProxies: true}}}}
	op, err := server.New(server.Config{
		Hooks:     server.HooksConfig{Addr: "127.0.0.1:0"},
		Discovery: server.DiscoveryAPIConfig{Addr: "127.0.0.1:0", Token: cfg.Token},
		Gateway:   gateway.Config{Addr: "127.0.0.1:0"},
		// The farm's sites are on 127.x: the gateway's egress policy refuses loopback targets
		// unless allowed (decision 0250).
		Egress:        server.EgressConfig{TargetAllow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}},
		Providers:     server.ProvidersConfig{Parsed: &pcfg},
		Lease:         server.LeaseConfig{Policy: lease.Policy{RateLimitedCooldown: cfg.RateLimitedCooldown, BannedCooldown: cfg.BannedCooldown, MaxCooldown: cfg.MaxCooldown}},
		ShutdownGrace: 5 * time.Second,
		Quality:       server.QualityConfig{IgnoreBand: cfg.IgnoreBand, SlowProbe: cfg.SlowProbe},
	})
	if err != nil {
		return nil, err
	}
	// The probe target: what every proxy fetches through itself to prove it works.
	probe := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if cfg.ProbeDelay != nil {
			ip, _, _ := net.SplitHostPort(r.RemoteAddr)
			if d := cfg.ProbeDelay(ip); d > 0 {
				select {
				case <-time.After(d):
				case <-r.Context().Done():
					return
				}
			}
		}
		w.WriteHeader(http.StatusNoContent)
	}), ReadHeaderTimeout: 5 * time.Second}
	probeLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	go func() { _ = probe.Serve(probeLn) }()
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		err := op.Run(runCtx)
		_ = probe.Close()
		done <- err
	}()
	o := &Operator{DiscoveryURL: "http://" + op.DiscoveryAddr(), GatewayAddr: op.GatewayAddr(), Token: cfg.Token, View: op.Fleet(), health: op.Health(), cancel: cancel, done: done}
	if err := playMetacontroller(ctx, "http://"+op.HookAddr(), "http://"+probeLn.Addr().String()+"/generate_204", cfg, op.Health()); err != nil {
		o.Close()
		return nil, err
	}
	return o, nil
}

// playMetacontroller applies cfg.Proxies Managed mock Proxies and runs Metacontroller's loop
// (metacontroller/driver: statuses written back, children applied, resyncs as asked) on a
// clock that follows real time, until every proxy is Ready and probed healthy.
func playMetacontroller(ctx context.Context, hookURL, probeURL string, cfg OperatorConfig, h interface {
	Health(string) verdict.Health
}) error {
	d := &driver.Driver{URL: hookURL, Clock: driver.NewClock(time.Now()), ResyncPeriod: 120 * time.Second}
	maxLeases := int32(cfg.MaxLeases)
	ns := cmp.Or(cfg.Namespace, "crawl")
	for i := range cfg.Proxies {
		p := &v1.Proxy{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("px-%02d", i), Namespace: ns},
			Spec: v1.ProxySpec{Mode: v1.ModeManaged, Provider: "mock", Attributes: map[string]string{"pool": "crawl"}, MaxLeases: &maxLeases,
				HealthCheck: &v1.HealthCheckSpec{ProbeURL: probeURL, IntervalSeconds: 2, TimeoutSeconds: 2, FailureThreshold: 3, SuccessThreshold: 1}},
		}
		if err := d.Apply(p); err != nil {
			return err
		}
	}
	deadline := time.Now().Add(5 * time.Minute) // a loaded 2-core machine probes slowly
	for {
		d.Clock.AdvanceTo(time.Now())
		if err := d.RunUntilIdle(); err != nil {
			return err
		}
		ready := 0
		for i := range cfg.Proxies {
			key := fmt.Sprintf("%s/px-%02d", ns, i)
			if st, _ := d.Status(key); st.Phase == v1.PhaseReady && h.Health(key).State == verdict.Healthy {
				ready++
			}
		}
		if ready == cfg.Proxies {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("only %d of %d proxies Ready and healthy after 5 minutes", ready, cfg.Proxies)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}
