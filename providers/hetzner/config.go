package hetzner

// This file is the provider's config: it builds with every tag, so the providers config file
// is checked the same whether or not the binary carries the hetzner client (see omit.go).

import (
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/proxy-operator/proxy-operator/providers"
)

// Duration is the providers config duration ("5s").
type Duration = providers.Duration

// Config is the hetzner entry of the providers config. Each entry is one project (a token
// belongs to one project): several entries are several projects.
type Config struct {
	// TokenFile is the path of a file holding the project's API token (read and write), as
	// a Secret mounted into the operator's Pod. Required; read once, at start.
	TokenFile string `json:"tokenFile"`
	// Location is where servers go when a Proxy's placement.zone is empty (fsn1, nbg1, hel1,
	// ash, hil, sin).
	Location string `json:"location,omitempty"`
	// FirewallIDs are firewalls applied to every server (one must open the proxy port).
	FirewallIDs []int64 `json:"firewallIds,omitempty"`
	// EnableIPv6 gives servers a public IPv6 network too (the proxy is reached on IPv4).
	EnableIPv6 bool `json:"enableIPv6,omitempty"`
	// RequestTimeout bounds each API call, under the caller's own deadline (default 30s).
	RequestTimeout Duration `json:"requestTimeout,omitempty"`
}

var (
	locationRE = regexp.MustCompile(`^[a-z]{3}[0-9]?$`)
	// labelValueRE is what the API accepts as a label value.
	labelValueRE = regexp.MustCompile(`^([a-zA-Z0-9]([-_.a-zA-Z0-9]{0,61}[a-zA-Z0-9])?)?$`)
	nameRE       = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)
	typeRE       = regexp.MustCompile(`^[a-z0-9-]{2,32}$`)
	imageRE      = regexp.MustCompile(`^[a-z0-9][-a-z0-9._]{0,62}$`)
)

// Validate names the field that is missing or malformed. It does not read the token file.
func (c Config) Validate() error {
	switch {
	case c.TokenFile == "":
		return errors.New("hetzner: tokenFile is required (the path of a mounted Secret holding the project's API token)")
	case c.Location != "" && !locationRE.MatchString(c.Location):
		return fmt.Errorf("hetzner: location %q is not a location name (e.g. fsn1)", c.Location)
	case c.RequestTimeout < 0:
		return fmt.Errorf("hetzner: requestTimeout %s must not be negative", time.Duration(c.RequestTimeout))
	}
	for i, id := range c.FirewallIDs {
		if id <= 0 {
			return fmt.Errorf("hetzner: firewallIds[%d] %d is not a firewall ID", i, id)
		}
	}
	return nil
}
