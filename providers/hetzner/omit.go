//go:build omit_hetzner

package hetzner

import (
	"github.com/proxy-operator/proxy-operator/providers"
)

// New, in a binary built with -tags omit_hetzner, has no Hetzner Cloud client to build: it checks
// cfg as the real New does, then says how to get a binary that has one.
func New(cfg Config) (providers.Provider, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return nil, providers.Omitted("hetzner", "Hetzner Cloud")
}
