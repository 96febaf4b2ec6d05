package reliability

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/health"
	"github.com/proxy-operator/proxy-operator/internal/fleet"
	"github.com/proxy-operator/proxy-operator/lease"
	"github.com/proxy-operator/proxy-operator/providers"
	"github.com/proxy-operator/proxy-operator/providers/factory"
	op "github.com/proxy-operator/proxy-operator/server"
)

// operatorOpts are the knobs the tests turn; everything else is server.Defaults().
type operatorOpts struct {
	providersYAML string // empty: factory.Default()
	token         string
	warmup        time.Duration
	maxBodyBytes  int64
	// leaseObserve sees every change of the lease store, under its lock.
	leaseObserve func(lease.Event)
	// healthLog receives the prober's transitions (nil: discarded).
	healthLog slog.Handler
	cooldown  time.Duration
	// extra providers join the configured ones (a GCP provider pointed at a stand-in).
	extra []providers.Entry
}

// operator is the real process, assembled by server.New as main.go assembles it: one
// provider set, one fleet view, the prober, the lease store, the hook and discovery servers on
// their own loopback listeners, and the background loops.
type operator struct {
	hookURL, discURL string
	view             *fleet.View
	sched            *health.Scheduler
	store            *lease.Memory
}

// bootOperator starts an operator and stops it when the test ends.
func bootOperator(t testing.TB, o operatorOpts) *operator {
	t.Helper()
	cfg := op.Config{
		Hooks:         op.HooksConfig{Addr: "127.0.0.1:0", MaxBodyBytes: o.maxBodyBytes},
		Discovery:     op.DiscoveryAPIConfig{Addr: "127.0.0.1:0", Token: o.token},
		FleetWarmup:   o.warmup,
		Lease:         op.LeaseConfig{Observe: o.leaseObserve},
		Providers:     op.ProvidersConfig{Extra: o.extra},
		ShutdownGrace: 10 * time.Second,
		// The tests' External proxies are stub servers on 127.0.0.1.
		Egress: op.EgressConfig{AllowLoopback: true},
	}
	if o.providersYAML != "" {
		pcfg, err := factory.Parse([]byte(o.providersYAML))
		if err != nil {
			t.Fatal(err)
		}
		cfg.Providers.Parsed = &pcfg
	}
	if o.healthLog != nil {
		cfg.Health.Log = slog.New(o.healthLog)
	}
	if o.cooldown > 0 {
		cfg.Lease.RateLimitedCooldown, cfg.Lease.BannedCooldown, cfg.Lease.MaxCooldown = o.cooldown, 2*o.cooldown, 4*o.cooldown
	}
	p, err := op.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("operator: %v", err)
		}
	})
	return &operator{
		hookURL: "http://" + p.HookAddr(),
		discURL: "http://" + p.DiscoveryAddr(),
		view:    p.Fleet(), sched: p.Health(), store: p.Leases(),
	}
}
