package server

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
	"github.com/proxy-operator/proxy-operator/internal/fleet"
	"github.com/proxy-operator/proxy-operator/internal/netpolicy"
	"github.com/proxy-operator/proxy-operator/lease"
	"github.com/proxy-operator/proxy-operator/lease/redisstore"
)

// redisBackend is the Redis lease store with the reader discovery serves from and, in the
// operator, the publisher that fills it.
type redisBackend struct {
	client redis.UniversalClient
	store  *redisstore.Store
	reader *redisstore.Reader
	pub    *redisstore.Publisher
}

// admit is the egress check every record read from Redis passes before it is leased.
func newRedisBackend(s LeaseConfig, admit func(fleet.Proxy) error, log *slog.Logger) (*redisBackend, error) {
	redis.SetLogger(redisLog{log.With("component", "redis-client")})
	client, err := redisstore.NewClient(redisstore.ClientConfig{URL: s.Store, PasswordFile: s.PasswordFile,
		CAFile: s.CAFile, CertFile: s.CertFile, KeyFile: s.KeyFile})
	if err != nil {
		return nil, fmt.Errorf("-lease-store: %w", err)
	}
	store, err := redisstore.New(redisstore.Config{Client: client, WaitReplicas: s.WaitReplicas, Prefix: s.StorePrefix,
		Policy: s.Policy, Admit: admit, Log: log.With("component", "lease-store")})
	if err != nil {
		client.Close()
		return nil, err
	}
	// The URL without its password: never log the password.
	log.Info("lease store: redis", "url", redisstore.Redact(s.Store), "topology", string(redisstore.TopologyOf(s.Store)),
		"passwordFile", s.PasswordFile, "waitReplicas", s.WaitReplicas, "prefix", store.Prefix())
	b := &redisBackend{client: client, store: store,
		reader: redisstore.NewReader(redisstore.ReaderConfig{Store: store, Log: log.With("component", "lease-store")})}
	// A first read before serving, so a restarted process answers from Redis at once. Redis
	// being down is not fatal: discovery answers 503 until the reader's loop gets through.
	ctx, cancel := context.WithTimeout(context.Background(), redisstore.DefaultTimeout)
	defer cancel()
	if err := b.reader.Refresh(ctx); err != nil {
		log.Warn("lease store not reachable at start; discovery answers 503 until it is", "err", err)
	} else {
		checkDurability(ctx, client, log)
	}
	return b, nil
}

// checkDurability warns when the Redis server's appendfsync is not "always": a crash then
// loses the last second of leases and cooldowns (README, "Redis"). A server that refuses
// CONFIG GET (a managed Redis, an ACL) is only noted: the check is advice, not a gate.
func checkDurability(ctx context.Context, client redis.UniversalClient, log *slog.Logger) {
	v, err := client.ConfigGet(ctx, "appendfsync").Result()
	switch {
	case err != nil:
		log.Info("lease store: cannot read the Redis appendfsync setting (CONFIG GET refused); make sure it is always", "err", err)
	case v["appendfsync"] != "always" || appendOnly(ctx, client) != "yes":
		log.Warn("lease store: Redis does not fsync every write (want appendonly yes, appendfsync always): a Redis crash loses recent leases and cooldowns",
			"appendfsync", v["appendfsync"], "appendonly", appendOnly(ctx, client))
	}
}

func appendOnly(ctx context.Context, client redis.UniversalClient) string {
	v, _ := client.ConfigGet(ctx, "appendonly").Result()
	return v["appendonly"]
}

// publisher makes the operator the one that publishes its fleet view and verdicts.
func (b *redisBackend) publisher(view interface {
	lease.Fleet
	Complete() bool
}, health lease.Health, preferBand bool, log *slog.Logger) {
	b.pub = redisstore.NewPublisher(redisstore.PublisherConfig{Store: b.store, Fleet: view, Health: health,
		Complete: view.Complete, PreferBand: preferBand, Log: log.With("component", "lease-store")})
}

// admitBy is the egress check of a proxy record before it is leased: the policy of e, with
// the process's own listeners (own) and the mock providers' loopback exception
// (loopbackProviders) as the operator has them.
func admitBy(e EgressConfig, loopbackProviders, own []string) (func(fleet.Proxy) error, error) {
	var listeners []string
	for _, a := range own {
		if a != "" {
			listeners = append(listeners, a)
		}
	}
	policy, err := netpolicy.New(netpolicy.Config{AllowLoopback: e.AllowLoopback, LoopbackProviders: loopbackProviders,
		ExternalCIDRs: e.ExternalCIDRs, OwnListeners: listeners})
	if err != nil {
		return nil, err
	}
	return admitWith(policy), nil
}

// admitWith is the egress check of a proxy record under policy.
func admitWith(policy *netpolicy.Policy) func(fleet.Proxy) error {
	return func(p fleet.Proxy) error {
		return policy.CheckHost(p.IP, uint16(p.Port), netpolicy.Dest{External: p.Mode == v1.ModeExternal, Provider: p.Provider})
	}
}

func (b *redisBackend) close() { _ = b.client.Close() }

// register exports the store's own counters on reg.
func (b *redisBackend) register(reg prometheus.Registerer) { registerDenied(reg, b.store) }

// registerDenied exports how many proxy records the egress policy denied at lease time.
func registerDenied(reg prometheus.Registerer, s interface{ DeniedRecords() uint64 }) {
	if reg == nil {
		return
	}
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "proxy_operator_lease_records_denied_total",
		Help: "Proxy records the egress policy denied at lease time, never handed out (Redis store: grants given back; in memory: record versions).",
	}, func() float64 { return float64(s.DeniedRecords()) }))
}

// redisLog routes the Redis client's own messages (dial failures while Redis is out) into the
// process log instead of bare lines on stderr. It is the client library's one global.
type redisLog struct{ log *slog.Logger }

func (l redisLog) Printf(_ context.Context, format string, v ...any) {
	l.log.Warn("redis client", "detail", fmt.Sprintf(format, v...))
}
