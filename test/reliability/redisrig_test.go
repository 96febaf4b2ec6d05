package reliability

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/internal/redistest"
	op "github.com/proxy-operator/proxy-operator/server"
)

// redisRig is the operator and discovery-only replicas on one shared lease store, running
// until the test ends, with the fleet healthy and listed by every server.
type redisRig struct {
	hookURL string
	// discURLs are the discovery servers: the operator's first, then the replicas'.
	discURLs []string
}

// startRedisRig starts the operator and replicas discovery servers on store (the operator's
// lease settings; the replicas add the lease policy the operator would tell them), syncs the
// fleet in, and waits until every server lists it healthy.
func startRedisRig(t *testing.T, fleet *redisFleet, store op.LeaseConfig, replicas int) *redisRig {
	t.Helper()
	oper, err := op.New(op.Config{Hooks: op.HooksConfig{Addr: "127.0.0.1:0"}, Discovery: op.DiscoveryAPIConfig{Addr: "127.0.0.1:0", Insecure: true},
		FleetWarmup: time.Millisecond, Egress: op.EgressConfig{AllowLoopback: true}, Lease: store, ShutdownGrace: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	rig := &redisRig{hookURL: "http://" + oper.HookAddr(), discURLs: []string{"http://" + oper.DiscoveryAddr()}}
	runs := []func(context.Context) error{oper.Run}
	replicaLease := store
	replicaLease.MaxTTL, replicaLease.RateLimitedCooldown, replicaLease.BannedCooldown, replicaLease.MaxCooldown = time.Hour, time.Minute, time.Hour, 24*time.Hour
	for range replicas {
		replica, err := op.NewDiscovery(op.DiscoveryConfig{Discovery: op.DiscoveryAPIConfig{Addr: "127.0.0.1:0", Insecure: true},
			Egress: op.EgressConfig{AllowLoopback: true}, // the stubs live on loopback, as the operator is told
			Lease:  replicaLease})
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, replica.Run)
		rig.discURLs = append(rig.discURLs, "http://"+replica.Addr())
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
	fleet.untilHealthy(t, rig.hookURL, rig.discURLs[0])
	for _, u := range rig.discURLs[1:] { // the replicas read what the operator published
		redistest.Until(t, 30*time.Second, "discovery replica lists the fleet", func() bool {
			code, b := httpCall(t, http.MethodGet, u+"/v1/proxies?healthy=true", "", "")
			return code == http.StatusOK && strings.Contains(string(b), fmt.Sprintf(`"count":%d`, len(fleet.names)))
		})
	}
	return rig
}

// answer is one call a load client made to one of the rig's servers: -1 for no answer.
type answer struct {
	start, end time.Time
	server     int
	op         string
	code       int
	retryAfter string
	body       string
}

// answerLog records every call of a load, for the checks after it.
type answerLog struct {
	mu  sync.Mutex
	all []answer
}

// call makes one request to server and records its answer.
func (l *answerLog) call(server int, opName, method, url, body string) (int, []byte) {
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	a := answer{start: time.Now(), server: server, op: opName, code: -1}
	var b []byte
	if res, err := redisHTTP.Do(req); err != nil {
		a.body = err.Error()
	} else {
		b, _ = io.ReadAll(res.Body)
		res.Body.Close()
		a.code, a.retryAfter, a.body = res.StatusCode, res.Header.Get("Retry-After"), string(b)
	}
	a.end = time.Now()
	l.mu.Lock()
	l.all = append(l.all, a)
	l.mu.Unlock()
	return a.code, b
}

// decided waits (up to 60 s) until each of servers has answered a lease request started
// after `after` with a decision of the store (a grant or a 409), and returns when each first
// did.
func (l *answerLog) decided(servers int, after time.Time) map[int]time.Time {
	first := map[int]time.Time{}
	deadline := time.Now().Add(60 * time.Second)
	for len(first) < servers && time.Now().Before(deadline) {
		l.mu.Lock()
		for _, a := range l.all {
			if a.op == "lease" && (a.code == http.StatusOK || a.code == http.StatusConflict) && a.start.After(after) {
				if f, ok := first[a.server]; !ok || a.end.Before(f) {
					first[a.server] = a.end
				}
			}
		}
		l.mu.Unlock()
		time.Sleep(20 * time.Millisecond)
	}
	return first
}

// check fails t for every answer whose code allowed refuses (the first ten), every 503
// without Retry-After, and every answer inside the outage window [from, to] that is not a
// 503; it returns how many answers there were, how many fell inside the window, and the
// count of each code by operation.
func (l *answerLog) check(t *testing.T, allowed func(code int) bool, from, to time.Time) (total, during int, codes map[string]map[int]int) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	bad := 0
	codes = map[string]map[int]int{}
	for _, a := range l.all {
		total++
		if codes[a.op] == nil {
			codes[a.op] = map[int]int{}
		}
		codes[a.op][a.code]++
		if !allowed(a.code) {
			bad++
			if bad <= 10 {
				t.Errorf("%s on server %d: %d %s", a.op, a.server, a.code, a.body)
			}
		}
		if a.code == http.StatusServiceUnavailable && a.retryAfter == "" {
			t.Errorf("%s: 503 without Retry-After", a.op)
		}
		if a.start.After(from) && a.end.Before(to) {
			during++
			if a.code != http.StatusServiceUnavailable {
				t.Errorf("%s on server %d inside the outage: %d %s, want 503", a.op, a.server, a.code, a.body)
			}
		}
	}
	return total, during, codes
}
