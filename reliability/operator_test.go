package reliability

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/proxy-operator/proxy-operator/fleet"
	"github.com/proxy-operator/proxy-operator/health"
	"github.com/proxy-operator/proxy-operator/lease"
	"github.com/proxy-operator/proxy-operator/providers"
	"github.com/proxy-operator/proxy-operator/providers/factory"
	"github.com/proxy-operator/proxy-operator/server"
)

// operatorOpts are the knobs the tests turn; everything else is main.go's default.
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

// operator is the process assembled the way main.go's run does it: one provider set, one fleet
// view, the prober, the lease store, the hook and discovery servers on their own loopback
// listeners, and the background loops.
type operator struct {
	hookURL, discURL string
	view             *fleet.View
	sched            *health.Scheduler
	store            *lease.Memory
}

// bootOperator starts an operator and stops it when the test ends. package main's run is not
// importable, so this mirrors it: same constructors, same server timeouts, same loops.
func bootOperator(t testing.TB, o operatorOpts) *operator {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	reg := prometheus.NewRegistry()
	pcfg := factory.Default()
	if o.providersYAML != "" {
		var err error
		if pcfg, err = factory.Parse([]byte(o.providersYAML)); err != nil {
			t.Fatal(err)
		}
	}
	set, err := factory.Build(pcfg, factory.Deps{Metrics: providers.NewMetrics(reg)})
	if err != nil {
		t.Fatal(err)
	}
	if len(o.extra) > 0 {
		set = providers.NewSet(append(set.Entries(), o.extra...)...)
	}
	view := fleet.New(time.Now, o.warmup)
	prober := health.NewHTTPProber(nil)
	t.Cleanup(prober.Close)
	hlog := log
	if o.healthLog != nil {
		hlog = slog.New(o.healthLog)
	}
	sched, err := health.New(health.Config{View: view, Prober: prober, Registerer: reg, Log: hlog})
	if err != nil {
		t.Fatal(err)
	}
	hooks := &server.Hooks{
		Providers:    set,
		Fleet:        view,
		Health:       sched,
		HealthResync: health.ResyncPolicy{QPS: health.DefaultResyncQPS}.After,
		Log:          log,
		Registry:     reg,
		MaxBodyBytes: o.maxBodyBytes,
	}
	cool := o.cooldown
	if cool <= 0 {
		cool = 15 * time.Minute
	}
	store := lease.NewMemory(lease.Config{
		Fleet: view, Health: sched, Now: time.Now,
		RateLimitedCooldown: cool,
		BannedCooldown:      2 * cool,
		MaxCooldown:         4 * cool,
		Observe:             o.leaseObserve,
	})
	disc := &server.Discovery{Fleet: view, Health: sched, Leases: store, Token: o.token, Log: log, Registerer: reg}

	hookSrv := &http.Server{
		Handler:           hooks.Handler(),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      2*server.DefaultProviderTimeout + 10*time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
	}
	discSrv := disc.Server("")
	hookLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	discLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	serveOn := func(s *http.Server, ln net.Listener) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
				t.Errorf("server: %v", err)
			}
		}()
	}
	serveOn(hookSrv, hookLn)
	serveOn(discSrv, discLn)
	for _, loop := range []func(context.Context) error{sched.Run, store.Run} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := loop(ctx); err != nil {
				t.Errorf("background loop: %v", err)
			}
		}()
	}
	t.Cleanup(func() {
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		_ = hookSrv.Shutdown(sctx)
		_ = discSrv.Shutdown(sctx)
		cancel()
		wg.Wait()
	})
	return &operator{
		hookURL: "http://" + hookLn.Addr().String(),
		discURL: "http://" + discLn.Addr().String(),
		view:    view, sched: sched, store: store,
	}
}
