//go:build !omit_hetzner

package hetzner

import (
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hetznercloud/hcloud-go/v2/hcloud"

	"github.com/proxy-operator/proxy-operator/internal/clocktest"
	"github.com/proxy-operator/proxy-operator/providers"
	"github.com/proxy-operator/proxy-operator/providers/hetzner/hcloudtest"
	"github.com/proxy-operator/proxy-operator/providers/providertest"
)

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
func standIn(t *testing.T, cfg Config) (*Provider, *hcloudtest.API, *clocktest.Clock) {
	t.Helper()
	clock := clocktest.New(time.Date(2026, 12, 2, 1, 0, 0, 0, time.UTC))
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
var apiFailures = providertest.Failures{
	"create": {
		providers.ErrQuotaExceeded: {Code: "resource_limit_exceeded", Status: http.StatusForbidden},
		providers.ErrTransient:     {Code: "rate_limit_exceeded", Status: http.StatusTooManyRequests},
		providers.ErrPermanent:     {Code: "invalid_input", Status: http.StatusBadRequest},
	},
	"get": {
		providers.ErrTransient: {Code: "server_error", Status: http.StatusInternalServerError},
		providers.ErrPermanent: {Code: "unauthorized", Status: http.StatusUnauthorized},
	},
	"delete": {
		providers.ErrTransient: {Code: "locked", Status: http.StatusLocked},
		providers.ErrPermanent: {Code: "protected", Status: http.StatusForbidden},
	},
	"list": {
		providers.ErrTransient: {Code: "rate_limit_exceeded", Status: http.StatusTooManyRequests},
		providers.ErrPermanent: {Code: "forbidden", Status: http.StatusForbidden},
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
			Fail:      apiFailures.Injector(func(op string, f providertest.Failure) { api.Fail(op, f.Code, f.Status, 1) }),
			Hold:      func() func() { api.Hold(); return api.Release },
			Foreign: func() {
				api.Put(hcloudtest.Server{ID: 42, Name: "someones-build-box", ServerType: "cx22", Image: "debian-12",
					Labels: map[string]string{"team": "ci"}, Created: clock.Now().Add(-time.Hour)})
			},
			Vanish: func(id string) {
				sid, _ := ParseID(id)
				api.Remove(sid)
			},
			Page: 50, // the provider asks for 50 a page, the API's most
		}
	})
}
