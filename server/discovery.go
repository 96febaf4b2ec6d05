package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/proxy-operator/proxy-operator/server/console"
	"github.com/proxy-operator/proxy-operator/server/discovery"
	"github.com/proxy-operator/proxy-operator/server/gateway"
)

// DiscoveryConfig configures a discovery-only process (`proxy-operator discovery`): the
// crawlers' API served from a shared lease store that an operator fills, nothing else. Its
// Discovery and Lease are the operator's own structs: the lease policy must match the
// operator's, since the cooldown policy travels with each report.
type DiscoveryConfig struct {
	Discovery DiscoveryAPIConfig
	// Lease.Store is required (the Redis the operator fills).
	Lease LeaseConfig
	// Egress is the policy every record read from Redis is checked against before it is
	// leased (the operator's flags of the same names; mock providers' loopback exception
	// needs -allow-loopback-proxies here).
	Egress        EgressConfig
	ShutdownGrace time.Duration
	Log           *slog.Logger
}

// DiscoveryDefaults returns the defaults the discovery subcommand's flags show.
func DiscoveryDefaults() DiscoveryConfig {
	d := Defaults()
	return DiscoveryConfig{Discovery: d.Discovery, Lease: d.Lease, ShutdownGrace: d.ShutdownGrace}
}

// Validate says which setting is missing or out of range.
func (c DiscoveryConfig) Validate() error {
	if c.Lease.Store == "" {
		return errors.New("-lease-store is required: the discovery subcommand serves from a shared store (redis:// or rediss://)")
	}
	if err := c.Lease.Validate(); err != nil {
		return err
	}
	if c.ShutdownGrace <= 0 {
		return fmt.Errorf("-shutdown-grace must be positive")
	}
	return nil
}

// Discovery is an assembled discovery-only process. Build it with NewDiscovery, serve it with
// Run (once).
type Discovery struct{ replica }

// RunDiscovery builds the discovery process from c and serves it until ctx ends.
func RunDiscovery(ctx context.Context, c DiscoveryConfig) error {
	d, err := NewDiscovery(c)
	if err != nil {
		return err
	}
	return d.Run(ctx)
}

// NewDiscovery builds the store, the reader and the server and binds the listener. Redis need
// not be reachable yet.
func NewDiscovery(cfg DiscoveryConfig) (*Discovery, error) {
	d := DiscoveryDefaults()
	if cfg.Discovery.Addr == "" {
		cfg.Discovery.Addr = d.Discovery.Addr
	}
	if cfg.ShutdownGrace == 0 {
		cfg.ShutdownGrace = d.ShutdownGrace
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	tokens, err := discovery.Tokens(cfg.Discovery.Token, cfg.Discovery.TokenFile, cfg.Discovery.Insecure)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", cfg.Discovery.Addr)
	if err != nil {
		return nil, fmt.Errorf("discovery listener: %w", err)
	}
	admit, err := admitBy(cfg.Egress, nil, []string{cfg.Discovery.Addr, ln.Addr().String()})
	if err != nil {
		ln.Close()
		return nil, err
	}
	b, err := newRedisBackend(cfg.Lease, admit, log)
	if err != nil {
		ln.Close()
		return nil, err
	}
	// The replica's own metrics (its requests, latencies, refusals), served beside the API on
	// its listener at /metrics, outside /v1 and its token, as the operator's hook listener does.
	reg := replicaRegistry()
	b.register(reg)
	disc := &discovery.Discovery{Fleet: b.reader, Health: b.reader, Leases: b.store, Tokens: tokens, Insecure: cfg.Discovery.Insecure,
		Log: log.With("component", "discovery"), Registerer: reg, MaxTTL: cfg.Lease.MaxTTL,
		// /v1/usage: what every gateway replica counted in Redis (decision 0295).
		Usage: gateway.SharedUsage{Book: b.store, Tokens: tokens, Log: log.With("component", "discovery")}}
	var loops []func(context.Context) error
	if cfg.Discovery.Console {
		// A replica has no Kubernetes client and no pool hooks: the console reads and
		// releases, and says why it cannot drain.
		traffic := &console.Traffic{Gatherer: reg}
		disc.Console = &console.Console{Discovery: disc, Tokens: tokens, Insecure: cfg.Discovery.Insecure, Leases: b.store,
			Traffic: traffic, Log: log.With("component", "console"),
			NoDrain: "a discovery replica has no Kubernetes client: drain from the operator's console, or label the Proxy"}
		loops = append(loops, traffic.Run)
	}
	srv := disc.Server("")
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.Handle("/", srv.Handler)
	srv.Handler = mux
	return &Discovery{replica{log: log, grace: cfg.ShutdownGrace, backend: b, servers: []served{{"discovery", srv, ln}}, loops: loops}}, nil
}

// Addr is the bound address of the discovery listener.
func (d *Discovery) Addr() string { return d.servers[0].ln.Addr().String() }

// Run serves until ctx ends, with the reader and the store's sweep running beside it, then
// shuts down within ShutdownGrace.
func (d *Discovery) Run(ctx context.Context) error {
	d.log.Info("listening", "discovery", d.Addr())
	return d.run(ctx)
}
