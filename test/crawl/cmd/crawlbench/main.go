// Command crawlbench runs the crawl benchmark (`make bench-crawl`): the same job with the
// random, rotating, leases and gateway strategies against the loopback farm, each on a fresh operator,
// and prints a Markdown table of what each achieved, then the farm's counters per site.
package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
	"github.com/proxy-operator/proxy-operator/test/crawl"
	"github.com/proxy-operator/proxy-operator/test/crawlfarm"
)

func main() {
	cfg := crawl.Default()
	// -degraded starts from crawl.Degraded (leases with and without the quality score on a
	// farm that mistreats some proxies); flags given after it still apply.
	for _, a := range os.Args[1:] {
		if a == "-degraded" || a == "--degraded" {
			cfg = crawl.Degraded()
		}
	}
	flag.Bool("degraded", false, "start from the degraded farm: datacenter and slow proxies, leases with and without the quality score")
	flag.IntVar(&cfg.Sites, "sites", cfg.Sites, "K sites")
	flag.IntVar(&cfg.Strict, "strict", cfg.Strict, "how many sites are strict")
	flag.IntVar(&cfg.Proxies, "proxies", cfg.Proxies, "P mock proxies")
	flag.IntVar(&cfg.Workers, "workers", cfg.Workers, "W concurrent workers")
	flag.IntVar(&cfg.URLsPerSite, "urls-per-site", cfg.URLsPerSite, "URLs per site (M = this x K)")
	flag.DurationVar(&cfg.Budget, "budget", cfg.Budget, "time budget per strategy")
	flag.DurationVar(&cfg.RateLimitedCooldown, "lease-cooldown", 0, "operator -lease-cooldown (0: its default)")
	flag.DurationVar(&cfg.BannedCooldown, "lease-ban-cooldown", 0, "operator -lease-ban-cooldown (0: its default)")
	flag.DurationVar(&cfg.RotatingBase, "rotating-base", cfg.RotatingBase, "rotating strategy's backoff base")
	flag.DurationVar(&cfg.RotatingCap, "rotating-cap", cfg.RotatingCap, "rotating strategy's backoff cap")
	flag.IntVar(&cfg.Datacenter, "datacenter", cfg.Datacenter, "proxies every site refuses as datacenter addresses (403 always)")
	flag.IntVar(&cfg.Slow, "slow", cfg.Slow, "proxies every site (and the probe target) answers -slow-delay late")
	flag.DurationVar(&cfg.SlowDelay, "slow-delay", cfg.SlowDelay, "delay of answers to slow proxies")
	flag.IntVar(&cfg.PagesPerLease, "pages-per-lease", cfg.PagesPerLease, "lease strategies take a fresh lease after this many pages (0: hold it until a 429 or 403)")
	flag.DurationVar(&cfg.SlowProbe, "slow-probe", cfg.SlowProbe, "operator -score-slow-probe (0: its default)")
	strategies := flag.String("strategies", cmp.Or(strings.Join(cfg.Strategies, ","), "random,rotating,leases,gateway"), "strategies to run, comma-separated (random, rotating, leases, gateway, leases-unscored)")
	verbose := flag.Bool("v", false, "print the farm's counters per site for each strategy")
	flag.Parse()
	cfg.Strategies = strings.Split(*strategies, ",")

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	rows, err := crawl.Run(ctx, cfg, func(s string) { fmt.Fprintln(os.Stderr, "crawlbench:", s) })
	if err != nil {
		fmt.Fprintln(os.Stderr, "crawlbench:", err)
		os.Exit(1)
	}
	fmt.Printf("farm: %d sites (%d strict), %d mock proxies, %d workers, %d URLs, budget %s per strategy\n",
		cfg.Sites, cfg.Strict, cfg.Proxies, cfg.Workers, cfg.Sites*cfg.URLsPerSite, cfg.Budget)
	if cfg.Datacenter > 0 || cfg.Slow > 0 {
		fmt.Printf("  degraded: %d proxies refused as datacenter addresses on every site, %d answered %s late (probes too)\n",
			cfg.Datacenter, cfg.Slow, cfg.SlowDelay)
	}
	s, l := crawlfarm.Strict("", ""), crawlfarm.Lenient("", "")
	for _, x := range []crawlfarm.Site{s, l} {
		kind := "strict"
		if x.RPS == l.RPS {
			kind = "lenient"
		}
		fmt.Printf("  %s site, per source IP: %g req/s, burst %d, 429 Retry-After %s, banned after %d requests ignoring it, ban %s then %s\n",
			kind, x.RPS, x.Burst, x.RetryAfter, x.Tolerance+1, x.Ban, x.RepeatBan)
	}
	fmt.Println()
	fmt.Print(crawl.Table(rows, cfg.Budget))
	for _, r := range rows {
		fmt.Printf("\n%s: crawler saw %d pages, %d 429, %d 403 (%d of them to datacenter addresses), %d failed; %d leases, %d no-match\n",
			r.Strategy, r.Pages, r.Limited, r.Banned, r.Farm.Total.DCRefused, r.Failed, r.Leases, r.NoMatch)
		for _, k := range r.Kinds {
			fmt.Printf("  %s proxies (%d): served %d, 429 %d, 403 %d; time in band: Good %.0f %%, Fair %.0f %%, Poor %.0f %%\n",
				k.Kind, k.Proxies, k.Counts.Served, k.Counts.Limited, k.Counts.Refused,
				100*k.BandShare[v1.BandGood], 100*k.BandShare[v1.BandFair], 100*k.BandShare[v1.BandPoor])
		}
		if *verbose {
			for _, st := range r.Farm.Sites {
				fmt.Printf("  %s %s: served %d, 429 %d, 403 %d, bans %d, banned now %d\n", st.Name, st.Host, st.Served, st.Limited, st.Refused, st.Bans, len(st.BannedNow))
			}
		}
	}
}
