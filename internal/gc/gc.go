// Package gc owns orphan garbage collection: a background sweep that deletes the instances,
// in every configured provider, whose owner Proxy no longer exists. It decides nothing about
// live Proxies (their instances are the sync core's) and knows nothing of Metacontroller; it
// trusts only live-UID sources that can prove they are complete, and skips a sweep on any doubt.
package gc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/proxy-operator/proxy-operator/providers"
)

// Defaults for Config fields left zero.
const (
	DefaultInterval     = 10 * time.Minute
	DefaultMinAge       = 10 * time.Minute
	DefaultMaxDeletions = 20
	DefaultCallTimeout  = 30 * time.Second
)

// LiveSource says which Proxies exist.
type LiveSource interface {
	// Name is a short word for logs and metrics ("api", "fleet").
	Name() string
	// LiveUIDs returns the UID of every Proxy that exists, those being deleted included. It
	// returns an error whenever it cannot vouch that the set is complete; the sweep then
	// deletes nothing.
	LiveUIDs(ctx context.Context) (map[string]bool, error)
}

// Config is what a Collector needs.
type Config struct {
	Providers *providers.Set
	// Sources are all asked before each sweep; an instance is an orphan only if its owner is
	// in none of their answers, and any source failing skips the sweep.
	Sources []LiveSource
	// Interval between sweeps (default 10m). The first sweep waits one interval.
	Interval time.Duration
	// MinAge spares instances younger than this (default 10m): a Proxy created after the
	// live list was taken has only young instances.
	MinAge time.Duration
	// MaxDeletions aborts a sweep that finds more orphans than this (default 20): that many at
	// once more likely means a wrong live set than a real leak. Negative means no limit.
	MaxDeletions int
	// DryRun logs what would be deleted and deletes nothing.
	DryRun bool
	// CallTimeout bounds each source and provider call (default 30s).
	CallTimeout time.Duration
	Now         func() time.Time
	Log         *slog.Logger
	Registerer  prometheus.Registerer
}

// Collector runs orphan sweeps.
type Collector struct {
	cfg       Config
	deletions *prometheus.CounterVec
	skipped   *prometheus.CounterVec
	sweeps    *prometheus.CounterVec
}

// ErrSkipped wraps the reason a sweep deleted nothing on purpose.
var ErrSkipped = errors.New("gc sweep skipped")

// New checks cfg, fills defaults and registers the metrics.
func New(cfg Config) (*Collector, error) {
	if cfg.Providers == nil {
		return nil, fmt.Errorf("gc: no providers")
	}
	if len(cfg.Sources) == 0 {
		return nil, fmt.Errorf("gc: at least one live-UID source is required")
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.MinAge <= 0 {
		cfg.MinAge = DefaultMinAge
	}
	if cfg.MaxDeletions == 0 {
		cfg.MaxDeletions = DefaultMaxDeletions
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = DefaultCallTimeout
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Registerer == nil {
		cfg.Registerer = prometheus.NewRegistry()
	}
	c := &Collector{
		cfg: cfg,
		deletions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "proxy_operator_gc_deletions_total",
			Help: "Orphan instances deleted by GC, by provider.",
		}, []string{"provider"}),
		skipped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "proxy_operator_gc_skipped_total",
			Help: "Orphan candidates GC left alone, by provider and reason (young, no_owner, dry_run, delete_failed).",
		}, []string{"provider", "reason"}),
		sweeps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "proxy_operator_gc_sweeps_total",
			Help: "GC sweeps by result (done, skipped).",
		}, []string{"result"}),
	}
	if err := cfg.Registerer.Register(c.deletions); err != nil {
		return nil, fmt.Errorf("gc metrics: %w", err)
	}
	if err := cfg.Registerer.Register(c.skipped); err != nil {
		return nil, fmt.Errorf("gc metrics: %w", err)
	}
	if err := cfg.Registerer.Register(c.sweeps); err != nil {
		return nil, fmt.Errorf("gc metrics: %w", err)
	}
	return c, nil
}

// Run sweeps every Interval until ctx ends. A failed sweep is logged and the next one runs on
// schedule. It returns nil when ctx ends.
func (c *Collector) Run(ctx context.Context) error {
	t := time.NewTimer(c.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if _, err := c.Sweep(ctx); err != nil && ctx.Err() == nil {
			level := slog.LevelError
			if errors.Is(err, ErrSkipped) {
				level = slog.LevelWarn
			}
			c.cfg.Log.Log(ctx, level, "gc sweep deleted nothing", "err", err)
		}
		t.Reset(c.cfg.Interval)
	}
}

// Orphan is one instance a sweep deleted (or, in dry run, would have).
type Orphan struct {
	Provider string
	Instance providers.Instance
}

// Report is what one sweep did.
type Report struct {
	Deleted []Orphan
	// Young are orphans spared for their age; they are deleted by a later sweep.
	Young []Orphan
	// FailedProviders are the providers whose list failed; their instances were not looked at.
	FailedProviders []string
}

// Sweep takes the live set, lists every provider's tagged instances and deletes the orphans
// old enough. It returns an error wrapping ErrSkipped, having deleted nothing, when any live
// source fails or the orphans exceed MaxDeletions.
func (c *Collector) Sweep(ctx context.Context) (Report, error) {
	var rep Report
	live, err := c.liveUIDs(ctx)
	if err != nil {
		c.sweeps.WithLabelValues("skipped").Inc()
		return rep, err
	}
	now := c.cfg.Now()
	var orphans []Orphan
	for _, e := range c.cfg.Providers.Entries() {
		lctx, cancel := context.WithTimeout(ctx, c.cfg.CallTimeout)
		insts, err := e.Provider.ListByTag(lctx)
		cancel()
		if err != nil {
			// One provider's outage hides only its own instances; the live set is still sound.
			c.cfg.Log.Error("gc list failed", "provider", e.Name, "err", err)
			rep.FailedProviders = append(rep.FailedProviders, e.Name)
			continue
		}
		for _, in := range insts {
			o := Orphan{Provider: e.Name, Instance: in}
			switch {
			case in.OwnerUID == "":
				// Tagged managed but naming no owner: not provably ours to judge.
				c.skipped.WithLabelValues(e.Name, "no_owner").Inc()
			case live[in.OwnerUID]:
			case in.CreatedAt.IsZero() || now.Sub(in.CreatedAt) < c.cfg.MinAge:
				// An instance of unknown age is treated as young: it is never provably old.
				c.skipped.WithLabelValues(e.Name, "young").Inc()
				rep.Young = append(rep.Young, o)
			default:
				orphans = append(orphans, o)
			}
		}
	}
	if c.cfg.MaxDeletions >= 0 && len(orphans) > c.cfg.MaxDeletions {
		c.sweeps.WithLabelValues("skipped").Inc()
		return rep, fmt.Errorf("%w: %d orphans found, more than --gc-max-deletions=%d: check the live-UID sources before raising it", ErrSkipped, len(orphans), c.cfg.MaxDeletions)
	}
	for _, o := range orphans {
		if ctx.Err() != nil {
			break
		}
		log := c.cfg.Log.With("provider", o.Provider, "providerID", o.Instance.ID, "uid", o.Instance.OwnerUID,
			"createdAt", o.Instance.CreatedAt, "dryRun", c.cfg.DryRun)
		if c.cfg.DryRun {
			log.Warn("gc would delete orphan instance")
			c.skipped.WithLabelValues(o.Provider, "dry_run").Inc()
			rep.Deleted = append(rep.Deleted, o)
			continue
		}
		e, _ := c.cfg.Providers.Lookup(o.Provider)
		dctx, cancel := context.WithTimeout(ctx, c.cfg.CallTimeout)
		err := e.Provider.Delete(dctx, o.Instance.ID)
		cancel()
		if err != nil {
			log.Error("gc delete failed", "err", err)
			c.skipped.WithLabelValues(o.Provider, "delete_failed").Inc()
			continue
		}
		log.Warn("gc deleted orphan instance")
		c.deletions.WithLabelValues(o.Provider).Inc()
		rep.Deleted = append(rep.Deleted, o)
	}
	c.sweeps.WithLabelValues("done").Inc()
	return rep, nil
}

// liveUIDs is the union of every source's answer, or an error if any source fails.
func (c *Collector) liveUIDs(ctx context.Context) (map[string]bool, error) {
	live := map[string]bool{}
	for _, s := range c.cfg.Sources {
		sctx, cancel := context.WithTimeout(ctx, c.cfg.CallTimeout)
		uids, err := s.LiveUIDs(sctx)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("%w: live-UID source %s: %w", ErrSkipped, s.Name(), err)
		}
		for u := range uids {
			live[u] = true
		}
	}
	return live, nil
}
