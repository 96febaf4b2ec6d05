// Package server is the process's wiring: from a Config it builds the provider set, the
// fleet view, the prober and its scheduler, the lease store, the orphan GC, the metrics
// registry and the two servers (Metacontroller hooks and the crawlers' discovery API), and
// Run serves them until its context ends, then shuts everything down in order. main.go only
// turns flags into a Config; tests assemble the real process through New.
package server

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

	"github.com/proxy-operator/proxy-operator/health"
	"github.com/proxy-operator/proxy-operator/health/geoip"
	"github.com/proxy-operator/proxy-operator/health/mark"
	"github.com/proxy-operator/proxy-operator/internal/events"
	"github.com/proxy-operator/proxy-operator/internal/fleet"
	"github.com/proxy-operator/proxy-operator/internal/gc"
	"github.com/proxy-operator/proxy-operator/internal/kube"
	"github.com/proxy-operator/proxy-operator/internal/kube/parents"
	"github.com/proxy-operator/proxy-operator/internal/netpolicy"
	"github.com/proxy-operator/proxy-operator/internal/verdict"
	"github.com/proxy-operator/proxy-operator/lease"
	"github.com/proxy-operator/proxy-operator/providers"
	"github.com/proxy-operator/proxy-operator/providers/factory"
	"github.com/proxy-operator/proxy-operator/server/console"
	"github.com/proxy-operator/proxy-operator/server/discovery"
	"github.com/proxy-operator/proxy-operator/server/discovery/access"
	"github.com/proxy-operator/proxy-operator/server/gateway"
	"github.com/proxy-operator/proxy-operator/server/hooks"
	"github.com/proxy-operator/proxy-operator/server/hooks/hookauth"
	"github.com/proxy-operator/proxy-operator/server/hooks/membudget"
	"github.com/proxy-operator/proxy-operator/server/hooks/poolhook"
	"github.com/proxy-operator/proxy-operator/server/replay"
)

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
	parents   *parents.Cache // the API server's view of hook parents; nil without a client
	marker    *mark.Marker
	events    *events.Recorder
	traffic   *console.Traffic // the console's counter history (nil without -console)

	hookSrv, discSrv *http.Server
	hookLn, discLn   net.Listener
	echoSrv          *http.Server // nil without Quality.EchoAddr
	echoLn           net.Listener
	geo              *geoip.Resolver
	gwSrv            *http.Server // nil without -gateway-addr
	own              []string     // every address the listeners answer on (listen)
	gwLn             net.Listener
	socksSrv         *gateway.SOCKSServer // nil without -gateway-socks-addr or a token's socks5 port
	socksLn          net.Listener
	ports            []access.Port  // the tokens' own gateway ports (decision 0279)
	portLns          []net.Listener // theirs, bound by listen, then each a PortListener
	portSrvs         []served       // theirs, built by buildServers
	demoSrv          *http.Server   // the demo site; nil without -demo-proxies and -demo-site-addr
	demoLn           net.Listener
	// hookCreds are the hook listener's TLS certificate and token (nil: plain HTTP, no token).
	hookCreds *hookauth.Credentials
}

// Run builds the operator from c (New) and serves it until ctx ends (Operator.Run).
func Run(ctx context.Context, c Config) error {
	op, err := New(c)
	if err != nil {
		return err
	}
	return op.Run(ctx)
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
	reg := o.buildMetrics()
	// Listeners first: the egress policy and the mock proxies must know their bound addresses.
	own, err := o.listen()
	if err != nil {
		return nil, err
	}
	if err := o.buildProviders(reg, own); err != nil {
		return nil, err
	}
	tokens, err := o.loadTokens()
	if err != nil {
		return nil, err
	}
	if own, err = o.listenPorts(own, tokens.Ports()); err != nil {
		return nil, err
	}
	egress, err := o.buildEgress(own)
	if err != nil {
		return nil, err
	}
	if err := o.connect(); err != nil {
		return nil, err
	}
	if err := o.loadHookCredentials(); err != nil {
		return nil, err
	}
	if err := o.checkDemo(); err != nil {
		return nil, err
	}
	if err := o.buildHealth(reg, egress); err != nil {
		return nil, err
	}
	h, err := o.buildHooks(reg, egress)
	if err != nil {
		return nil, err
	}
	disc := o.buildDiscovery(reg, tokens)
	if err := o.buildLeases(disc, egress); err != nil {
		return nil, err
	}
	o.buildPoolHooks(h, reg)
	o.buildOutcomes(disc)
	if err := o.buildGC(reg); err != nil {
		return nil, err
	}
	if err := o.buildServers(h, disc, tokens, reg); err != nil {
		return nil, err
	}
	return o, nil
}

// buildMetrics picks the Registerer every component registers on (a fresh registry with the
// Go and process collectors when none is given) and the Gatherer /metrics serves.
func (o *Operator) buildMetrics() prometheus.Registerer {
	reg, gat := o.cfg.Registerer, o.cfg.Gatherer
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
	return reg
}

// buildProviders builds the provider set from the providers file, the parsed config or the
// default, plus the extra entries tests inject; mock proxies refuse to relay to own, the
// operator's listeners, and to the lease store's addresses (decision 0251).
func (o *Operator) buildProviders(reg prometheus.Registerer, own []string) (err error) {
	ownPolicy, err := netpolicy.New(netpolicy.Config{OwnListeners: own, Protected: storeAddrs(o.cfg.Lease.Store)})
	if err != nil {
		return err
	}
	cfg := o.cfg
	pcfg := factory.Default()
	switch {
	case cfg.Providers.File != "":
		if pcfg, err = factory.Load(cfg.Providers.File); err != nil {
			return err
		}
	case cfg.Providers.Parsed != nil:
		pcfg = *cfg.Providers.Parsed
		if err := pcfg.Validate(); err != nil {
			return err
		}
	}
	if o.providers, err = factory.Build(pcfg, factory.Deps{Metrics: providers.NewMetrics(reg), OwnListener: ownPolicy.OwnListener}); err != nil {
		return err
	}
	if len(cfg.Providers.Extra) > 0 {
		o.providers = providers.NewSet(append(o.providers.Entries(), cfg.Providers.Extra...)...)
	}
	for _, e := range o.providers.Entries() {
		o.log.Info("provider configured", "provider", e.Name, "type", e.Type)
	}
	return nil
}

// loadTokens loads the discovery (and gateway) bearer tokens; nil only with -discovery-insecure.
func (o *Operator) loadTokens() (*access.Tokens, error) {
	tokens, err := discovery.Tokens(o.cfg.Discovery.Token, o.cfg.Discovery.TokenFile, o.cfg.Discovery.Insecure)
	if err != nil {
		return nil, err
	}
	if tokens != nil {
		o.log.Info("discovery tokens loaded", "count", tokens.Len())
	}
	return tokens, nil
}

// listen binds the hook, discovery and (when set) gateway listeners and returns every address
// they answer on, configured and bound, for the egress policy to refuse.
func (o *Operator) listen() (own []string, err error) {
	cfg := o.cfg
	if o.hookLn, err = net.Listen("tcp", cfg.Hooks.Addr); err != nil {
		return nil, fmt.Errorf("hook listener: %w", err)
	}
	if o.discLn, err = net.Listen("tcp", cfg.Discovery.Addr); err != nil {
		return nil, fmt.Errorf("discovery listener: %w", err)
	}
	own = []string{o.HookAddr(), o.DiscoveryAddr(), cfg.Hooks.Addr, cfg.Discovery.Addr}
	if cfg.Gateway.Addr != "" {
		if o.gwLn, err = net.Listen("tcp", cfg.Gateway.Addr); err != nil {
			return nil, fmt.Errorf("gateway listener: %w", err)
		}
		own = append(own, o.gwLn.Addr().String(), cfg.Gateway.Addr)
		if cfg.Gateway.SOCKSAddr != "" {
			if o.socksLn, err = net.Listen("tcp", cfg.Gateway.SOCKSAddr); err != nil {
				return nil, fmt.Errorf("gateway SOCKS5 listener: %w", err)
			}
			own = append(own, o.socksLn.Addr().String(), cfg.Gateway.SOCKSAddr)
		}
	}
	// The demo site is a crawl target, not one of the operator's own listeners: it stays out of own.
	if cfg.Demo.Proxies > 0 && cfg.Demo.SiteAddr != "" {
		if o.demoLn, err = net.Listen("tcp", cfg.Demo.SiteAddr); err != nil {
			return nil, fmt.Errorf("demo site listener: %w", err)
		}
		o.demoSrv = demoSiteServer()
	}
	return own, nil
}

// listenPorts binds the tokens' own gateway ports (decision 0279) and adds them to own.
func (o *Operator) listenPorts(own []string, ports []access.Port) ([]string, error) {
	if len(ports) > 0 && o.gwLn == nil {
		return nil, fmt.Errorf("the tokens file names gateway ports (token %s's %s) but -gateway-addr is off", ports[0].Caller.Name, ports[0].Addr)
	}
	for _, p := range ports {
		ln, err := listenPort(p)
		if err != nil {
			return nil, err
		}
		o.ports, o.portLns = append(o.ports, p), append(o.portLns, ln)
		own = append(own, ln.Addr().String(), p.Addr)
	}
	return own, nil
}

// buildEgress builds the policy every outbound connection (probes, leases, hooks) is checked
// against; mock providers may use loopback.
func (o *Operator) buildEgress(own []string) (*netpolicy.Policy, error) {
	o.own = own
	return netpolicy.New(netpolicy.Config{AllowLoopback: o.cfg.Egress.AllowLoopback, LoopbackProviders: o.mockProviders(),
		ExternalCIDRs: o.cfg.Egress.ExternalCIDRs, OwnListeners: own})
}

// mockProviders are the names of the mock providers, whose instances may be on loopback.
func (o *Operator) mockProviders() []string {
	var names []string
	for _, e := range o.providers.Entries() {
		if e.Type == "mock" {
			names = append(names, e.Name)
		}
	}
	return names
}

// buildHealth builds the fleet view, the prober, the GeoIP resolver, the echo listener (with
// Quality.EchoAddr) and the scheduler, and with a cluster the health mark and the Event recorder.
func (o *Operator) buildHealth(reg prometheus.Registerer, egress *netpolicy.Policy) (err error) {
	cfg, log := o.cfg, o.log
	o.fleet = fleet.New(time.Now, cfg.FleetWarmup)
	o.prober = health.NewHTTPProber(nil, health.WithEgressPolicy(egress))
	hlog := cfg.Health.Log
	if hlog == nil {
		hlog = log.With("component", "health")
	}
	q := cfg.Quality
	if o.geo, err = geoip.Open(geoip.Config{CountryPath: q.GeoIPDB, ASNPath: q.ASNDB, Log: log.With("component", "geoip")}); err != nil {
		return fmt.Errorf("-geoip-db/-asn-db: %w", err)
	}
	if q.EchoAddr != "" {
		if o.echoLn, err = net.Listen("tcp", q.EchoAddr); err != nil {
			return fmt.Errorf("echo listener: %w", err)
		}
		o.echoSrv = &http.Server{Handler: health.EchoHandler(), ReadHeaderTimeout: 5 * time.Second,
			ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second, IdleTimeout: 30 * time.Second, MaxHeaderBytes: 8 << 10}
	}
	if o.sched, err = health.New(health.Config{View: o.fleet, Prober: o.prober, Workers: cfg.Health.Workers,
		Registerer: reg, FleetDurationOnly: cfg.Health.DurationFleetOnly, Log: hlog, OnTransition: o.notifyTransition,
		ExitURL: q.ExitURL, ExitInterval: q.ExitInterval, Geo: o.geo, ScoreHalfLife: q.ScoreHalfLife, SlowProbe: q.SlowProbe}); err != nil {
		return err
	}
	if o.kube != nil {
		if o.marker, err = mark.New(mark.Config{
			Patcher: mark.KubePatcher{Client: o.kube.Dynamic, Resource: kube.ProxyResource},
			Behind:  mark.FleetBehind(o.fleet, o.sched),
			QPS:     cfg.Health.MarkQPS, Log: log.With("component", "healthmark"),
		}); err != nil {
			return err
		}
		o.events = events.NewRecorder(o.kube.Dynamic, log.With("component", "events"))
	}
	return nil
}

// buildHooks builds the Metacontroller hooks with their memory budget, with a cluster the API
// server cache they check bodies against and, with -capture-dir, the recorder of every call.
func (o *Operator) buildHooks(reg prometheus.Registerer, egress *netpolicy.Policy) (_ *hooks.Hooks, err error) {
	cfg, log := o.cfg, o.log
	h := &hooks.Hooks{
		Providers:       o.providers,
		Fleet:           o.fleet,
		Health:          o.sched,
		HealthResync:    health.ResyncPolicy{QPS: cfg.Health.ResyncQPS}.After,
		Log:             log,
		Registerer:      reg,
		Gatherer:        o.gatherer,
		MaxBodyBytes:    cfg.Hooks.MaxBodyBytes,
		ProviderTimeout: cfg.Hooks.ProviderTimeout,
		BodyReadTimeout: cfg.Hooks.BodyReadTimeout,
		Egress:          egress,
	}
	if o.hookCreds != nil {
		h.Token, h.TLS = o.hookCreds.Token, o.hookCreds.TLSConfig()
	}
	memLimit, memSource := membudget.Limit(cfg.Hooks.MemoryLimit)
	h.Budget = membudget.ForLimit(memLimit, 0, 0, cfg.Hooks.MaxBodyBytes)
	log.Info("hook memory budget", "bytes", h.Budget.Size(), "memoryLimit", memLimit, "from", memSource)
	if o.events != nil {
		h.Events = o.events
	}
	if o.kube != nil && o.kube.Dynamic != nil {
		if o.parents, err = parents.New(o.kube.Dynamic, log.With("component", "parents")); err != nil {
			return nil, err
		}
		h.Parents = o.parents
	} else {
		log.Warn("no Kubernetes client: hook bodies are trusted as sent (no API server check of uid, deletion or spec before a delete or an endpoint change)")
	}
	if cfg.Capture.Dir != "" {
		rec, err := replay.NewRecorder(cfg.Capture.Dir, log)
		if err != nil {
			return nil, err
		}
		rec.MaxBytes, rec.KeepSecrets = cfg.Capture.MaxBytes, cfg.Capture.Secrets
		h.Recorder = rec
		log.Warn("capturing every hook call", "dir", cfg.Capture.Dir)
	}
	return h, nil
}

// buildDiscovery builds the crawler-facing API over the process's fleet view; buildLeases
// gives it its store (and, with Redis, what the operator published there).
//
// The reports counter is the process's, made here and shared with the gateway (buildServers)
// so a gateway's reports are counted beside the API's, by source.
func (o *Operator) buildDiscovery(reg prometheus.Registerer, tokens *access.Tokens) *discovery.Discovery {
	reports := discovery.NewReportCounter()
	reg.MustRegister(reports)
	return &discovery.Discovery{Fleet: o.fleet, Health: o.sched, Tokens: tokens, Insecure: o.cfg.Discovery.Insecure,
		Log: o.log.With("component", "discovery"), Registerer: reg, MaxTTL: o.cfg.Lease.MaxTTL, Reports: reports}
}

// buildLeases builds the lease store, in memory or in Redis (-lease-store); with Redis,
// discovery reads the fleet published there.
func (o *Operator) buildLeases(disc *discovery.Discovery, egress *netpolicy.Policy) (err error) {
	cfg := o.cfg
	if cfg.Lease.Store == "" {
		o.memory = lease.NewMemory(lease.Config{
			Fleet: o.fleet, Health: o.sched, Now: time.Now,
			Policy:     cfg.Lease.Policy,
			Observe:    cfg.Lease.Observe,
			PreferBand: !cfg.Quality.IgnoreBand,
			Admit:      admitWith(egress),
		})
		o.store = o.memory
		registerDenied(disc.Registerer, o.memory)
	} else {
		// Discovery reads what the operator published, like every replica: after a restart it
		// serves from Redis at once instead of waiting for the view to refill.
		if o.redis, err = newRedisBackend(cfg.Lease, admitWith(egress), o.log); err != nil {
			return err
		}
		o.redis.publisher(o.fleet, o.sched, !cfg.Quality.IgnoreBand, o.log)
		o.redis.register(disc.Registerer)
		o.store = o.redis.store
		disc.Fleet, disc.Health = o.redis.reader, o.redis.reader
	}
	return nil
}

// buildPoolHooks gives the ProxyPool controller's hooks the lease store's view of each
// pool's members (both stores have it; with Redis it is what every replica granted and
// refused).
func (o *Operator) buildPoolHooks(h *hooks.Hooks, reg prometheus.Registerer) {
	h.Pools = &poolhook.Hooks{Log: o.log.With("component", "pools"), Metrics: poolhook.NewMetrics(reg)}
	if pl, ok := o.store.(lease.PoolLoad); ok {
		h.Pools.Load = pl
	}
	if o.events != nil {
		h.Pools.Events = o.events // scale and rotation decisions as Events on the pool
	}
}

// buildOutcomes wraps the lease store so crawlers' reports (and the gateway's, through the
// store) feed the quality score, and hands the wrapped store to discovery. The pool hooks
// keep the bare store: they read its load, they never report.
func (o *Operator) buildOutcomes(disc *discovery.Discovery) {
	o.store = lease.WithOutcomes(o.store, func(proxy string, r lease.Result) {
		o.sched.Report(proxy, reportOutcome(r), time.Now())
	})
	disc.Leases = o.store
}

// buildGC builds the orphan collector when -gc-interval is set.
func (o *Operator) buildGC(reg prometheus.Registerer) (err error) {
	cfg := o.cfg
	if cfg.GC.Interval <= 0 {
		return nil
	}
	var dyn dynamic.Interface
	if o.kube != nil {
		dyn = o.kube.Dynamic
	}
	srcs := gc.Sources(o.fleet, dyn)
	o.collector, err = gc.New(gc.Config{Providers: o.providers, Sources: srcs, Interval: cfg.GC.Interval, MinAge: cfg.GC.MinAge,
		MaxDeletions: cfg.GC.MaxDeletions, DryRun: cfg.GC.DryRun, Log: o.log.With("component", "gc"), Registerer: reg})
	if err != nil {
		return err
	}
	o.log.Info("orphan gc enabled", "source", srcs[0].Name(), "interval", cfg.GC.Interval.String(), "dryRun", cfg.GC.DryRun)
	return nil
}

// buildServers builds the HTTP servers for the hook, discovery and gateway listeners.
func (o *Operator) buildServers(h *hooks.Hooks, disc *discovery.Discovery, tokens *access.Tokens, reg prometheus.Registerer) error {
	o.hookSrv = h.Server()
	if o.cfg.Discovery.Console {
		o.buildConsole(h, disc, tokens)
	}
	o.discSrv = disc.Server("")
	if o.gwLn != nil {
		egress, err := gatewayEgress(o.cfg.Egress, o.mockProviders(), o.own, o.cfg.Lease.Store, o.DemoSiteAddr())
		if err != nil {
			return err
		}
		gw := &gateway.Gateway{Leases: o.store, Fleet: disc.Fleet, Tokens: tokens, Insecure: o.cfg.Discovery.Insecure,
			Log: o.log.With("component", "gateway"), Registerer: reg, Egress: egress, Reports: disc.Reports,
			Shares: disc.SharesFor} // the API's fair shares hold through the gateway (decision 0259)
		if o.redis != nil {
			gw.Book = o.redis.store      // the pace shared with the gateway replicas (decision 0268)
			gw.UsageBook = o.redis.store // usage and budgets shared too (decision 0295)
		}
		if err := o.cfg.Gateway.Apply(gw); err != nil {
			return err
		}
		memLimit, _ := membudget.Limit(o.cfg.Hooks.MemoryLimit)
		gw.Budget = gateway.BudgetFor(memLimit)
		o.gwSrv, o.gwLn = gw.Server(), gw.Listener(o.gwLn)
		if o.socksLn != nil || len(o.ports) > 0 {
			o.socksSrv = gw.SOCKSServer()
		}
		for i, p := range o.ports {
			s, err := portServer(gw, o.socksSrv, p, o.portLns[i])
			if err != nil {
				return err
			}
			o.portLns[i] = s.ln
			o.portSrvs = append(o.portSrvs, s)
		}
		disc.Sites = gw // /v1/sites reads its pacer
		disc.Usage = gw // /v1/usage reads its count
	}
	return nil
}

// buildConsole serves the web console beside the discovery API (-console): it reads what
// discovery reads, the pool hooks' last answers, and the counters of this process; with a
// Kubernetes client it drains through the API server and records Events.
func (o *Operator) buildConsole(h *hooks.Hooks, disc *discovery.Discovery, tokens *access.Tokens) {
	c := &console.Console{Discovery: disc, Tokens: tokens, Insecure: o.cfg.Discovery.Insecure,
		Log: o.log.With("component", "console")}
	if o.memory != nil {
		c.Leases = o.memory
	} else if o.redis != nil {
		c.Leases = o.redis.store
	}
	if h.Pools != nil {
		h.Pools.Seen = &poolhook.Seen{}
		c.Pools = h.Pools.Seen
	}
	if o.kube != nil {
		c.Kube = &console.Kube{Dynamic: o.kube.Dynamic, Events: o.events}
	}
	if o.gatherer != nil {
		c.Traffic = &console.Traffic{Gatherer: o.gatherer}
		o.traffic = c.Traffic
	}
	disc.Console = c
}

// hookCredentialsTimeout bounds reading (or creating) the hook credential Secrets at start.
const hookCredentialsTimeout = time.Minute

// loadHookCredentials finds the hook listener's TLS certificate and token: given, from files,
// or from the Secrets of -hooks-secrets-namespace (created when absent). Without any, the hooks
// serve plain HTTP without a token, and say so.
func (o *Operator) loadHookCredentials() (err error) {
	h := o.cfg.Hooks
	switch {
	case h.Credentials != nil:
		o.hookCreds = h.Credentials
	case h.TLSCertFile != "":
		o.hookCreds, err = hookauth.LoadFiles(h.TLSCertFile, h.TLSKeyFile, h.TokenFile)
	case h.SecretsNamespace != "":
		if o.kube == nil {
			return fmt.Errorf("-hooks-secrets-namespace %s needs a Kubernetes client (-kubeconfig, KUBECONFIG or the in-cluster service account)", h.SecretsNamespace)
		}
		ctx, cancel := context.WithTimeout(context.Background(), hookCredentialsTimeout)
		defer cancel()
		o.hookCreds, err = hookauth.EnsureSecrets(ctx, hookauth.SecretsConfig{Dynamic: o.kube.Dynamic,
			Namespace: h.SecretsNamespace, Service: h.Service, Log: o.log.With("component", "hookauth")})
	default:
		o.log.Warn("hooks served over plain HTTP without a token: anyone who reaches the hook address controls the fleet (-hooks-insecure)", "addr", o.HookAddr())
		return nil
	}
	if err != nil {
		return err
	}
	o.log.Info("hooks served over TLS; every call but GET /healthz, /readyz and /metrics needs the bearer token")
	return nil
}

// connect finds the Kubernetes client, or decides to run without one.
func (o *Operator) connect() error {
	cfg := o.cfg
	if cfg.Kube.Clients != nil {
		o.kube = cfg.Kube.Clients
		return nil
	}
	rc, src, err := kube.Config(kube.Options{Kubeconfig: cfg.Kube.Kubeconfig, QPS: float32(cfg.Kube.QPS), Burst: cfg.Kube.Burst})
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

// reportOutcome is how the score weighs a lease report.
func reportOutcome(r lease.Result) health.Outcome {
	switch r {
	case lease.ResultBanned:
		return health.OutcomeBanned
	case lease.ResultRateLimited:
		return health.OutcomeRateLimited
	}
	return health.OutcomeOK
}

// notifyTransition hands a verdict transition to the health annotation, when there is one,
// and to the in-memory lease index, so a proxy shown healthy is leasable at once.
func (o *Operator) notifyTransition(key string, _ verdict.Health) {
	if o.marker != nil {
		o.marker.Notify(key)
	}
	if o.memory != nil {
		o.memory.HealthChanged()
	}
}

// close releases what New acquired (listeners, the prober's connections, providers' resources).
func (o *Operator) close() {
	if o.events != nil {
		o.events.Shutdown()
		o.events = nil
	}
	for _, ln := range append([]net.Listener{o.hookLn, o.discLn, o.echoLn, o.gwLn, o.socksLn}, o.portLns...) {
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

// EchoAddr is the bound address of the echo listener ("" without one).
func (o *Operator) EchoAddr() string {
	if o.echoLn == nil {
		return ""
	}
	return o.echoLn.Addr().String()
}

// DemoSiteAddr is the address crawlers reach the demo site at ("" without one): its bound
// address, or 127.0.0.1 at its port when it listens on every interface.
func (o *Operator) DemoSiteAddr() string {
	if o.demoLn == nil {
		return ""
	}
	ap, err := netip.ParseAddrPort(o.demoLn.Addr().String())
	if err != nil || !ap.Addr().IsUnspecified() {
		return o.demoLn.Addr().String()
	}
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), ap.Port()).String()
}

// GatewayAddr is the bound address of the gateway listener ("" without one).
func (o *Operator) GatewayAddr() string {
	if o.gwLn == nil {
		return ""
	}
	return o.gwLn.Addr().String()
}

// GatewaySOCKSAddr is the bound address of the gateway's SOCKS5 listener ("" without one).
func (o *Operator) GatewaySOCKSAddr() string {
	if o.socksLn == nil {
		return ""
	}
	return o.socksLn.Addr().String()
}

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

// consoleURL is where the web console is served ("" without -console).
func (o *Operator) consoleURL() string {
	if !o.cfg.Discovery.Console {
		return ""
	}
	return "http://" + o.DiscoveryAddr() + "/ui/"
}

// Run serves both listeners and runs the background loops (probes, lease expiry, GC) until
// ctx ends or one of them fails; then it shuts the servers down within ShutdownGrace, stops
// the loops and closes the providers. It returns the first failure, nil on a clean stop.
func (o *Operator) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer o.close()
	log := o.log
	log.Info("listening", "hooks", o.HookAddr(), "discovery", o.DiscoveryAddr(), "gateway", o.GatewayAddr(), "socks", o.GatewaySOCKSAddr(), "console", o.consoleURL())

	// Background loops return nil when ctx ends; an early return is a failure of the process.
	background := []func(context.Context) error{o.sched.Run, o.store.Run, o.geo.Run}
	if o.redis != nil {
		background = append(background, o.redis.pub.Run, o.redis.reader.Run)
	}
	if o.collector != nil {
		background = append(background, o.collector.Run)
	}
	if o.marker != nil {
		background = append(background, o.marker.Run)
	}
	if o.parents != nil {
		background = append(background, o.parents.Run)
	}
	if o.cfg.Demo.Proxies > 0 {
		background = append(background, o.runDemo)
	}
	if o.traffic != nil {
		background = append(background, o.traffic.Run)
	}
	// Room for every server's and loop's error, so none blocks after the first is taken.
	errc := make(chan error, 5+len(background))
	go func() {
		if o.hookCreds != nil {
			errc <- fmt.Errorf("hook server: %w", o.hookSrv.ServeTLS(o.hookLn, "", ""))
			return
		}
		errc <- fmt.Errorf("hook server: %w", o.hookSrv.Serve(o.hookLn))
	}()
	go func() { errc <- fmt.Errorf("discovery server: %w", o.discSrv.Serve(o.discLn)) }()
	if o.echoSrv != nil {
		log.Info("echo listening", "addr", o.EchoAddr())
		go func() { errc <- fmt.Errorf("echo server: %w", o.echoSrv.Serve(o.echoLn)) }()
	}
	if o.gwSrv != nil {
		go func() { errc <- fmt.Errorf("gateway server: %w", o.gwSrv.Serve(o.gwLn)) }()
	}
	if o.socksLn != nil {
		go func() { errc <- fmt.Errorf("gateway SOCKS5 server: %w", o.socksSrv.Serve(o.socksLn)) }()
	}
	for _, s := range o.portSrvs {
		go func() { errc <- fmt.Errorf("%s: %w", s.name, s.srv.Serve(s.ln)) }()
	}
	if o.demoSrv != nil {
		go func() { errc <- fmt.Errorf("demo site: %w", o.demoSrv.Serve(o.demoLn)) }()
	}
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
	var hookErr, discErr, gwErr error
	var stopping sync.WaitGroup
	stopping.Go(func() { hookErr = o.hookSrv.Shutdown(sctx) })
	stopping.Go(func() { discErr = o.discSrv.Shutdown(sctx) })
	if o.echoSrv != nil {
		stopping.Go(func() { _ = o.echoSrv.Shutdown(sctx) })
	}
	if o.gwSrv != nil {
		stopping.Go(func() { gwErr = o.gwSrv.Shutdown(sctx) })
	}
	if o.socksSrv != nil {
		stopping.Go(func() { _ = o.socksSrv.Shutdown(sctx) })
	}
	for _, s := range o.portSrvs {
		stopping.Go(func() { _ = s.srv.Shutdown(sctx) })
	}
	if o.demoSrv != nil {
		stopping.Go(func() { _ = o.demoSrv.Shutdown(sctx) })
	}
	stopping.Wait()
	if gwErr != nil && runErr == nil {
		runErr = fmt.Errorf("gateway server shutdown: %w", gwErr)
	}
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
