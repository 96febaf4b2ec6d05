package hetzner

import (
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hetznercloud/hcloud-go/v2/hcloud"

	"github.com/proxy-operator/proxy-operator/providers"
	"github.com/proxy-operator/proxy-operator/providers/hetzner/hcloudtest"
	"github.com/proxy-operator/proxy-operator/providers/providertest"
)

// testClock is the stand-in's clock, moved only by the test.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *testClock {
	return &testClock{now: time.Date(2026, 12, 2, 1, 0, 0, 0, time.UTC)}
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// tokenFile writes the stand-in's token as a mounted Secret would hold it.
func tokenFile(t *testing.T, token string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// standIn starts the Hetzner stand-in on a test clock and a provider whose real hcloud client
// talks to it.
func standIn(t *testing.T, cfg Config) (*Provider, *hcloudtest.API, *testClock) {
	t.Helper()
	clock := newClock()
	api := hcloudtest.New(clock.Now)
	t.Cleanup(api.Close)
	if cfg.TokenFile == "" {
		cfg.TokenFile = tokenFile(t, hcloudtest.Token)
	}
	p, err := New(cfg, hcloud.WithEndpoint(api.URL))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return p, api, clock
}

// apiFailures are the API's own answers for each class of each call.
var apiFailures = map[string]map[error]struct {
	code   string
	status int
}{
	"create": {
		providers.ErrQuotaExceeded: {"resource_limit_exceeded", http.StatusForbidden},
		providers.ErrTransient:     {"rate_limit_exceeded", http.StatusTooManyRequests},
		providers.ErrPermanent:     {"invalid_input", http.StatusBadRequest},
	},
	"get": {
		providers.ErrTransient: {"server_error", http.StatusInternalServerError},
		providers.ErrPermanent: {"unauthorized", http.StatusUnauthorized},
	},
	"delete": {
		providers.ErrTransient: {"locked", http.StatusLocked},
		providers.ErrPermanent: {"protected", http.StatusForbidden},
	},
	"list": {
		providers.ErrTransient: {"rate_limit_exceeded", http.StatusTooManyRequests},
		providers.ErrPermanent: {"forbidden", http.StatusForbidden},
	},
}

func TestConformance(t *testing.T) {
	providertest.Run(t, func(t *testing.T) providertest.Env {
		p, api, clock := standIn(t, Config{Location: "fsn1"})
		return providertest.Env{
			Provider:  p,
			Base:      providers.CreateRequest{Zone: "nbg1", MachineType: "cx22", Image: "ubuntu-24.04"},
			UnknownID: FormatID(99999999),
			Settle:    func() { clock.Advance(5 * time.Second) },
			Fail: func(op string, kind error) bool {
				f, ok := apiFailures[op][kind]
				if ok {
					api.Fail(op, f.code, f.status, 1)
				}
				return ok
			},
			Hold: func() func() { api.Hold(); return api.Release },
			Foreign: func() {
				api.Put(hcloudtest.Server{ID: 42, Name: "someones-build-box", ServerType: "cx22", Image: "debian-12",
					Labels: map[string]string{"team": "ci"}, Created: clock.Now().Add(-time.Hour)})
			},
		}
	})
}
