package redisstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
	"github.com/proxy-operator/proxy-operator/internal/verdict"
	"github.com/proxy-operator/proxy-operator/lease"
)

// publishBatch bounds the proxies one script call carries, so a 10,000-proxy first publish
// does not hold Redis for one long script.
const publishBatch = 256

// Publisher copies the operator's fleet view and the prober's verdicts into the store, on
// change only: what discovery replicas read and what the scripts choose from. One operator
// runs it; replicas only read.
type Publisher struct {
	store  *Store
	fleet  lease.Fleet
	health lease.Health
	// complete reports whether the view holds the whole fleet (fleet.View.Complete). Until it
	// does, the publisher only adds and updates: a proxy absent from a view that is still
	// filling after a restart may simply not be synced yet, and removing it would drop its
	// leases.
	complete func() bool
	refresh  time.Duration
	log      *slog.Logger
	// preferBand publishes each verdict's band for the scripts to rank by (PublisherConfig).
	preferBand bool

	mu         sync.Mutex
	last       map[string]published
	reconciled bool
}

type published struct {
	proxy  string // the record's JSON: any field added to fleet.Proxy counts as a change
	health verdict.Health
	ok     bool
}

// PublisherConfig configures a Publisher.
type PublisherConfig struct {
	Store    *Store
	Fleet    lease.Fleet
	Health   lease.Health
	Complete func() bool
	// Refresh paces the health pass (default lease.DefaultHealthRefresh): verdicts and
	// latency reach the store at most this late.
	Refresh time.Duration
	Log     *slog.Logger
	// PreferBand publishes each verdict's quality band with its record, so every replica's
	// choice ranks by band before load and latency, as lease.Config.PreferBand does in memory
	// (the operator's -lease-by-quality decides for all).
	PreferBand bool
}

// NewPublisher returns a publisher of cfg.Fleet and cfg.Health into cfg.Store.
func NewPublisher(cfg PublisherConfig) *Publisher {
	if cfg.Refresh <= 0 {
		cfg.Refresh = lease.DefaultHealthRefresh
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Complete == nil {
		cfg.Complete = func() bool { return true }
	}
	return &Publisher{store: cfg.Store, fleet: cfg.Fleet, health: cfg.Health, complete: cfg.Complete,
		refresh: cfg.Refresh, log: cfg.Log, last: map[string]published{}, preferBand: cfg.PreferBand}
}

// Run publishes on every fleet change and every Refresh until ctx ends. A Redis outage is
// logged once and retried: what was not published is sent again on the next pass.
func (pb *Publisher) Run(ctx context.Context) error {
	t := time.NewTicker(pb.refresh)
	defer t.Stop()
	failing := false
	for {
		changed := pb.fleet.Changed()
		err := pb.Sync(ctx)
		switch {
		case err != nil && !failing && ctx.Err() == nil:
			pb.log.Warn("publishing the fleet to the lease store failed; retrying", "err", err)
			failing = true
		case err == nil && failing:
			pb.log.Info("fleet published to the lease store again")
			failing = false
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
			// A pass reads the whole view: bound its cost when the fleet changes all the time.
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(lease.DefaultMinSyncInterval):
			}
		case <-t.C:
		}
	}
}

// Sync publishes what changed since the last successful pass.
func (pb *Publisher) Sync(ctx context.Context) error {
	pb.mu.Lock()
	defer pb.mu.Unlock()
	complete := pb.complete()
	list := pb.fleet.List()
	seen := make(map[string]struct{}, len(list))
	var ups, hs []any
	next := map[string]published{}
	for _, p := range list {
		seen[p.Key] = struct{}{}
		pj, err := encodeProxy(p)
		if err != nil {
			return fmt.Errorf("publish %s: %w", p.Key, err)
		}
		h := pb.health.Health(p.Key)
		cur := published{proxy: string(pj), health: h, ok: lease.Leasable(p, h)}
		old, had := pb.last[p.Key]
		hj, _ := json.Marshal(h)
		switch {
		case !had || old.proxy != cur.proxy:
			attrs := p.Attributes
			if attrs == nil {
				attrs = map[string]string{}
			}
			aj, _ := json.Marshal(attrs) // sorted keys: one spelling per attribute set
			// A bucket is an attribute set within one namespace, so a lease can be limited to
			// namespaces and a refusal counted for the namespace's pool.
			ns, _, _ := strings.Cut(p.Key, "/")
			sum := sha256.Sum256(append([]byte(ns+"\x00"), aj...))
			pool := ""
			if attrs[v1.PoolAttribute] != "" {
				pool = ns + "/" + attrs[v1.PoolAttribute]
			}
			ups = append(ups, p.Key, pj, hex.EncodeToString(sum[:12]), aj, p.MaxLeases, flag(cur.ok), h.LatencyMillis, hj, ns, pool, pb.bandPenalty(h))
		case old.ok != cur.ok || !sameHealth(old.health, h):
			hs = append(hs, p.Key, flag(cur.ok), h.LatencyMillis, hj, pb.bandPenalty(h))
		default:
			continue
		}
		next[p.Key] = cur
	}
	if err := pb.batches(ctx, pb.store.sc.publish, ups, 11); err != nil {
		return err
	}
	if err := pb.batches(ctx, pb.store.sc.health, hs, 5); err != nil {
		return err
	}
	maps.Copy(pb.last, next)

	if !complete {
		return nil
	}
	var gone []any
	if !pb.reconciled {
		// The first complete pass also removes what an earlier operator published and the
		// fleet no longer has (deleted while this one was down).
		cctx, cancel := pb.store.op(ctx)
		keys, err := pb.store.cfg.Client.HKeys(cctx, pb.store.cfg.Prefix+"fleet").Result()
		cancel()
		if err != nil {
			return unavailable("publish", err)
		}
		for _, k := range keys {
			if _, ok := seen[k]; !ok {
				gone = append(gone, k)
			}
		}
	} else {
		for k := range pb.last {
			if _, ok := seen[k]; !ok {
				gone = append(gone, k)
			}
		}
	}
	if err := pb.batches(ctx, pb.store.sc.remove, gone, 1); err != nil {
		return err
	}
	for _, k := range gone {
		delete(pb.last, k.(string))
	}
	if !pb.reconciled {
		// Said once, at the end of the warm-up: a proxy that was never synced again since the
		// start (deleted meanwhile, or Metacontroller not running) vanishes here, not silently.
		dropped := make([]string, 0, min(len(gone), 5))
		for _, k := range gone[:min(len(gone), 5)] {
			dropped = append(dropped, k.(string))
		}
		pb.log.Info("fleet complete: removed the proxies an earlier process published that were not synced since start",
			"removed", len(gone), "kept", len(seen), "examples", dropped)
		cctx, cancel := pb.store.op(ctx)
		err := pb.store.cfg.Client.Set(cctx, pb.store.cfg.Prefix+"complete", strconv.FormatInt(time.Now().UnixMilli(), 10), 0).Err()
		cancel()
		if err != nil {
			return unavailable("publish", err)
		}
		pb.reconciled = true
	}
	return nil
}

// batches runs script over args in groups of width, publishBatch groups per call.
func (pb *Publisher) batches(ctx context.Context, script *redis.Script, args []any, width int) error {
	step := publishBatch * width
	for i := 0; i < len(args); i += step {
		chunk := args[i:min(i+step, len(args))]
		cctx, cancel := pb.store.op(ctx)
		// Replicated like a grant: a fleet record lost in a failover would end the leases on it.
		err := pb.store.write(cctx, script, append(pb.store.head(len(chunk)), chunk...)...).Err()
		cancel()
		if err != nil {
			return unavailable("publish", err)
		}
	}
	return nil
}

func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

func sameHealth(a, b verdict.Health) bool {
	return a.State == b.State && a.LatencyMillis == b.LatencyMillis && a.Reason == b.Reason && a.Since.Equal(b.Since) && a.Band == b.Band
}

// bandPenalty is what the scripts rank a verdict's band by: 0 for Good .. 3 for ungraded
// (v1.BandRank reversed), 0 for every proxy when bands are not preferred.
func (pb *Publisher) bandPenalty(h verdict.Health) int {
	if !pb.preferBand {
		return 0
	}
	return 3 - v1.BandRank(h.Band)
}
