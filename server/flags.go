package server

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/proxy-operator/proxy-operator/health/mark"
	"github.com/proxy-operator/proxy-operator/internal/kube"
	"github.com/proxy-operator/proxy-operator/internal/netpolicy"
	"github.com/proxy-operator/proxy-operator/server/hooks/hookauth"
)

// This file binds every flag to the field of the config struct it sets, once: the operator
// and the discovery subcommand share the bindings of the structs they share, so a flag has
// one declaration and one help text. A flag's default is the field's value when it is bound
// (bind to Defaults()).

// BindFlags binds the operator's flags to c.
func (c *Config) BindFlags(fs *flag.FlagSet) {
	c.Hooks.bindFlags(fs)
	c.Capture.bindFlags(fs)
	fs.StringVar(&c.Providers.File, "providers-config", c.Providers.File, "path of the providers config YAML; empty: one mock provider named \"mock\" serving real loopback proxies")
	c.Egress.bindFlags(fs)
	c.Discovery.bindFlags(fs)
	c.Lease.bindFlags(fs, "; empty: in memory")
	c.Health.bindFlags(fs)
	c.GC.bindFlags(fs)
	c.Kube.bindFlags(fs)
	c.Demo.bindFlags(fs)
	c.Quality.bindFlags(fs)
	c.Gateway.RegisterFlags(fs, "listen address of the crawlers' proxy gateway (HTTP forward proxy and CONNECT over the same leases and tokens); empty: no gateway")
	fs.DurationVar(&c.FleetWarmup, "fleet-warmup", c.FleetWarmup, "time after start before the fleet view is trusted as complete (at least the CompositeController's resyncPeriodSeconds)")
	bindShutdownGrace(fs, &c.ShutdownGrace)
}

// BindFlags binds the gateway subcommand's flags to c.
func (c *GatewayConfig) BindFlags(fs *flag.FlagSet) {
	c.Gateway.RegisterFlags(fs, "listen address of the proxy gateway")
	fs.StringVar(&c.MetricsAddr, "metrics-addr", c.MetricsAddr, "listen address of /metrics and /healthz (empty: none)")
	fs.StringVar(&c.TokenFile, "discovery-token-file", c.TokenFile, "file of discovery API tokens, the proxy passwords: one per line, or scoped YAML (wins over DISCOVERY_TOKEN); without a token the process does not start")
	fs.BoolVar(&c.Insecure, "discovery-insecure", c.Insecure, "serve the gateway without a token (only on a trusted address such as 127.0.0.1)")
	c.Lease.bindFlags(fs, " (required)")
	c.Egress.bindFlags(fs)
	bindShutdownGrace(fs, &c.ShutdownGrace)
}

// BindFlags binds the discovery subcommand's flags to c.
func (c *DiscoveryConfig) BindFlags(fs *flag.FlagSet) {
	c.Discovery.bindFlags(fs)
	c.Lease.bindFlags(fs, " (required)")
	c.Egress.bindFlags(fs)
	bindShutdownGrace(fs, &c.ShutdownGrace)
}

func bindShutdownGrace(fs *flag.FlagSet, d *time.Duration) {
	fs.DurationVar(d, "shutdown-grace", *d, "time allowed for in-flight requests at shutdown")
}

func (h *HooksConfig) bindFlags(fs *flag.FlagSet) {
	fs.StringVar(&h.Addr, "hook-addr", h.Addr, "listen address of the Metacontroller hooks, /healthz, /readyz and /metrics")
	fs.DurationVar(&h.ProviderTimeout, "provider-timeout", h.ProviderTimeout, "timeout of each provider call made by a hook")
	fs.Int64Var(&h.MaxBodyBytes, "max-hook-body-bytes", h.MaxBodyBytes, "largest hook request body accepted (413 beyond)")
	fs.Var((*bytesValue)(&h.MemoryLimit), "hook-memory-limit", "memory limit the hook body budget and the gateway's connection budget are sized from, a quarter of it each (e.g. 256Mi; default: GOMEMLIMIT, else the cgroup's memory.max, else 1Gi)")
	fs.DurationVar(&h.BodyReadTimeout, "hook-body-read-timeout", h.BodyReadTimeout, "time allowed to receive one hook request body (408 beyond)")
	fs.StringVar(&h.SecretsNamespace, "hooks-secrets-namespace", h.SecretsNamespace, "namespace where the operator keeps the hooks' TLS certificate and bearer token in the Secrets "+
		hookauth.TLSSecret+" and "+hookauth.TokenSecret+", creating each that is absent (the shipped install: its own namespace); needs a Kubernetes client")
	fs.StringVar(&h.Service, "hooks-service", hookauth.DefaultService, "name of the hook Service whose DNS names (NAME.NAMESPACE.svc...) a certificate generated for -hooks-secrets-namespace carries")
	fs.StringVar(&h.TLSCertFile, "hooks-tls-cert", h.TLSCertFile, "PEM certificate (chain) the hooks serve TLS with, e.g. from cert-manager (with -hooks-tls-key and -hooks-token-file)")
	fs.StringVar(&h.TLSKeyFile, "hooks-tls-key", h.TLSKeyFile, "PEM private key of -hooks-tls-cert")
	fs.StringVar(&h.TokenFile, "hooks-token-file", h.TokenFile, "file holding the bearer token every hook call must carry (Metacontroller's authorization.secretRef; at least 16 characters)")
	fs.BoolVar(&h.Insecure, "hooks-insecure", h.Insecure, "serve the hooks over plain HTTP without a token (make run and the quickstart; only on a trusted address such as 127.0.0.1)")
}

func (c *CaptureConfig) bindFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Dir, "capture-dir", c.Dir, "write every handled hook call as a fixture folder under this directory (debugging; replay with 'proxy-operator replay DIR')")
	fs.Var((*bytesValue)(&c.MaxBytes), "capture-max-bytes", "cap of the -capture-dir directory (default 100Mi)")
	fs.BoolVar(&c.Secrets, "capture-secrets", c.Secrets, "keep Secret data in captured hook calls (redacted by default)")
}

func (e *EgressConfig) bindFlags(fs *flag.FlagSet) {
	fs.BoolVar(&e.AllowLoopback, "allow-loopback-proxies", e.AllowLoopback, "let any proxy, External ones included, be on loopback (the mock provider's instances always may)")
	fs.Var((*cidrsValue)(&e.ExternalCIDRs), "external-cidrs", "comma-separated CIDRs External endpoints must be in (empty: any address the egress policy allows)")
	fs.Var((*cidrsValue)(&e.TargetAllow), "gateway-allow-target-cidrs", "comma-separated CIDRs the gateway lets targets be in although its egress policy refuses them (tests, a laptop: 127.0.0.0/8); the operator's listeners and the lease store stay refused")
	fs.Var((*suffixesValue)(&e.TargetDenySuffixes), "gateway-deny-target-suffixes", "comma-separated DNS suffixes the gateway refuses as cluster-internal targets (default "+strings.Join(netpolicy.DefaultClusterSuffixes, ",")+")")
}

// suffixesValue is a comma-separated list of DNS suffixes.
type suffixesValue []string

func (s *suffixesValue) String() string {
	if s == nil {
		return ""
	}
	return strings.Join(*s, ",")
}

func (s *suffixesValue) Set(v string) error {
	out, err := netpolicy.ParseSuffixes(v)
	if err != nil {
		return err
	}
	*s = append([]string{}, out...)
	return nil
}

func (d *DiscoveryAPIConfig) bindFlags(fs *flag.FlagSet) {
	fs.StringVar(&d.Addr, "discovery-addr", d.Addr, "listen address of the discovery and lease API")
	fs.StringVar(&d.TokenFile, "discovery-token-file", d.TokenFile, "file of discovery API tokens: one per line (every right), or YAML scoping each to namespaces and read/lease rights (wins over DISCOVERY_TOKEN); without a token the process does not start")
	fs.BoolVar(&d.Insecure, "discovery-insecure", d.Insecure, "serve the discovery API without a token (only on a trusted address such as 127.0.0.1)")
	fs.BoolVar(&d.Console, "console", d.Console, "serve the web console under /ui/ on the discovery listener (log in with a discovery token; actions need a token with the admin right)")
}

func (l *LeaseConfig) bindFlags(fs *flag.FlagSet, storeNote string) {
	fs.DurationVar(&l.MaxTTL, "lease-max-ttl", l.MaxTTL, "longest lease TTL a client may ask for")
	fs.DurationVar(&l.RateLimitedCooldown, "lease-cooldown", l.RateLimitedCooldown, "cooldown of a proxy for a target after a rate_limited report without the site's Retry-After (with one: exactly that); every process sharing a store must agree")
	fs.DurationVar(&l.BannedCooldown, "lease-ban-cooldown", l.BannedCooldown, "cooldown of a proxy for a target after a banned report; every process sharing a store must agree")
	fs.DurationVar(&l.MaxCooldown, "lease-max-cooldown", l.MaxCooldown, "cap of a cooldown grown by repeated reports; every process sharing a store must agree")
	fs.StringVar(&l.Store, "lease-store", l.Store, "Redis URL that keeps leases, cooldowns and sessions and receives the fleet for discovery replicas: "+
		"redis://host:port[/db], redis+sentinel://host:port[,host:port]/MASTER[/db] (a Sentinel master set), "+
		"redis+cluster://host:port[,host:port] (a Redis Cluster); rediss for TLS"+storeNote)
	fs.StringVar(&l.PasswordFile, "lease-store-password-file", l.PasswordFile, "file holding the Redis password of the data nodes (a mounted Secret; wins over the URL's; a missing file is an error)")
	fs.StringVar(&l.CAFile, "lease-store-ca-file", l.CAFile, "PEM certificates that verify a rediss lease store (default: the system's roots)")
	fs.StringVar(&l.CertFile, "lease-store-cert-file", l.CertFile, "client certificate for a rediss lease store that asks for one (with -lease-store-key-file)")
	fs.StringVar(&l.KeyFile, "lease-store-key-file", l.KeyFile, "private key of -lease-store-cert-file")
	fs.IntVar(&l.WaitReplicas, "lease-store-wait-replicas", l.WaitReplicas, "replicas that must confirm every lease change (Redis WAIT) before it is answered, so a Sentinel failover loses no acknowledged grant; 0: do not wait")
	fs.IntVar(&l.MaxLeasesPerHolder, "lease-max-per-token", l.MaxLeasesPerHolder, "most live leases one discovery token holds in one namespace, when more than one token is configured (beyond: 429); 0: no bound")
	fs.StringVar(&l.StorePrefix, "lease-store-prefix", l.StorePrefix, "prefix of every Redis key of the lease store (empty: \"{proxy-operator}:\"); give each operator sharing one Redis database its own, with its discovery replicas using the same; keep a {hash tag} for Redis Cluster")
}

func (h *HealthConfig) bindFlags(fs *flag.FlagSet) {
	fs.IntVar(&h.Workers, "probe-workers", h.Workers, "most probes in flight at once")
	fs.Var((*notBool)(&h.DurationFleetOnly), "probe-duration-by-proxy", "label the probe duration histogram by proxy; false: one histogram for the fleet (about 15 series per proxy fewer, for large fleets) (default true)")
	fs.Float64Var(&h.ResyncQPS, "health-resync-qps", h.ResyncQPS, "reads per second that steady-state health resyncs may cost Metacontroller")
	if h.MarkQPS == 0 {
		h.MarkQPS = mark.DefaultQPS
	}
	fs.Float64Var(&h.MarkQPS, "health-mark-qps", h.MarkQPS, "health annotation patches per second (each makes Metacontroller sync that Proxy at once)")
}

func (q *QualityConfig) bindFlags(fs *flag.FlagSet) {
	fs.StringVar(&q.EchoAddr, "echo-addr", q.EchoAddr, "listen address of the exit echo (answers each caller's address; empty: none)")
	fs.StringVar(&q.ExitURL, "exit-url", q.ExitURL, "echo URL the exit check fetches through each proxy whose spec.verify.exitURL is empty (text or JSON answer; empty: no exit check for those)")
	fs.DurationVar(&q.ExitInterval, "exit-interval", q.ExitInterval, "time between exit checks of one proxy")
	fs.StringVar(&q.GeoIPDB, "geoip-db", q.GeoIPDB, "MaxMind-format Country or City database (e.g. GeoLite2-Country.mmdb) for exits' countries; reloaded when it changes")
	fs.StringVar(&q.ASNDB, "asn-db", q.ASNDB, "MaxMind-format ASN database (e.g. GeoLite2-ASN.mmdb) for exits' networks; reloaded when it changes")
	fs.DurationVar(&q.ScoreHalfLife, "score-half-life", q.ScoreHalfLife, "time for a probe or crawler report to count half as much in a proxy's quality score")
	fs.DurationVar(&q.SlowProbe, "score-slow-probe", q.SlowProbe, "probe latency beyond which a successful probe counts against a proxy's quality score")
	fs.Var((*notBool)(&q.IgnoreBand), "lease-by-quality", "lease proxies of a better quality band first (then least-loaded, then lowest latency); false: ignore bands (default true)")
}

func (g *GCConfig) bindFlags(fs *flag.FlagSet) {
	fs.DurationVar(&g.Interval, "gc-interval", g.Interval, "time between orphan GC sweeps (0 disables GC)")
	fs.DurationVar(&g.MinAge, "gc-min-age", g.MinAge, "never delete an instance younger than this")
	fs.IntVar(&g.MaxDeletions, "gc-max-deletions", g.MaxDeletions, "a sweep finding more orphans than this deletes none (-1: no limit)")
	fs.BoolVar(&g.DryRun, "gc-dry-run", g.DryRun, "log the orphans GC would delete, delete none")
}

func (k *KubeConfig) bindFlags(fs *flag.FlagSet) {
	fs.StringVar(&k.Kubeconfig, "kubeconfig", k.Kubeconfig, "kubeconfig of the API server to use outside a cluster (default: KUBECONFIG, then the in-cluster service account; none: run without a Kubernetes client)")
	if k.QPS == 0 && k.Burst == 0 {
		k.QPS, k.Burst = kube.DefaultQPS, kube.DefaultBurst
	}
	fs.Float64Var(&k.QPS, "kube-api-qps", k.QPS, "requests per second the operator's Kubernetes client may make (GC lists, health annotations, events)")
	fs.IntVar(&k.Burst, "kube-api-burst", k.Burst, "burst of the operator's Kubernetes client")
}

func (d *DemoConfig) bindFlags(fs *flag.FlagSet) {
	fs.IntVar(&d.Proxies, "demo-proxies", d.Proxies, "define this many mock Proxies in process (namespace demo, attributes demo=true,geo=local) and sync them through the own hooks, playing Metacontroller, so the discovery API has leasable proxies without a cluster (make run: 3; needs no Kubernetes client)")
	fs.StringVar(&d.SiteAddr, "demo-site-addr", d.SiteAddr, "with -demo-proxies: serve the demo site here, a crawl target on loopback that answers 429 beyond 2 requests/s per source address (pages /page/1 to /page/50, its own count per source at /stats); empty: none")
}

// LogConfig is how the process logs: -log-level and -log-format.
type LogConfig struct {
	Level  slog.Level
	Format string
}

// BindFlags binds -log-level and -log-format.
func (l *LogConfig) BindFlags(fs *flag.FlagSet) {
	if l.Format == "" {
		l.Format = "json"
	}
	fs.TextVar(&l.Level, "log-level", l.Level, "log level: debug, info, warn or error")
	fs.Func("log-format", "log format: json or text (default json)", func(s string) error {
		if s != "json" && s != "text" {
			return fmt.Errorf("want json or text")
		}
		l.Format = s
		return nil
	})
}

// Logger is the process log writing to w.
func (l LogConfig) Logger(w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: l.Level}
	if l.Format == "text" {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}

// bytesValue is a byte size flag: a plain number or one with a Ki, Mi or Gi suffix.
type bytesValue int64

func (b *bytesValue) String() string {
	if b == nil || *b == 0 {
		return ""
	}
	return strconv.FormatInt(int64(*b), 10)
}

func (b *bytesValue) Set(s string) error {
	mult := int64(1)
	for suffix, m := range map[string]int64{"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30} {
		if v, ok := strings.CutSuffix(s, suffix); ok {
			s, mult = v, m
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 || n > math.MaxInt64/mult {
		return fmt.Errorf("want a byte size such as 268435456 or 256Mi")
	}
	*b = bytesValue(n * mult)
	return nil
}

// cidrsValue is a comma-separated list of CIDRs.
type cidrsValue []netip.Prefix

func (c *cidrsValue) String() string {
	if c == nil {
		return ""
	}
	s := make([]string, len(*c))
	for i, p := range *c {
		s[i] = p.String()
	}
	return strings.Join(s, ",")
}

func (c *cidrsValue) Set(s string) error {
	p, err := netpolicy.ParseCIDRs(s)
	if err != nil {
		return err
	}
	*c = p
	return nil
}

// notBool is a boolean flag that sets the negation of its field (the field's zero value is
// the flag's default true).
type notBool bool

func (b *notBool) String() string   { return strconv.FormatBool(b == nil || !bool(*b)) }
func (b *notBool) IsBoolFlag() bool { return true }
func (b *notBool) Set(s string) error {
	v, err := strconv.ParseBool(s)
	if err != nil {
		return err
	}
	*b = notBool(!v)
	return nil
}

// DidYouMean is `; did you mean "x"?` naming the candidate nearest to a mistyped word
// (Levenshtein distance under 3), or "" when none is near.
func DidYouMean(word string, candidates []string) string {
	best, bestD := "", 3
	for _, n := range candidates {
		if d := editDistance(word, n); d < bestD {
			best, bestD = n, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf("; did you mean %q?", best)
}

// editDistance is the Levenshtein distance of a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}
