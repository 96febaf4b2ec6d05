package gateway

import (
	"errors"
	"flag"
	"fmt"
	"time"
)

// Config is what the flags say of a gateway, shared by the operator (-gateway-addr) and the
// gateway subcommand.
type Config struct {
	// Addr is the listen address; empty: no gateway (the operator's default).
	Addr string
	// SOCKSAddr is the SOCKS5 listen address (socks.go); empty: none.
	SOCKSAddr        string
	RulesFile        string
	LeaseTTL         time.Duration
	MaxTries         int
	MaxRetryBody     int64
	MaxConns         int
	MaxConnsPerToken int
	MaxHeaderBytes   int
	IdleTimeout      time.Duration
	PerProxyMetrics  bool
	// Waterfall and WaterfallCooldown: the per-site waterfall to vendor sources (vendor.go).
	Waterfall         bool
	WaterfallCooldown time.Duration
}

// DefaultConfig is the flags' defaults.
func DefaultConfig() Config {
	return Config{LeaseTTL: DefaultLeaseTTL, MaxTries: DefaultMaxTries, MaxRetryBody: DefaultMaxRetryBody,
		MaxConns: DefaultMaxConns, MaxConnsPerToken: DefaultMaxConnsPerToken, MaxHeaderBytes: DefaultMaxHeaderBytes,
		IdleTimeout: DefaultIdleTimeout, WaterfallCooldown: DefaultWaterfallCooldown}
}

// RegisterFlags adds the -gateway-* flags to fs, with c's values as defaults. addrUsage says
// what an empty address means where the flags are used.
func (c *Config) RegisterFlags(fs *flag.FlagSet, addrUsage string) {
	fs.StringVar(&c.Addr, "gateway-addr", c.Addr, addrUsage)
	fs.StringVar(&c.SOCKSAddr, "gateway-socks-addr", c.SOCKSAddr, "listen address of the gateway's SOCKS5 listener (RFC 1928 CONNECT, username/password as on the HTTP listener: the username grammar and a discovery token); empty: none")
	fs.StringVar(&c.RulesFile, "gateway-rules", c.RulesFile, "YAML file of ban rules for plain-HTTP answers (default rules: 429 rate_limited, 403 banned; docs/api.md)")
	fs.DurationVar(&c.LeaseTTL, "gateway-lease-ttl", c.LeaseTTL, "TTL of the gateway's leases (renewed at half while in use, so a crashed gateway's leases end soon)")
	fs.IntVar(&c.MaxTries, "gateway-max-tries", c.MaxTries, "upstreams one request or tunnel may try, the first included")
	fs.Int64Var(&c.MaxRetryBody, "gateway-max-retry-body", c.MaxRetryBody, "largest request body kept in memory for a retry (larger bodies are sent once)")
	fs.IntVar(&c.MaxConns, "gateway-max-conns", c.MaxConns, "client connections at once (beyond: 503 and close)")
	fs.IntVar(&c.MaxConnsPerToken, "gateway-max-conns-per-token", c.MaxConnsPerToken, "requests and tunnels in flight per token (beyond: 429)")
	fs.IntVar(&c.MaxHeaderBytes, "gateway-max-header-bytes", c.MaxHeaderBytes, "largest request head (beyond: 431)")
	fs.DurationVar(&c.IdleTimeout, "gateway-idle-timeout", c.IdleTimeout, "time without traffic after which a keep-alive connection, a tunnel or a body ends")
	fs.BoolVar(&c.Waterfall, "gateway-waterfall", c.Waterfall, "send a site's requests to a vendor source (a Proxy with spec.vendor) while our own proxies cannot get it (two refuse it with 403, or all are cooling for it), and try our own again after -gateway-waterfall-cooldown")
	fs.DurationVar(&c.WaterfallCooldown, "gateway-waterfall-cooldown", c.WaterfallCooldown, "how long the waterfall keeps a site with the vendor source before our own proxies are tried again")
	fs.BoolVar(&c.PerProxyMetrics, "gateway-metrics-per-proxy", c.PerProxyMetrics, "label the gateway byte counters by proxy too (a series per proxy and pool)")
}

// Validate says which setting is out of range.
func (c Config) Validate() error {
	switch {
	case c.LeaseTTL < 2*time.Second:
		return errors.New("-gateway-lease-ttl must be at least 2s")
	case c.MaxTries < 1 || c.MaxTries > 10:
		return fmt.Errorf("-gateway-max-tries %d: want 1 to 10", c.MaxTries)
	case c.MaxRetryBody < 0 || c.MaxRetryBody > 64<<20:
		return fmt.Errorf("-gateway-max-retry-body %d: want 0 to 64 MiB", c.MaxRetryBody)
	case c.MaxConns < 1 || c.MaxConnsPerToken < 1:
		return errors.New("-gateway-max-conns and -gateway-max-conns-per-token must be positive")
	case c.MaxHeaderBytes < 1<<10 || c.MaxHeaderBytes > 1<<20:
		return fmt.Errorf("-gateway-max-header-bytes %d: want 1 KiB to 1 MiB", c.MaxHeaderBytes)
	case c.IdleTimeout < time.Second:
		return errors.New("-gateway-idle-timeout must be at least 1s")
	case c.Waterfall && c.WaterfallCooldown < time.Second:
		return errors.New("-gateway-waterfall-cooldown must be at least 1s")
	}
	return nil
}

// Apply sets g's limits from c and loads the rules file; a bad file is an error naming the rule.
func (c Config) Apply(g *Gateway) error {
	rules, err := LoadRules(c.RulesFile)
	if err != nil {
		return err
	}
	g.Rules = rules
	c.setLimits(g)
	g.PerProxyMetrics = c.PerProxyMetrics
	g.Waterfall, g.WaterfallCooldown = c.Waterfall, c.WaterfallCooldown
	return nil
}

// setLimits copies the limits a Config sets into g.
func (c Config) setLimits(g *Gateway) {
	g.LeaseTTL, g.MaxTries, g.MaxRetryBody = c.LeaseTTL, c.MaxTries, c.MaxRetryBody
	g.MaxConns, g.MaxConnsPerToken, g.MaxHeaderBytes = c.MaxConns, c.MaxConnsPerToken, c.MaxHeaderBytes
	g.IdleTimeout = c.IdleTimeout
}

// limitsOf is the Config of g's limits, a negative one read as unset (zero), as Gateway.init
// always has.
func limitsOf(g *Gateway) Config {
	return Config{LeaseTTL: max(g.LeaseTTL, 0), MaxTries: max(g.MaxTries, 0), MaxRetryBody: max(g.MaxRetryBody, 0),
		MaxConns: max(g.MaxConns, 0), MaxConnsPerToken: max(g.MaxConnsPerToken, 0), MaxHeaderBytes: max(g.MaxHeaderBytes, 0),
		IdleTimeout: max(g.IdleTimeout, 0)}
}

// WithDefaults fills the zero fields (other than Addr) from DefaultConfig.
func (c Config) WithDefaults() Config {
	d := DefaultConfig()
	if c.LeaseTTL == 0 {
		c.LeaseTTL = d.LeaseTTL
	}
	if c.MaxTries == 0 {
		c.MaxTries = d.MaxTries
	}
	if c.MaxRetryBody == 0 {
		c.MaxRetryBody = d.MaxRetryBody
	}
	if c.MaxConns == 0 {
		c.MaxConns = d.MaxConns
	}
	if c.MaxConnsPerToken == 0 {
		c.MaxConnsPerToken = d.MaxConnsPerToken
	}
	if c.MaxHeaderBytes == 0 {
		c.MaxHeaderBytes = d.MaxHeaderBytes
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = d.IdleTimeout
	}
	return c
}
