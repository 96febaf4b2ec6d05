// Command proxy-operator is the Metacontroller webhook operator for HTTP egress proxies. This
// file only wires: flags into a Config, dependencies built, run(ctx) until a signal.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/proxy-operator/proxy-operator/fleet"
	"github.com/proxy-operator/proxy-operator/gc"
	"github.com/proxy-operator/proxy-operator/health"
	"github.com/proxy-operator/proxy-operator/lease"
	"github.com/proxy-operator/proxy-operator/providers"
	"github.com/proxy-operator/proxy-operator/providers/factory"
	"github.com/proxy-operator/proxy-operator/replay"
	"github.com/proxy-operator/proxy-operator/server"
)

// Config is everything the process is told from outside.
type Config struct {
	HookAddr        string
	ProvidersConfig string
	LogLevel        slog.Level
	LogFormat       string
	ProviderTimeout time.Duration
	MaxBodyBytes    int64
	FleetWarmup     time.Duration
	ShutdownGrace   time.Duration
	// CaptureDir, when set, receives every handled hook call as a replayable fixture.
	CaptureDir string

	DiscoveryAddr      string
	DiscoveryTokenFile string
	LeaseMaxTTL        time.Duration
	LeaseCooldown      time.Duration
	LeaseBanCooldown   time.Duration
	LeaseMaxCooldown   time.Duration

	ProbeWorkers    int
	HealthResyncQPS float64

	GCInterval     time.Duration
	GCMinAge       time.Duration
	GCMaxDeletions int
	GCDryRun       bool
}

func parseFlags(args []string, stderr io.Writer) (Config, error) {
	fs := flag.NewFlagSet("proxy-operator", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c Config
	var level string
	fs.StringVar(&c.HookAddr, "hook-addr", ":8080", "listen address of the Metacontroller hooks, /healthz, /readyz and /metrics")
	fs.StringVar(&c.ProvidersConfig, "providers-config", "", "path of the providers config YAML; empty: one mock provider named \"mock\" serving real loopback proxies")
	fs.StringVar(&level, "log-level", "info", "log level: debug, info, warn or error")
	fs.StringVar(&c.LogFormat, "log-format", "json", "log format: json or text")
	fs.DurationVar(&c.ProviderTimeout, "provider-timeout", server.DefaultProviderTimeout, "timeout of each provider call made by a hook")
	fs.Int64Var(&c.MaxBodyBytes, "max-hook-body-bytes", server.DefaultMaxBodyBytes, "largest hook request body accepted (413 beyond)")
	fs.DurationVar(&c.FleetWarmup, "fleet-warmup", 3*time.Minute, "time after start before the fleet view is trusted as complete (at least the CompositeController's resyncPeriodSeconds)")
	fs.DurationVar(&c.ShutdownGrace, "shutdown-grace", 20*time.Second, "time allowed for in-flight requests at shutdown")
	fs.StringVar(&c.CaptureDir, "capture-dir", "", "write every handled hook call as a fixture folder under this directory (debugging; replay with 'proxy-operator replay DIR')")
	fs.StringVar(&c.DiscoveryAddr, "discovery-addr", ":8090", "listen address of the discovery and lease API")
	fs.StringVar(&c.DiscoveryTokenFile, "discovery-token-file", "", "file holding the discovery API bearer token (wins over DISCOVERY_TOKEN); empty token: auth off")
	fs.DurationVar(&c.LeaseMaxTTL, "lease-max-ttl", time.Hour, "longest lease TTL a client may ask for")
	fs.DurationVar(&c.LeaseCooldown, "lease-cooldown", 15*time.Minute, "cooldown of a proxy for a target after a rate_limited report")
	fs.DurationVar(&c.LeaseBanCooldown, "lease-ban-cooldown", time.Hour, "cooldown of a proxy for a target after a banned report")
	fs.DurationVar(&c.LeaseMaxCooldown, "lease-max-cooldown", 24*time.Hour, "cap of a cooldown grown by repeated reports")
	fs.IntVar(&c.ProbeWorkers, "probe-workers", health.DefaultWorkers, "most probes in flight at once")
	fs.Float64Var(&c.HealthResyncQPS, "health-resync-qps", health.DefaultResyncQPS, "reads per second that steady-state health resyncs may cost Metacontroller")
	fs.DurationVar(&c.GCInterval, "gc-interval", gc.DefaultInterval, "time between orphan GC sweeps (0 disables GC)")
	fs.DurationVar(&c.GCMinAge, "gc-min-age", gc.DefaultMinAge, "never delete an instance younger than this")
	fs.IntVar(&c.GCMaxDeletions, "gc-max-deletions", 20, "a sweep finding more orphans than this deletes none (-1: no limit)")
	fs.BoolVar(&c.GCDryRun, "gc-dry-run", false, "log the orphans GC would delete, delete none")
	if err := fs.Parse(args); err != nil {
		return Config{}, err
	}
	if fs.NArg() > 0 {
		return Config{}, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	if err := c.LogLevel.UnmarshalText([]byte(level)); err != nil {
		return Config{}, fmt.Errorf("-log-level: %w", err)
	}
	if c.LogFormat != "json" && c.LogFormat != "text" {
		return Config{}, fmt.Errorf("-log-format %q: want json or text", c.LogFormat)
	}
	if c.ProviderTimeout <= 0 || c.MaxBodyBytes <= 0 || c.FleetWarmup < 0 {
		return Config{}, fmt.Errorf("-provider-timeout and -max-hook-body-bytes must be positive, -fleet-warmup not negative")
	}
	if c.LeaseMaxTTL <= 0 || c.LeaseCooldown <= 0 || c.LeaseBanCooldown <= 0 || c.LeaseMaxCooldown < c.LeaseBanCooldown || c.LeaseMaxCooldown < c.LeaseCooldown {
		return Config{}, fmt.Errorf("-lease-max-ttl and the cooldowns must be positive, -lease-max-cooldown at least each cooldown")
	}
	if c.ProbeWorkers <= 0 || c.HealthResyncQPS <= 0 {
		return Config{}, fmt.Errorf("-probe-workers and -health-resync-qps must be positive")
	}
	if c.GCInterval < 0 || c.GCMinAge <= 0 {
		return Config{}, fmt.Errorf("-gc-interval must not be negative, -gc-min-age must be positive")
	}
	return c, nil
}

func newLogger(c Config, w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: c.LogLevel}
	if c.LogFormat == "text" {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}

func main() {
	if err := dispatch(os.Args[1:]); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "proxy-operator:", err)
		}
		os.Exit(1)
	}
}

func dispatch(args []string) error {
	if len(args) > 0 && args[0] == "replay" {
		return runReplay(args[1:], os.Stdout)
	}
	cfg, err := parseFlags(args, os.Stderr)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return run(ctx, cfg, newLogger(cfg, os.Stderr), nil)
}

// listening is where run's servers listen, sent once both are bound.
type listening struct {
	Hook, Discovery string
}

// run builds the operator and serves until ctx ends. If ready is non-nil it receives the bound
// addresses once the servers listen (for tests that boot the process in-process).
func run(ctx context.Context, cfg Config, log *slog.Logger, ready chan<- listening) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	pcfg := factory.Default()
	if cfg.ProvidersConfig != "" {
		var err error
		if pcfg, err = factory.Load(cfg.ProvidersConfig); err != nil {
			return err
		}
	}
	set, err := factory.Build(pcfg, factory.Deps{Metrics: providers.NewMetrics(reg)})
	if err != nil {
		return err
	}
	for _, e := range set.Entries() {
		log.Info("provider configured", "provider", e.Name, "type", e.Type)
	}
	token, err := server.DiscoveryToken(os.Getenv("DISCOVERY_TOKEN"), cfg.DiscoveryTokenFile)
	if err != nil {
		return err
	}

	view := fleet.New(time.Now, cfg.FleetWarmup)
	prober := health.NewHTTPProber(nil)
	defer prober.Close()
	sched, err := health.New(health.Config{View: view, Prober: prober, Workers: cfg.ProbeWorkers,
		Registerer: reg, Log: log.With("component", "health")})
	if err != nil {
		return err
	}
	hooks := &server.Hooks{
		Providers:       set,
		Fleet:           view,
		Health:          sched,
		HealthResync:    health.ResyncPolicy{QPS: cfg.HealthResyncQPS}.After,
		Log:             log,
		Registry:        reg,
		MaxBodyBytes:    cfg.MaxBodyBytes,
		ProviderTimeout: cfg.ProviderTimeout,
	}
	if cfg.CaptureDir != "" {
		rec, err := replay.NewRecorder(cfg.CaptureDir, log)
		if err != nil {
			return err
		}
		hooks.Recorder = rec
		log.Warn("capturing every hook call", "dir", cfg.CaptureDir)
	}
	store := lease.NewMemory(lease.Config{
		Fleet: view, Health: sched, Now: time.Now,
		RateLimitedCooldown: cfg.LeaseCooldown,
		BannedCooldown:      cfg.LeaseBanCooldown,
		MaxCooldown:         cfg.LeaseMaxCooldown,
	})
	disc := &server.Discovery{Fleet: view, Health: sched, Leases: store, Token: token,
		Log: log.With("component", "discovery"), Registerer: reg, MaxTTL: cfg.LeaseMaxTTL}

	var collector *gc.Collector
	if cfg.GCInterval > 0 {
		srcs, err := gc.DefaultSources(view)
		if err != nil {
			return fmt.Errorf("gc: %w", err)
		}
		collector, err = gc.New(gc.Config{Providers: set, Sources: srcs, Interval: cfg.GCInterval, MinAge: cfg.GCMinAge,
			MaxDeletions: cfg.GCMaxDeletions, DryRun: cfg.GCDryRun, Log: log.With("component", "gc"), Registerer: reg})
		if err != nil {
			return err
		}
		log.Info("orphan gc enabled", "source", srcs[0].Name(), "interval", cfg.GCInterval.String(), "dryRun", cfg.GCDryRun)
	}

	hookSrv := newHTTPServer(hooks.Handler(), cfg.ProviderTimeout)
	discSrv := disc.Server("")
	hookLn, err := net.Listen("tcp", cfg.HookAddr)
	if err != nil {
		return fmt.Errorf("hook listener: %w", err)
	}
	discLn, err := net.Listen("tcp", cfg.DiscoveryAddr)
	if err != nil {
		hookLn.Close()
		return fmt.Errorf("discovery listener: %w", err)
	}
	log.Info("listening", "hooks", hookLn.Addr().String(), "discovery", discLn.Addr().String())

	errc := make(chan error, 5)
	go func() { errc <- fmt.Errorf("hook server: %w", hookSrv.Serve(hookLn)) }()
	go func() { errc <- fmt.Errorf("discovery server: %w", discSrv.Serve(discLn)) }()
	// Background loops return nil when ctx ends; an early return is a failure of the process.
	background := []func(context.Context) error{sched.Run, store.Run}
	if collector != nil {
		background = append(background, collector.Run)
	}
	done := make(chan struct{}, len(background))
	for _, loop := range background {
		go func() {
			if err := loop(ctx); err != nil {
				errc <- err
			}
			done <- struct{}{}
		}()
	}
	if ready != nil {
		ready <- listening{Hook: hookLn.Addr().String(), Discovery: discLn.Addr().String()}
	}

	var runErr error
	select {
	case runErr = <-errc:
	case <-ctx.Done():
	}
	log.Info("shutting down")
	sctx, scancel := context.WithTimeout(context.Background(), cfg.ShutdownGrace)
	defer scancel()
	if err := hookSrv.Shutdown(sctx); err != nil && runErr == nil {
		runErr = fmt.Errorf("hook server shutdown: %w", err)
	}
	if err := discSrv.Shutdown(sctx); err != nil && runErr == nil {
		runErr = fmt.Errorf("discovery server shutdown: %w", err)
	}
	cancel()
	for range background {
		<-done
	}
	return runErr
}

// newHTTPServer sets every timeout: a hook may make two provider calls, so writes get room.
func newHTTPServer(h http.Handler, providerTimeout time.Duration) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      2*providerTimeout + 10*time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
	}
}

// runReplay replays one fixture folder, or every fixture under a capture directory, and
// prints each answer and the provider calls it made. It fails when one differs from its golden.
func runReplay(args []string, out io.Writer) error {
	if len(args) != 1 {
		return fmt.Errorf("usage: proxy-operator replay <fixture-dir | capture-dir>")
	}
	var cases []replay.Case
	if _, err := os.Stat(filepath.Join(args[0], replay.RequestFile)); err == nil {
		c, err := replay.Load(args[0])
		if err != nil {
			return err
		}
		cases = append(cases, c)
	} else {
		var err error
		if cases, err = replay.LoadAll(args[0]); err != nil {
			return err
		}
		if len(cases) == 0 {
			return fmt.Errorf("replay: no fixture in %s (want %s, or <hook>/<case>/%s below it)", args[0], replay.RequestFile, replay.RequestFile)
		}
	}
	differ := 0
	for _, c := range cases {
		got, err := replay.Run(c, nil)
		if err != nil {
			return err
		}
		var body bytes.Buffer
		if json.Indent(&body, got.Body, "", "  ") != nil {
			body.Write(got.Body)
		}
		fmt.Fprintf(out, "== %s (%s)\nHTTP %d\n%s\nprovider calls:\n", c.Dir, c.Hook, got.Code, body.String())
		if len(got.Calls) == 0 {
			fmt.Fprintln(out, "  (none)")
		}
		for _, call := range got.Calls {
			line := "  " + call.Op + " " + call.Arg
			if call.Err != "" {
				line += " -> " + call.Err
			}
			fmt.Fprintln(out, strings.TrimRight(line, " "))
		}
		switch d := replay.Diff(c, got); {
		case c.Want == nil:
			fmt.Fprintln(out, "golden: none")
		case d == "":
			fmt.Fprintln(out, "golden: match")
		default:
			differ++
			fmt.Fprintf(out, "golden: differs\n%s", d)
		}
	}
	if differ > 0 {
		return fmt.Errorf("replay: %d of %d fixtures differ from their goldens", differ, len(cases))
	}
	return nil
}
