package reliability

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
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
	storeURL := set.URL()
	oper, err := op.New(op.Config{Hooks: op.HooksConfig{Addr: "127.0.0.1:0"}, Discovery: op.DiscoveryAPIConfig{Addr: "127.0.0.1:0", Insecure: true},
		FleetWarmup: time.Millisecond, Egress: op.EgressConfig{AllowLoopback: true}, Lease: op.LeaseConfig{Store: storeURL, WaitReplicas: 1},
		ShutdownGrace: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	runs := []func(context.Context) error{oper.Run}
	discURLs := []string{"http://" + oper.DiscoveryAddr()}
	for range 2 {
		replica, err := op.NewDiscovery(op.DiscoveryConfig{Discovery: op.DiscoveryAPIConfig{Addr: "127.0.0.1:0", Insecure: true},
			Egress: op.EgressConfig{AllowLoopback: true}, // the stubs live on loopback, as the operator is told
			Lease:  op.LeaseConfig{Store: storeURL, WaitReplicas: 1, MaxTTL: time.Hour, Cooldown: time.Minute, BanCooldown: time.Hour, MaxCooldown: 24 * time.Hour}})
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, replica.Run)
		discURLs = append(discURLs, "http://"+replica.Addr())
	}
	ctx, cancel := context.WithCancel(context.Background())
	var bg sync.WaitGroup
	for _, run := range runs {
		bg.Go(func() {
			if err := run(ctx); err != nil {
				t.Errorf("run: %v", err)
			}
		})
	}
	t.Cleanup(func() { cancel(); bg.Wait() })
	hookURL := "http://" + oper.HookAddr()
	fleet.untilHealthy(t, hookURL, discURLs[0])
	for _, u := range discURLs[1:] { // the replicas read what the operator published
		redistest.Until(t, 30*time.Second, "discovery replica lists the fleet", func() bool {
			code, b := httpCall(t, http.MethodGet, u+"/v1/proxies?healthy=true", "", "")
			return code == http.StatusOK && strings.Contains(string(b), fmt.Sprintf(`"count":%d`, len(fleet.names)))
		})
	}

	type answer struct {
		start, end time.Time
		server     int
		op         string
		code       int
		retryAfter string
		body       string
	}
	var (
		mu       sync.Mutex
		answers  []answer
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
	call := func(server int, opName, method, url, body string) (int, []byte) {
		req, _ := http.NewRequest(method, url, strings.NewReader(body))
		start := time.Now()
		res, err := redisHTTP.Do(req)
		a := answer{start: start, server: server, op: opName, code: -1}
		var b []byte
		if err != nil {
			a.body = err.Error()
		} else {
			b, _ = io.ReadAll(res.Body)
			res.Body.Close()
			a.code, a.retryAfter, a.body = res.StatusCode, res.Header.Get("Retry-After"), string(b)
		}
		a.end = time.Now()
		mu.Lock()
		answers = append(answers, a)
		mu.Unlock()
		return a.code, b
	}
	// untilDecided repeats a call while it answers 503 (as a crawler would), through a random
	// server each time; it gives up only when the load stops.
	untilDecided := func(rng *rand.Rand, opName, method, path, body string) int {
		for {
			server := rng.IntN(len(discURLs))
			code, _ := call(server, opName, method, discURLs[server]+path, body)
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
				code, b := call(server, "lease", http.MethodPost, discURLs[server]+"/v1/leases", `{"ttlSeconds":600}`)
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
	// decided waits until each server has answered a lease request started after `after` with
	// a decision of the store (a grant or a 409), and returns when each first did.
	decided := func(after time.Time) map[int]time.Time {
		first := map[int]time.Time{}
		deadline := time.Now().Add(60 * time.Second)
		for len(first) < len(discURLs) && time.Now().Before(deadline) {
			mu.Lock()
			for _, a := range answers {
				if a.op == "lease" && (a.code == http.StatusOK || a.code == http.StatusConflict) && a.start.After(after) {
					if f, ok := first[a.server]; !ok || a.end.Before(f) {
						first[a.server] = a.end
					}
				}
			}
			mu.Unlock()
			time.Sleep(20 * time.Millisecond)
		}
		return first
	}
	decided(time.Now()) // load running on every server
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
	first := decided(killed)
	// Load after the recovery too, then stop: leases still held are renewed once more.
	grantedAtRecovery := granted.Load()
	redistest.Until(t, 30*time.Second, "grants after the failover", func() bool { return granted.Load() > grantedAtRecovery+20 })
	stopLoad.Store(true)
	load.Wait()

	mu.Lock()
	defer mu.Unlock()
	for _, b := range breaks {
		t.Error(b)
	}
	var during, total, bad int
	codes := map[string]map[int]int{}
	for _, a := range answers {
		total++
		if codes[a.op] == nil {
			codes[a.op] = map[int]int{}
		}
		codes[a.op][a.code]++
		if !slices.Contains([]int{http.StatusOK, http.StatusNoContent, http.StatusConflict, http.StatusServiceUnavailable}, a.code) {
			bad++
			if bad <= 10 {
				t.Errorf("%s on server %d: %d %s", a.op, a.server, a.code, a.body)
			}
		}
		if a.code == http.StatusServiceUnavailable && a.retryAfter == "" {
			t.Errorf("%s: 503 without Retry-After", a.op)
		}
		if a.start.After(killed) && a.end.Before(lastOld) {
			during++
			if a.code != http.StatusServiceUnavailable {
				t.Errorf("%s on server %d while no primary was known: %d %s, want 503", a.op, a.server, a.code, a.body)
			}
		}
	}
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
