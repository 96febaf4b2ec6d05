package server

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/proxy-operator/proxy-operator/lease"
	"github.com/proxy-operator/proxy-operator/lease/redisstore"
)

// redisSettings are the flags that make a Redis lease store.
type redisSettings struct {
	url, passwordFile                  string
	cooldown, banCooldown, maxCooldown time.Duration
}

// redisBackend is the Redis lease store with the reader discovery serves from and, in the
// operator, the publisher that fills it.
type redisBackend struct {
	client *redis.Client
	store  *redisstore.Store
	reader *redisstore.Reader
	pub    *redisstore.Publisher
}

func newRedisBackend(s redisSettings, log *slog.Logger) (*redisBackend, error) {
	client, err := redisstore.NewClient(s.url, s.passwordFile)
	if err != nil {
		return nil, fmt.Errorf("-lease-store: %w", err)
	}
	store, err := redisstore.New(redisstore.Config{Client: client,
		RateLimitedCooldown: s.cooldown, BannedCooldown: s.banCooldown, MaxCooldown: s.maxCooldown,
		Log: log.With("component", "lease-store")})
	if err != nil {
		client.Close()
		return nil, err
	}
	// The URL without its password: never log the password.
	log.Info("lease store: redis", "url", redisstore.Redact(s.url), "passwordFile", s.passwordFile)
	b := &redisBackend{client: client, store: store,
		reader: redisstore.NewReader(redisstore.ReaderConfig{Store: store, Log: log.With("component", "lease-store")})}
	// A first read before serving, so a restarted process answers from Redis at once. Redis
	// being down is not fatal: discovery answers 503 until the reader's loop gets through.
	ctx, cancel := context.WithTimeout(context.Background(), redisstore.DefaultTimeout)
	defer cancel()
	if err := b.reader.Refresh(ctx); err != nil {
		log.Warn("lease store not reachable at start; discovery answers 503 until it is", "err", err)
	}
	return b, nil
}

// publisher makes the operator the one that publishes its fleet view and verdicts.
func (b *redisBackend) publisher(view interface {
	lease.Fleet
	Complete() bool
}, health lease.Health, log *slog.Logger) {
	b.pub = redisstore.NewPublisher(redisstore.PublisherConfig{Store: b.store, Fleet: view, Health: health,
		Complete: view.Complete, Log: log.With("component", "lease-store")})
}

func (b *redisBackend) close() { _ = b.client.Close() }
