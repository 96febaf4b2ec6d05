package redisstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/proxy-operator/proxy-operator/internal/fleet"
	"github.com/proxy-operator/proxy-operator/internal/verdict"
	"github.com/proxy-operator/proxy-operator/lease"
)

// Defaults for ReaderConfig fields left zero.
const (
	DefaultPollInterval = 250 * time.Millisecond
	DefaultStaleAfter   = 3 * time.Second
)

// Reader is a discovery replica's view of what the operator published: the fleet, the
// health verdicts and whether the fleet is complete. It keeps a local copy, re-read when the
// versions the publisher bumps change, so a list costs no Redis round trip; a copy older than
// StaleAfter (Redis unreachable) makes Err report lease.ErrUnavailable.
type Reader struct {
	store      *Store
	poll       time.Duration
	staleAfter time.Duration
	log        *slog.Logger
	now        func() time.Time

	mu         sync.RWMutex
	fver, hver string
	byKey      map[string]fleet.Proxy
	list       []fleet.Proxy
	health     map[string]verdict.Health
	complete   bool
	okAt       time.Time
	lastErr    error
}

// ReaderConfig configures a Reader.
type ReaderConfig struct {
	Store        *Store
	PollInterval time.Duration
	StaleAfter   time.Duration
	Log          *slog.Logger
}

// NewReader returns a reader of what was published into cfg.Store; it holds nothing until
// its first Refresh.
func NewReader(cfg ReaderConfig) *Reader {
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = DefaultPollInterval
	}
	if cfg.StaleAfter <= 0 {
		cfg.StaleAfter = DefaultStaleAfter
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return &Reader{store: cfg.Store, poll: cfg.PollInterval, staleAfter: cfg.StaleAfter, log: cfg.Log, now: time.Now,
		byKey: map[string]fleet.Proxy{}, health: map[string]verdict.Health{}, lastErr: errors.New("not read yet")}
}

// Run refreshes on every PollInterval until ctx ends.
func (r *Reader) Run(ctx context.Context) error {
	t := time.NewTicker(r.poll)
	defer t.Stop()
	failing := false
	for {
		err := r.Refresh(ctx)
		switch {
		case err != nil && !failing && ctx.Err() == nil:
			r.log.Warn("reading the fleet from the lease store failed; retrying", "err", err)
			failing = true
		case err == nil && failing:
			r.log.Info("reading the fleet from the lease store again")
			failing = false
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Refresh re-reads the versions, and the records whose version moved.
func (r *Reader) Refresh(ctx context.Context) error {
	err := r.refresh(ctx)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lastErr = err
	if err == nil {
		r.okAt = r.now()
	}
	return err
}

func (r *Reader) refresh(ctx context.Context) error {
	ctx, cancel := r.store.op(ctx)
	defer cancel()
	c, pre := r.store.cfg.Client, r.store.cfg.Prefix
	vals, err := c.MGet(ctx, pre+"ver", pre+"hver", pre+"complete").Result()
	if err != nil {
		return unavailable("read fleet", err)
	}
	fver, hver := asString(vals[0]), asString(vals[1])
	complete := vals[2] != nil
	r.mu.RLock()
	needF, needH := fver != r.fver || r.list == nil, hver != r.hver || r.list == nil
	r.mu.RUnlock()
	if !needF && !needH {
		r.mu.Lock()
		r.complete = complete
		r.mu.Unlock()
		return nil
	}
	// Both hashes and both versions in one transaction: a record and the version it belongs
	// to are never read apart.
	var fc, hc *redis.MapStringStringCmd
	var vc *redis.SliceCmd
	_, err = c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		vc = p.MGet(ctx, pre+"ver", pre+"hver")
		if needF {
			fc = p.HGetAll(ctx, pre+"fleet")
		}
		if needH {
			hc = p.HGetAll(ctx, pre+"health")
		}
		return nil
	})
	if err != nil {
		return unavailable("read fleet", err)
	}
	var byKey map[string]fleet.Proxy
	var list []fleet.Proxy
	if fc != nil {
		byKey = make(map[string]fleet.Proxy, len(fc.Val()))
		for k, js := range fc.Val() {
			p, err := decodeProxy([]byte(js))
			if err != nil {
				r.log.Error("unreadable proxy record in the lease store", "proxy", k, "err", err)
				continue
			}
			byKey[k] = p
			list = append(list, p)
		}
		slices.SortFunc(list, func(a, b fleet.Proxy) int { return strings.Compare(a.Key, b.Key) })
		if list == nil {
			list = []fleet.Proxy{}
		}
	}
	var health map[string]verdict.Health
	if hc != nil {
		health = make(map[string]verdict.Health, len(hc.Val()))
		for k, js := range hc.Val() {
			var h verdict.Health
			if err := json.Unmarshal([]byte(js), &h); err != nil {
				continue
			}
			health[k] = h
		}
	}
	v := vc.Val()
	r.mu.Lock()
	defer r.mu.Unlock()
	if byKey != nil {
		r.byKey, r.list, r.fver = byKey, list, asString(v[0])
	}
	if health != nil {
		r.health, r.hver = health, asString(v[1])
	}
	r.complete = complete
	return nil
}

func asString(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case int64:
		return strconv.FormatInt(x, 10)
	}
	return ""
}

// Err is nil while the copy is fresh, else why it is not (wrapping lease.ErrUnavailable).
func (r *Reader) Err() error {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.okAt.IsZero() {
		return fmt.Errorf("fleet from the lease store: %w: %w", lease.ErrUnavailable, r.lastErr)
	}
	if age := r.now().Sub(r.okAt); age > r.staleAfter {
		return fmt.Errorf("fleet from the lease store: last read %s ago: %w: %w", age.Round(time.Millisecond), lease.ErrUnavailable, r.lastErr)
	}
	return nil
}

// List returns every published proxy sorted by key. Callers own the result.
func (r *Reader) List() []fleet.Proxy {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return slices.Clone(r.list)
}

// Get returns the published record for key.
func (r *Reader) Get(key string) (fleet.Proxy, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	p, ok := r.byKey[key]
	return p, ok
}

// Health returns the published verdict for key (Unknown when none).
func (r *Reader) Health(key string) verdict.Health {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if h, ok := r.health[key]; ok {
		return h
	}
	return verdict.Health{State: verdict.Unknown}
}

// Complete reports whether an operator has published the whole fleet at least once into
// this Redis: from then on the records survive operator restarts and replicas serve at once.
func (r *Reader) Complete() bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.complete
}

// CompleteAt is a guess of when the fleet will be complete: an operator publishes it within
// its warm-up, which a replica does not know; the poll interval keeps Retry-After short.
func (r *Reader) CompleteAt() time.Time {
	return r.now().Add(r.poll)
}
