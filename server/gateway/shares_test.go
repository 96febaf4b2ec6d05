package gateway_test

import (
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/internal/fleet"
	"github.com/proxy-operator/proxy-operator/internal/healthtest"
	"github.com/proxy-operator/proxy-operator/lease"

	"github.com/proxy-operator/proxy-operator/server/discovery/access"
	"github.com/proxy-operator/proxy-operator/server/gateway"
)

// TestGatewayLeasesAreTheTokens: with more than one token a gateway lease is held in the
// token's name, so the token's fair share of a namespace (decision 0259) bounds its requests in
// flight there as it bounds its API leases: with a share of 2, a third concurrent request is
// 429 token_share with a Retry-After, and passes once one ends (issue 30: a token scoped to
// every namespace took a small namespace whole through the gateway, which leased for nobody).
func TestGatewayLeasesAreTheTokens(t *testing.T) {
	view := fleet.New(time.Now, 0)
	h := &healthtest.Map{}
	// The operator's store: -lease-max-per-token's default bound, which a share lowers.
	store := lease.NewMemory(lease.Config{Fleet: view, Health: h, MaxLeasesPerHolder: lease.DefaultMaxLeasesPerHolder})
	e := newEnvWith(t, view, h, store, func(g *gateway.Gateway) {
		g.Shares = func(c *access.Caller) map[string]int {
			if c.Name == "crawler" {
				return map[string]int{"crawl": 2}
			}
			return nil
		}
	})
	for i := 1; i <= 3; i++ {
		e.addUpstream(t, fmt.Sprintf("crawl/p%d", i), fmt.Sprintf("127.0.0.%d", 10+i), map[string]string{"pool": "web"}, 100)
	}
	release := make(chan struct{})
	var inside sync.WaitGroup
	inside.Add(2)
	slow := newSite(t, func(w http.ResponseWriter, r *http.Request, _ string) {
		inside.Done()
		<-release
		_, _ = io.WriteString(w, "slow")
	})
	other := newSite(t, nil)
	c := e.client("", token)
	var held sync.WaitGroup
	for _, path := range []string{"/a", "/b"} {
		held.Add(1)
		go func() {
			defer held.Done()
			if resp, err := c.Get(slow.url(path)); err == nil {
				resp.Body.Close()
			}
		}()
	}
	inside.Wait() // two leases held in the token's name
	resp, body := get(t, c, other.url("/"))
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get(gateway.HeaderError) != gateway.ReasonTokenShare || resp.Header.Get("Retry-After") == "" {
		t.Errorf("third request: %d %s=%q Retry-After %q %s; want 429 token_share with a Retry-After",
			resp.StatusCode, gateway.HeaderError, resp.Header.Get(gateway.HeaderError), resp.Header.Get("Retry-After"), body)
	}
	close(release)
	held.Wait()
	if resp, body := get(t, c, other.url("/")); resp.StatusCode != http.StatusOK {
		t.Errorf("after the two ended: %d %s, want 200", resp.StatusCode, body)
	}
}
