package aws

// This file is the provider's config: it builds with every tag, so the providers config file
// is checked the same whether or not the binary carries the aws client (see omit.go).

import (
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/proxy-operator/proxy-operator/providers"
)

// Duration is the providers config duration ("5s").
type Duration = providers.Duration

// Config is the aws entry of the providers config. Several entries with different profiles
// (or regions) are several accounts (or regions).
type Config struct {
	// Region is where instances are created and listed (e.g. eu-central-1). Required.
	Region string `json:"region"`
	// Profile, when set, is the shared config profile whose credentials this entry uses;
	// unset takes the standard chain (environment, web identity for IRSA, shared config,
	// instance role).
	Profile string `json:"profile,omitempty"`
	// SubnetID is the subnet of every instance's interface; unset takes the default VPC's
	// default subnet of the zone.
	SubnetID string `json:"subnetId,omitempty"`
	// SecurityGroupIDs are the security groups of every interface (one must open the proxy
	// port); unset takes the VPC's default group.
	SecurityGroupIDs []string `json:"securityGroupIds,omitempty"`
	// Spot requests one-time spot instances, terminated on interruption (the proxy goes
	// Unhealthy, then NotFound, and is replaced).
	Spot bool `json:"spot,omitempty"`
	// SpotMaxPrice is the highest hourly price in USD ("0.0050"); unset is the on-demand price.
	SpotMaxPrice string `json:"spotMaxPrice,omitempty"`
	// RequestTimeout bounds each API call, under the caller's own deadline (default 30s).
	RequestTimeout Duration `json:"requestTimeout,omitempty"`
}

var (
	regionRE  = regexp.MustCompile(`^[a-z]{2}(-[a-z]+)+-[0-9]+$`)
	subnetRE  = regexp.MustCompile(`^subnet-[0-9a-f]{8,17}$`)
	sgRE      = regexp.MustCompile(`^sg-[0-9a-f]{8,17}$`)
	amiRE     = regexp.MustCompile(`^ami-[0-9a-f]{8,17}$`)
	typeRE    = regexp.MustCompile(`^[a-z][a-z0-9-]*\.[a-z0-9]+$`)
	priceRE   = regexp.MustCompile(`^[0-9]+(\.[0-9]+)?$`)
	profileRE = regexp.MustCompile(`^[A-Za-z0-9_.@-]{1,64}$`)
	// instanceIDRE is an EC2 instance ID.
	instanceIDRE = regexp.MustCompile(`^i-[0-9a-f]{8,17}$`)
	// nameRE is the deterministic instance name (providers.InstanceName), also the client
	// token, which EC2 limits to 64 ASCII characters.
	nameRE = regexp.MustCompile(`^[a-z0-9-]{1,40}$`)
)

// Validate names the field that is missing or malformed.
func (c Config) Validate() error {
	switch {
	case c.Region == "":
		return errors.New("aws: region is required (e.g. eu-central-1)")
	case !regionRE.MatchString(c.Region):
		return fmt.Errorf("aws: region %q is not a region name (e.g. eu-central-1)", c.Region)
	case c.Profile != "" && !profileRE.MatchString(c.Profile):
		return fmt.Errorf("aws: profile %q is not a profile name", c.Profile)
	case c.SubnetID != "" && !subnetRE.MatchString(c.SubnetID):
		return fmt.Errorf("aws: subnetId %q is not a subnet ID (subnet-0123abcd...)", c.SubnetID)
	case c.SpotMaxPrice != "" && !c.Spot:
		return errors.New("aws: spotMaxPrice is set but spot is not")
	case c.SpotMaxPrice != "" && !priceRE.MatchString(c.SpotMaxPrice):
		return fmt.Errorf("aws: spotMaxPrice %q is not a price in USD (e.g. \"0.0050\")", c.SpotMaxPrice)
	case c.RequestTimeout < 0:
		return fmt.Errorf("aws: requestTimeout %s must not be negative", time.Duration(c.RequestTimeout))
	}
	for i, g := range c.SecurityGroupIDs {
		if !sgRE.MatchString(g) {
			return fmt.Errorf("aws: securityGroupIds[%d] %q is not a security group ID (sg-0123abcd...)", i, g)
		}
	}
	return nil
}
