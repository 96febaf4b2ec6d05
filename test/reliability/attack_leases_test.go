package reliability

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// attackLeaseFlood: 20 Proxies x maxLeases 10,000 (then the CRD's maximum) gave a token
// 200,000 leases, 362 MiB and a legitimate hook p99 of 1.09 s. maxLeases is now at most 1000
// (CRD and Validate): 20 Proxies at 1000 lease 20,000 at most, and 20 more asking for 10,000
// are Failed and lease nothing. 16 workers lease as fast as they can (each lease with a new
// session key, so the session table grows too) for dur, never releasing. They lease with the
// attacker's own token (every namespace), not the legitimate crawler's: since gateway leases
// are the token's (0273), a flood with team-a's token fills team-a's own share, and the
// legitimate crawler sharing that token would be refused for it; the flood's leases are
// released afterwards so the rows after it start from an empty share.
func attackLeaseFlood(t *testing.T, c *child, good proxyDesc, dur time.Duration) {
	const proxies = 20
	for i := range proxies {
		spec := attackMockSpec(c.probeURL, "flood")
		spec["maxLeases"] = 1000
		p := proxyDesc{ns: "team-a", name: fmt.Sprintf("flood-%d", i), uid: fmt.Sprintf("uid-flood-%d", i), spec: spec}
		c.syncUntil(t, &p, "Ready", func(a syncAnswer) bool { return a.Status.Phase == "Ready" })
		over := attackMockSpec(c.probeURL, "flood")
		over["maxLeases"] = 10000
		q := proxyDesc{ns: "team-a", name: fmt.Sprintf("flood-over-%d", i), uid: fmt.Sprintf("uid-flood-over-%d", i), spec: over}
		if a := c.syncUntil(t, &q, "answered", func(syncAnswer) bool { return true }); a.Status.Phase != "Failed" {
			t.Errorf("maxLeases 10000: phase %q, want Failed", a.Status.Phase)
		}
	}
	c.resetPeak()
	l := c.startLegit(good)
	var cs codes
	var granted atomic.Int64
	var mu sync.Mutex
	var ids []string
	deadline := time.Now().Add(dur)
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Now().Before(deadline); i++ {
				code, b, err := post(c.discURL+"/v1/leases", attackerToken,
					fmt.Appendf(nil, `{"selector":{"geo":"flood"},"ttlSeconds":3600,"sessionKey":"flood-%d-%d"}`, w, i))
				if err != nil {
					t.Errorf("lease: %v", err)
					return
				}
				cs.add(code)
				if code == http.StatusOK {
					granted.Add(1)
					var lj struct {
						LeaseID string `json:"leaseID"`
					}
					if json.Unmarshal(b, &lj) == nil {
						mu.Lock()
						ids = append(ids, lj.LeaseID)
						mu.Unlock()
					}
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("ATTACK %-22s %d leases granted in %v", "lease flood", granted.Load(), dur)
	if n := granted.Load(); n > proxies*1000 {
		t.Errorf("%d leases granted over %d proxies of maxLeases 1000", n, proxies)
	}
	cs.check(t, "lease flood", http.StatusOK, http.StatusConflict, http.StatusTooManyRequests)
	l.finish(t, "lease flood", c)
	releaseAll(t, attackerToken, c, ids)
}
