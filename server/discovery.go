package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/proxy-operator/proxy-operator/server/discovery"
)

// DiscoveryConfig configures a discovery-only process (`proxy-operator discovery`): the
// crawlers' API served from a shared lease store that an operator fills, nothing else. The
// lease flags must match the operator's: the cooldown policy travels with each report.
type DiscoveryConfig struct {
	DiscoveryAddr string
	// DiscoveryToken is the bearer token (DISCOVERY_TOKEN); DiscoveryTokenFile wins over it.
	DiscoveryToken     string
	DiscoveryTokenFile string
	// DiscoveryInsecure serves without a token (see Config.DiscoveryInsecure).
	DiscoveryInsecure bool
	// LeaseStore is the Redis URL (required); LeaseStorePasswordFile holds its password.
	LeaseStore             string
	LeaseStorePasswordFile string
	LeaseMaxTTL            time.Duration
	LeaseCooldown          time.Duration
	LeaseBanCooldown       time.Duration
	LeaseMaxCooldown       time.Duration
	ShutdownGrace          time.Duration
	Log                    *slog.Logger
}

// DiscoveryDefaults returns the defaults the discovery subcommand's flags show.
func DiscoveryDefaults() DiscoveryConfig {
	d := Defaults()
	return DiscoveryConfig{DiscoveryAddr: d.DiscoveryAddr, LeaseMaxTTL: d.LeaseMaxTTL, LeaseCooldown: d.LeaseCooldown,
		LeaseBanCooldown: d.LeaseBanCooldown, LeaseMaxCooldown: d.LeaseMaxCooldown, ShutdownGrace: d.ShutdownGrace}
}

// Validate says which setting is missing or out of range.
func (c DiscoveryConfig) Validate() error {
	if c.LeaseStore == "" {
		return errors.New("-lease-store is required: the discovery subcommand serves from a shared store (redis:// or rediss://)")
	}
	if c.LeaseMaxTTL <= 0 || c.LeaseCooldown <= 0 || c.LeaseBanCooldown <= 0 || c.LeaseMaxCooldown < c.LeaseBanCooldown || c.LeaseMaxCooldown < c.LeaseCooldown {
		return fmt.Errorf("-lease-max-ttl and the cooldowns must be positive, -lease-max-cooldown at least each cooldown")
	}
	if c.ShutdownGrace <= 0 {
		return fmt.Errorf("-shutdown-grace must be positive")
	}
	return nil
}

// Discovery is an assembled discovery-only process. Build it with NewDiscovery, serve it with
// Run (once).
type Discovery struct {
	cfg     DiscoveryConfig
	log     *slog.Logger
	backend *redisBackend
	srv     *http.Server
	ln      net.Listener
}

// NewDiscovery builds the store, the reader and the server and binds the listener. Redis need
// not be reachable yet.
func NewDiscovery(cfg DiscoveryConfig) (*Discovery, error) {
	d := DiscoveryDefaults()
	if cfg.DiscoveryAddr == "" {
		cfg.DiscoveryAddr = d.DiscoveryAddr
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
	tokens, err := discovery.Tokens(cfg.DiscoveryToken, cfg.DiscoveryTokenFile, cfg.DiscoveryInsecure)
	if err != nil {
		return nil, err
	}
	b, err := newRedisBackend(redisSettings{url: cfg.LeaseStore, passwordFile: cfg.LeaseStorePasswordFile,
		cooldown: cfg.LeaseCooldown, banCooldown: cfg.LeaseBanCooldown, maxCooldown: cfg.LeaseMaxCooldown}, log)
	if err != nil {
		return nil, err
	}
	disc := &discovery.Discovery{Fleet: b.reader, Health: b.reader, Leases: b.store, Tokens: tokens, Insecure: cfg.DiscoveryInsecure,
		Log: log.With("component", "discovery"), Registerer: prometheus.NewRegistry(), MaxTTL: cfg.LeaseMaxTTL}
	ln, err := net.Listen("tcp", cfg.DiscoveryAddr)
	if err != nil {
		b.close()
		return nil, fmt.Errorf("discovery listener: %w", err)
	}
	return &Discovery{cfg: cfg, log: log, backend: b, srv: disc.Server(""), ln: ln}, nil
}

// Addr is the bound address of the discovery listener.
func (d *Discovery) Addr() string { return d.ln.Addr().String() }

// Run serves until ctx ends, with the reader and the store's sweep running beside it, then
// shuts down within ShutdownGrace.
func (d *Discovery) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer d.backend.close()
	d.log.Info("listening", "discovery", d.Addr())
	errc := make(chan error, 3)
	go func() { errc <- fmt.Errorf("discovery server: %w", d.srv.Serve(d.ln)) }()
	loops := []func(context.Context) error{d.backend.reader.Run, d.backend.store.Run}
	waitLoops := startLoops(ctx, errc, loops)
	var runErr error
	select {
	case runErr = <-errc:
	case <-ctx.Done():
	}
	d.log.Info("shutting down")
	sctx, scancel := context.WithTimeout(context.Background(), d.cfg.ShutdownGrace)
	defer scancel()
	if err := d.srv.Shutdown(sctx); err != nil && runErr == nil {
		runErr = fmt.Errorf("discovery server shutdown: %w", err)
	}
	cancel()
	waitLoops()
	if errors.Is(runErr, http.ErrServerClosed) {
		runErr = nil
	}
	return runErr
}
