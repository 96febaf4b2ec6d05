package crawl

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
	"github.com/proxy-operator/proxy-operator/client"
	"github.com/proxy-operator/proxy-operator/internal/fleet"
	"github.com/proxy-operator/proxy-operator/test/crawlfarm"
)

// Config is one benchmark run: the farm, the fleet, the job and the strategies' knobs.
type Config struct {
	Sites, Strict int // K sites, the first Strict of them strict
	Proxies       int // P mock proxies
	Workers       int // W
	URLsPerSite   int // M / K
	Budget        time.Duration
	// Operator cooldowns (zero: the operator's defaults, 15 min / 1 h / 24 h).
	RateLimitedCooldown, BannedCooldown, MaxCooldown time.Duration
	// RotatingBase and RotatingCap are the rotating strategy's backoff (scrapy-rotating-proxies
	// defaults: 300 s and 3600 s).
	RotatingBase, RotatingCap time.Duration
	// Strategies to run, in order (default: random, rotating, leases, gateway).
	// "leases-unscored" is leases with the operator ignoring quality bands
	// (-lease-by-quality=false).
	Strategies []string
	// Datacenter and Slow are how many of the proxies every site treats as a datacenter's
	// (403 always) or answers SlowDelay late (probes too); SlowProbe is the operator's
	// -score-slow-probe.
	Datacenter, Slow     int
	SlowDelay, SlowProbe time.Duration
	// PagesPerLease, when positive, makes the lease strategies release a lease after that
	// many pages and take a fresh one (0: hold it until a 429 or 403).
	PagesPerLease int
	// Namespace of the fleet's Proxies (default "crawl"; see OperatorConfig.Namespace).
	Namespace string
}

// Degraded is the `make bench-crawl-score` run: Default's farm where a quarter of the
// proxies are datacenter addresses and another quarter slow, 6 workers (fewer than the 8
// sound proxies, so the lease choice matters), leases with and without the quality score.
func Degraded() Config {
	c := Default()
	c.Workers, c.Datacenter, c.Slow = 6, 4, 4
	c.SlowDelay, c.SlowProbe = time.Second, 300*time.Millisecond
	// A lease held until a 429 would keep whatever proxy the first choice gave for the whole
	// run, so the choice would be made once; taking a fresh lease every 5 pages makes it
	// matter, as it does for a crawler that leases per batch.
	c.PagesPerLease = 5
	c.Namespace = "crawl-degraded"
	c.Strategies = []string{"leases-unscored", "leases"}
	return c
}

// Default is the `make bench-crawl` run: 8 sites, 6 strict; 16 proxies; 16 workers; 4,000 URLs;
// 90 s per strategy.
func Default() Config {
	return Config{Sites: 8, Strict: 6, Proxies: 16, Workers: 16, URLsPerSite: 500, Budget: 90 * time.Second,
		RotatingBase: 300 * time.Second, RotatingCap: time.Hour}
}

// Row is one strategy's figures: the crawler's counts and the farm's.
type Row struct {
	Result
	Farm crawlfarm.Stats
	// Unbanned is how many of the fleet's proxies were banned on no site at the end.
	Unbanned, Proxies int
	// Kinds is, on a degraded farm, what each kind of proxy (sound, datacenter, slow) was
	// served and how long it spent in each quality band during the crawl.
	Kinds []KindStats
}

// KindStats is one kind of proxy's share of a degraded run.
type KindStats struct {
	Kind    string // "sound", "datacenter" or "slow"
	Proxies int
	Counts  crawlfarm.Counts
	// BandShare is the share of samples (every 500 ms, per proxy) in each band.
	BandShare map[v1.QualityBand]float64
}

// Share429 and Share403 are the shares of answered requests that were 429 and 403.
func (r Row) Share429() float64 { return share(r.Farm.Total.Limited, r.Farm.Total.Requests()) }
func (r Row) Share403() float64 { return share(r.Farm.Total.Refused, r.Farm.Total.Requests()) }

func share(n, of int64) float64 {
	if of == 0 {
		return 0
	}
	return float64(n) / float64(of)
}

// Run runs every strategy on a fresh operator and a fresh farm, so no strategy inherits
// another's cooldowns or bans.
func Run(ctx context.Context, cfg Config, progress func(string)) ([]Row, error) {
	if progress == nil {
		progress = func(string) {}
	}
	names := cfg.Strategies
	if len(names) == 0 {
		names = []string{"random", "rotating", "leases", "gateway"}
	}
	var rows []Row
	for _, name := range names {
		row, err := runOne(ctx, cfg, name, progress)
		if err != nil {
			return rows, err
		}
		rows = append(rows, row)
	}
	return rows, nil
}

const token = "bench-crawler-token"

func runOne(ctx context.Context, cfg Config, name string, progress func(string)) (Row, error) {
	farm, err := crawlfarm.Start(crawlfarm.MostlyStrict(cfg.Sites, cfg.Strict))
	if err != nil {
		return Row{}, err
	}
	defer farm.Close()
	progress(fmt.Sprintf("%s: starting the operator with %d mock proxies", name, cfg.Proxies))
	op, err := StartOperator(ctx, OperatorConfig{Proxies: cfg.Proxies, MaxLeases: cfg.Workers * cfg.Sites, Token: token,
		RateLimitedCooldown: cfg.RateLimitedCooldown, BannedCooldown: cfg.BannedCooldown, MaxCooldown: cfg.MaxCooldown,
		Namespace: cfg.Namespace, IgnoreBand: name == "leases-unscored", SlowProbe: cfg.SlowProbe,
		ProbeDelay: func(ip string) time.Duration { _, d := farm.Treated(ip); return d }})
	if err != nil {
		return Row{}, err
	}
	defer op.Close()
	if cfg.Datacenter > 0 || cfg.Slow > 0 {
		t := degrade(op.View.List(), cfg.Datacenter, cfg.Slow)
		t.SlowDelay = cfg.SlowDelay
		farm.Treat(t)
		progress(fmt.Sprintf("%s: sites treat %v as datacenter addresses and answer %v %s late; waiting until probes grade the slow ones", name, t.Datacenter, t.Slow, cfg.SlowDelay))
		// Only probes can tell a slow proxy before any crawl; datacenter addresses are learnt
		// from crawlers' reports, during the crawl.
		if err := op.WaitGraded(ctx, t.Slow); err != nil {
			return Row{}, err
		}
	}
	c, err := client.New(op.DiscoveryURL, client.WithToken(op.Token), client.WithRetry(1, time.Second))
	if err != nil {
		return Row{}, err
	}
	sel := map[string]string{"pool": "crawl"}
	// A pool API hands out each proxy's credential with its address; the operator's own
	// record of it plays that part (the discovery list never carries one).
	auth := func(id string) *url.Userinfo {
		if p, ok := op.View.Get(id); ok && p.Credentials != nil {
			return url.UserPassword(p.Credentials.Username, p.Credentials.Password)
		}
		return nil
	}
	var s strategy
	switch name {
	case "random":
		s = &random{pool: pool{c: c, selector: sel, auth: auth}}
	case "rotating":
		s = &rotating{pool: pool{c: c, selector: sel, auth: auth}, base: cfg.RotatingBase, cap: cfg.RotatingCap, state: map[string]*rotState{}}
	case "leases", "leases-unscored":
		s = &leases{label: name, pagesPerLease: cfg.PagesPerLease, c: c, selector: sel, sites: farm.Hosts(), ttl: time.Minute, held: map[[2]int]*heldLease{}, wait: map[[2]int]time.Duration{}}
	case "gateway":
		s = &viaGateway{proxy: &url.URL{Scheme: "http", Host: op.GatewayAddr, User: url.UserPassword("pool-crawl", op.Token)},
			pause: time.Second, until: map[[2]int]time.Time{}}
	default:
		return Row{}, fmt.Errorf("crawl: unknown strategy %q", name)
	}
	progress(fmt.Sprintf("%s: crawling %d URLs over %d sites with %d workers (budget %s)", name, cfg.URLsPerSite*cfg.Sites, cfg.Sites, cfg.Workers, cfg.Budget))
	sampleCtx, stopSampling := context.WithCancel(ctx)
	samples := make(chan map[string]map[v1.QualityBand]int, 1)
	go func() { samples <- sampleBands(sampleCtx, op) }()
	res, err := run(ctx, Job{Sites: farm.Hosts(), URLsPerSite: cfg.URLsPerSite, Workers: cfg.Workers, Budget: cfg.Budget}, s)
	stopSampling()
	bands := <-samples
	if err != nil {
		return Row{}, err
	}
	st := farm.Stats()
	proxyIPs := map[string]bool{}
	for _, p := range op.View.List() {
		proxyIPs[p.IP] = true
	}
	banned := 0
	for _, ip := range st.BannedNow {
		if proxyIPs[ip] {
			banned++
		}
	}
	row := Row{Result: res, Farm: st, Unbanned: len(proxyIPs) - banned, Proxies: len(proxyIPs)}
	if cfg.Datacenter > 0 || cfg.Slow > 0 {
		row.Kinds = kinds(op, farm, st, bands)
	}
	return row, nil
}

// sampleBands counts, every 500 ms until ctx ends, each proxy's quality band (by IP).
func sampleBands(ctx context.Context, op *Operator) map[string]map[v1.QualityBand]int {
	out := map[string]map[v1.QualityBand]int{}
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for {
		for _, p := range op.View.List() {
			if out[p.IP] == nil {
				out[p.IP] = map[v1.QualityBand]int{}
			}
			out[p.IP][op.health.Health(p.Key).Band]++
		}
		select {
		case <-ctx.Done():
			return out
		case <-t.C:
		}
	}
}

// kinds sums the farm's counters and the band samples per kind of proxy.
func kinds(op *Operator, farm *crawlfarm.Farm, st crawlfarm.Stats, bands map[string]map[v1.QualityBand]int) []KindStats {
	order := []string{"sound", "datacenter", "slow"}
	by := map[string]*KindStats{}
	samples := map[string]int{}
	for _, k := range order {
		by[k] = &KindStats{Kind: k, BandShare: map[v1.QualityBand]float64{}}
	}
	for _, p := range op.View.List() {
		k := "sound"
		if dc, d := farm.Treated(p.IP); dc {
			k = "datacenter"
		} else if d > 0 {
			k = "slow"
		}
		ks := by[k]
		ks.Proxies++
		c := st.ByIP[p.IP]
		ks.Counts.Served += c.Served
		ks.Counts.Limited += c.Limited
		ks.Counts.Refused += c.Refused
		ks.Counts.Bans += c.Bans
		ks.Counts.DCRefused += c.DCRefused
		for b, n := range bands[p.IP] {
			ks.BandShare[b] += float64(n)
			samples[k] += n
		}
	}
	var out []KindStats
	for _, k := range order {
		ks := by[k]
		if ks.Proxies == 0 {
			continue
		}
		for b := range ks.BandShare {
			ks.BandShare[b] /= float64(max(samples[k], 1))
		}
		out = append(out, *ks)
	}
	return out
}

// degrade picks the proxies the farm mistreats: every other one in key order, alternately
// datacenter and slow, until each count is reached, so neither kind bunches in one place of
// the list (least-loaded ties break by key).
func degrade(ps []fleet.Proxy, datacenter, slow int) crawlfarm.Treatment {
	var t crawlfarm.Treatment
	for i, p := range ps {
		switch {
		case i%4 == 1 && len(t.Datacenter) < datacenter:
			t.Datacenter = append(t.Datacenter, p.IP)
		case i%4 == 3 && len(t.Slow) < slow:
			t.Slow = append(t.Slow, p.IP)
		}
	}
	return t
}

// Table renders the rows as a Markdown table.
func Table(rows []Row, budget time.Duration) string {
	var b strings.Builder
	b.WriteString("| strategy | pages/min | pages | requests | 429 share | 403 share | bans incurred | proxies unbanned at end | time to finish |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		finish := "not finished in " + budget.String()
		if r.Finished {
			finish = r.Elapsed.Round(100 * time.Millisecond).String()
		}
		fmt.Fprintf(&b, "| %s | %.0f | %d | %d | %.1f %% | %.1f %% | %d | %d / %d | %s |\n",
			r.Strategy, r.PagesPerMinute(), r.Pages, r.Farm.Total.Requests(), 100*r.Share429(), 100*r.Share403(),
			r.Farm.Total.Bans, r.Unbanned, r.Proxies, finish)
	}
	return b.String()
}
