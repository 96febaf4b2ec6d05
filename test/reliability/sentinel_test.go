package reliability

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/internal/redistest"
	op "github.com/proxy-operator/proxy-operator/server"
)

// TestRedisSentinelFailover: a primary, two replicas and three sentinels (real redis-server
// and redis-sentinel); the operator and two discovery-only servers on the set through
// redis+sentinel:// with -lease-store-wait-replicas 1; 16 clients lease, hold, renew and
// release through all three servers. The primary is killed (SIGKILL) mid-run. Every answer is
// a 200, 204, 409 or a 503 with Retry-After (never a 500, a hang or a dropped connection);
// every request made while no primary was known is a 503; no grant passes a proxy's cap; and
// no acknowledged grant is lost: every lease a client was granted renews until it releases
// it, across the failover. The time from the kill to each server's first decided lease answer
// is logged (docs/reliability.md has five runs), not asserted.
func TestRedisSentinelFailover(t *testing.T) {
	set := redistest.StartSentinelSet(t, 2, 3)
	const maxLeases = 3
	fleet := newRedisFleet(t, 8, maxLeases)
	rig := startRedisRig(t, fleet, op.LeaseConfig{Store: set.URL(), WaitReplicas: 1}, 2)
	discURLs := rig.discURLs
	var (
		log      answerLog
		mu       sync.Mutex
		live     = map[string]int{}
		breaks   []string
		stopLoad atomic.Bool
		granted  atomic.Int64
	)
	fail := func(format string, args ...any) {
		mu.Lock()
		breaks = append(breaks, fmt.Sprintf(format, args...))
		mu.Unlock()
	}
	// untilDecided repeats a call while it answers 503 (as a crawler would), through a random
	// server each time; it gives up only when the load stops.
	untilDecided := func(rng *rand.Rand, opName, method, path, body string) int {
		for {
			server := rng.IntN(len(discURLs))
			code, _ := log.call(server, opName, method, discURLs[server]+path, body)
			if code != http.StatusServiceUnavailable || stopLoad.Load() {
				return code
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	var load sync.WaitGroup
	for c := range 16 {
		load.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(c), 7))
			for !stopLoad.Load() {
				server := rng.IntN(len(discURLs))
				code, b := log.call(server, "lease", http.MethodPost, discURLs[server]+"/v1/leases", `{"ttlSeconds":600}`)
				if code != http.StatusOK {
					time.Sleep(20 * time.Millisecond)
					continue
				}
				var l redisLease
				if err := json.Unmarshal(b, &l); err != nil {
					fail("lease answer %s: %v", b, err)
					continue
				}
				granted.Add(1)
				mu.Lock()
				live[l.Proxy.ID]++
				if l.Proxy.ActiveLeases > maxLeases || live[l.Proxy.ID] > maxLeases {
					breaks = append(breaks, fmt.Sprintf("%s: %d active by the answer, %d live by the test, cap %d", l.Proxy.ID, l.Proxy.ActiveLeases, live[l.Proxy.ID], maxLeases))
				}
				mu.Unlock()
				time.Sleep(time.Duration(rng.IntN(400)) * time.Millisecond) // the crawl
				// The grant was acknowledged: it must still be there, whichever primary now
				// holds the store (its TTL is far off).
				if code := untilDecided(rng, "renew", http.MethodPost, "/v1/leases/"+l.LeaseID+"/renew", `{}`); code != http.StatusOK && (code != http.StatusServiceUnavailable || !stopLoad.Load()) {
					fail("renew of acknowledged lease %s on %s: %d, want 200 (a lost grant)", l.LeaseID, l.Proxy.ID, code)
				}
				mu.Lock()
				live[l.Proxy.ID]-- // out of the count before the release: never count a freed slot
				mu.Unlock()
				untilDecided(rng, "release", http.MethodDelete, "/v1/leases/"+l.LeaseID, "")
			}
		})
	}
	log.decided(len(discURLs), time.Now()) // load running on every server
	before := granted.Load()

	old := set.PrimaryAddr()
	primary := set.Server(old)
	if primary == nil {
		t.Fatalf("the sentinels name %q as primary, not one of the set", old)
	}
	primary.Kill()
	killed := time.Now()
	// Poll the sentinels until one names another primary; lastOld is the last time they still
	// named the dead one, so a request that ended before it met no primary at all.
	lastOld := killed
	redistest.Until(t, 60*time.Second, "sentinels promote a replica", func() bool {
		now := time.Now()
		if a := set.PrimaryAddr(); a != "" && a != old {
			return true
		}
		lastOld = now
		return false
	})
	promoted := time.Now()
	first := log.decided(len(discURLs), killed)
	// Load after the recovery too, then stop: leases still held are renewed once more.
	grantedAtRecovery := granted.Load()
	redistest.Until(t, 30*time.Second, "grants after the failover", func() bool { return granted.Load() > grantedAtRecovery+20 })
	stopLoad.Store(true)
	load.Wait()

	for _, b := range breaks {
		t.Error(b)
	}
	allowed := []int{http.StatusOK, http.StatusNoContent, http.StatusConflict, http.StatusServiceUnavailable}
	total, during, codes := log.check(t, func(code int) bool { return slices.Contains(allowed, code) }, killed, lastOld)
	if during == 0 {
		t.Errorf("no request was answered while no primary was known: the failover was not exercised")
	}
	if before == 0 || granted.Load() <= grantedAtRecovery {
		t.Errorf("grants: %d before the kill, %d at recovery, %d at the end: the load did not run on both sides", before, grantedAtRecovery, granted.Load())
	}
	t.Logf("primary %s killed; sentinels named %s after %s", old, set.PrimaryAddr(), promoted.Sub(killed).Round(time.Millisecond))
	for server := range discURLs {
		f, ok := first[server]
		if !ok {
			t.Errorf("server %d decided no lease request within 60 s of the kill", server)
			continue
		}
		t.Logf("server %d: first decided lease answer (200 or 409) %s after the kill", server, f.Sub(killed).Round(time.Millisecond))
	}
	t.Logf("%d answers (%d while no primary was known, all 503), %d grants, by operation and code: %v", total, during, granted.Load(), codes)
}
