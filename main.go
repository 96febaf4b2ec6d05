// Command proxy-operator is the Metacontroller webhook operator for HTTP egress proxies. This
// file only turns flags into an operator.Config, dispatches subcommands and stops on a
// signal; the wiring lives in package operator.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/redis/go-redis/v9"

	"github.com/proxy-operator/proxy-operator/healthmark"
	"github.com/proxy-operator/proxy-operator/kube"
	"github.com/proxy-operator/proxy-operator/netpolicy"
	"github.com/proxy-operator/proxy-operator/operator"
	"github.com/proxy-operator/proxy-operator/replay"
)

// description is the one line -h starts with.
const description = "proxy-operator: the Metacontroller webhook operator for HTTP egress proxies: provisions them (mock, GCP VMs, Squid Pods), probes them through themselves, and leases healthy ones to crawlers."

// subcommand is one entry of the table below: the first argument selects it.
type subcommand struct {
	// usage is the synopsis, summary one line of what it does.
	usage, summary string
	run            func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

// subcommands are every subcommand; with none named, the operator runs. Adding one is one
// entry here.
var subcommands = map[string]subcommand{
	"replay": {usage: replay.CommandUsage, summary: "replay captured or committed hook fixtures through the real router and compare with their goldens",
		run: func(_ context.Context, args []string, stdout, _ io.Writer) error { return replay.Command(args, stdout) }},
	"discovery": {usage: "proxy-operator discovery -lease-store redis://HOST:PORT [flags]\n\tserve only the discovery API, from the Redis an operator fills (any number of replicas)",
		run: runDiscovery},
}

// usage writes -h's text: the description, the synopses, the environment and the flags.
func usage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintf(w, "%s\n\nUsage:\n  proxy-operator [flags]\n\trun the operator: Metacontroller hooks on -hook-addr, the crawlers' discovery API on -discovery-addr\n", description)
	for _, name := range slices.Sorted(maps.Keys(subcommands)) {
		sc := subcommands[name]
		fmt.Fprintf(w, "  %s\n\t%s\n", sc.usage, sc.summary)
	}
	fmt.Fprintf(w, "\nEnvironment:\n  DISCOVERY_TOKEN\n\tbearer token every discovery API request must carry (-discovery-token-file wins over it)\n\nFlags:\n")
	fs.PrintDefaults()
}

// options is what the flags say: the operator's Config and how to log.
type options struct {
	operator  operator.Config
	logLevel  slog.Level
	logFormat string
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	fs := flag.NewFlagSet("proxy-operator", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { usage(fs.Output(), fs) }
	d := operator.Defaults()
	var o options
	c := &o.operator
	var level string
	fs.StringVar(&c.HookAddr, "hook-addr", d.HookAddr, "listen address of the Metacontroller hooks, /healthz, /readyz and /metrics")
	fs.StringVar(&c.ProvidersConfig, "providers-config", "", "path of the providers config YAML; empty: one mock provider named \"mock\" serving real loopback proxies")
	fs.StringVar(&level, "log-level", "info", "log level: debug, info, warn or error")
	fs.StringVar(&o.logFormat, "log-format", "json", "log format: json or text")
	fs.DurationVar(&c.ProviderTimeout, "provider-timeout", d.ProviderTimeout, "timeout of each provider call made by a hook")
	fs.Int64Var(&c.MaxBodyBytes, "max-hook-body-bytes", d.MaxBodyBytes, "largest hook request body accepted (413 beyond)")
	fs.DurationVar(&c.FleetWarmup, "fleet-warmup", d.FleetWarmup, "time after start before the fleet view is trusted as complete (at least the CompositeController's resyncPeriodSeconds)")
	fs.DurationVar(&c.ShutdownGrace, "shutdown-grace", d.ShutdownGrace, "time allowed for in-flight requests at shutdown")
	fs.StringVar(&c.CaptureDir, "capture-dir", "", "write every handled hook call as a fixture folder under this directory (debugging; replay with 'proxy-operator replay DIR')")
	fs.StringVar(&c.DiscoveryAddr, "discovery-addr", d.DiscoveryAddr, "listen address of the discovery and lease API")
	fs.StringVar(&c.DiscoveryTokenFile, "discovery-token-file", "", "file of discovery API tokens: one per line (every right), or YAML scoping each to namespaces and read/lease rights (wins over DISCOVERY_TOKEN); without a token the operator does not start")
	fs.BoolVar(&c.DiscoveryInsecure, "discovery-insecure", false, "serve the discovery API without a token (only on a trusted address such as 127.0.0.1)")
	fs.BoolVar(&c.AllowLoopbackProxies, "allow-loopback-proxies", false, "let any proxy, External ones included, be on loopback (the mock provider's instances always may)")
	var externalCIDRs string
	fs.StringVar(&externalCIDRs, "external-cidrs", "", "comma-separated CIDRs External endpoints must be in (empty: any address the egress policy allows)")
	var hookMem bytesFlag
	fs.Var(&hookMem, "hook-memory-limit", "memory limit the hook body budget is sized from, a quarter of it (e.g. 256Mi; default: GOMEMLIMIT, else the cgroup's memory.max, else 1Gi)")
	fs.DurationVar(&c.HookBodyReadTimeout, "hook-body-read-timeout", d.HookBodyReadTimeout, "time allowed to receive one hook request body (408 beyond)")
	var captureMax bytesFlag
	fs.Var(&captureMax, "capture-max-bytes", "cap of the -capture-dir directory (default 100Mi)")
	fs.BoolVar(&c.CaptureSecrets, "capture-secrets", false, "keep Secret data in captured hook calls (redacted by default)")
	fs.DurationVar(&c.LeaseMaxTTL, "lease-max-ttl", d.LeaseMaxTTL, "longest lease TTL a client may ask for")
	fs.DurationVar(&c.LeaseCooldown, "lease-cooldown", d.LeaseCooldown, "cooldown of a proxy for a target after a rate_limited report without the site's Retry-After (with one: exactly that)")
	fs.DurationVar(&c.LeaseBanCooldown, "lease-ban-cooldown", d.LeaseBanCooldown, "cooldown of a proxy for a target after a banned report")
	fs.DurationVar(&c.LeaseMaxCooldown, "lease-max-cooldown", d.LeaseMaxCooldown, "cap of a cooldown grown by repeated reports")
	fs.IntVar(&c.ProbeWorkers, "probe-workers", d.ProbeWorkers, "most probes in flight at once")
	durationByProxy := fs.Bool("probe-duration-by-proxy", true, "label the probe duration histogram by proxy; false: one histogram for the fleet (about 15 series per proxy fewer, for large fleets)")
	fs.Float64Var(&c.HealthResyncQPS, "health-resync-qps", d.HealthResyncQPS, "reads per second that steady-state health resyncs may cost Metacontroller")
	fs.DurationVar(&c.GCInterval, "gc-interval", d.GCInterval, "time between orphan GC sweeps (0 disables GC)")
	fs.DurationVar(&c.GCMinAge, "gc-min-age", d.GCMinAge, "never delete an instance younger than this")
	fs.IntVar(&c.GCMaxDeletions, "gc-max-deletions", d.GCMaxDeletions, "a sweep finding more orphans than this deletes none (-1: no limit)")
	fs.BoolVar(&c.GCDryRun, "gc-dry-run", false, "log the orphans GC would delete, delete none")
	fs.StringVar(&c.Kubeconfig, "kubeconfig", "", "kubeconfig of the API server to use outside a cluster (default: KUBECONFIG, then the in-cluster service account; none: run without a Kubernetes client)")
	fs.Float64Var(&c.KubeQPS, "kube-api-qps", kube.DefaultQPS, "requests per second the operator's Kubernetes client may make (GC lists, health annotations, events)")
	fs.IntVar(&c.KubeBurst, "kube-api-burst", kube.DefaultBurst, "burst of the operator's Kubernetes client")
	fs.Float64Var(&c.HealthMarkQPS, "health-mark-qps", healthmark.DefaultQPS, "health annotation patches per second (each makes Metacontroller sync that Proxy at once)")
	fs.StringVar(&c.LeaseStore, "lease-store", "", leaseStoreUsage+"; empty: in memory")
	fs.StringVar(&c.LeaseStorePasswordFile, "lease-store-password-file", "", leaseStorePasswordUsage)
	// The first crawl: a demo fleet without a cluster.
	fs.IntVar(&c.DemoProxies, "demo-proxies", 0, "define this many mock Proxies in process (namespace demo, attributes demo=true,geo=local) and sync them through the own hooks, playing Metacontroller, so the discovery API has leasable proxies without a cluster (make run: 3; needs no Kubernetes client)")
	if err := fs.Parse(args); err != nil {
		return options{}, err
	}
	c.HookMemoryLimit, c.CaptureMaxBytes = int64(hookMem), int64(captureMax)
	cidrs, err := netpolicy.ParseCIDRs(externalCIDRs)
	if err != nil {
		return options{}, fmt.Errorf("-external-cidrs: %w", err)
	}
	c.ExternalCIDRs = cidrs
	if fs.NArg() > 0 {
		return options{}, fmt.Errorf("unexpected arguments %q after the flags: subcommands come first (%s); run 'proxy-operator -h' for help", fs.Args(), strings.Join(slices.Sorted(maps.Keys(subcommands)), ", "))
	}
	if err := o.logLevel.UnmarshalText([]byte(level)); err != nil {
		return options{}, fmt.Errorf("-log-level: %w", err)
	}
	if o.logFormat != "json" && o.logFormat != "text" {
		return options{}, fmt.Errorf("-log-format %q: want json or text", o.logFormat)
	}
	c.ProbeDurationFleetOnly = !*durationByProxy
	if err := c.Validate(); err != nil {
		return options{}, err
	}
	c.DiscoveryToken = os.Getenv("DISCOVERY_TOKEN")
	return o, nil
}

const (
	leaseStoreUsage         = "Redis URL (redis://host:port[/db], rediss:// for TLS) that keeps leases, cooldowns and sessions and receives the fleet for discovery replicas"
	leaseStorePasswordUsage = "file holding the Redis password (a mounted Secret; wins over the URL's; a missing file means none)"
)

// runDiscovery is the discovery subcommand: the discovery API alone, served from Redis.
func runDiscovery(ctx context.Context, args []string, _, stderr io.Writer) error {
	fs := flag.NewFlagSet("proxy-operator discovery", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c := operator.DiscoveryDefaults()
	var level, format string
	fs.StringVar(&c.DiscoveryAddr, "discovery-addr", c.DiscoveryAddr, "listen address of the discovery and lease API")
	fs.StringVar(&c.DiscoveryTokenFile, "discovery-token-file", "", "file of discovery API tokens: one per line, or scoped YAML (wins over DISCOVERY_TOKEN); without a token it does not start")
	fs.BoolVar(&c.DiscoveryInsecure, "discovery-insecure", false, "serve the discovery API without a token (only on a trusted address such as 127.0.0.1)")
	fs.StringVar(&c.LeaseStore, "lease-store", "", leaseStoreUsage+" (required)")
	fs.StringVar(&c.LeaseStorePasswordFile, "lease-store-password-file", "", leaseStorePasswordUsage)
	fs.DurationVar(&c.LeaseMaxTTL, "lease-max-ttl", c.LeaseMaxTTL, "longest lease TTL a client may ask for")
	fs.DurationVar(&c.LeaseCooldown, "lease-cooldown", c.LeaseCooldown, "cooldown of a proxy for a target after a rate_limited report (same as the operator's)")
	fs.DurationVar(&c.LeaseBanCooldown, "lease-ban-cooldown", c.LeaseBanCooldown, "cooldown of a proxy for a target after a banned report (same as the operator's)")
	fs.DurationVar(&c.LeaseMaxCooldown, "lease-max-cooldown", c.LeaseMaxCooldown, "cap of a cooldown grown by repeated reports (same as the operator's)")
	fs.DurationVar(&c.ShutdownGrace, "shutdown-grace", c.ShutdownGrace, "time allowed for in-flight requests at shutdown")
	fs.StringVar(&level, "log-level", "info", "log level: debug, info, warn or error")
	fs.StringVar(&format, "log-format", "json", "log format: json or text")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	o := options{logFormat: format}
	if err := o.logLevel.UnmarshalText([]byte(level)); err != nil {
		return fmt.Errorf("-log-level: %w", err)
	}
	if format != "json" && format != "text" {
		return fmt.Errorf("-log-format %q: want json or text", format)
	}
	if err := c.Validate(); err != nil {
		return err
	}
	c.DiscoveryToken = os.Getenv("DISCOVERY_TOKEN")
	c.Log = newLogger(o, stderr)
	redis.SetLogger(redisLog{c.Log.With("component", "redis-client")})
	d, err := operator.NewDiscovery(c)
	if err != nil {
		return err
	}
	return d.Run(ctx)
}

// redisLog routes the Redis client's own messages (dial failures while Redis is out) into the
// process log instead of bare lines on stderr. It is the client library's one global.
type redisLog struct{ log *slog.Logger }

func (l redisLog) Printf(_ context.Context, format string, v ...any) {
	l.log.Warn("redis client", "detail", fmt.Sprintf(format, v...))
}

func isHelp(arg string) bool {
	return arg == "-h" || arg == "-help" || arg == "--help"
}

// parseHelp prints -h's text to w.
func parseHelp(w io.Writer) error {
	_, err := parseFlags([]string{"-h"}, w)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	return err
}

// unknownSubcommand names the closest subcommand when one is near the mistyped word.
func unknownSubcommand(word string) error {
	names := slices.Sorted(maps.Keys(subcommands))
	best, bestD := "", 3
	for _, n := range names {
		if d := editDistance(word, n); d < bestD {
			best, bestD = n, d
		}
	}
	hint := ""
	if best != "" {
		hint = fmt.Sprintf("; did you mean %q?", best)
	}
	return fmt.Errorf("unknown subcommand %q%s (subcommands: %s; flags start with '-'; run 'proxy-operator -h' for help)", word, hint, strings.Join(names, ", "))
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

func newLogger(o options, w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: o.logLevel}
	if o.logFormat == "text" {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := dispatch(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(exitCode(err, os.Stderr))
}

// exitCode is 0 for success and for -h, else 1 after printing err.
func exitCode(err error, stderr io.Writer) int {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return 0
	}
	fmt.Fprintln(stderr, "proxy-operator:", err)
	return 1
}

// dispatch runs the subcommand named by args[0], else the operator with args as flags.
func dispatch(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 {
		if sc, ok := subcommands[args[0]]; ok {
			if len(args) > 1 && isHelp(args[1]) {
				fmt.Fprintf(stdout, "Usage: %s\n\t%s\n", sc.usage, sc.summary)
				return nil
			}
			return sc.run(ctx, args[1:], stdout, stderr)
		}
		if args[0] == "help" {
			return parseHelp(stdout)
		}
		if !strings.HasPrefix(args[0], "-") {
			return unknownSubcommand(args[0])
		}
	}
	out := stderr
	if slices.ContainsFunc(args, isHelp) {
		out = stdout // asked for: help is the answer, not an error
	}
	o, err := parseFlags(args, out)
	if err != nil {
		return err
	}
	o.operator.Log = newLogger(o, stderr)
	redis.SetLogger(redisLog{o.operator.Log.With("component", "redis-client")})
	op, err := operator.New(o.operator)
	if err != nil {
		return err
	}
	return op.Run(ctx)
}

// bytesFlag is a byte size: a plain number or one with a Ki, Mi or Gi suffix.
type bytesFlag int64

func (b *bytesFlag) String() string { return strconv.FormatInt(int64(*b), 10) }

func (b *bytesFlag) Set(s string) error {
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
	*b = bytesFlag(n * mult)
	return nil
}
