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

	"github.com/proxy-operator/proxy-operator/server/discovery"
	"github.com/proxy-operator/proxy-operator/server/discovery/access"
	"github.com/proxy-operator/proxy-operator/server/gateway"
)

// DefaultGatewayAddr is where `proxy-operator gateway` listens unless told otherwise.
const DefaultGatewayAddr = ":8091"

// GatewayConfig configures a gateway-only process (`proxy-operator gateway`): the crawlers'
// proxy gateway served from a shared lease store that an operator fills. The lease flags must
// match the operator's: the cooldown policy travels with each report.
type GatewayConfig struct {
	Gateway gateway.Config
	// MetricsAddr serves /metrics and /healthz (empty: none).
	MetricsAddr string
	// Token, TokenFile and Insecure: the tokens, as the discovery API's (DiscoveryAPIConfig).
	Token     string
	TokenFile string
	Insecure  bool
	// Lease.Store is required (the Redis the operator fills).
	Lease LeaseConfig
	// Egress is the policy every record read from Redis is checked against before the
	// gateway leases it (as DiscoveryConfig.Egress).
	Egress        EgressConfig
	ShutdownGrace time.Duration
	Log           *slog.Logger
}

// GatewayDefaults returns the defaults the gateway subcommand's flags show.
func GatewayDefaults() GatewayConfig {
	d := Defaults()
	g := gateway.DefaultConfig()
	g.Addr = DefaultGatewayAddr
	return GatewayConfig{Gateway: g, MetricsAddr: ":9091", Lease: d.Lease, ShutdownGrace: d.ShutdownGrace}
}

// Validate says which setting is missing or out of range.
func (c GatewayConfig) Validate() error {
	if c.Lease.Store == "" {
		return errors.New("-lease-store is required: the gateway subcommand leases from a shared store (redis:// or rediss://); " +
			"for one process, run the operator with -gateway-addr instead")
	}
	if c.Gateway.Addr == "" {
		return errors.New("-gateway-addr is required")
	}
	if err := c.Lease.Validate(); err != nil {
		return err
	}
	if c.ShutdownGrace <= 0 {
		return fmt.Errorf("-shutdown-grace must be positive")
	}
	return c.Gateway.Validate()
}

// RunGateway builds the gateway process from c and serves it until ctx ends.
func RunGateway(ctx context.Context, c GatewayConfig) error {
	g, err := NewGateway(c)
	if err != nil {
		return err
	}
	return g.Run(ctx)
}

// Gateway is an assembled gateway-only process. Build it with NewGateway, serve it with Run
// (once).
type Gateway struct {
	replica
	socks net.Listener // nil without -gateway-socks-addr
}

// NewGateway builds the store, the reader and the server and binds the listeners. Redis need
// not be reachable yet.
func NewGateway(cfg GatewayConfig) (_ *Gateway, err error) {
	cfg.Gateway = cfg.Gateway.WithDefaults()
	cfg.Lease = cfg.Lease.withDefaults()
	if cfg.ShutdownGrace == 0 {
		cfg.ShutdownGrace = Defaults().ShutdownGrace
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	tokens, err := discovery.Tokens(cfg.Token, cfg.TokenFile, cfg.Insecure)
	if err != nil {
		return nil, err
	}
	g := &Gateway{replica: replica{log: log, grace: cfg.ShutdownGrace}}
	defer func() {
		if err != nil {
			g.close()
		}
	}()
	admit, err := admitBy(cfg.Egress, nil, append([]string{cfg.Gateway.Addr, cfg.Gateway.SOCKSAddr, cfg.MetricsAddr}, portAddrs(tokens)...))
	if err != nil {
		return nil, err
	}
	if g.backend, err = newRedisBackend(cfg.Lease, admit, log); err != nil {
		return nil, err
	}
	reg := replicaRegistry()
	g.backend.register(reg)
	egress, err := gatewayEgress(cfg.Egress, nil, append([]string{cfg.Gateway.Addr, cfg.Gateway.SOCKSAddr, cfg.MetricsAddr}, portAddrs(tokens)...), cfg.Lease.Store, "")
	if err != nil {
		return nil, err
	}
	reports := discovery.NewReportCounter() // the gateway's source only: no API here
	reg.MustRegister(reports)
	gw := &gateway.Gateway{Leases: g.backend.store, Fleet: g.backend.reader, Tokens: tokens, Insecure: cfg.Insecure,
		Log: log.With("component", "gateway"), Registerer: reg, Egress: egress, Book: g.backend.store, UsageBook: g.backend.store, Reports: reports}
	if err := cfg.Gateway.Apply(gw); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", cfg.Gateway.Addr)
	if err != nil {
		return nil, fmt.Errorf("gateway listener: %w", err)
	}
	g.servers = append(g.servers, served{"gateway", gw.Server(), gw.Listener(ln)})
	socks := gw.SOCKSServer()
	if cfg.Gateway.SOCKSAddr != "" {
		sln, err := net.Listen("tcp", cfg.Gateway.SOCKSAddr)
		if err != nil {
			return nil, fmt.Errorf("gateway SOCKS5 listener: %w", err)
		}
		g.socks = sln
		g.servers = append(g.servers, served{"gateway-socks", socks, sln})
	}
	ports, err := servePorts(gw, socks, tokens.Ports())
	g.servers = append(g.servers, ports...)
	if err != nil {
		return nil, err
	}
	if cfg.MetricsAddr != "" {
		mln, err := net.Listen("tcp", cfg.MetricsAddr)
		if err != nil {
			return nil, fmt.Errorf("metrics listener: %w", err)
		}
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
		g.servers = append(g.servers, served{"metrics", &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second,
			ReadTimeout: 10 * time.Second, WriteTimeout: 15 * time.Second, IdleTimeout: time.Minute, MaxHeaderBytes: 16 << 10}, mln})
	}
	return g, nil
}

// servePorts opens the tokens' own gateway ports (decision 0279), each served by the gateway's
// HTTP server or socks. On an error the ports opened so far are returned, to be closed.
func servePorts(gw *gateway.Gateway, socks *gateway.SOCKSServer, ports []access.Port) ([]served, error) {
	var out []served
	for _, p := range ports {
		ln, err := listenPort(p)
		if err != nil {
			return out, err
		}
		s, err := portServer(gw, socks, p, ln)
		if err != nil {
			ln.Close()
			return out, err
		}
		out = append(out, s)
	}
	return out, nil
}

// listenPort binds a token's own gateway port; the gateway subcommand and the operator both
// bind theirs with it.
func listenPort(p access.Port) (net.Listener, error) {
	ln, err := net.Listen("tcp", p.Addr)
	if err != nil {
		return nil, fmt.Errorf("token %s's gateway port: %w", p.Caller.Name, err)
	}
	return ln, nil
}

// portServer serves the bound port ln of p with the gateway's HTTP server or socks, as its
// protocol says, through the listener that gives its connections the token's identity.
func portServer(gw *gateway.Gateway, socks *gateway.SOCKSServer, p access.Port, ln net.Listener) (served, error) {
	pl, err := gw.PortListener(ln, p)
	if err != nil {
		return served{}, err
	}
	var srv server = gw.Server()
	if p.Protocol == "socks5" {
		srv = socks
	}
	return served{"gateway port " + p.Addr, srv, pl}, nil
}

// portAddrs are the addresses of the tokens' own gateway ports, for the egress policy.
func portAddrs(tokens *access.Tokens) []string {
	var out []string
	for _, p := range tokens.Ports() {
		out = append(out, p.Addr)
	}
	return out
}

// Addr is the bound address of the gateway listener.
func (g *Gateway) Addr() string { return g.servers[0].ln.Addr().String() }

// SOCKSAddr is the bound address of the SOCKS5 listener ("" without one).
func (g *Gateway) SOCKSAddr() string {
	if g.socks == nil {
		return ""
	}
	return g.socks.Addr().String()
}

// MetricsAddr is the bound address of the metrics listener ("" without one).
func (g *Gateway) MetricsAddr() string {
	for _, s := range g.servers {
		if s.name == "metrics" {
			return s.ln.Addr().String()
		}
	}
	return ""
}

// Run serves until ctx ends, with the reader and the store's sweep running beside it, then
// shuts down within ShutdownGrace (open tunnels are cut when the process exits).
func (g *Gateway) Run(ctx context.Context) error {
	g.log.Info("listening", "gateway", g.Addr(), "socks", g.SOCKSAddr(), "metrics", g.MetricsAddr())
	return g.run(ctx)
}
