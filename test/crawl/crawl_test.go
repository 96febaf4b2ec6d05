package crawl

import (
	"context"
	"testing"
	"time"
)

// TestStrategiesCompleteAndCountersAddUp is the short run of `make bench-crawl` that `make
// test` runs: every strategy completes against a real operator and farm, and the crawler's
// counts and the farm's agree request for request. It asserts no ratio between strategies.
func TestStrategiesCompleteAndCountersAddUp(t *testing.T) {
	cfg := Config{Sites: 3, Strict: 2, Proxies: 4, Workers: 4, URLsPerSite: 15, Budget: 4 * time.Second,
		RotatingBase: 300 * time.Second, RotatingCap: time.Hour}
	rows, err := Run(context.Background(), cfg, func(s string) { t.Log(s) })
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 4 {
		t.Fatalf("%d rows, want 4", len(rows))
	}
	for _, r := range rows {
		t.Run(r.Strategy, func(t *testing.T) {
			f := r.Farm.Total
			if r.Sent == 0 || r.Pages == 0 {
				t.Fatalf("sent %d requests, fetched %d pages: the strategy did not crawl", r.Sent, r.Pages)
			}
			if r.Strategy == "gateway" {
				// The gateway retries a 429 or 403 on other upstreams itself, and answers 503 (a
				// failure to the crawler) when every upstream is cooling for a site.
				if f.Served != r.Pages || f.Requests() < r.Sent-r.Failed || f.Limited < r.Limited || f.Refused < r.Banned {
					t.Errorf("farm served/429/403 %d/%d/%d of %d, crawler sent %d (%d failed) and saw %d/%d/%d",
						f.Served, f.Limited, f.Refused, f.Requests(), r.Sent, r.Failed, r.Pages, r.Limited, r.Banned)
				}
			} else {
				if f.Requests() != r.Sent || r.Failed != 0 {
					t.Errorf("farm answered %d requests (served %d + refused %d + %d), crawler sent %d (%d failed)",
						f.Requests(), f.Served, f.Limited, f.Refused, r.Sent, r.Failed)
				}
				if f.Served != r.Pages || f.Limited != r.Limited || f.Refused != r.Banned {
					t.Errorf("farm served/429/403 %d/%d/%d, crawler saw %d/%d/%d", f.Served, f.Limited, f.Refused, r.Pages, r.Limited, r.Banned)
				}
			}
			var bySite, byIP int64
			for _, s := range r.Farm.Sites {
				bySite += s.Requests()
			}
			for ip, c := range r.Farm.ByIP {
				byIP += c.Requests()
				if ip == "127.0.0.1" {
					t.Errorf("the farm saw requests from 127.0.0.1: a proxy did not dial from its own address")
				}
			}
			if bySite != f.Requests() || byIP != f.Requests() {
				t.Errorf("per site %d, per IP %d, total %d", bySite, byIP, f.Requests())
			}
			if len(r.Farm.ByIP) < 2 || len(r.Farm.ByIP) > r.Proxies {
				t.Errorf("the farm saw %d source IPs, want 2..%d (one per proxy)", len(r.Farm.ByIP), r.Proxies)
			}
			if r.Finished && r.Pages != int64(cfg.Sites*cfg.URLsPerSite) {
				t.Errorf("finished with %d pages of %d", r.Pages, cfg.Sites*cfg.URLsPerSite)
			}
		})
	}
	t.Logf("\n%s", Table(rows, cfg.Budget))
}
