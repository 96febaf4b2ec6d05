package gateway_test

import (
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/internal/redistest"
	"github.com/proxy-operator/proxy-operator/test/crawlfarm"
)

// TestThreeReplicasShareOnePace: three gateway replicas over one Redis, each with naive
// clients at full speed, crawl the issue's site (1 request/s per source address, banned after
// 5 ignored 429s): the replicas book each upstream's sends in the shared store, so together they
// never send one upstream faster than its pace, and the site bans nobody. Paced per replica
// alone, each replica sent every upstream 1 request/s and the site saw three times that.
func TestThreeReplicasShareOnePace(t *testing.T) {
	srv := redistest.Start(t)
	farm, err := crawlfarm.Start([]crawlfarm.Site{issueSite()})
	if err != nil {
		t.Skipf("cannot start the farm on 127.0.10.31: %v", err)
	}
	t.Cleanup(farm.Close)
	replicas := bookedReplicas(t, srv.Addr, 3, 3, 40, map[string]string{"pool": "web"}, 50)
	const pagesPerReplica = 8
	var (
		mu      sync.Mutex
		got     int
		answers = map[int]int{}
		wg      sync.WaitGroup
	)
	for ri, e := range replicas {
		c := e.client("", token)
		c.Timeout = 2 * time.Minute
		for w := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for p := w; p < pagesPerReplica; p += 2 {
					code := 0
					resp, err := c.Get(fmt.Sprintf("http://%s/r%d/page/%d", farm.Hosts()[0], ri, p))
					if err == nil {
						_, _ = io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						code = resp.StatusCode
					}
					mu.Lock()
					answers[code]++
					if code == http.StatusOK {
						got++
					}
					mu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
	st := farm.Stats().Total
	// The 429s are the pace learning the site's limit (2-3 measured, 14 with each replica
	// pacing alone): 6 leaves room for a late send on a busy machine.
	if want := 3 * pagesPerReplica; got != want || st.Refused != 0 || st.Bans != 0 || st.Limited > 6 {
		t.Errorf("got %d of %d pages, answers %v; the site answered %d 429s, refused %d and banned %d: want every page, at most 6 429s, no ban",
			got, want, answers, st.Limited, st.Refused, st.Bans)
	}
	t.Logf("site: %d served, %d limited (429), %d refused", st.Served, st.Limited, st.Refused)
}
