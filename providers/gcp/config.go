package gcp

// This file is the provider's config: it builds with every tag, so the providers config file
// is checked the same whether or not the binary carries the gcp client (see omit.go).

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/proxy-operator/proxy-operator/providers"
)

// Duration is the providers config duration ("5s").
type Duration = providers.Duration

// Config is the gcp entry of the providers config.
type Config struct {
	// Project is the project VMs are created in and listed from. Required.
	Project string `json:"project"`
	// Network is the VPC network of the VM's interface (default global/networks/default).
	Network string `json:"network,omitempty"`
	// Subnetwork, when set, is the interface's subnetwork (regions/<region>/subnetworks/<name>);
	// required on custom-mode networks.
	Subnetwork string `json:"subnetwork,omitempty"`
	// NetworkTag is the network tag every VM carries, for the firewall rule that opens the
	// proxy port (default proxy-operator).
	NetworkTag string `json:"networkTag,omitempty"`
	// ServiceAccount, when set, is the email of the service account attached to every VM;
	// the operator's identity then needs roles/iam.serviceAccountUser on it. Unset attaches none.
	ServiceAccount string `json:"serviceAccount,omitempty"`
	// DiskSizeGb is the boot disk size; 0 takes the image's size.
	DiskSizeGb int64 `json:"diskSizeGb,omitempty"`
	// RequestTimeout bounds each API call, under the caller's own deadline (default 30s).
	RequestTimeout Duration `json:"requestTimeout,omitempty"`
}

var (
	// projectRE accepts project IDs, including the legacy domain-scoped "example.com:name".
	projectRE = regexp.MustCompile(`^([a-z0-9.-]+:)?[a-z][-a-z0-9]{4,28}[a-z0-9]$`)
	// nameRE is a Compute Engine resource name (RFC 1035 label): zones, instances, tags.
	nameRE = regexp.MustCompile(`^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$`)
	// labelValueRE is what Compute Engine accepts as a label value.
	labelValueRE = regexp.MustCompile(`^[a-z0-9_-]{0,63}$`)
)

// Validate names the field that is missing or malformed.
func (c Config) Validate() error {
	switch {
	case c.Project == "":
		return errors.New("gcp: project is required")
	case !projectRE.MatchString(c.Project):
		return fmt.Errorf("gcp: project %q is not a project ID", c.Project)
	case c.NetworkTag != "" && !nameRE.MatchString(c.NetworkTag):
		return fmt.Errorf("gcp: networkTag %q must be lowercase letters, digits and '-', at most 63", c.NetworkTag)
	case c.DiskSizeGb < 0:
		return fmt.Errorf("gcp: diskSizeGb %d must not be negative", c.DiskSizeGb)
	case c.ServiceAccount != "" && !strings.Contains(c.ServiceAccount, "@"):
		return fmt.Errorf("gcp: serviceAccount %q must be a service account email", c.ServiceAccount)
	}
	return nil
}
