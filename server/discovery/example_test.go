package discovery_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/proxy-operator/proxy-operator/internal/fleet"
	"github.com/proxy-operator/proxy-operator/internal/healthtest"
	"github.com/proxy-operator/proxy-operator/lease"
	"github.com/proxy-operator/proxy-operator/server/discovery"
)

// ExampleDiscovery shows the wiring main does: the store over the fleet view and the
// prober, its Run loop, the discovery server on its own listener, graceful shutdown.
func ExampleDiscovery() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log := slog.New(slog.DiscardHandler)
	reg := prometheus.NewRegistry()
	view := fleet.New(time.Now, 3*time.Minute)
	var health discovery.HealthSource = &healthtest.Map{} // main: the health.Scheduler

	tokens, err := discovery.Tokens(os.Getenv("DISCOVERY_TOKEN"), "" /* -discovery-token-file */, true /* -discovery-insecure */)
	if err != nil {
		return
	}
	store := lease.NewMemory(lease.Config{
		Fleet: view, Health: health, Now: time.Now,
		RateLimitedCooldown: 15 * time.Minute, // -lease-cooldown
		BannedCooldown:      time.Hour,        // -lease-ban-cooldown
		MaxCooldown:         24 * time.Hour,   // -lease-max-cooldown
	})
	go func() { _ = store.Run(ctx) }()

	d := &discovery.Discovery{Fleet: view, Health: health, Leases: store, Tokens: tokens, Insecure: tokens == nil, Log: log, Registerer: reg,
		MaxTTL: time.Hour /* -lease-max-ttl */}
	srv := d.Server("")
	ln, err := net.Listen("tcp", "127.0.0.1:0") // main: -discovery-addr, default :8090
	if err != nil {
		return
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()

	cancel() // main: SIGTERM
	sctx, done := context.WithTimeout(context.Background(), 20*time.Second)
	defer done()
	_ = srv.Shutdown(sctx)
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return
	}
}
