//go:build omit_aws

package aws

import (
	"context"

	"github.com/proxy-operator/proxy-operator/providers"
)

// New, in a binary built with -tags omit_aws, has no EC2 client to build: it checks cfg as the
// real New does, then says how to get a binary that has one.
func New(_ context.Context, cfg Config) (providers.Provider, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return nil, providers.Omitted("aws", "EC2")
}
