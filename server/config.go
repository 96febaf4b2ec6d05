package server

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/proxy-operator/proxy-operator/health"
	"github.com/proxy-operator/proxy-operator/internal/gc"
	"github.com/proxy-operator/proxy-operator/internal/kube"
	"github.com/proxy-operator/proxy-operator/lease"
	"github.com/proxy-operator/proxy-operator/providers"
	"github.com/proxy-operator/proxy-operator/providers/factory"
	"github.com/proxy-operator/proxy-operator/server/discovery"
	"github.com/proxy-operator/proxy-operator/server/gateway"
	"github.com/proxy-operator/proxy-operator/server/hooks"
	"github.com/proxy-operator/proxy-operator/server/hooks/hookauth"
)

// Config is everything the operator process is told from outside, one struct per concern.
// New gives a zero field its value from Defaults, except FleetWarmup and the GC fields, whose
// zero means something (trusted at once, GC off, no deletion allowed, deleting for real).
type Config struct {
	Hooks     HooksConfig
	Capture   CaptureConfig
	Providers ProvidersConfig
	Egress    EgressConfig
	Discovery DiscoveryAPIConfig
	Lease     LeaseConfig
	Health    HealthConfig
	GC        GCConfig
	Kube      KubeConfig
	Demo      DemoConfig
	Quality   QualityConfig
	// Gateway is the crawlers' proxy gateway (server/gateway), served on Gateway.Addr beside
	// the discovery API over the same lease store and tokens; an empty Addr: none.
	Gateway gateway.Config

	// FleetWarmup is the time after start before the fleet view is trusted as complete
	// (0 is a valid value: trusted at once).
	FleetWarmup   time.Duration
	ShutdownGrace time.Duration

	// Registerer receives every metric of the process and Gatherer serves them at /metrics
	// (both nil: a new registry holding the Go and process collectors too; a Registerer that
	// is also a Gatherer, such as a *prometheus.Registry, serves as both).
	Registerer prometheus.Registerer
	Gatherer   prometheus.Gatherer
	// Log receives the process log (nil: discarded).
	Log *slog.Logger
}

// HooksConfig is the Metacontroller hook listener and what one hook call may cost.
type HooksConfig struct {
	// Addr is the listen address (":0" or "127.0.0.1:0" picks a port; read it back with
	// Operator.HookAddr).
	Addr string
	// MaxBodyBytes is the largest hook body accepted (413 beyond).
	MaxBodyBytes int64
	// MemoryLimit is the memory limit the hook body budget is sized from (a quarter of it);
	// 0: GOMEMLIMIT, else the cgroup's limit, else 1 GiB.
	MemoryLimit int64
	// BodyReadTimeout bounds reading one hook body (0: hooks.DefaultBodyReadTimeout).
	BodyReadTimeout time.Duration
	// ProviderTimeout bounds each provider call a hook makes.
	ProviderTimeout time.Duration

	// Where the listener's TLS certificate and bearer token come from (decision 0180), at most
	// one of: Credentials; the three files; SecretsNamespace. None of them serves plain HTTP
	// without a token, as Insecure says: the flags (RequireCredentials) refuse that unless
	// -hooks-insecure is given, a Config built in process does not.
	// Credentials, when set, are used as they are (tests).
	Credentials *hookauth.Credentials
	// TLSCertFile, TLSKeyFile and TokenFile are PEM files and a one-line token file (e.g.
	// mounted from cert-manager's Secret and one of your own).
	TLSCertFile, TLSKeyFile, TokenFile string
	// SecretsNamespace, when set, is where the operator keeps both in two Secrets, creating
	// each that is absent (hookauth.EnsureSecrets); it needs a Kubernetes client. Service is
	// the hook Service whose DNS names a generated certificate carries (empty:
	// hookauth.DefaultService).
	SecretsNamespace, Service string
	// Insecure serves plain HTTP without a token (make run, the quickstart); it excludes
	// every source above.
	Insecure bool
}

// sources are the credential sources set, by flag name.
func (h HooksConfig) sources() []string {
	var s []string
	if h.Credentials != nil {
		s = append(s, "Credentials")
	}
	if h.TLSCertFile != "" || h.TLSKeyFile != "" || h.TokenFile != "" {
		s = append(s, "-hooks-tls-cert/-hooks-tls-key/-hooks-token-file")
	}
	if h.SecretsNamespace != "" {
		s = append(s, "-hooks-secrets-namespace")
	}
	return s
}

// Validate says which credential settings contradict each other.
func (h HooksConfig) Validate() error {
	src := h.sources()
	switch {
	case h.Insecure && len(src) > 0:
		return fmt.Errorf("-hooks-insecure and %s exclude each other: give one", strings.Join(src, " and "))
	case len(src) > 1:
		return fmt.Errorf("hook credentials from %s: give one source", strings.Join(src, " and "))
	case (h.TLSCertFile != "" || h.TLSKeyFile != "" || h.TokenFile != "") && (h.TLSCertFile == "" || h.TLSKeyFile == "" || h.TokenFile == ""):
		return fmt.Errorf("-hooks-tls-cert, -hooks-tls-key and -hooks-token-file go together: give all three")
	}
	return nil
}

// RequireCredentials refuses hooks that would serve without TLS and a token when
// -hooks-insecure does not ask for it. It is checked where flags become a Config, not in New,
// so a Config built in process (tests) serves plain HTTP as before (decision 0180).
func (h HooksConfig) RequireCredentials() error {
	if h.Insecure || len(h.sources()) > 0 {
		return nil
	}
	return errors.New("the hooks have no TLS certificate and token: give -hooks-secrets-namespace NAMESPACE (the operator keeps them in Secrets there, " +
		"as the shipped install does) or -hooks-tls-cert, -hooks-tls-key and -hooks-token-file, " +
		"or pass -hooks-insecure to serve them over plain HTTP without a token (only on a trusted address such as 127.0.0.1)")
}

// CaptureConfig is the hook capture for replay (debugging).
type CaptureConfig struct {
	// Dir, when set, receives every handled hook call as a replayable fixture.
	Dir string
	// MaxBytes caps the directory (0: replay.DefaultCaptureMaxBytes); Secrets keeps Secret
	// data in captures instead of redacting it.
	MaxBytes int64
	Secrets  bool
}

// ProvidersConfig says where the providers come from.
type ProvidersConfig struct {
	// File is the path of the providers YAML; empty: Parsed, else one mock provider named
	// "mock" serving real loopback proxies (factory.Default).
	File string
	// Parsed is an already parsed providers config, used when File is empty.
	Parsed *factory.Config
	// Extra join the configured ones (providers built outside the factory table, such as a
	// GCP client pointed at a local stand-in).
	Extra []providers.Entry
}

// EgressConfig is the egress policy's outside input (internal/netpolicy).
type EgressConfig struct {
	// AllowLoopback lets any proxy (External ones included) be on loopback; the mock
	// provider's instances are allowed there without it.
	AllowLoopback bool
	// ExternalCIDRs, when not empty, are the only places External endpoints may be.
	ExternalCIDRs []netip.Prefix
	// TargetAllow are ranges the gateway lets crawlers' targets be in although the target
	// policy refuses them (tests, `make run`, the crawl benchmark: sites on loopback); the
	// operator's listeners and the lease store stay refused.
	TargetAllow []netip.Prefix
	// TargetDenySuffixes are the DNS suffixes the gateway refuses as cluster-internal
	// targets (nil: netpolicy.DefaultClusterSuffixes).
	TargetDenySuffixes []string
}

// DiscoveryAPIConfig is the crawlers' API listener and its tokens, the same for the operator
// and the discovery subcommand.
type DiscoveryAPIConfig struct {
	// Addr is the listen address (read it back with Operator.DiscoveryAddr).
	Addr string
	// Token is one bearer token with every right (DISCOVERY_TOKEN); TokenFile (one token per
	// line, or scoped tokens in YAML: access.Load) wins over it. Both empty is an error
	// unless Insecure.
	Token     string
	TokenFile string
	Insecure  bool
	// Console serves the web console under /ui/ on this listener (server/console).
	Console bool
}

// LeaseConfig is the lease policy and where leases are kept: one struct for the in-memory
// store, the Redis store, the operator and the discovery subcommand (the cooldown policy
// travels with each report, so every process sharing a store must agree on it).
type LeaseConfig struct {
	MaxTTL time.Duration
	// Policy is the cooldowns and the bounds every store enforces (lease.Policy): the flags
	// set RateLimitedCooldown, BannedCooldown, MaxCooldown and MaxLeasesPerHolder (the live
	// leases one discovery token holds in one namespace when more than one token is
	// configured, decision 0201; 0: no bound); the rest keep lease.DefaultPolicy's values.
	lease.Policy
	// Store, when set, is the URL of a Redis (redis://, redis+sentinel://, redis+cluster://,
	// rediss for TLS: see redisstore.ClientConfig) that keeps leases, cooldowns and sessions,
	// and to which the fleet and health are published for discovery replicas; empty: the
	// in-memory store. PasswordFile holds its password.
	Store        string
	PasswordFile string
	// StorePrefix starts every key of the Redis store (empty: redisstore.DefaultPrefix); two
	// operators sharing one Redis database need different prefixes.
	StorePrefix string
	// CAFile verifies a rediss store's servers; CertFile and KeyFile are the client
	// certificate. WaitReplicas, above 0, makes every change wait for that many replicas
	// (redisstore.Config.WaitReplicas).
	CAFile, CertFile, KeyFile string
	WaitReplicas              int
	// Observe, when set, sees every change of the lease store under its lock (tests; the
	// in-memory store only).
	Observe func(lease.Event)
}

// HealthConfig is the prober, its scheduler and the health mark.
type HealthConfig struct {
	Workers   int
	ResyncQPS float64
	// DurationFleetOnly drops the proxy label from the probe duration histogram (for large
	// fleets: about 15 series per proxy otherwise).
	DurationFleetOnly bool
	// MarkQPS bounds the health annotation patches (0: mark.DefaultQPS).
	MarkQPS float64
	// Log, when set, receives the prober's log instead of Config.Log.
	Log *slog.Logger
}

// QualityConfig is what the target sees: the exit check and its echo, the GeoIP databases,
// and the quality score with its place in the lease choice (decisions 0140-0143).
type QualityConfig struct {
	// EchoAddr, when set, is where the operator answers each caller's address (the exit
	// check's echo, for clusters where proxies can reach the operator).
	EchoAddr string
	// ExitURL is the echo URL exit checks fetch for proxies whose spec.verify names none
	// (empty: those proxies get no exit check); ExitInterval paces the checks (0:
	// health.DefaultExitInterval).
	ExitURL      string
	ExitInterval time.Duration
	// GeoIPDB and ASNDB are MaxMind-format files (Country or City, and ASN) the exit's
	// country and network are read from; each is reloaded when it changes.
	GeoIPDB, ASNDB string
	// ScoreHalfLife is how fast outcomes fade from the quality score (0:
	// health.DefaultScoreHalfLife); SlowProbe is the probe latency beyond which a success
	// counts as slow (0: health.DefaultSlowProbe).
	ScoreHalfLife, SlowProbe time.Duration
	// IgnoreBand leaves the band out of the lease choice (-lease-by-quality=false).
	IgnoreBand bool
}

// Validate says which quality setting is wrong.
func (q QualityConfig) Validate() error {
	if q.ExitInterval < 0 || q.ScoreHalfLife < 0 || q.SlowProbe < 0 {
		return fmt.Errorf("-exit-interval, -score-half-life and -score-slow-probe must not be negative")
	}
	if q.ExitURL != "" {
		if u, err := url.Parse(q.ExitURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("-exit-url %q must be an absolute http:// or https:// URL", q.ExitURL)
		}
	}
	return nil
}

// GCConfig is the orphan sweep.
type GCConfig struct {
	// Interval is the time between orphan sweeps; 0 disables GC.
	Interval     time.Duration
	MinAge       time.Duration
	MaxDeletions int
	DryRun       bool
}

// KubeConfig is the operator's own Kubernetes client.
type KubeConfig struct {
	// Kubeconfig is the API server to use outside a cluster (-kubeconfig); KUBECONFIG, then
	// the in-cluster service account, otherwise. With none of them the operator runs without
	// a Kubernetes client: GC trusts the fleet view, health transitions wait for the next
	// resync, no events are recorded (the no-cluster quickstart).
	Kubeconfig string
	// Clients, when set, is the client to use instead of looking one up (tests).
	Clients *kube.Clients
	// QPS and Burst are the client's budget (0: kube.DefaultQPS, DefaultBurst).
	QPS   float64
	Burst int
}

// Defaults returns a Config holding every default: what the flags say when none is given.
func Defaults() Config {
	return Config{
		Hooks: HooksConfig{Addr: ":8080", ProviderTimeout: hooks.DefaultProviderTimeout,
			BodyReadTimeout: hooks.DefaultBodyReadTimeout, MaxBodyBytes: hooks.DefaultMaxBodyBytes},
		Discovery: DiscoveryAPIConfig{Addr: discovery.DefaultDiscoveryAddr},
		Lease:     DefaultLease(),
		Health:    HealthConfig{Workers: health.DefaultWorkers, ResyncQPS: health.DefaultResyncQPS},
		GC:        GCConfig{Interval: gc.DefaultInterval, MinAge: gc.DefaultMinAge, MaxDeletions: 20},
		Gateway:   gateway.DefaultConfig(),
		Quality: QualityConfig{ExitInterval: health.DefaultExitInterval, ScoreHalfLife: health.DefaultScoreHalfLife,
			SlowProbe: health.DefaultSlowProbe},
		Demo:          DemoConfig{SiteAddr: DefaultDemoSiteAddr},
		FleetWarmup:   3 * time.Minute,
		ShutdownGrace: 20 * time.Second,
	}
}

// DefaultLease is the lease policy the flags show when none is given.
func DefaultLease() LeaseConfig {
	return LeaseConfig{MaxTTL: discovery.DefaultMaxLeaseTTL, Policy: lease.DefaultPolicy()}
}

// orDuration sets *v to def when it is zero.
func orDuration(v *time.Duration, def time.Duration) {
	if *v == 0 {
		*v = def
	}
}

func (c Config) withDefaults() Config {
	d := Defaults()
	if c.Hooks.Addr == "" {
		c.Hooks.Addr = d.Hooks.Addr
	}
	if c.Discovery.Addr == "" {
		c.Discovery.Addr = d.Discovery.Addr
	}
	if c.Hooks.MaxBodyBytes == 0 {
		c.Hooks.MaxBodyBytes = d.Hooks.MaxBodyBytes
	}
	if c.Health.Workers == 0 {
		c.Health.Workers = d.Health.Workers
	}
	if c.Health.ResyncQPS == 0 {
		c.Health.ResyncQPS = d.Health.ResyncQPS
	}
	orDuration(&c.Hooks.ProviderTimeout, d.Hooks.ProviderTimeout)
	orDuration(&c.ShutdownGrace, d.ShutdownGrace)
	c.Lease = c.Lease.withDefaults()
	c.Gateway = c.Gateway.WithDefaults()
	orDuration(&c.GC.MinAge, d.GC.MinAge)
	return c
}

func (l LeaseConfig) withDefaults() LeaseConfig {
	orDuration(&l.MaxTTL, DefaultLease().MaxTTL)
	l.Policy = l.Policy.WithDefaults()
	return l
}

// Validate says which setting is out of range.
func (c Config) Validate() error {
	if c.Hooks.ProviderTimeout <= 0 || c.Hooks.MaxBodyBytes <= 0 || c.FleetWarmup < 0 {
		return fmt.Errorf("-provider-timeout and -max-hook-body-bytes must be positive, -fleet-warmup not negative")
	}
	if err := c.Hooks.Validate(); err != nil {
		return err
	}
	if err := c.Lease.Validate(); err != nil {
		return err
	}
	if c.Health.Workers <= 0 || c.Health.ResyncQPS <= 0 {
		return fmt.Errorf("-probe-workers and -health-resync-qps must be positive")
	}
	if c.Kube.QPS < 0 || c.Kube.Burst < 0 || c.Health.MarkQPS < 0 {
		return fmt.Errorf("-kube-api-qps, -kube-api-burst and -health-mark-qps must not be negative")
	}
	if c.GC.Interval < 0 || c.GC.MinAge <= 0 {
		return fmt.Errorf("-gc-interval must not be negative, -gc-min-age must be positive")
	}
	if err := c.Quality.Validate(); err != nil {
		return err
	}
	if c.Gateway.Addr != "" {
		return c.Gateway.Validate()
	}
	if c.Gateway.SOCKSAddr != "" {
		return fmt.Errorf("-gateway-socks-addr needs -gateway-addr: the SOCKS5 listener is the gateway's")
	}
	return nil
}

// Validate says which lease setting is out of range.
func (l LeaseConfig) Validate() error {
	if l.MaxTTL <= 0 {
		return fmt.Errorf("-lease-max-ttl %s must be positive", l.MaxTTL)
	}
	return l.Policy.Validate()
}

// DemoConfig is the demo fleet (demo.go): mock Proxies the process defines itself and syncs
// through its own hooks, playing Metacontroller's loop, for a first run without a cluster.
type DemoConfig struct {
	// Proxies is the fleet's size (0: no demo fleet). Only without a Kubernetes client.
	Proxies int
	// SiteAddr serves the demo site (demosite.go) beside a demo fleet; empty: none.
	SiteAddr string
}
