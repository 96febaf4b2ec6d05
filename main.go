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
	"math"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/proxy-operator/proxy-operator/healthmark"
	"github.com/proxy-operator/proxy-operator/kube"
	"github.com/proxy-operator/proxy-operator/netpolicy"
	"github.com/proxy-operator/proxy-operator/operator"
	"github.com/proxy-operator/proxy-operator/replay"
	"github.com/proxy-operator/proxy-operator/server/hooks"
)

// subcommand is one entry of the table below: the first argument selects it.
type subcommand struct {
	usage string
	run   func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

// subcommands are every subcommand; with none named, the operator runs. Adding one is one
// entry here.
var subcommands = map[string]subcommand{
	"replay": {usage: replay.CommandUsage + "\n\treplay captured or committed hook fixtures through the real router",
		run: func(_ context.Context, args []string, stdout, _ io.Writer) error { return replay.Command(args, stdout) }},
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
	fs.DurationVar(&c.HookBodyReadTimeout, "hook-body-read-timeout", hooks.DefaultBodyReadTimeout, "time allowed to receive one hook request body (408 beyond)")
	var captureMax bytesFlag
	fs.Var(&captureMax, "capture-max-bytes", "cap of the -capture-dir directory (default 100Mi)")
	fs.BoolVar(&c.CaptureSecrets, "capture-secrets", false, "keep Secret data in captured hook calls (redacted by default)")
	fs.DurationVar(&c.LeaseMaxTTL, "lease-max-ttl", d.LeaseMaxTTL, "longest lease TTL a client may ask for")
	fs.DurationVar(&c.LeaseCooldown, "lease-cooldown", d.LeaseCooldown, "cooldown of a proxy for a target after a rate_limited report without the site's Retry-After (with one: exactly that)")
	fs.DurationVar(&c.LeaseBanCooldown, "lease-ban-cooldown", d.LeaseBanCooldown, "cooldown of a proxy for a target after a banned report")
	fs.DurationVar(&c.LeaseMaxCooldown, "lease-max-cooldown", d.LeaseMaxCooldown, "cap of a cooldown grown by repeated reports")
	fs.IntVar(&c.ProbeWorkers, "probe-workers", d.ProbeWorkers, "most probes in flight at once")
	fs.Float64Var(&c.HealthResyncQPS, "health-resync-qps", d.HealthResyncQPS, "reads per second that steady-state health resyncs may cost Metacontroller")
	fs.DurationVar(&c.GCInterval, "gc-interval", d.GCInterval, "time between orphan GC sweeps (0 disables GC)")
	fs.DurationVar(&c.GCMinAge, "gc-min-age", d.GCMinAge, "never delete an instance younger than this")
	fs.IntVar(&c.GCMaxDeletions, "gc-max-deletions", d.GCMaxDeletions, "a sweep finding more orphans than this deletes none (-1: no limit)")
	fs.BoolVar(&c.GCDryRun, "gc-dry-run", false, "log the orphans GC would delete, delete none")
	fs.StringVar(&c.Kubeconfig, "kubeconfig", "", "kubeconfig of the API server to use outside a cluster (default: KUBECONFIG, then the in-cluster service account; none: run without a Kubernetes client)")
	fs.Float64Var(&c.KubeQPS, "kube-api-qps", kube.DefaultQPS, "requests per second the operator's Kubernetes client may make (GC lists, health annotations, events)")
	fs.IntVar(&c.KubeBurst, "kube-api-burst", kube.DefaultBurst, "burst of the operator's Kubernetes client")
	fs.Float64Var(&c.HealthMarkQPS, "health-mark-qps", healthmark.DefaultQPS, "health annotation patches per second (each makes Metacontroller sync that Proxy at once)")
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
		return options{}, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	if err := o.logLevel.UnmarshalText([]byte(level)); err != nil {
		return options{}, fmt.Errorf("-log-level: %w", err)
	}
	if o.logFormat != "json" && o.logFormat != "text" {
		return options{}, fmt.Errorf("-log-format %q: want json or text", o.logFormat)
	}
	if err := c.Validate(); err != nil {
		return options{}, err
	}
	c.DiscoveryToken = os.Getenv("DISCOVERY_TOKEN")
	return o, nil
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
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "proxy-operator:", err)
		}
		os.Exit(1)
	}
}

// dispatch runs the subcommand named by args[0], else the operator with args as flags.
func dispatch(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 {
		if sc, ok := subcommands[args[0]]; ok {
			return sc.run(ctx, args[1:], stdout, stderr)
		}
	}
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	o.operator.Log = newLogger(o, stderr)
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
