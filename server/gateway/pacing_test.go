package gateway_test

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/test/crawlfarm"
)

// issueSite is the site of issue 31: 1 request/s per source IP, faster gets 429 with
// Retry-After: 2, and an IP that keeps going while told to wait (the 6th time) is banned
// (403) for 60 s.
func issueSite() crawlfarm.Site {
	return crawlfarm.RateLimited("issue-31", "127.0.10.31:0")
}

// naiveCrawl is one crawl of the issue's site through the gateway by a naive client: workers
// goroutines fetching pages at full speed, with no delay and no retry.
type naiveCrawl struct {
	upstreams, workers, pages int
}

type crawlResult struct {
	naiveCrawl
	got     int // 200 answers the client saw
	answers map[int]int
	farm    crawlfarm.Counts
	elapsed time.Duration
}

func (r crawlResult) ideal() time.Duration {
	return time.Duration(float64(r.pages) / float64(r.upstreams) * float64(time.Second))
}

func (r crawlResult) row() string {
	return fmt.Sprintf("| %d | %d | %d | %d/%d | %d | %d | %.1f s | %.1f s | %.2fx |", r.upstreams, r.workers, r.pages,
		r.got, r.pages, r.farm.Limited, r.farm.Refused, r.elapsed.Seconds(), r.ideal().Seconds(), r.elapsed.Seconds()/r.ideal().Seconds())
}

func runNaiveCrawl(t *testing.T, c naiveCrawl) crawlResult {
	t.Helper()
	farm, err := crawlfarm.Start([]crawlfarm.Site{issueSite()})
	if err != nil {
		t.Skipf("cannot start the farm on 127.0.10.31: %v", err)
	}
	t.Cleanup(farm.Close)
	e := newEnv(t, c.upstreams, nil)
	client := e.client("", token)
	client.Timeout = 2 * time.Minute
	pages := make(chan int, c.pages)
	for i := range c.pages {
		pages <- i
	}
	close(pages)
	res := crawlResult{naiveCrawl: c, answers: map[int]int{}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	for range c.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range pages {
				code := 0
				resp, err := client.Get(fmt.Sprintf("http://%s/page/%d", farm.Hosts()[0], i))
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					code = resp.StatusCode
				}
				mu.Lock()
				res.answers[code]++
				if code == http.StatusOK {
					res.got++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	res.farm = farm.Stats().Total
	return res
}

// TestNaiveCrawlersGetEveryPageWithoutBans is the short version of the pacing benchmark:
// naive clients (a sequential loop, 4 concurrent workers) at full speed through the gateway
// get every page of the issue's site and no upstream is banned. Without pacing, every retry
// of a 429 went at once to the next upstream and the fleet was banned within seconds.
func TestNaiveCrawlersGetEveryPageWithoutBans(t *testing.T) {
	for _, c := range []naiveCrawl{{upstreams: 3, workers: 1, pages: 9}, {upstreams: 3, workers: 4, pages: 9}} {
		t.Run(fmt.Sprintf("%d-workers", c.workers), func(t *testing.T) {
			r := runNaiveCrawl(t, c)
			if r.got != c.pages || r.farm.Refused != 0 || r.farm.Bans != 0 {
				t.Errorf("got %d of %d pages, answers %v; the site refused %d and banned %d, want every page and none",
					r.got, c.pages, r.answers, r.farm.Refused, r.farm.Bans)
			}
		})
	}
}

// TestPacingBenchmark is the table of docs/performance.md (issue 31, "Done when"): set
// PACING_BENCH=1 to run it (about two minutes).
func TestPacingBenchmark(t *testing.T) {
	if os.Getenv("PACING_BENCH") == "" {
		t.Skip("set PACING_BENCH=1 to run the pacing benchmark")
	}
	var rows []string
	for _, ups := range []int{3, 16} {
		for _, w := range []int{1, 4} {
			rows = append(rows, runNaiveCrawl(t, naiveCrawl{upstreams: ups, workers: w, pages: 51}).row())
		}
	}
	t.Logf("\n| upstreams | workers | pages | got | 429s | 403s | time | ideal | ratio |\n|---|---|---|---|---|---|---|---|---|\n%s",
		strings.Join(rows, "\n"))
}

// TestSitesViewCountsTrafficPerNamespace: the gateway's SitesView shows a site it sent to,
// with its pace and its recent traffic under the namespace of the upstreams that carried it.
func TestSitesViewCountsTrafficPerNamespace(t *testing.T) {
	e := newEnv(t, 2, nil)
	s := newSite(t, nil)
	for range 2 {
		if resp, _ := get(t, e.client("", token), s.url("/")); resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d", resp.StatusCode)
		}
	}
	for _, p := range e.gw.Sites() {
		if p.Site != s.addr {
			continue
		}
		if p.Rate <= 0 || p.Traffic["crawl"] < 1.9 || p.Traffic["crawl"] > 2 || len(p.Traffic) != 1 {
			t.Errorf("site %+v, want a pace and about 2 recent requests in namespace crawl", p)
		}
		return
	}
	t.Errorf("site %s missing from %+v", s.addr, e.gw.Sites())
}
