// Package operator is the process's wiring: from a Config it builds the provider set, the
// fleet view, the prober and its scheduler, the lease store, the orphan GC, the metrics
// registry and the two servers (Metacontroller hooks and the crawlers' discovery API), and
// Run serves them until its context ends, then shuts everything down in order. main.go only
// turns flags into a Config; tests assemble the real process through New.
package operator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"k8s.io/client-go/dynamic"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
	"github.com/proxy-operator/proxy-operator/events"
	"github.com/proxy-operator/proxy-operator/fleet"
	"github.com/proxy-operator/proxy-operator/gc"
	"github.com/proxy-operator/proxy-operator/health"
	"github.com/proxy-operator/proxy-operator/healthmark"
	"github.com/proxy-operator/proxy-operator/kube"
	"github.com/proxy-operator/proxy-operator/lease"
	"github.com/proxy-operator/proxy-operator/lifecycle"
	"github.com/proxy-operator/proxy-operator/membudget"
	"github.com/proxy-operator/proxy-operator/netpolicy"
	"github.com/proxy-operator/proxy-operator/poolhook"
	"github.com/proxy-operator/proxy-operator/providers"
	"github.com/proxy-operator/proxy-operator/providers/factory"
	"github.com/proxy-operator/proxy-operator/replay"
	"github.com/proxy-operator/proxy-operator/server/discovery"
	"github.com/proxy-operator/proxy-operator/server/hooks"
)

// Config is everything the process is told from outside. New gives a zero field its value
// from Defaults, except FleetWarmup, GCInterval, GCMaxDeletions and GCDryRun, whose zero
// means something (trusted at once, GC off, no deletion allowed, deleting for real).
type Config struct {
	// HookAddr and DiscoveryAddr are the listen addresses (":0" or "127.0.0.1:0" picks a port;
	// read it back with HookAddr() and DiscoveryAddr()).
	HookAddr      string
	DiscoveryAddr string

	// ProvidersConfig is the path of the providers YAML; empty: Providers, else one mock
	// provider named "mock" serving real loopback proxies (factory.Default).
	ProvidersConfig string
	// Providers is an already parsed providers config, used when ProvidersConfig is empty.
	Providers *factory.Config
	// ExtraProviders join the configured ones (providers built outside the factory table,
	// such as a GCP client pointed at a local stand-in).
	ExtraProviders []providers.Entry

	ProviderTimeout time.Duration
	MaxBodyBytes    int64
	// FleetWarmup is the time after start before the fleet view is trusted as complete
	// (0 is a valid value: trusted at once).
	FleetWarmup   time.Duration
	ShutdownGrace time.Duration
	// CaptureDir, when set, receives every handled hook call as a replayable fixture.
	CaptureDir string
	// CaptureMaxBytes caps the capture directory (0: replay.DefaultCaptureMaxBytes);
	// CaptureSecrets keeps Secret data in captures instead of redacting it.
	CaptureMaxBytes int64
	CaptureSecrets  bool
	// HookMemoryLimit is the memory limit the hook body budget is sized from (a quarter of
	// it); 0: GOMEMLIMIT, else the cgroup's limit, else 1 GiB.
	HookMemoryLimit int64
	// HookBodyReadTimeout bounds reading one hook body (0: hooks.DefaultBodyReadTimeout).
	HookBodyReadTimeout time.Duration

	// AllowLoopbackProxies lets any proxy (External ones included) be on loopback; the mock
	// provider's instances are allowed there without it.
	AllowLoopbackProxies bool
	// ExternalCIDRs, when not empty, are the only places External endpoints may be.
	ExternalCIDRs []netip.Prefix

	// DiscoveryToken is one bearer token with every right (DISCOVERY_TOKEN);
	// DiscoveryTokenFile (one token per line, or scoped tokens in YAML: access.Load) wins
	// over it. Both empty is an error unless DiscoveryInsecure.
	DiscoveryToken     string
	DiscoveryTokenFile string
	DiscoveryInsecure  bool
	LeaseMaxTTL        time.Duration
	LeaseCooldown      time.Duration
	LeaseBanCooldown   time.Duration
	LeaseMaxCooldown   time.Duration
	// LeaseObserve, when set, sees every change of the lease store under its lock (tests;
	// the in-memory store only).
	LeaseObserve func(lease.Event)
	// LeaseStore, when set, is the URL of a Redis (redis:// or rediss://) that keeps leases,
	// cooldowns and sessions, and to which the fleet and health are published for discovery
	// replicas; empty: the in-memory store. LeaseStorePasswordFile holds its password.
	LeaseStore             string
	LeaseStorePasswordFile string

	ProbeWorkers    int
	HealthResyncQPS float64

	// GCInterval is the time between orphan sweeps; 0 disables GC.
	GCInterval     time.Duration
	GCMinAge       time.Duration
	GCMaxDeletions int
	GCDryRun       bool

	// Registerer receives every metric of the process and Gatherer serves them at /metrics
	// (both nil: a new registry holding the Go and process collectors too; a Registerer that
	// is also a Gatherer, such as a *prometheus.Registry, serves as both).
	Registerer prometheus.Registerer
	Gatherer   prometheus.Gatherer
	// ProbeDurationFleetOnly drops the proxy label from the probe duration histogram (for
	// large fleets: about 15 series per proxy otherwise).
	ProbeDurationFleetOnly bool

	// Kubeconfig is the API server to use outside a cluster (-kubeconfig); KUBECONFIG, then
	// the in-cluster service account, otherwise. With none of them the operator runs without
	// a Kubernetes client: GC trusts the fleet view, health transitions wait for the next
	// resync, no events are recorded (the no-cluster quickstart).
	Kubeconfig string
	// Kube, when set, is the client to use instead of looking one up (tests).
	Kube *kube.Clients
	// KubeQPS and KubeBurst are the operator's own client budget (0: kube.DefaultQPS, DefaultBurst).
	KubeQPS   float64
	KubeBurst int
	// HealthMarkQPS bounds the health annotation patches (0: healthmark.DefaultQPS).
	HealthMarkQPS float64

	// DemoProxies, when positive, is the size of a demo fleet: mock Proxies the process defines
	// itself and syncs through its own hooks, playing Metacontroller's loop (demo.go). Only
	// without a Kubernetes client.
	DemoProxies int

	// Log receives the process log (nil: discarded). HealthLog, when set, receives the
	// prober's log instead of Log.
	Log       *slog.Logger
	HealthLog *slog.Logger
}

// Defaults returns a Config holding every default: what the flags say when none is given.
func Defaults() Config {
	return Config{
		HookAddr:            ":8080",
		DiscoveryAddr:       discovery.DefaultDiscoveryAddr,
		ProviderTimeout:     hooks.DefaultProviderTimeout,
		HookBodyReadTimeout: hooks.DefaultBodyReadTimeout,
		MaxBodyBytes:        hooks.DefaultMaxBodyBytes,
		FleetWarmup:         3 * time.Minute,
		ShutdownGrace:       20 * time.Second,
		LeaseMaxTTL:         discovery.DefaultMaxLeaseTTL,
		LeaseCooldown:       15 * time.Minute,
		LeaseBanCooldown:    time.Hour,
		LeaseMaxCooldown:    24 * time.Hour,
		ProbeWorkers:        health.DefaultWorkers,
		HealthResyncQPS:     health.DefaultResyncQPS,
		GCInterval:          gc.DefaultInterval,
		GCMinAge:            gc.DefaultMinAge,
		GCMaxDeletions:      20,
	}
}

func (c Config) withDefaults() Config {
	d := Defaults()
	or := func(v *time.Duration, def time.Duration) {
		if *v == 0 {
			*v = def
		}
	}
	if c.HookAddr == "" {
		c.HookAddr = d.HookAddr
	}
	if c.DiscoveryAddr == "" {
		c.DiscoveryAddr = d.DiscoveryAddr
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = d.MaxBodyBytes
	}
	if c.ProbeWorkers == 0 {
		c.ProbeWorkers = d.ProbeWorkers
	}
	if c.HealthResyncQPS == 0 {
		c.HealthResyncQPS = d.HealthResyncQPS
	}
	or(&c.ProviderTimeout, d.ProviderTimeout)
	or(&c.ShutdownGrace, d.ShutdownGrace)
	or(&c.LeaseMaxTTL, d.LeaseMaxTTL)
	or(&c.LeaseCooldown, d.LeaseCooldown)
	or(&c.LeaseBanCooldown, d.LeaseBanCooldown)
	or(&c.LeaseMaxCooldown, d.LeaseMaxCooldown)
	or(&c.GCMinAge, d.GCMinAge)
	return c
}

// Validate says which setting is out of range.
func (c Config) Validate() error {
	if c.ProviderTimeout <= 0 || c.MaxBodyBytes <= 0 || c.FleetWarmup < 0 {
		return fmt.Errorf("-provider-timeout and -max-hook-body-bytes must be positive, -fleet-warmup not negative")
	}
	if c.LeaseMaxTTL <= 0 || c.LeaseCooldown <= 0 || c.LeaseBanCooldown <= 0 || c.LeaseMaxCooldown < c.LeaseBanCooldown || c.LeaseMaxCooldown < c.LeaseCooldown {
		return fmt.Errorf("-lease-max-ttl and the cooldowns must be positive, -lease-max-cooldown at least each cooldown")
	}
	if c.ProbeWorkers <= 0 || c.HealthResyncQPS <= 0 {
		return fmt.Errorf("-probe-workers and -health-resync-qps must be positive")
	}
	if c.KubeQPS < 0 || c.KubeBurst < 0 || c.HealthMarkQPS < 0 {
		return fmt.Errorf("-kube-api-qps, -kube-api-burst and -health-mark-qps must not be negative")
	}
	if c.GCInterval < 0 || c.GCMinAge <= 0 {
		return fmt.Errorf("-gc-interval must not be negative, -gc-min-age must be positive")
	}
	return nil
}

// Operator is the assembled process. Build it with New, serve it with Run (once).
type Operator struct {
	cfg      Config
	log      *slog.Logger
	gatherer prometheus.Gatherer

	providers *providers.Set
	fleet     *fleet.View
	prober    *health.HTTPProber
	sched     *health.Scheduler
	store     lease.Store
	memory    *lease.Memory // the store when it is the in-memory one
	redis     *redisBackend // the store's Redis side when -lease-store is set
	collector *gc.Collector
	kube      *kube.Clients
	marker    *healthmark.Marker
	events    *events.Recorder

	hookSrv, discSrv *http.Server
	hookLn, discLn   net.Listener
}

// New builds every part and binds both listeners, so the addresses are known when it returns.
// On an error nothing is left open.
func New(cfg Config) (_ *Operator, err error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	o := &Operator{cfg: cfg, log: log}
	defer func() {
		if err != nil {
			o.close()
		}
	}()
	reg, gat := cfg.Registerer, cfg.Gatherer
	if reg == nil {
		r := prometheus.NewRegistry()
		r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		reg = r
		if gat == nil {
			gat = r
		}
	}
	if g, ok := reg.(prometheus.Gatherer); ok && gat == nil {
		gat = g
	}
	o.gatherer = gat

	pcfg := factory.Default()
	switch {
	case cfg.ProvidersConfig != "":
		if pcfg, err = factory.Load(cfg.ProvidersConfig); err != nil {
			return nil, err
		}
	case cfg.Providers != nil:
		pcfg = *cfg.Providers
		if err := pcfg.Validate(); err != nil {
			return nil, err
		}
	}
	if o.providers, err = factory.Build(pcfg, factory.Deps{Metrics: providers.NewMetrics(reg)}); err != nil {
		return nil, err
	}
	if len(cfg.ExtraProviders) > 0 {
		o.providers = providers.NewSet(append(o.providers.Entries(), cfg.ExtraProviders...)...)
	}
	for _, e := range o.providers.Entries() {
		log.Info("provider configured", "provider", e.Name, "type", e.Type)
	}
	tokens, err := discovery.Tokens(cfg.DiscoveryToken, cfg.DiscoveryTokenFile, cfg.DiscoveryInsecure)
	if err != nil {
		return nil, err
	}
	if tokens != nil {
		log.Info("discovery tokens loaded", "count", tokens.Len())
	}

	// Listeners first: the egress policy must know their bound addresses.
	if o.hookLn, err = net.Listen("tcp", cfg.HookAddr); err != nil {
		return nil, fmt.Errorf("hook listener: %w", err)
	}
	if o.discLn, err = net.Listen("tcp", cfg.DiscoveryAddr); err != nil {
		return nil, fmt.Errorf("discovery listener: %w", err)
	}
	var loopbackProviders []string
	for _, e := range o.providers.Entries() {
		if e.Type == "mock" {
			loopbackProviders = append(loopbackProviders, e.Name)
		}
	}
	egress, err := netpolicy.New(netpolicy.Config{AllowLoopback: cfg.AllowLoopbackProxies, LoopbackProviders: loopbackProviders,
		ExternalCIDRs: cfg.ExternalCIDRs, OwnListeners: []string{o.HookAddr(), o.DiscoveryAddr(), cfg.HookAddr, cfg.DiscoveryAddr}})
	if err != nil {
		return nil, err
	}

	if err := o.connect(); err != nil {
		return nil, err
	}
	if err := o.checkDemo(); err != nil {
		return nil, err
	}

	o.fleet = fleet.New(time.Now, cfg.FleetWarmup)
	o.prober = health.NewHTTPProber(nil, health.WithEgressPolicy(egress))
	hlog := cfg.HealthLog
	if hlog == nil {
		hlog = log.With("component", "health")
	}
	if o.sched, err = health.New(health.Config{View: o.fleet, Prober: o.prober, Workers: cfg.ProbeWorkers,
		Registerer: reg, FleetDurationOnly: cfg.ProbeDurationFleetOnly, Log: hlog, OnTransition: o.notifyTransition}); err != nil {
		return nil, err
	}
	if o.kube != nil {
		if o.marker, err = healthmark.New(healthmark.Config{
			Patcher: healthmark.KubePatcher{Client: o.kube.Dynamic, Resource: kube.ProxyResource},
			Behind:  healthmark.FleetBehind(o.fleet, o.sched),
			QPS:     cfg.HealthMarkQPS, Log: log.With("component", "healthmark"),
		}); err != nil {
			return nil, err
		}
		o.events = events.NewRecorder(o.kube.Core, log.With("component", "events"))
	}
	h := &hooks.Hooks{
		Providers:       o.providers,
		Fleet:           o.fleet,
		Health:          o.sched,
		HealthResync:    health.ResyncPolicy{QPS: cfg.HealthResyncQPS}.After,
		Log:             log,
		Registerer:      reg,
		Gatherer:        gat,
		MaxBodyBytes:    cfg.MaxBodyBytes,
		ProviderTimeout: cfg.ProviderTimeout,
		BodyReadTimeout: cfg.HookBodyReadTimeout,
		Egress:          egress,
	}
	memLimit, memSource := membudget.Limit(cfg.HookMemoryLimit)
	h.Budget = membudget.ForLimit(memLimit, 0, 0, cfg.MaxBodyBytes)
	log.Info("hook memory budget", "bytes", h.Budget.Size(), "memoryLimit", memLimit, "from", memSource)
	if o.events != nil {
		h.Events = o.events
	}
	if cfg.CaptureDir != "" {
		rec, err := replay.NewRecorder(cfg.CaptureDir, log)
		if err != nil {
			return nil, err
		}
		rec.MaxBytes, rec.KeepSecrets = cfg.CaptureMaxBytes, cfg.CaptureSecrets
		h.Recorder = rec
		log.Warn("capturing every hook call", "dir", cfg.CaptureDir)
	}
	disc := &discovery.Discovery{Fleet: o.fleet, Health: o.sched, Tokens: tokens, Insecure: cfg.DiscoveryInsecure,
		Log: log.With("component", "discovery"), Registerer: reg, MaxTTL: cfg.LeaseMaxTTL}

	if cfg.LeaseStore == "" {
		o.memory = lease.NewMemory(lease.Config{
			Fleet: o.fleet, Health: o.sched, Now: time.Now,
			RateLimitedCooldown: cfg.LeaseCooldown,
			BannedCooldown:      cfg.LeaseBanCooldown,
			MaxCooldown:         cfg.LeaseMaxCooldown,
			Observe:             cfg.LeaseObserve,
			Admit: func(p fleet.Proxy) error {
				return egress.CheckHost(p.IP, uint16(p.Port), netpolicy.Dest{External: p.Mode == v1.ModeExternal, Provider: p.Provider})
			},
		})
		o.store = o.memory
	} else {
		// Discovery reads what the operator published, like every replica: after a restart it
		// serves from Redis at once instead of waiting for the view to refill.
		if o.redis, err = newRedisBackend(redisSettings{url: cfg.LeaseStore, passwordFile: cfg.LeaseStorePasswordFile,
			cooldown: cfg.LeaseCooldown, banCooldown: cfg.LeaseBanCooldown, maxCooldown: cfg.LeaseMaxCooldown}, log); err != nil {
			return nil, err
		}
		o.redis.publisher(o.fleet, o.sched, log)
		o.store = o.redis.store
		disc.Fleet, disc.Health = o.redis.reader, o.redis.reader
	}
	disc.Leases = o.store
	// The ProxyPool controller's hooks read the lease store's view of each pool's members; a
	// store without that view (Redis today) leaves pools sized by spec and rotated by age only.
	h.Pools = &poolhook.Hooks{Log: log.With("component", "pools"), Metrics: poolhook.NewMetrics(reg)}
	if pl, ok := o.store.(lease.PoolLoad); ok {
		h.Pools.Load = pl
	}
	if o.events != nil {
		h.Pools.Events = o.events // scale and rotation decisions as Events on the pool
	}

	if cfg.GCInterval > 0 {
		var dyn dynamic.Interface
		if o.kube != nil {
			dyn = o.kube.Dynamic
		}
		srcs := gc.Sources(o.fleet, dyn)
		o.collector, err = gc.New(gc.Config{Providers: o.providers, Sources: srcs, Interval: cfg.GCInterval, MinAge: cfg.GCMinAge,
			MaxDeletions: cfg.GCMaxDeletions, DryRun: cfg.GCDryRun, Log: log.With("component", "gc"), Registerer: reg})
		if err != nil {
			return nil, err
		}
		log.Info("orphan gc enabled", "source", srcs[0].Name(), "interval", cfg.GCInterval.String(), "dryRun", cfg.GCDryRun)
	}

	o.hookSrv = h.Server()
	o.discSrv = disc.Server("")
	return o, nil
}

// connect finds the Kubernetes client, or decides to run without one.
func (o *Operator) connect() error {
	cfg := o.cfg
	if cfg.Kube != nil {
		o.kube = cfg.Kube
		return nil
	}
	rc, src, err := kube.Config(kube.Options{Kubeconfig: cfg.Kubeconfig, QPS: float32(cfg.KubeQPS), Burst: cfg.KubeBurst})
	switch {
	case errors.Is(err, kube.ErrNoCluster):
		o.log.Info("no Kubernetes client: GC trusts the fleet view, health transitions reach status at the next resync, no events are recorded")
		return nil
	case err != nil:
		return err
	}
	if o.kube, err = kube.NewClients(rc); err != nil {
		return err
	}
	o.log.Info("kubernetes client", "source", string(src), "host", rc.Host, "qps", rc.QPS, "burst", rc.Burst)
	return nil
}

// notifyTransition hands a verdict transition to the health annotation, when there is one.
func (o *Operator) notifyTransition(key string, _ lifecycle.Health) {
	if o.marker != nil {
		o.marker.Notify(key)
	}
}

// close releases what New acquired (listeners, the prober's connections, providers' resources).
func (o *Operator) close() {
	if o.events != nil {
		o.events.Shutdown()
		o.events = nil
	}
	for _, ln := range []net.Listener{o.hookLn, o.discLn} {
		if ln != nil {
			_ = ln.Close()
		}
	}
	if o.redis != nil {
		o.redis.close()
	}
	if o.prober != nil {
		o.prober.Close()
	}
	if o.providers != nil {
		if err := o.providers.Close(); err != nil {
			o.log.Error("closing providers", "err", err)
		}
	}
}

// HookAddr is the bound address of the hook listener (sync, finalize, customize, /healthz,
// /readyz, /metrics).
func (o *Operator) HookAddr() string { return o.hookLn.Addr().String() }

// DiscoveryAddr is the bound address of the discovery API listener.
func (o *Operator) DiscoveryAddr() string { return o.discLn.Addr().String() }

// Fleet is the process's fleet view.
func (o *Operator) Fleet() *fleet.View { return o.fleet }

// Health is the probe scheduler (the live verdict of every proxy).
func (o *Operator) Health() *health.Scheduler { return o.sched }

// Leases is the in-memory lease store (nil with -lease-store).
func (o *Operator) Leases() *lease.Memory { return o.memory }

// LeaseStore is the lease store, whichever it is.
func (o *Operator) LeaseStore() lease.Store { return o.store }

// Providers is the configured provider set.
func (o *Operator) Providers() *providers.Set { return o.providers }

// Gatherer is what /metrics serves.
func (o *Operator) Gatherer() prometheus.Gatherer { return o.gatherer }

// Run serves both listeners and runs the background loops (probes, lease expiry, GC) until
// ctx ends or one of them fails; then it shuts the servers down within ShutdownGrace, stops
// the loops and closes the providers. It returns the first failure, nil on a clean stop.
func (o *Operator) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer o.close()
	log := o.log
	log.Info("listening", "hooks", o.HookAddr(), "discovery", o.DiscoveryAddr())

	// Background loops return nil when ctx ends; an early return is a failure of the process.
	background := []func(context.Context) error{o.sched.Run, o.store.Run}
	if o.redis != nil {
		background = append(background, o.redis.pub.Run, o.redis.reader.Run)
	}
	if o.collector != nil {
		background = append(background, o.collector.Run)
	}
	if o.marker != nil {
		background = append(background, o.marker.Run)
	}
	if o.cfg.DemoProxies > 0 {
		background = append(background, o.runDemo)
	}
	// Room for every server's and loop's error, so none blocks after the first is taken.
	errc := make(chan error, 2+len(background))
	go func() { errc <- fmt.Errorf("hook server: %w", o.hookSrv.Serve(o.hookLn)) }()
	go func() { errc <- fmt.Errorf("discovery server: %w", o.discSrv.Serve(o.discLn)) }()
	waitLoops := startLoops(ctx, errc, background)

	var runErr error
	select {
	case runErr = <-errc:
	case <-ctx.Done():
	}
	log.Info("shutting down")
	// Both servers stop together under one deadline: discovery must not keep granting
	// leases while the hooks drain (or the reverse).
	sctx, scancel := context.WithTimeout(context.Background(), o.cfg.ShutdownGrace)
	defer scancel()
	var hookErr, discErr error
	var stopping sync.WaitGroup
	stopping.Go(func() { hookErr = o.hookSrv.Shutdown(sctx) })
	stopping.Go(func() { discErr = o.discSrv.Shutdown(sctx) })
	stopping.Wait()
	if hookErr != nil && runErr == nil {
		runErr = fmt.Errorf("hook server shutdown: %w", hookErr)
	}
	if discErr != nil && runErr == nil {
		runErr = fmt.Errorf("discovery server shutdown: %w", discErr)
	}
	cancel()
	waitLoops()
	if errors.Is(runErr, http.ErrServerClosed) {
		runErr = nil
	}
	return runErr
}

// startLoops runs each background loop until ctx ends, sending a loop's error to errc (which
// must have room for one error per loop); the returned wait blocks until all have returned.
func startLoops(ctx context.Context, errc chan<- error, loops []func(context.Context) error) (wait func()) {
	var wg sync.WaitGroup
	for _, loop := range loops {
		wg.Go(func() {
			if err := loop(ctx); err != nil {
				errc <- err
			}
		})
	}
	return wg.Wait
}
