package crawl

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
	"github.com/proxy-operator/proxy-operator/internal/fleet"
	"github.com/proxy-operator/proxy-operator/internal/lifecycle"
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
}

// Operator is a running operator with its fleet Ready and healthy.
type Operator struct {
	DiscoveryURL string
	// GatewayAddr is the operator's proxy gateway (-gateway-addr), over the same leases.
	GatewayAddr string
	Token       string
	View        *fleet.View
	cancel      context.CancelFunc
	done        chan error
}

// Close stops the operator (servers, loops) and its mock proxies.
func (o *Operator) Close() {
	o.cancel()
	<-o.done
}

// StartOperator runs the real operator in-process (server.New and Run, as main does, with
// the mock provider serving real forward proxies and the discovery API behind a token), then
// plays Metacontroller with cfg.Proxies Managed mock Proxies until each is Ready and probed
// healthy through itself.
func StartOperator(ctx context.Context, cfg OperatorConfig) (*Operator, error) {
	pcfg := factory.Config{Providers: []factory.Entry{{Name: "mock", Type: "mock",
		Mock: &mock.Config{ProvisioningDelay: mock.Duration(200 * time.Millisecond), ServeProxies: true}}}}
	op, err := server.New(server.Config{
		Hooks:         server.HooksConfig{Addr: "127.0.0.1:0"},
		Discovery:     server.DiscoveryAPIConfig{Addr: "127.0.0.1:0", Token: cfg.Token},
		Gateway:       gateway.Config{Addr: "127.0.0.1:0"},
		Providers:     server.ProvidersConfig{Parsed: &pcfg},
		Lease:         server.LeaseConfig{Cooldown: cfg.RateLimitedCooldown, BanCooldown: cfg.BannedCooldown, MaxCooldown: cfg.MaxCooldown},
		ShutdownGrace: 5 * time.Second,
	})
	if err != nil {
		return nil, err
	}
	// The probe target: what every proxy fetches through itself to prove it works.
	probe := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }),
		ReadHeaderTimeout: 5 * time.Second}
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
	o := &Operator{DiscoveryURL: "http://" + op.DiscoveryAddr(), GatewayAddr: op.GatewayAddr(), Token: cfg.Token, View: op.Fleet(), cancel: cancel, done: done}
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
	Health(string) lifecycle.Health
}) error {
	d := &driver.Driver{URL: hookURL, Clock: driver.NewClock(time.Now()), ResyncPeriod: 120 * time.Second}
	maxLeases := int32(cfg.MaxLeases)
	for i := range cfg.Proxies {
		p := &v1.Proxy{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("px-%02d", i), Namespace: "crawl"},
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
			key := fmt.Sprintf("crawl/px-%02d", i)
			if st, _ := d.Status(key); st.Phase == v1.PhaseReady && h.Health(key).State == lifecycle.HealthHealthy {
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
