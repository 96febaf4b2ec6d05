//go:build omit_gcp

package gcp

import (
	"context"

	"github.com/proxy-operator/proxy-operator/providers"
)

// New, in a binary built with -tags omit_gcp, has no Compute Engine client to build: it checks cfg
// as the real New does, then says how to get a binary that has one.
func New(_ context.Context, cfg Config) (providers.Provider, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return nil, providers.Omitted("gcp", "Compute Engine")
}
