package gateway_test

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/proxy-operator/proxy-operator/server/gateway"
	"github.com/proxy-operator/proxy-operator/test/crawlfarm"
)

// farmRun is what one crawl of the farm through the gateway achieved.
type farmRun struct {
	pages, fetched        int
	refusingPages         int   // pages of the sites that refuse our fleet
	refusingFetched       int   // of those, fetched
	refusingBytes         int64 // body bytes of the refusing sites' pages fetched
	vendorIn, vendorOut   int64 // what the stand-in vendor counted
	usageIn, usageOut     int64 // what the gateway's usage counted for the vendor
	viaVendor, viaOwnPage int
	// sessionExits are the residential addresses the first refusing site saw serve each of
	// two gateway sessions' pages after the crawl (checked at the farm: one each, distinct).
	sessionExits [2][]string
}

// crawlFarm fetches pages pages round-robin over the farm's sites with workers workers, the
// first refusing sites refusing our fleet's ranges, through a gateway of four mock upstreams
// (on 127.1.0.x, datacenter addresses to the farm) and the stand-in vendor.
func crawlFarm(t *testing.T, waterfall bool, sites, refusing, pages, workers int) farmRun {
	t.Helper()
	e := newEnv(t, 0, func(g *gateway.Gateway) { g.Waterfall = waterfall })
	for i := 1; i <= 4; i++ {
		e.addUpstream(t, fmt.Sprintf("crawl/dc%d", i), fmt.Sprintf("127.1.0.%d", 10+i), map[string]string{"pool": "web"}, 100)
	}
	vendor := e.addVendor(t)
	cfg := make([]crawlfarm.Site, sites)
	for i := range cfg {
		cfg[i] = crawlfarm.Lenient(fmt.Sprintf("site-%02d", i+1), fmt.Sprintf("127.0.11.%d:0", i+1))
		if i < refusing {
			cfg[i].Refuse = crawlfarm.FleetRanges()
		}
	}
	farm, err := crawlfarm.Start(cfg)
	if err != nil {
		t.Skipf("farm: %v", err)
	}
	t.Cleanup(farm.Close)
	hosts := farm.Hosts()

	var (
		mu   sync.Mutex
		run  = farmRun{pages: pages}
		next atomic.Int64
		wg   sync.WaitGroup
	)
	c := e.client("any", token)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= pages {
					return
				}
				site := i % len(hosts)
				resp, err := c.Get("http://" + hosts[site] + "/page/" + strconv.Itoa(i))
				var n int64
				ok := false
				via := ""
				if err == nil {
					n, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					ok = resp.StatusCode == http.StatusOK
					via = resp.Header.Get(gateway.HeaderProxy)
				}
				mu.Lock()
				if site < refusing {
					run.refusingPages++
				}
				if ok {
					run.fetched++
					if site < refusing {
						run.refusingFetched++
						run.refusingBytes += n
					}
					if via == vendorKey {
						run.viaVendor++
					} else {
						run.viaOwnPage++
					}
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	for _, u := range e.gw.Usage() {
		if u.Source == vendorKey {
			run.usageIn, run.usageOut = u.BytesIn, u.BytesOut
		}
	}
	// The stand-in counts a body once its handler returns, after the client has it.
	waitFor(t, "the vendor's count to settle", func() bool { return vendor.Usage().BytesIn >= run.usageIn })
	v := vendor.Usage()
	run.vendorIn, run.vendorOut = v.BytesIn, v.BytesOut
	if waterfall && refusing > 0 {
		for i, session := range []string{"session-s1", "session-s2"} {
			before := farm.Stats().Sites[0].ByIP
			sc := e.client(session, token)
			for j := range 4 {
				if resp, err := sc.Get("http://" + hosts[0] + "/session/" + strconv.Itoa(j)); err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}
			for ip, n := range farm.Stats().Sites[0].ByIP {
				if n.Served > before[ip].Served {
					run.sessionExits[i] = append(run.sessionExits[i], ip)
				}
			}
		}
	}
	return run
}

// TestWaterfallOnTheFarm is issue 32's first and second Done-when figures: on a farm where a
// third of the sites refuse our fleet, the gateway with the waterfall fetches at least 98 % of
// the pages, the vendor carries at most 1.2x the bytes of the pages only it can get, and the
// gateway's usage matches the vendor's own count within 1 %; without the waterfall the
// refusing sites' pages fail. VENDOR_FARM_PAGES sets the pages (default 240; -short skips it).
func TestWaterfallOnTheFarm(t *testing.T) {
	if testing.Short() {
		t.Skip("a crawl of the farm: not in -short")
	}
	pages := 240
	if v, err := strconv.Atoi(os.Getenv("VENDOR_FARM_PAGES")); err == nil && v > 0 {
		pages = v
	}
	with := crawlFarm(t, true, 6, 2, pages, 8)
	ratio := float64(with.vendorIn+with.vendorOut) / float64(with.refusingBytes)
	usage, vendor := with.usageIn+with.usageOut, with.vendorIn+with.vendorOut
	t.Logf("with the waterfall: %d/%d pages (%.2f %%), %d through the vendor, %d through our own; refusing sites %d/%d",
		with.fetched, with.pages, 100*float64(with.fetched)/float64(with.pages), with.viaVendor, with.viaOwnPage, with.refusingFetched, with.refusingPages)
	t.Logf("vendor bytes %d for %d bytes of vendor-only pages: %.3fx; usage %d bytes, the vendor's own count %d", vendor, with.refusingBytes, ratio, usage, vendor)
	if float64(with.fetched) < 0.98*float64(with.pages) {
		t.Errorf("fetched %d of %d pages, want at least 98 %%", with.fetched, with.pages)
	}
	if ratio > 1.2 {
		t.Errorf("the vendor carried %.3fx the bytes of the pages only it can get, want at most 1.2x", ratio)
	}
	if d := usage - vendor; d*100 > vendor || -d*100 > vendor {
		t.Errorf("usage %d bytes, the vendor counted %d: more than 1 %% apart", usage, vendor)
	}
	t.Logf("the farm saw session s1 from %v, session s2 from %v", with.sessionExits[0], with.sessionExits[1])
	if s1, s2 := with.sessionExits[0], with.sessionExits[1]; len(s1) != 1 || len(s2) != 1 || s1[0] == s2[0] {
		t.Errorf("at the farm session s1 left from %v and s2 from %v: want one exit each, distinct", s1, s2)
	}

	without := crawlFarm(t, false, 6, 2, pages/3, 8)
	t.Logf("without the waterfall: %d/%d pages; refusing sites %d/%d", without.fetched, without.pages, without.refusingFetched, without.refusingPages)
	if without.refusingFetched != 0 || without.viaVendor != 0 {
		t.Errorf("without the waterfall %d pages of the refusing sites were fetched (%d through the vendor), want none", without.refusingFetched, without.viaVendor)
	}
}
