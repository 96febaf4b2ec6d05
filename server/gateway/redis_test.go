package gateway_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/internal/fleet"
	"github.com/proxy-operator/proxy-operator/internal/healthtest"
	"github.com/proxy-operator/proxy-operator/internal/redistest"
	"github.com/proxy-operator/proxy-operator/lease"
	"github.com/proxy-operator/proxy-operator/lease/redisstore"
	"github.com/proxy-operator/proxy-operator/server/gateway"
)

// redisGateway is one gateway replica with its own Redis client over the shared store; mod
// adjusts it before it serves (nil: nothing).
func redisGateway(t testing.TB, addr string, view *fleet.View, h *healthtest.Map, mod ...func(*gateway.Gateway)) *env {
	t.Helper()
	client, err := redisstore.NewClient(redisstore.ClientConfig{URL: "redis://" + addr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	store, err := redisstore.New(redisstore.Config{Client: client, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return newEnvWith(t, view, h, store, func(g *gateway.Gateway) {
		for _, m := range mod {
			m(g)
		}
	})
}

// bookedReplicas are n gateway replicas over the Redis at addr, each booking its sends in the
// shared pace book (decision 0268), in front of ups real mock upstreams (keys crawl/p1..,
// addresses 127.0.0.<base+i>, attributes attrs) that the operator's publisher put in Redis.
func bookedReplicas(t testing.TB, addr string, n, ups, base int, attrs map[string]string, maxLeases int32) []*env {
	t.Helper()
	view := fleet.New(time.Now, 0)
	h := &healthtest.Map{}
	var reps []*env
	for range n {
		e := redisGateway(t, addr, view, h)
		e.gw.Book = e.store.(*redisstore.Store)
		reps = append(reps, e)
	}
	for i := 1; i <= ups; i++ {
		reps[0].addUpstream(t, fmt.Sprintf("crawl/p%d", i), fmt.Sprintf("127.0.0.%d", base+i), attrs, maxLeases)
	}
	if err := redisstore.NewPublisher(redisstore.PublisherConfig{Store: reps[0].store.(*redisstore.Store), Fleet: view, Health: h}).Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	return reps
}

func TestTwoGatewaysOverOneRedisShareSessionsAndBans(t *testing.T) {
	srv := redistest.Start(t)
	view := fleet.New(time.Now, 0)
	h := &healthtest.Map{}
	a := redisGateway(t, srv.Addr, view, h)
	b := redisGateway(t, srv.Addr, view, h)
	for i := 1; i <= 3; i++ {
		a.addUpstream(t, fmt.Sprintf("crawl/p%d", i), fmt.Sprintf("127.0.0.%d", 20+i), map[string]string{"pool": "web"}, 50)
	}
	b.ups = a.ups
	// The operator's part: publish the fleet (with credentials) into Redis.
	store := a.store.(*redisstore.Store)
	if err := redisstore.NewPublisher(redisstore.PublisherConfig{Store: store, Fleet: view, Health: h}).Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	var bannedIP string
	s := newSite(t, func(w http.ResponseWriter, r *http.Request, from string) {
		if from == bannedIP {
			w.WriteHeader(http.StatusForbidden)
			return
		}
		_, _ = io.WriteString(w, "ok")
	})
	ca, cb := a.client("session-shared", token), b.client("session-shared", token)
	first, _ := get(t, ca, s.url("/a"))
	stuck := first.Header.Get(gateway.HeaderProxy)
	if first.StatusCode != http.StatusOK || stuck == "" {
		t.Fatalf("first request through gateway A: %d via %q", first.StatusCode, stuck)
	}
	for i, c := range []*http.Client{cb, ca, cb} {
		resp, _ := get(t, c, s.url(fmt.Sprintf("/%d", i)))
		if got := resp.Header.Get(gateway.HeaderProxy); got != stuck {
			t.Fatalf("request %d of the session (alternating gateways) went through %s, want %s", i, got, stuck)
		}
	}
	// A ban seen by gateway B moves the session for both.
	bannedIP = a.ups[stuck]
	resp, _ := get(t, cb, s.url("/ban"))
	moved := resp.Header.Get(gateway.HeaderProxy)
	if resp.StatusCode != http.StatusOK || moved == stuck {
		t.Fatalf("after the ban through B: %d via %s, want 200 via another than %s", resp.StatusCode, moved, stuck)
	}
	resp, _ = get(t, ca, s.url("/after"))
	if got := resp.Header.Get(gateway.HeaderProxy); got != moved {
		t.Errorf("gateway A after B's ban: %s, want the session's new upstream %s", got, moved)
	}
	// And the banned upstream is cooling for the site in the shared store.
	l, err := a.store.Acquire(context.Background(), lease.Request{TTL: time.Minute, Target: s.addr, Avoid: []string{moved}})
	if err != nil {
		t.Fatal(err)
	}
	if l.Proxy.Key == stuck {
		t.Errorf("the banned upstream %s was leased for the site it is banned on", stuck)
	}
	waitFor(t, "every gateway lease to end", func() bool { return a.leases(t) == 1 })
}
