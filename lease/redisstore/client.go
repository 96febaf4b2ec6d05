package redisstore

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Client timeouts: a discovery request must answer (503 at worst) well within its own write
// timeout, so no Redis call may wait long for a dead server.
const (
	dialTimeout  = 2 * time.Second
	readTimeout  = time.Second
	writeTimeout = time.Second
)

// ErrClientConfig is wrapped by every error NewClient returns: the URL or a file it names is
// wrong, and no retry will cure it.
var ErrClientConfig = errors.New("redis client configuration")

// ClientConfig says how to reach the Redis that holds the store. URL takes one of three forms
// (TLS with the rediss variants):
//
//	redis://[:password@]host:port[/db]                                   one server
//	redis+sentinel://[:password@]sentinel:port[,...]/master[/db][?addr=sentinel:port...]  a Sentinel master set
//	redis+cluster://[:password@]node:port[?addr=node:port...]            a Redis Cluster
//
// The password is the data nodes' (the sentinels are asked without one). More sentinels or
// seed nodes come as addr= parameters, or comma-separated in the host part.
type ClientConfig struct {
	URL string
	// PasswordFile, when set, holds the password (a mounted Secret) and wins over one in the
	// URL; a file that does not exist is an error, and so is an empty one.
	PasswordFile string
	// CAFile holds the PEM certificates that verify the servers (rediss only; default: the
	// system's roots). CertFile and KeyFile are a client certificate, both or neither.
	CAFile, CertFile, KeyFile string
}

// Topology names the three URL forms.
type Topology string

const (
	Single   Topology = "single"
	Sentinel Topology = "sentinel"
	Cluster  Topology = "cluster"
)

// NewClient returns a client for cfg (see ClientConfig). Errors wrap ErrClientConfig and never
// carry the password.
func NewClient(cfg ClientConfig) (redis.UniversalClient, error) {
	o, err := parseClientConfig(cfg)
	if err != nil {
		return nil, err
	}
	switch {
	case o.failover != nil:
		return redis.NewFailoverClient(o.failover), nil
	case o.cluster != nil:
		return redis.NewClusterClient(o.cluster), nil
	}
	return redis.NewClient(o.single), nil
}

// TopologyOf is the form of rawURL (Single for anything not Sentinel or Cluster).
func TopologyOf(rawURL string) Topology {
	scheme, _, _ := strings.Cut(rawURL, "://")
	switch scheme {
	case "redis+sentinel", "rediss+sentinel":
		return Sentinel
	case "redis+cluster", "rediss+cluster":
		return Cluster
	}
	return Single
}

// clientOptions is the parsed config: exactly one of the three is set.
type clientOptions struct {
	single   *redis.Options
	failover *redis.FailoverOptions
	cluster  *redis.ClusterOptions
}

func parseClientConfig(cfg ClientConfig) (clientOptions, error) {
	var o clientOptions
	if cfg.URL == "" {
		return o, fmt.Errorf("%w: redis URL is empty", ErrClientConfig)
	}
	u, err := url.Parse(cfg.URL)
	if err != nil {
		return o, fmt.Errorf("%w: redis URL %s does not parse", ErrClientConfig, Redact(cfg.URL))
	}
	base, topo, ok := strings.Cut(u.Scheme, "+")
	if base != "redis" && base != "rediss" || ok && topo != string(Sentinel) && topo != string(Cluster) {
		return o, fmt.Errorf("%w: redis URL %s: want redis://host:port[/db], redis+sentinel://host:port/master or redis+cluster://host:port (rediss for TLS)", ErrClientConfig, Redact(cfg.URL))
	}
	useTLS := base == "rediss"
	// Comma-separated hosts become addr= parameters, which go-redis's parsers read.
	q := u.Query()
	if hosts := strings.Split(u.Host, ","); len(hosts) > 1 {
		u.Host = hosts[0]
		q["addr"] = append(hosts[1:], q["addr"]...)
	}
	plain := *u
	plain.Scheme = base
	var password string
	if u.User != nil {
		password, _ = u.User.Password()
	}
	bad := func(what string) error {
		// go-redis's messages can quote the URL: say what is wrong without it.
		return fmt.Errorf("%w: redis URL %s: %s", ErrClientConfig, Redact(cfg.URL), what)
	}
	switch Topology(topo) {
	case Sentinel:
		parts := strings.FieldsFunc(u.Path, func(r rune) bool { return r == '/' })
		if len(parts) == 0 || len(parts) > 2 {
			return o, bad("a Sentinel URL names its master set in the path: redis+sentinel://host:port/master[/db]")
		}
		q.Set("master_name", parts[0])
		plain.Path = ""
		if len(parts) == 2 {
			plain.Path = "/" + parts[1]
		}
		plain.User = nil
		plain.RawQuery = q.Encode()
		fo, err := redis.ParseFailoverURL(plain.String())
		if err != nil {
			return o, bad("want redis+sentinel://[:password@]host:port[,host:port]/master[/db][?addr=host:port]")
		}
		fo.Username, fo.Password = "", password
		if u.User != nil {
			fo.Username = u.User.Username()
		}
		fo.DialTimeout, fo.ReadTimeout, fo.WriteTimeout, fo.MaxRetries = dialTimeout, readTimeout, writeTimeout, 1
		o.failover = fo
	case Cluster:
		if strings.Trim(u.Path, "/") != "" {
			return o, bad("a Cluster has only database 0: no path")
		}
		plain.RawQuery = q.Encode()
		co, err := redis.ParseClusterURL(plain.String())
		if err != nil {
			return o, bad("want redis+cluster://[:password@]host:port[,host:port][?addr=host:port]")
		}
		co.DialTimeout, co.ReadTimeout, co.WriteTimeout, co.MaxRetries = dialTimeout, readTimeout, writeTimeout, 1
		o.cluster = co
	default:
		if len(q["addr"]) > 0 {
			return o, bad("more than one address: use redis+sentinel:// or redis+cluster://")
		}
		so, err := redis.ParseURL(plain.String())
		if err != nil {
			return o, bad("want redis://host:port[/db] or rediss:// for TLS")
		}
		// One retry at most: a call has its own deadline, and a retry loop inside it would only
		// spend that deadline on a server that is gone.
		so.DialTimeout, so.ReadTimeout, so.WriteTimeout, so.MaxRetries = dialTimeout, readTimeout, writeTimeout, 1
		o.single = so
	}
	if cfg.PasswordFile != "" {
		b, err := os.ReadFile(cfg.PasswordFile)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			// A wrong path would otherwise mean "no password" and surface later as NOAUTH.
			return o, fmt.Errorf("%w: redis password file %s does not exist (without a password, give no -lease-store-password-file)", ErrClientConfig, cfg.PasswordFile)
		case err != nil:
			return o, fmt.Errorf("%w: redis password file: %w", ErrClientConfig, err)
		case strings.TrimSpace(string(b)) == "":
			return o, fmt.Errorf("%w: redis password file %s is empty", ErrClientConfig, cfg.PasswordFile)
		default:
			o.setPassword(strings.TrimSpace(string(b)))
		}
	}
	tc, err := tlsConfig(cfg, useTLS, u.Hostname())
	if err != nil {
		return o, err
	}
	o.setTLS(tc)
	return o, nil
}

func (o clientOptions) setPassword(pw string) {
	switch {
	case o.single != nil:
		o.single.Password = pw
	case o.failover != nil:
		o.failover.Password = pw
	case o.cluster != nil:
		o.cluster.Password = pw
	}
}

func (o clientOptions) setTLS(tc *tls.Config) {
	switch {
	case o.single != nil:
		o.single.TLSConfig = tc
	case o.failover != nil:
		o.failover.TLSConfig = tc
	case o.cluster != nil:
		o.cluster.TLSConfig = tc
	}
}

// tlsConfig is the TLS of a rediss URL: TLS 1.2 or newer, the servers verified against
// CAFile (or the system roots), the client certificate when given. Files given for a plain
// redis URL are an error rather than ignored: the operator asked for TLS and would not get it.
func tlsConfig(cfg ClientConfig, useTLS bool, host string) (*tls.Config, error) {
	if !useTLS {
		if cfg.CAFile != "" || cfg.CertFile != "" || cfg.KeyFile != "" {
			return nil, fmt.Errorf("%w: TLS files given but the redis URL is not rediss://", ErrClientConfig)
		}
		return nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: host}
	if cfg.CAFile != "" {
		pem, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("%w: redis CA file: %w", ErrClientConfig, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%w: redis CA file %s holds no PEM certificate", ErrClientConfig, cfg.CAFile)
		}
		tc.RootCAs = pool
	}
	if (cfg.CertFile == "") != (cfg.KeyFile == "") {
		return nil, fmt.Errorf("%w: a redis client certificate needs both the certificate and the key file", ErrClientConfig)
	}
	if cfg.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(cfg.CertFile, cfg.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("%w: redis client certificate: %w", ErrClientConfig, err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// Redact returns rawURL without its password, fit for logs.
func Redact(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}
