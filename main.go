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

	"github.com/CHANGEME/proxy-operator/fleet"
	"github.com/CHANGEME/proxy-operator/providers"
	"github.com/CHANGEME/proxy-operator/providers/factory"
	"github.com/CHANGEME/proxy-operator/replay"
	"github.com/CHANGEME/proxy-operator/server"
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

// run builds the operator and serves until ctx ends. If ready is non-nil it receives the
// bound hook address once the server listens (for tests that boot the process in-process).
func run(ctx context.Context, cfg Config, log *slog.Logger, ready chan<- string) error {
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

	view := fleet.New(time.Now, cfg.FleetWarmup)
	hooks := &server.Hooks{
		Providers:       set,
		Fleet:           view,
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
	hookSrv := newHTTPServer(hooks.Handler(), cfg.ProviderTimeout)
	ln, err := net.Listen("tcp", cfg.HookAddr)
	if err != nil {
		return fmt.Errorf("hook listener: %w", err)
	}
	log.Info("hook server listening", "addr", ln.Addr().String())
	if ready != nil {
		ready <- ln.Addr().String()
	}
	errc := make(chan error, 1)
	go func() { errc <- hookSrv.Serve(ln) }()

	select {
	case err := <-errc:
		return fmt.Errorf("hook server: %w", err)
	case <-ctx.Done():
	}
	log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownGrace)
	defer cancel()
	if err := hookSrv.Shutdown(sctx); err != nil {
		return fmt.Errorf("hook server shutdown: %w", err)
	}
	return nil
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
